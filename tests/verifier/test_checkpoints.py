"""Signed checkpoints: the documented test vectors, key rotation, and `--checkpoint`."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from shoebox_verify import checkpoints as cp
from shoebox_verify.cli import main

from tests.verifier.exportgen import Played, export_lines, write

# docs/verification.md, "Signed checkpoints": the test vectors.
KEY1_SEED = bytes(range(32))
KEY2_SEED = bytes(range(32, 64))
KEY1 = "03a107bff3ce10be1d70dd18e74bc09967e4d6309ba50d5f1ddc8664125531b8"
KEY1_ID = "56475aa75463474c0285df5dbf2bcab73da651358839e9b77481b2eab107708c"
KEY2 = "29acbae141bccaf0b22e1a94d34d0bc7361e526d0bfe12c89794bc9322966dd7"
KEY2_ID = "24f6ed6acbfe1009c030d7ca567c33ca4830911498236b5561a6c82abec5de28"
HEAD = "d82ec8e46b448f547aab7b0830d719f8147a347d1b056b76ce499873a9edbbd0"
MESSAGE1 = (
    '{"format":"shoebox-checkpoint/1","head_hash":"' + HEAD + '","key_id":"' + KEY1_ID + '",'
    '"position":1,"recorded_at":"2026-11-30T16:22:24.000000Z"}'
)
SIGNATURE1 = (
    "259150c53239a9bdcbc2f36cfc0897697fc53735666455c2f2d886a97d76a8c7"
    "4ff97dd3eaac06d453f67f69ec58f79fd62b3f7d5576206565fc1a69b6e6c303"
)
MESSAGE2 = (
    '{"format":"shoebox-checkpoint/1","head_hash":"' + HEAD + '","key_id":"' + KEY2_ID + '",'
    '"position":2,"recorded_at":"2026-12-01T00:00:00.000000Z"}'
)
SIGNATURE2 = (
    "cd2370c3d2b44a3a98cfcbc490135deb1dbd81ea442c4ad16536af107ccae811"
    "5267da2dc18d44eedc2724fd6431fea51704caac6da33996aa74b497c653380c"
)
PREVIOUS2 = (
    "c6c835ce66a1dcca70c33f55da09266b3b3786447939d70085df0cf23fff1fb8"
    "b468496fd1a7c9ba9abd418e9c9e87701687a0baac343ae4efccc720b5b1250e"
)


def test_the_library_is_rfc_8032_ed25519() -> None:
    seed = bytes.fromhex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
    public = cp.public_key_of(seed)
    assert public.hex() == "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a"
    signature = bytes.fromhex(
        "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bac"
        "c61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b"
    )
    assert cp.signature_valid(public, b"", signature)


def test_the_documented_vectors() -> None:
    assert cp.public_key_of(KEY1_SEED).hex() == KEY1
    assert cp.key_id(bytes.fromhex(KEY1)) == KEY1_ID
    assert cp.public_key_of(KEY2_SEED).hex() == KEY2
    assert cp.key_id(bytes.fromhex(KEY2)) == KEY2_ID
    assert cp.signed_message(1, HEAD, "2026-11-30T16:22:24.000000Z", KEY1_ID) == MESSAGE1.encode()
    first = cp.sign(KEY1_SEED, 1, HEAD, "2026-11-30T16:22:24.000000Z")
    assert first == {
        "kind": "checkpoint",
        "format": "shoebox-checkpoint/1",
        "position": 1,
        "head_hash": HEAD,
        "recorded_at": "2026-11-30T16:22:24.000000Z",
        "key_id": KEY1_ID,
        "public_key": KEY1,
        "signature": SIGNATURE1,
        "previous_key_signature": None,
    }
    second = cp.sign(KEY2_SEED, 2, HEAD, "2026-12-01T00:00:00.000000Z", KEY1_SEED)
    assert cp.parse(second).message == MESSAGE2.encode()
    assert second["signature"] == SIGNATURE2
    assert second["previous_key_signature"] == PREVIOUS2
    chain = cp.KeyChain([bytes.fromhex(KEY1)])
    cp.verify_chain_of_keys([(1, cp.parse(first)), (2, cp.parse(second))], chain, "vectors")
    assert chain.current == bytes.fromhex(KEY2)


def _at(
    position: int, seed: bytes = KEY1_SEED, previous: bytes | None = None, **over: Any
) -> cp.Checkpoint:
    line = cp.sign(seed, position, HEAD, f"2026-11-30T16:22:{position:02d}.000000Z", previous)
    line.update(over)
    return cp.parse(line)


def test_a_new_key_needs_the_old_keys_endorsement_and_retires_it() -> None:
    chain = cp.KeyChain([bytes.fromhex(KEY1)])
    chain.accept(_at(1))
    with pytest.raises(cp.CheckpointError, match="not trusted"):
        chain.accept(_at(2, KEY2_SEED))
    with pytest.raises(cp.CheckpointError, match="not trusted"):
        chain.accept(_at(2, KEY2_SEED, previous=KEY2_SEED))
    chain.accept(_at(3, KEY2_SEED, previous=KEY1_SEED))
    chain.accept(_at(4, KEY2_SEED))
    with pytest.raises(cp.CheckpointError, match="rotated out"):
        chain.accept(_at(5))


def test_an_anchor_refuses_other_keys_and_no_anchor_trusts_the_first() -> None:
    with pytest.raises(cp.CheckpointError, match="not trusted"):
        cp.KeyChain([bytes.fromhex(KEY1)]).accept(_at(1, KEY2_SEED))
    unanchored = cp.KeyChain()
    unanchored.accept(_at(1, KEY2_SEED))
    assert not unanchored.anchored


def test_malformed_and_forged_checkpoints_are_refused() -> None:
    good = cp.sign(KEY1_SEED, 1, HEAD, "2026-11-30T16:22:24.000000Z")
    forged = {**good, "position": 2}
    with pytest.raises(cp.CheckpointError, match="signature"):
        cp.KeyChain().accept(cp.parse(forged))
    for edit, words in (
        ({"key_id": KEY2_ID}, "key_id is not the SHA-256"),
        ({"signature": "00"}, "signature is not 128"),
        ({"position": 0}, "position 0"),
        ({"recorded_at": "yesterday"}, "recorded_at"),
        ({"extra": 1}, "no key extra"),
    ):
        with pytest.raises(cp.CheckpointError, match=words):
            cp.parse({**good, **edit})
    with pytest.raises(cp.CheckpointError, match="needs head_hash"):
        cp.parse({k: v for k, v in good.items() if k != "head_hash"})


# --checkpoint on exports.


def _events(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [line for line in lines if line["kind"] == "event"]


def _kept(tmp_path: Path, *lines: dict[str, Any]) -> Path:
    return write(tmp_path / "kept.jsonl", list(lines))


def _run(capsys: pytest.CaptureFixture[str], *arguments: str) -> tuple[int, str]:
    code = main([*arguments, "--no-progress"])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out + err


def test_a_kept_checkpoint_inside_the_export_is_proved(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, lines: list[dict[str, Any]]
) -> None:
    event = _events(lines)[100]
    kept = _kept(
        tmp_path, cp.sign(KEY1_SEED, event["position"], event["hash"], event["recorded_at"])
    )
    export = write(tmp_path / "e.jsonl", lines)
    code, out = _run(capsys, str(export), "--checkpoint", str(kept), "--trusted-key", KEY1)
    assert code == 0, out
    assert "1 checkpoints" in out


def test_a_kept_checkpoint_the_export_contradicts_fails(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, lines: list[dict[str, Any]]
) -> None:
    event = _events(lines)[100]
    kept = _kept(tmp_path, cp.sign(KEY1_SEED, event["position"], "ab" * 32, event["recorded_at"]))
    code, out = _run(capsys, str(write(tmp_path / "e.jsonl", lines)), "--checkpoint", str(kept))
    assert code == 1
    assert f"checkpoint: position {event['position']}" in out
    assert "note: the keys of" in out  # no --trusted-key: trusted on first use, and said so


def test_a_checkpoint_just_before_a_slice_is_proved_by_its_prev_hash(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, played_two_shoes: Played
) -> None:
    times = sorted({r.recorded_at for r in played_two_shoes.records})
    lines = list(export_lines(played_two_shoes, times[50], times[90]))
    first = lines[0]["first_position"]
    before = played_two_shoes.records[first - 2]
    assert before.position == first - 1
    kept = _kept(
        tmp_path, cp.sign(KEY1_SEED, before.position, before.hash, "2026-11-30T12:00:00.000000Z")
    )
    export = write(tmp_path / "e.jsonl", lines)
    code, out = _run(capsys, str(export), "--checkpoint", str(kept), "--trusted-key", KEY1)
    assert code == 0, out
    kept = _kept(
        tmp_path,
        cp.sign(KEY1_SEED, before.position - 1, before.prev_hash, "2026-11-30T12:00:00.000000Z"),
    )
    code, out = _run(capsys, str(export), "--checkpoint", str(kept), "--trusted-key", KEY1)
    assert code == 1
    assert "cannot prove the export extends any kept checkpoint" in out


def test_a_checkpoint_file_with_a_broken_key_chain_fails(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, lines: list[dict[str, Any]]
) -> None:
    event = _events(lines)[10]
    kept = _kept(
        tmp_path, cp.sign(KEY2_SEED, event["position"], event["hash"], event["recorded_at"])
    )
    export = write(tmp_path / "e.jsonl", lines)
    code, out = _run(capsys, str(export), "--checkpoint", str(kept), "--trusted-key", KEY1)
    assert code == 1
    assert "not trusted" in out


def test_an_unreadable_checkpoint_file_is_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, lines: list[dict[str, Any]]
) -> None:
    kept = tmp_path / "kept.jsonl"
    kept.write_text('{"kind": "checkpoint", "position": 1e400}\n')
    code, out = _run(capsys, str(write(tmp_path / "e.jsonl", lines)), "--checkpoint", str(kept))
    assert code == 1
    assert "kept.jsonl line 1: the number 1e400 is not an integer" in out


def test_checkpoint_lines_in_the_export_are_verified(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, lines: list[dict[str, Any]]
) -> None:
    events = _events(lines)
    first = cp.sign(
        KEY1_SEED, events[10]["position"], events[10]["hash"], events[10]["recorded_at"]
    )
    rotated = cp.sign(
        KEY2_SEED,
        events[500]["position"],
        events[500]["hash"],
        events[500]["recorded_at"],
        KEY1_SEED,
    )
    export = write(tmp_path / "e.jsonl", [*lines, first, rotated])
    code, out = _run(capsys, str(export), "--trusted-key", KEY1)
    assert code == 0, out
    assert "2 checkpoints" in out
    lying = copy.deepcopy(rotated)
    lying.update(
        cp.sign(
            KEY2_SEED, events[500]["position"], "cd" * 32, events[500]["recorded_at"], KEY1_SEED
        )
    )
    export = write(tmp_path / "e.jsonl", [*lines, first, lying])
    code, out = _run(capsys, str(export), "--trusted-key", KEY1)
    assert code == 1
    assert "checkpoint: position" in out
    code, out = _run(capsys, str(export), "--trusted-key", KEY2)
    assert code == 1
    assert "not trusted" in out
