"""Kept checkpoints lost by a recorded restore (`LogRestored`), docs/verification.md.

The restored export is built from a played one: the log is kept up to one position, a
`LogRestored` follows it, and the rest is appended again after it (rechained), so every kept
checkpoint signed past the restore point over the old log no longer matches.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from shoebox_verify import checkpoints as cp
from shoebox_verify.cli import main

from tests.verifier.exportgen import rechain, write

KEY1_SEED = bytes(range(32))
KEY1 = cp.public_key_of(KEY1_SEED).hex()
KEPT_INDEX = 300  # the last event the restore kept, as an index into the export's events
RESTORED_AT = "2026-11-30T13:00:00.000000Z"  # after every event of the played export
BEFORE = "2026-11-30T12:30:00.000000Z"
AFTER = "2026-11-30T13:05:00.000000Z"


def _events(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [line for line in lines if line["kind"] == "event"]


def _log_restored(kept: dict[str, Any], named: dict[str, Any] | None) -> dict[str, Any]:
    return {
        "kind": "event",
        "position": kept["position"] + 1,
        "stream_id": "audit:restores",
        "category": "audit",
        "version": 1,
        "type": "LogRestored",
        "schema_version": 1,
        "payload": {
            "restore_id": "ab" * 16,
            "last_position_kept": kept["position"],
            "last_checkpoint_position": None if named is None else named["position"],
            "last_checkpoint_hash": None if named is None else named["hash"],
            "recovery_target": f"position {kept['position']}",
            "reason": "the primary's disk was lost",
            "restored_at": RESTORED_AT,
        },
        "metadata": {**kept["metadata"], "actor": "operator", "role": "operator"},
        "recorded_at": RESTORED_AT,
        "prev_hash": kept["hash"],
        "hash": "",
    }


def _restored(
    lines: list[dict[str, Any]], *, recorded: bool = True, **payload: Any
) -> list[dict[str, Any]]:
    """The export of the log restored to the event at KEPT_INDEX, then played on."""
    events = _events(lines)
    kept = events[KEPT_INDEX]
    at = lines.index(kept) + 1
    restore = _log_restored(kept, events[KEPT_INDEX - 10])
    restore["payload"].update(payload)
    if not recorded:  # an event in its place that explains nothing
        restore.update(stream_id="audit:notes", type="CheckpointSigned")
    return rechain([copy.deepcopy(line) for line in lines[:at]] + [restore] + lines[at:])


def _kept(tmp_path: Path, *checkpoints: dict[str, Any]) -> Path:
    return write(tmp_path / "kept.jsonl", list(checkpoints))


def _run(capsys: pytest.CaptureFixture[str], *arguments: str) -> tuple[int, str]:
    code = main([*arguments, "--no-progress", "--trusted-key", KEY1])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out + err


def test_a_checkpoint_past_the_restore_point_signed_before_it_is_lost_not_failed(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, lines: list[dict[str, Any]]
) -> None:
    old = _events(lines)
    restored = _restored(lines)
    export = write(tmp_path / "e.jsonl", restored)
    before, lost = old[KEPT_INDEX - 20], old[KEPT_INDEX + 40]
    kept = _kept(
        tmp_path,
        cp.sign(KEY1_SEED, before["position"], before["hash"], BEFORE),
        cp.sign(KEY1_SEED, lost["position"], lost["hash"], BEFORE),
    )
    assert _events(restored)[KEPT_INDEX + 40]["hash"] != lost["hash"]
    code, out = _run(capsys, str(export), "--checkpoint", str(kept))
    assert code == 0, out
    restore_at = old[KEPT_INDEX]["position"] + 1
    assert (
        f"note: the checkpoint file: checkpoint at position {lost['position']}: LOST by the"
        f" restore recorded at position {restore_at} ({RESTORED_AT}: the log was restored to"
        f" position {restore_at - 1}, extending the checkpoint at"
        f" {old[KEPT_INDEX - 10]['position']}; reason: the primary's disk was lost)"
    ) in out
    assert "2 checkpoints" in out


def test_the_log_restored_event_itself_may_hold_the_lost_position(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, lines: list[dict[str, Any]]
) -> None:
    lost = _events(lines)[KEPT_INDEX + 1]
    export = write(tmp_path / "e.jsonl", _restored(lines))
    kept = _kept(tmp_path, cp.sign(KEY1_SEED, lost["position"], lost["hash"], BEFORE))
    code, out = _run(capsys, str(export), "--checkpoint", str(kept))
    assert code == 0, out
    assert f"checkpoint at position {lost['position']}: LOST by the restore" in out


def test_a_checkpoint_signed_after_the_restore_and_then_cut_still_fails(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, lines: list[dict[str, Any]]
) -> None:
    restored = _restored(lines)
    new = _events(restored)[KEPT_INDEX + 40]
    export = write(tmp_path / "e.jsonl", restored)
    kept = _kept(tmp_path, cp.sign(KEY1_SEED, new["position"], new["hash"], AFTER))
    code, out = _run(capsys, str(export), "--checkpoint", str(kept))
    assert code == 0, out  # signed over the restored log, which extends it
    # The restored log was then cut and played on again: the same checkpoint no longer holds.
    cut = rechain(restored[: restored.index(new)] + restored[restored.index(new) + 1 :])
    code, out = _run(capsys, str(write(tmp_path / "e.jsonl", cut)), "--checkpoint", str(kept))
    assert code == 1, out
    assert f"checkpoint: position {new['position']}" in out
    assert "LOST" not in out
    # Signed at the very moment of the restore is not before it either.
    kept = _kept(tmp_path, cp.sign(KEY1_SEED, new["position"], new["hash"], RESTORED_AT))
    code, out = _run(capsys, str(write(tmp_path / "e.jsonl", cut)), "--checkpoint", str(kept))
    assert code == 1, out
    assert "LOST" not in out


def test_a_checkpoint_the_restore_kept_must_still_match(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, lines: list[dict[str, Any]]
) -> None:
    kept_event = _events(lines)[KEPT_INDEX - 20]
    export = write(tmp_path / "e.jsonl", _restored(lines))
    kept = _kept(tmp_path, cp.sign(KEY1_SEED, kept_event["position"], "cd" * 32, BEFORE))
    code, out = _run(capsys, str(export), "--checkpoint", str(kept))
    assert code == 1, out
    assert f"checkpoint: position {kept_event['position']}" in out
    assert "LOST" not in out


def test_a_cut_no_log_restored_explains_still_fails(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, lines: list[dict[str, Any]]
) -> None:
    lost = _events(lines)[KEPT_INDEX + 40]
    # The same rewrite of the log past the restore point, with no LogRestored recorded.
    export = write(tmp_path / "e.jsonl", _restored(lines, recorded=False))
    kept = _kept(tmp_path, cp.sign(KEY1_SEED, lost["position"], lost["hash"], BEFORE))
    code, out = _run(capsys, str(export), "--checkpoint", str(kept))
    assert code == 1, out
    assert f"checkpoint: position {lost['position']}" in out
    assert "LOST" not in out


def test_a_restore_record_must_be_true(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, lines: list[dict[str, Any]]
) -> None:
    events = _events(lines)
    named = events[KEPT_INDEX - 10]
    kept = _kept(tmp_path, cp.sign(KEY1_SEED, named["position"], named["hash"], BEFORE))
    # A checkpoint the log does not hold.
    export = write(tmp_path / "e.jsonl", _restored(lines, last_checkpoint_hash="ef" * 32))
    code, out = _run(capsys, str(export), "--checkpoint", str(kept))
    assert code == 1, out
    assert f"the restore recorded at position {events[KEPT_INDEX]['position'] + 1}" in out
    # A restore point other than the head it was recorded after: it would excuse the rewrite
    # of positions the log kept.
    export = write(
        tmp_path / "e.jsonl",
        _restored(lines, last_position_kept=named["position"], last_checkpoint_position=None),
    )
    code, out = _run(capsys, str(export), "--checkpoint", str(kept))
    assert code == 1, out
    assert f"says the log was restored to position {named['position']}" in out
    assert "must both be null or neither" in out


def test_events_placed_after_recovery_may_differ_from_the_lost_timeline(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, lines: list[dict[str, Any]]
) -> None:
    # Recovery ended five events before the restore was recorded: the appends it kept
    # unsequenced were placed after it, with new hashes, so the lost timeline's checkpoint
    # over one of those positions (here, a hash the restored log does not hold) is lost.
    events = _events(lines)
    recovered, placed = events[KEPT_INDEX - 5], events[KEPT_INDEX - 2]
    kept = _kept(tmp_path, cp.sign(KEY1_SEED, placed["position"], "cd" * 32, BEFORE))
    export = write(tmp_path / "e.jsonl", _restored(lines, recovered_head=recovered["position"]))
    code, out = _run(capsys, str(export), "--checkpoint", str(kept))
    assert code == 0, out
    assert (
        f"checkpoint at position {placed['position']}: LOST by the restore recorded at"
        f" position {events[KEPT_INDEX]['position'] + 1} ({RESTORED_AT}: the log was restored"
        f" to position {recovered['position']}"
    ) in out
    # Without the field, the same position was kept whole and must still match.
    export = write(tmp_path / "e.jsonl", _restored(lines))
    code, out = _run(capsys, str(export), "--checkpoint", str(kept))
    assert code == 1, out
    assert "LOST" not in out
    # Recovery cannot have ended past what the restore kept.
    beyond = events[KEPT_INDEX]["position"] + 1
    export = write(tmp_path / "e.jsonl", _restored(lines, recovered_head=beyond))
    code, out = _run(capsys, str(export), "--checkpoint", str(kept))
    assert code == 1, out
    assert f"it says recovery ended at position {beyond}, outside 0 to" in out
