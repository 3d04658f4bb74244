"""shoebox-verify on seamless money (shoebox-export/2): each win and rollback owed, and confirmed.

The exports are exportgen's play with operator wallets (seamlessgen.py); each tamper is made as
someone able to rewrite the export would make it, with the chain recomputed, so that the
seamless check alone has to catch it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.verifier.exportgen import Played, write
from tests.verifier.seamlessgen import Options, Story, seamless_export
from tests.verifier.test_cli import run


def _first(story: Story, kind: str, by: str, positive: bool = False) -> tuple[str, int]:
    return next(
        (txn, amount)
        for k, txn, owing, amount in story.owed
        if k == kind and owing == by and (amount > 0 or not positive)
    )


def test_a_clean_seamless_export_verifies(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, played: Played
) -> None:
    story = seamless_export(played)
    kinds = {(kind, by) for kind, _, by, _ in story.owed}
    # A lost bet's win of 0, a paid one, Pass returns, the void's rollbacks, an uncertain debit.
    assert {("win", "BetSettled"), ("rollback", "StakeReturned")} <= kinds
    assert {("rollback", "SettlementReversed"), ("rollback", "WalletCallOwed")} <= kinds
    assert ("rollback", "WalletCallRefused") in kinds  # every refused bet is rolled back too
    assert any(amount == 0 for kind, _, _, amount in story.owed if kind == "win")
    code, out, _ = run(capsys, write(tmp_path / "e.jsonl", story.lines))
    assert code == 0, out
    wins = sum(1 for kind, *_ in story.owed if kind == "win")
    rollbacks = len(story.owed) - wins
    assert f"{wins} win(s) and {rollbacks} rollback(s) owed in the slice" in out
    assert f"{len(story.owed)} confirmed here, 0 pending" in out


def test_seamless_money_under_version_1_fails_the_format_check(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, played: Played
) -> None:
    lines = seamless_export(played).lines
    lines[0] = {**lines[0], "format": "shoebox-export/1"}
    code, out, _ = run(capsys, write(tmp_path / "e.jsonl", lines))
    assert code == 1
    assert "format: header: shoebox-export/1 holds seamless money" in out
    assert "seamless:" not in out.replace("seamless money", "")


def test_a_win_confirmed_for_another_amount_fails(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, played: Played
) -> None:
    win, payout = _first(seamless_export(played), "win", "BetSettled", positive=True)
    story = seamless_export(played, Options(amount_delta={win: 100}))
    code, out, _ = run(capsys, write(tmp_path / "e.jsonl", story.lines))
    assert code == 1
    assert "seamless: position" in out
    assert f"win {win} is confirmed for {payout + 100}p" in out
    assert f"owes {payout}p" in out
    assert "chain:" not in out
    assert "money:" not in out


def test_a_win_confirmed_twice_fails(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, played: Played
) -> None:
    win, _ = _first(seamless_export(played), "win", "BetSettled")
    story = seamless_export(played, Options(confirm_twice={win}))
    code, out, _ = run(capsys, write(tmp_path / "e.jsonl", story.lines))
    assert code == 1
    assert f"win {win} is confirmed again" in out
    assert out.count("seamless: ") == 1


def test_a_rollback_confirmed_twice_fails(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, played: Played
) -> None:
    rollback, _ = _first(seamless_export(played), "rollback", "StakeReturned")
    story = seamless_export(played, Options(confirm_twice={rollback}))
    code, out, _ = run(capsys, write(tmp_path / "e.jsonl", story.lines))
    assert code == 1
    assert f"rollback {rollback} is confirmed again" in out


def test_a_confirmed_rollback_that_nothing_owes_fails(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, played: Played
) -> None:
    # The uncertain debit's WalletCallOwed is cut out: its confirmation is left naming a call
    # the slice never owed (a tamperer hiding a failed debit).
    story = seamless_export(played, Options(drop_owed=True))
    rollback, _ = _first(story, "rollback", "WalletCallOwed")
    code, out, _ = run(capsys, write(tmp_path / "e.jsonl", story.lines))
    assert code == 1
    assert f"confirms rollback {rollback}, which nothing owes" in out


def test_a_pending_rollback_of_an_uncertain_debit_is_a_note(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, played: Played
) -> None:
    rollback, _ = _first(seamless_export(played), "rollback", "WalletCallOwed")
    story = seamless_export(played, Options(skip={rollback}))
    code, out, _ = run(capsys, write(tmp_path / "e.jsonl", story.lines))
    assert code == 0, out
    assert f"rollback {rollback} of 500p" in out
    assert "is still owed at the end of the slice" in out
    assert ", 1 pending" in out


def test_a_missing_rollback_of_a_returned_stake_is_never_silent(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, played: Played
) -> None:
    # The wallet has not confirmed it (yet): the slice cannot tell late from never, so it says
    # which call is outstanding rather than passing it over.
    rollback, stake = _first(seamless_export(played), "rollback", "StakeReturned")
    story = seamless_export(played, Options(skip={rollback}))
    code, out, _ = run(capsys, write(tmp_path / "e.jsonl", story.lines))
    assert code == 0, out
    assert "note: " in out
    assert f"rollback {rollback} of {stake}p" in out


def test_a_refused_bets_rollback_is_owed_once(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, played: Played
) -> None:
    """Issue 24: every refused or uncertain bet has exactly one confirmed rollback."""
    rollback, amount = _first(seamless_export(played), "rollback", "WalletCallRefused")
    assert amount == 700
    pending = seamless_export(played, Options(skip={rollback}))
    code, out, _ = run(capsys, write(tmp_path / "pending.jsonl", pending.lines))
    assert code == 0, out  # still owed when the slice ends: a note, not a failure
    assert "1 pending" in out
    twice = seamless_export(played, Options(confirm_twice={rollback}))
    code, out, _ = run(capsys, write(tmp_path / "twice.jsonl", twice.lines))
    assert code == 1
    assert f"rollback {rollback} is confirmed again" in out
    wrong = seamless_export(played, Options(amount_delta={rollback: 1}))
    code, out, _ = run(capsys, write(tmp_path / "wrong.jsonl", wrong.lines))
    assert code == 1
    assert f"rollback {rollback} is confirmed for 701p" in out
