"""Reconciliation compares Shoebox's money calls with the wallet's list, by transaction id."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from service.application.wallet_reconciliation import (
    CallState,
    Problem,
    ShoeboxCall,
    WalletEntry,
    reconcile,
)

AT = datetime(2026, 12, 4, 12, tzinfo=UTC)


def _call(
    transaction: str,
    kind: str = "bet",
    amount: int = 500,
    state: CallState = CallState.CONFIRMED,
    reference: tuple[str, ...] = (),
) -> ShoeboxCall:
    return ShoeboxCall(transaction, kind, "alice", amount, "GBP", reference, state)


def _entry(
    transaction: str,
    kind: str = "bet",
    amount: int = 500,
    status: str = "OK",
    rolled_back_by: str | None = None,
    reference: tuple[str, ...] = (),
    at: datetime = AT,
) -> WalletEntry:
    moved = {"bet": -amount, "win": amount, "rollback": amount}[kind]
    return WalletEntry(
        transaction, kind, "alice", amount, moved, "GBP", reference, status, rolled_back_by, at
    )


def test_agreeing_sides_are_clean() -> None:
    report = reconcile(
        [_call("b1"), _call("w1", "win", 900, reference=("b1",))],
        [_entry("b1"), _entry("w1", "win", 900, reference=("b1",))],
    )
    assert report.clean
    assert report.compared == 2


def test_a_confirmed_call_the_wallet_does_not_list_is_missing() -> None:
    report = reconcile([_call("b1")], [])
    assert [(item.transaction_uuid, item.problem) for item in report.differences] == [
        ("b1", Problem.MISSING_AT_WALLET)
    ]


def test_a_wallet_transaction_shoebox_never_sent_is_reported_inside_the_window_only() -> None:
    stray = _entry("x1")
    late = _entry("x2", at=AT + timedelta(days=1))
    deposit = WalletEntry("d1", "deposit", "alice", 100, 100, "GBP", (), "OK", None, AT)
    report = reconcile([], [stray, late, deposit], window=(AT, AT + timedelta(hours=1)))
    assert [(item.transaction_uuid, item.problem) for item in report.differences] == [
        ("x1", Problem.UNKNOWN_TO_SHOEBOX)
    ]


def test_a_different_amount_or_reference_is_reported_with_both_values() -> None:
    report = reconcile(
        [_call("b1", amount=500), _call("w1", "win", 900, reference=("b1",))],
        [_entry("b1", amount=5000), _entry("w1", "win", 900, reference=("b9",))],
    )
    assert [item.problem for item in report.differences] == [Problem.FIELDS_DIFFER] * 2
    assert "amount: 500 here, 5000 at the wallet" in report.differences[0].detail


def test_a_bet_refused_to_shoebox_but_applied_at_the_wallet_is_reported() -> None:
    report = reconcile(
        [_call("b1", state=CallState.REFUSED), _call("b2", state=CallState.REFUSED)],
        [_entry("b1")],
    )
    assert [(item.transaction_uuid, item.problem) for item in report.differences] == [
        ("b1", Problem.APPLIED_BUT_REFUSED)
    ]


def test_an_uncertain_bet_is_clean_once_its_rollback_is_confirmed_either_way() -> None:
    applied = reconcile(
        [
            _call("b1", state=CallState.UNCERTAIN),
            _call("r1", "rollback", reference=("b1",)),
        ],
        [_entry("b1", rolled_back_by="r1"), _entry("r1", "rollback", reference=("b1",))],
    )
    never_arrived = reconcile(
        [
            _call("b1", state=CallState.UNCERTAIN),
            _call("r1", "rollback", reference=("b1",)),
        ],
        [_entry("r1", "rollback", status="UNKNOWN_TRANSACTION", reference=("b1",))],
    )
    assert applied.clean
    assert never_arrived.clean


def test_an_uncertain_bet_still_held_after_its_confirmed_rollback_is_reported() -> None:
    report = reconcile(
        [_call("b1", state=CallState.UNCERTAIN), _call("r1", "rollback", reference=("b1",))],
        [_entry("b1"), _entry("r1", "rollback", reference=("b1",))],
    )
    assert [item.problem for item in report.differences] == [Problem.NOT_ROLLED_BACK]


@pytest.mark.parametrize("listed", [[], [_entry("b1")]])
def test_a_call_still_owed_is_a_note_not_a_difference(listed: list[WalletEntry]) -> None:
    report = reconcile(
        [
            _call("b1", state=CallState.UNCERTAIN),
            _call("r1", "rollback", state=CallState.PENDING, reference=("b1",)),
        ],
        listed,
    )
    assert report.clean
    assert Problem.AWAITING in {item.problem for item in report.notes}


def test_a_row_that_is_not_a_transaction_is_refused() -> None:
    with pytest.raises(ValueError, match="not a wallet transaction row"):
        WalletEntry.from_document({"transaction_uuid": "x", "amount": 1.5})
