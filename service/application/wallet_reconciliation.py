"""Reconciliation of a seamless operator: Shoebox's money calls against the wallet's own list.

Pure comparison, by transaction id. Shoebox's side is each money call it made and what it
knows of its fate; the wallet's side is its transaction list (docs/wallets.md). Every
disagreement is reported under the transaction id it concerns; a call whose fate Shoebox is
still waiting to learn (an owed rollback, a win being retried) is a note, not a difference.

`report_day` records one operator's day as a WalletReconciled event, once: the worker's daily
job (service/runtime/jobs.py) calls it, and a day with a difference is a significant event.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from enum import StrEnum
from typing import Any, Final

from domain.reconciliation import FIRST_DIFFERENCES, WalletReconciled
from events.store import ConcurrencyConflict, EventStore, JsonValue, NewEvent, StreamAppend
from service.application.actor import Actor

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


# -- the daily report ----------------------------------------------------------------------

RECONCILIATION: Final = "reconciliation"
RECONCILER: Final = Actor("reconciler", "system")
"""The actor of the WalletReconciled events the worker's daily job appends."""
LIST_MARGIN: Final = timedelta(minutes=10)
"""How far around the day the wallet's list is read: a call sent at the day's last instant may
be recorded by the wallet just after it (the same margin as `shoebox wallet reconcile`)."""
_ATTEMPTS: Final = 3


def reconciliation_stream(operator: str) -> str:
    """The stream of an operator's daily reconciliations, one event per day reported."""
    return f"{RECONCILIATION}:{operator}"


def day_window(day: date) -> tuple[datetime, datetime]:
    """The UTC day as [its midnight, the next midnight)."""
    start = datetime.combine(day, time(), UTC)
    return start, start + timedelta(days=1)


def report_day(
    store: EventStore,
    operator: str,
    day: date,
    calls: Callable[[datetime, datetime], Iterable[ShoeboxCall]],
    listed: Callable[[datetime, datetime], Iterable[WalletEntry]],
) -> WalletReconciled | None:
    """Reconcile `operator`'s `day` and append a WalletReconciled, unless the day is reported.

    `calls(since, until)` are Shoebox's calls of the window (the projection caught up);
    `listed(since, until)` the wallet's rows, read over LIST_MARGIN around it. Safe to run any
    number of times, by several workers: the stream's expected version lets one of two racing
    runs append, and the other finds the day reported. None when it was reported already.
    """
    stream = reconciliation_stream(operator)
    conflict: ConcurrencyConflict | None = None
    for _ in range(_ATTEMPTS):
        recorded = store.read_stream(stream)
        if any(event.payload.get("day") == day.isoformat() for event in recorded):
            return None
        start, end = day_window(day)
        result = reconcile(
            calls(start, end), listed(start - LIST_MARGIN, end + LIST_MARGIN), (start, end)
        )
        event = WalletReconciled(
            operator=operator,
            day=day.isoformat(),
            compared=result.compared,
            differences=len(result.differences),
            notes=len(result.notes),
            first_differences=tuple(
                difference.transaction_uuid for difference in result.differences[:FIRST_DIFFERENCES]
            ),
        )
        payload: dict[str, JsonValue] = {
            "operator": event.operator,
            "day": event.day,
            "compared": event.compared,
            "differences": event.differences,
            "notes": event.notes,
            "first_differences": list(event.first_differences),
        }
        new = NewEvent(WalletReconciled.type, payload)
        try:
            store.append([StreamAppend(stream, len(recorded), [new])], RECONCILER.metadata())
        except ConcurrencyConflict as error:
            # Another worker appended to the stream meanwhile: most likely this very day.
            conflict = error
            continue
        return event
    assert conflict is not None
    raise conflict
