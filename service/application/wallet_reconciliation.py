"""Reconciliation of a seamless operator: Shoebox's money calls against the wallet's own list.

Pure comparison, by transaction id. Shoebox's side is each money call it made and what it
knows of its fate; the wallet's side is its transaction list (docs/wallets.md). Every
disagreement is reported under the transaction id it concerns; a call whose fate Shoebox is
still waiting to learn (an owed rollback, a win being retried) is a note, not a difference.

Not built yet (docs/wallets.md, "What is built"): reading Shoebox's calls from the log's
events, and the `shoebox wallet reconcile` command with its daily significant event.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, Final

MONEY_KINDS: Final = ("bet", "win", "rollback")
APPLIED: Final = frozenset({"OK", "UNKNOWN_TRANSACTION"})
"""The wallet's statuses of a recorded transaction (a remembered rollback is recorded too)."""


class CallState(StrEnum):
    """What Shoebox knows of a money call's fate."""

    CONFIRMED = "confirmed"
    """The wallet answered ok."""
    REFUSED = "refused"
    """The wallet said no: nothing moved, so the wallet must not list it as applied."""
    UNCERTAIN = "uncertain"
    """A bet nobody knows the fate of; its rollback (another call) settles it."""
    PENDING = "pending"
    """Owed and still being retried (a rollback, a win): not yet a difference."""


@dataclass(frozen=True, slots=True)
class ShoeboxCall:
    """A money call Shoebox made, with the fields the wallet must agree on."""

    transaction_uuid: str
    kind: str
    player_id: str
    amount: int
    currency: str
    reference: tuple[str, ...]
    state: CallState


@dataclass(frozen=True, slots=True)
class WalletEntry:
    """One row of the wallet's transaction list."""

    transaction_uuid: str
    kind: str
    player_id: str
    amount: int
    moved: int
    currency: str
    reference: tuple[str, ...]
    status: str
    rolled_back_by: str | None
    created_at: datetime

    @classmethod
    def from_document(cls, row: Mapping[str, Any]) -> WalletEntry:
        """A row as the wallet lists it, or ValueError if it is not one."""
        try:
            amount, moved = row["amount"], row["moved"]
            if type(amount) is not int or type(moved) is not int:
                raise TypeError("amounts are integers")
            reference = row["reference_transaction_uuid"]
            return cls(
                transaction_uuid=str(row["transaction_uuid"]),
                kind=str(row["kind"]),
                player_id=str(row["player_id"]),
                amount=amount,
                moved=moved,
                currency=str(row["currency"]),
                reference=tuple(str(item) for item in reference),
                status=str(row["status"]),
                rolled_back_by=None
                if row["rolled_back_by"] is None
                else str(row["rolled_back_by"]),
                created_at=datetime.fromisoformat(str(row["created_at"])),
            )
        except (KeyError, TypeError, ValueError) as error:
            raise ValueError(f"not a wallet transaction row: {error}") from None


class Problem(StrEnum):
    """Each kind of disagreement, as reported."""

    MISSING_AT_WALLET = "missing-at-wallet"
    UNKNOWN_TO_SHOEBOX = "unknown-to-shoebox"
    FIELDS_DIFFER = "fields-differ"
    APPLIED_BUT_REFUSED = "applied-but-refused"
    NOT_ROLLED_BACK = "not-rolled-back"
    AWAITING = "awaiting"
    """A note: the call's fate is still being settled by retries."""


@dataclass(frozen=True, slots=True)
class Difference:
    """One disagreement (or note) about one transaction."""

    transaction_uuid: str
    problem: Problem
    detail: str


@dataclass(frozen=True, slots=True)
class Reconciliation:
    """The differences, in transaction id order, and the notes beside them."""

    compared: int
    differences: tuple[Difference, ...]
    notes: tuple[Difference, ...]

    @property
    def clean(self) -> bool:
        """Whether Shoebox and the wallet agree on every transaction."""
        return not self.differences


def reconcile(
    calls: Iterable[ShoeboxCall],
    listed: Iterable[WalletEntry],
    window: tuple[datetime, datetime] | None = None,
) -> Reconciliation:
    """Compare Shoebox's calls with the wallet's list, by transaction id.

    List the wallet over a margin around `window`: a call sent at the window's last instant may
    be recorded by the wallet just after it. A wallet row Shoebox does not know is reported
    only if it lies inside `window`.
    """
    ours = {call.transaction_uuid: call for call in calls}
    theirs = {entry.transaction_uuid: entry for entry in listed if entry.kind in MONEY_KINDS}
    confirmed_rollbacks = {
        call.reference[0]: call
        for call in ours.values()
        if call.kind == "rollback" and call.state is CallState.CONFIRMED and call.reference
    }
    differences: list[Difference] = []
    notes: list[Difference] = []
    for transaction, call in ours.items():
        entry = theirs.get(transaction)
        recorded = entry is not None and entry.status in APPLIED
        if call.state is CallState.PENDING:
            notes.append(Difference(transaction, Problem.AWAITING, f"{call.kind} still owed"))
        elif call.state is CallState.REFUSED:
            if recorded:
                differences.append(
                    Difference(
                        transaction,
                        Problem.APPLIED_BUT_REFUSED,
                        f"the wallet applied a {call.kind} it refused to Shoebox",
                    )
                )
        elif call.state is CallState.UNCERTAIN:
            if entry is not None and recorded and entry.rolled_back_by is None:
                if transaction in confirmed_rollbacks:
                    differences.append(
                        Difference(
                            transaction,
                            Problem.NOT_ROLLED_BACK,
                            f"the wallet confirmed its rollback but still holds the {call.kind}",
                        )
                    )
                else:
                    notes.append(
                        Difference(transaction, Problem.AWAITING, "its rollback is still owed")
                    )
        elif entry is None or not recorded:
            differences.append(
                Difference(
                    transaction,
                    Problem.MISSING_AT_WALLET,
                    f"Shoebox holds a confirmed {call.kind} the wallet does not list",
                )
            )
        else:
            mismatch = _mismatch(call, entry)
            if mismatch:
                differences.append(Difference(transaction, Problem.FIELDS_DIFFER, mismatch))
    for transaction, entry in theirs.items():
        if transaction in ours or entry.status not in APPLIED:
            continue
        if window is not None and not window[0] <= entry.created_at < window[1]:
            continue
        differences.append(
            Difference(
                transaction,
                Problem.UNKNOWN_TO_SHOEBOX,
                f"the wallet lists a {entry.kind} of {entry.amount} for {entry.player_id}"
                " that Shoebox never sent",
            )
        )
    return Reconciliation(
        compared=len(set(ours) | set(theirs)),
        differences=tuple(sorted(differences, key=lambda item: item.transaction_uuid)),
        notes=tuple(sorted(notes, key=lambda item: item.transaction_uuid)),
    )


def _mismatch(call: ShoeboxCall, entry: WalletEntry) -> str:
    fields = ("kind", "player_id", "amount", "currency")
    different = [
        f"{name}: {getattr(call, name)!r} here, {getattr(entry, name)!r} at the wallet"
        for name in fields
        if getattr(call, name) != getattr(entry, name)
    ]
    if sorted(call.reference) != sorted(entry.reference):
        different.append("the referenced transactions differ")
    return "; ".join(different)
