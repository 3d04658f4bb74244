"""`shoebox-verify` on real exports and on every kind of damage: clear, one-line, non-zero."""

from __future__ import annotations

import copy
import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
from shoebox_verify.cli import main
from shoebox_verify.strictjson import canonical_json
from shoebox_verify.verify import Verifier

from tests.verifier.exportgen import Played, export_lines, rechain, write

DOCUMENT_KEYS = (
    "position",
    "stream_id",
    "category",
    "version",
    "type",
    "schema_version",
    "payload",
    "metadata",
    "recorded_at",
)


def run(capsys: pytest.CaptureFixture[str], path: Path, *options: str) -> tuple[int, str, str]:
    code = main([str(path), "--no-progress", *options])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


def events(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [line for line in lines if line["kind"] == "event"]


def test_a_whole_export_with_a_void_verifies(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, lines: list[dict[str, Any]]
) -> None:
    assert any(line.get("type") == "RoundVoided" for line in lines)
    assert any(line.get("type") == "SettlementReversed" for line in lines)
    code, out, _ = run(capsys, write(tmp_path / "e.jsonl", lines))
    assert code == 0, out
    assert out.startswith("OK: ")
    assert " 40 coups" in out


def test_slices_of_a_day_verify(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, played_two_shoes: Played
) -> None:
    times = sorted({r.recorded_at for r in played_two_shoes.records})
    for start, end in ((10, 60), (60, 61), (5, 140), (100, len(times) - 1)):
        path = write(tmp_path / "s.jsonl", export_lines(played_two_shoes, times[start], times[end]))
        code, out, _ = run(capsys, path)
        assert code == 0, (start, end, out)


def test_memory_holds_only_what_is_open(tmp_path: Path, played_two_shoes: Played) -> None:
    path = write(tmp_path / "e.jsonl", export_lines(played_two_shoes))
    verifier = Verifier(str(path), progress=False)
    assert verifier.run().ok
    assert len(verifier._rounds) == 0
    assert len(verifier._derived) <= 16


def test_the_installed_command_runs(tmp_path: Path, lines: list[dict[str, Any]]) -> None:
    path = write(tmp_path / "e.jsonl", lines)
    done = subprocess.run(
        [sys.executable, "-m", "shoebox_verify", str(path)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("OK: ")


# Tampering that keeps the file readable: exit 1, naming the check.


def test_cut_tail_fails_on_the_header(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, lines: list[dict[str, Any]]
) -> None:
    last = max(i for i, line in enumerate(lines) if line["kind"] == "event")
    cut = lines[: last - 4] + lines[last + 1 :]
    code, out, _ = run(capsys, write(tmp_path / "e.jsonl", cut))
    assert code == 1
    assert "chain: the slice: the header says it ends at position" in out
    assert "FAILED" in out


def test_an_appended_event_fails_on_the_header(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, lines: list[dict[str, Any]]
) -> None:
    last_index = max(i for i, line in enumerate(lines) if line["kind"] == "event")
    last = lines[last_index]
    extra = copy.deepcopy(last)
    extra["position"] = last["position"] + 1
    extra["version"] = last["version"] + 1
    extra["prev_hash"] = last["hash"]
    document = canonical_json({key: extra[key] for key in DOCUMENT_KEYS})
    extra["hash"] = hashlib.sha256(last["hash"].encode() + document).hexdigest()
    tampered = [*lines[: last_index + 1], extra, *lines[last_index + 1 :]]
    code, out, _ = run(capsys, write(tmp_path / "e.jsonl", tampered))
    assert code == 1
    assert "events were cut off or appended" in out


def test_a_removed_credit_fails_even_with_the_chain_rewritten(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, lines: list[dict[str, Any]]
) -> None:
    index = next(i for i, line in enumerate(lines) if line.get("type") == "PayoutCredited")
    credit = lines[index]
    tampered = rechain(lines[:index] + lines[index + 1 :])
    # Also restate the wallet's closing balance as the tamperer would.
    player = credit["stream_id"].partition(":")[2]
    for line in tampered:
        if line["kind"] == "wallet" and line["player_id"] == player:
            line["closing"] = dict(line["closing"])
            line["closing"]["available"] -= credit["payload"]["payout"]
    code, out, _ = run(capsys, write(tmp_path / "e.jsonl", tampered))
    assert code == 1
    assert "chain:" not in out
    assert "money:" in out
    assert "no wallet does" in out


def test_a_modified_card_breaks_the_chain_and_the_card_check(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, lines: list[dict[str, Any]]
) -> None:
    card = next(line for line in lines if line.get("type") == "CardDrawn")
    card["payload"] = {**card["payload"], "card": "KS" if card["payload"]["card"] != "KS" else "QS"}
    code, out, _ = run(capsys, write(tmp_path / "e.jsonl", lines))
    assert code == 1
    assert "chain: position" in out
    assert "card: round" in out
    code, out, _ = run(capsys, write(tmp_path / "r.jsonl", rechain(lines)))
    assert code == 1
    assert "chain:" not in out
    assert "the re-derived shoe has" in out


def test_a_changed_payout_fails_the_payout_check(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, lines: list[dict[str, Any]]
) -> None:
    settled = next(
        line for line in lines if line.get("type") == "BetSettled" and line["payload"]["payout"] > 0
    )
    settled["payload"] = {**settled["payload"], "payout": settled["payload"]["payout"] + 100}
    code, out, _ = run(capsys, write(tmp_path / "e.jsonl", rechain(lines)))
    assert code == 1
    assert "payout: round" in out
    assert "the rules pay" in out


def test_a_bad_seed_fails_the_seed_check(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, lines: list[dict[str, Any]]
) -> None:
    shoe = next(line for line in lines if line["kind"] == "shoe")
    shoe["server_seed"] = "0" * 64
    code, out, _ = run(capsys, write(tmp_path / "e.jsonl", lines))
    assert code == 1
    assert "does not hash to the commitment" in out
    assert "differs from ShoeRevealed" in out


def test_a_commitment_published_for_a_second_shoe_fails_the_seed_check(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, played_two_shoes: Played
) -> None:
    lines = [dict(line) for line in export_lines(played_two_shoes)]
    first, second = (line for line in lines if line["kind"] == "shoe")
    second["server_seed_hash"] = first["server_seed_hash"]
    opened = next(
        line
        for line in lines
        if line.get("type") == "ShoeOpened" and line["payload"]["shoe_id"] == second["shoe_id"]
    )
    opened["payload"] = {**opened["payload"], "server_seed_hash": first["server_seed_hash"]}
    code, out, _ = run(capsys, write(tmp_path / "e.jsonl", rechain(lines)))
    assert code == 1
    assert f"already published for shoe {first['shoe_id']}" in out


def test_a_short_void_fails_the_money_check(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, lines: list[dict[str, Any]]
) -> None:
    reversal = next(
        i
        for i, line in enumerate(lines)
        if line.get("type") == "SettlementReversed" and line["category"] == "table"
    )
    code, out, _ = run(
        capsys, write(tmp_path / "e.jsonl", rechain(lines[:reversal] + lines[reversal + 1 :]))
    )
    assert code == 1
    assert "voided without reversing" in out


# Damage that makes the file unreadable: exit 2, exactly one line on stderr.


def damaged(capsys: pytest.CaptureFixture[str], path: Path) -> str:
    code, out, err = run(capsys, path)
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1, err
    return err


def raw_lines(lines: list[dict[str, Any]]) -> list[bytes]:
    return [orjson.dumps(line) for line in lines]


def test_1e400_in_a_payload(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, lines: list[dict[str, Any]]
) -> None:
    raw = raw_lines(lines)
    index = next(i for i, line in enumerate(lines) if line.get("type") == "BetPlaced")
    raw[index] = raw[index].replace(b'"stake":', b'"stake":1e400,"x":', 1)
    path = tmp_path / "e.jsonl"
    path.write_bytes(b"\n".join(raw) + b"\n")
    err = damaged(capsys, path)
    assert f"line {index + 1}" in err
    assert "1e400 is not an integer" in err


def test_infinity_as_recorded_at(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, lines: list[dict[str, Any]]
) -> None:
    index = 7
    lines[index]["recorded_at"] = "infinity"
    err = damaged(capsys, write(tmp_path / "e.jsonl", lines))
    assert f"line {index + 1} (position {lines[index]['position']})" in err
    assert "recorded_at 'infinity' is not a UTC timestamp" in err


def test_a_line_cut_mid_way(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, lines: list[dict[str, Any]]
) -> None:
    data = b"".join(line + b"\n" for line in raw_lines(lines))
    path = tmp_path / "e.jsonl"
    path.write_bytes(data[: len(data) // 2])
    err = damaged(capsys, path)
    assert "cut short" in err
    assert "line " in err


@pytest.mark.parametrize(
    ("edit", "words"),
    [
        (lambda line: line.pop("hash"), "the event line lacks hash"),
        (lambda line: line.update(position="12"), "position is a string, not an integer"),
        (lambda line: line.update(payload=[1]), "payload is an array, not an object"),
        (lambda line: line.update(metadata={**line["metadata"], "actor": 5}), "metadata.actor"),
        (lambda line: line.update(position=True), "position is a boolean"),
        (
            lambda line: line.update(recorded_at="2026-02-30T00:00:00.000000Z"),
            "not a UTC timestamp",
        ),
        (
            lambda line: line.update(payload={**line["payload"], "stake": "100"}),
            "payload.stake is a string",
        ),
        (lambda line: line["payload"].pop("stake"), "payload.stake is missing"),
    ],
)
def test_missing_keys_and_wrong_types(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    lines: list[dict[str, Any]],
    edit: Any,
    words: str,
) -> None:
    index = next(i for i, line in enumerate(lines) if line.get("type") == "BetPlaced")
    lines[index] = copy.deepcopy(lines[index])
    edit(lines[index])
    err = damaged(capsys, write(tmp_path / "e.jsonl", lines))
    assert f"line {index + 1}" in err
    assert words in err


@pytest.mark.parametrize(
    ("text", "words"),
    [
        (b"[1, 2]", "not an array"),
        (b'"event"', "not a string"),
        (b'{"kind": 3}', "no string kind"),
        (b'{"kind": "coupon"}', "unknown line kind 'coupon'"),
        (b'{"kind": "header", "format": "shoebox-export/1"}', "a second header"),
        (b'{"kind": "shoe", "shoe_id": "x"}', "table_id is missing"),
        (
            b'{"kind": "wallet", "player_id": "p", "opening": {}, "closing": {}}',
            "opening.open_stakes is missing",
        ),
        (b'{"kind":"event","a":1,"a":2}', "appears twice"),
    ],
)
def test_lines_that_are_not_export_lines(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    lines: list[dict[str, Any]],
    text: bytes,
    words: str,
) -> None:
    raw = raw_lines(lines)
    raw.insert(5, text)
    path = tmp_path / "e.jsonl"
    path.write_bytes(b"\n".join(raw) + b"\n")
    err = damaged(capsys, path)
    assert "line 6" in err
    assert words in err


def test_an_empty_file_and_a_missing_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "e.jsonl"
    path.write_bytes(b"")
    assert "empty" in damaged(capsys, path)
    assert "cannot read" in damaged(capsys, tmp_path / "missing.jsonl")


def test_a_header_that_is_not_one(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "e.jsonl"
    path.write_text(json.dumps({"kind": "header", "format": "shoebox-export/9"}) + "\n")
    assert "shoebox-export/9" in damaged(capsys, path)


def test_progress_is_reported_when_asked(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    lines: list[dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import time

    import shoebox_verify.verify as module

    ticks = iter(range(0, 10_000_000, 5))
    monkeypatch.setattr(time, "monotonic", lambda: float(next(ticks)))
    monkeypatch.setattr(module, "_PROGRESS_EVERY", 1)
    path = write(tmp_path / "e.jsonl", lines)
    assert main([str(path), "--progress"]) == 0
    _, err = capsys.readouterr()
    assert "shoebox-verify: pass 2 of 2:" in err
    assert main([str(path)]) == 0  # stderr is not a terminal: quiet
    assert capsys.readouterr().err == ""
