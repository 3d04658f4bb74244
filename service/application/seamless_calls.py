"""The calls Shoebox owes seamless wallets: a projection of the log, and their delivery.

The owed calls are written by the append that owes them, in its own transaction
(service/application/seamless_owed.py, as events/store.py's outbox rows). This projection of
the log derives the very same rows under the same transaction ids, so whichever comes first
the other adds nothing; it closes the debits each call settles, and queues the calls of a log
written before the appends did. A checkpointed consumer of the sequenced events
(events/subscription.py's CatchUpSubscription, whose batch and checkpoint commit in one
transaction, so each event is handled exactly once) turns

- each StakeDebited into the record of a confirmed debit;
- each StakeReturned of a seamless player into a `rollback` of every open debit on that spot;
- each BetSettled into a `win` of the payout (0 for a lost bet) naming every debit on the spot;
- each SettlementReversed into a `rollback` of that spot's win and of each of its debits;
- each WalletCallOwed (an uncertain or orphan debit) into the `rollback` it names;
- each WalletCallRefused into a `rollback` of the refused bet (it moved nothing: the wallet
  answers UNKNOWN_TRANSACTION and remembers the id, so the bet is never applied later);

and writes them into `seamless_calls` under their transaction id, so a batch handled twice
queues nothing twice. Ids are derived from the owing event's stream and version, so a
rebuild from the log would owe the very same calls.

`deliver_due` (an RQ job every 2 s) sends each due call under its player's money lock, with
the same request id on every retry, and backs off exponentially. A call still failing after
the operator's `flag_after_seconds` is flagged for an operator, but retried forever. A win is
never turned into a rollback. A fatal answer parks the call (WalletCallParked; `resume` sends
it again once the cause is fixed). A rollback answered UNKNOWN_TRANSACTION is done. Each
outcome is also an event of the player's seamless stream.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Final

from psycopg import Connection
from psycopg.rows import TupleRow

from domain.round import BetSettled, SettlementReversed, StakeReturned
from domain.seamless import (
    StakeDebited,
    WalletCallConfirmed,
    WalletCallOwed,
    WalletCallParked,
    WalletCallRefused,
)
from events.postgres import Pool
from events.store import RecordedEvent
from events.subscription import CatchUpSubscription
from service.application.operators import operator_of, player_ref
from service.application.seamless import (
    ROLLBACK,
    WIN,
    Outcome,
    WalletCall,
    request_uuid,
    transaction_uuid,
)
from service.application.seamless_bets import (
    ORPHAN_AFTER_SECONDS,
    SYSTEM,
    SeamlessService,
)
from service.application.streams import SEAMLESS, TABLE, id_of
from service.application.upcasters import upcasters
from service.application.wallet_reconciliation import CallState, ShoeboxCall

log = logging.getLogger("shoebox.seamless_calls")

SUBSCRIPTION: Final = "seamless-calls"
LONGEST_BACKOFF_SECONDS: Final = 60.0
DUE_BATCH: Final = 100
RUN_BUDGET_SECONDS: Final = 10.0
"""How long one run of `deliver_due` keeps sending: with a wallet down, each call may wait for
its timeouts, and the next run (2 s later) takes up what is left."""

_UPSERT_BET = """
INSERT INTO seamless_calls (transaction_uuid, request_uuid, kind, operator, player_id, table_id,
    round_id, spot, amount, state, stream_version, created_at)
VALUES (%(txn)s, %(request)s, 'bet', %(operator)s, %(player)s, %(table)s, %(round)s, %(spot)s,
    %(amount)s, %(state)s, %(version)s, %(at)s)
ON CONFLICT (transaction_uuid) DO UPDATE SET state = excluded.state,
    stream_version = excluded.stream_version
    WHERE seamless_calls.state IN ('in_flight', 'confirmed')
"""
_INSERT_OWED = """
INSERT INTO seamless_calls (transaction_uuid, request_uuid, kind, operator, player_id, table_id,
    round_id, spot, amount, reference, state, created_at, next_attempt_at)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, 'owed', %s, %s)
ON CONFLICT (transaction_uuid) DO NOTHING
"""
_OPEN_DEBITS = """
SELECT transaction_uuid, amount FROM seamless_calls
WHERE table_id = %s AND round_id = %s AND player_id = %s AND spot = %s
  AND kind = 'bet' AND state = 'confirmed' AND closed_by IS NULL
ORDER BY stream_version
"""
_OPEN_WINS = """
SELECT transaction_uuid, amount FROM seamless_calls
WHERE table_id = %s AND round_id = %s AND player_id = %s AND spot = %s
  AND kind = 'win' AND closed_by IS NULL
ORDER BY created_at, transaction_uuid
"""
_DEBITS_OF_WIN = """
SELECT transaction_uuid, amount FROM seamless_calls
WHERE kind = 'bet' AND closed_by = %s ORDER BY stream_version
"""
_QUEUED = "SELECT transaction_uuid FROM seamless_calls WHERE transaction_uuid = ANY(%s)"
_REFERENCE_OF = "SELECT reference FROM seamless_calls WHERE transaction_uuid = %s"
_CLOSE = "UPDATE seamless_calls SET closed_by = %s WHERE transaction_uuid = %s"
_MARK = """
UPDATE seamless_calls SET state = %s,
    confirmed_at = CASE WHEN %s = 'confirmed' THEN coalesce(confirmed_at, %s) END,
    parked_at = CASE WHEN %s = 'parked' THEN coalesce(parked_at, %s) END
WHERE transaction_uuid = %s AND state <> 'confirmed'
"""


def project(conn: Connection[TupleRow], events: Sequence[RecordedEvent]) -> None:
    """Fold a batch of sequenced events into `seamless_calls`, in log order."""
    for event in events:
        if event.category == SEAMLESS:
            _seamless(conn, event)
        elif event.category == TABLE:
            _table(conn, event)


def _seamless(conn: Connection[TupleRow], event: RecordedEvent) -> None:
    player = id_of(event.stream_id)
    payload: Any = event.payload
    at = event.recorded_at
    kind = event.type
    if kind in (StakeDebited.type, WalletCallRefused.type):
        bet = payload["transaction_uuid"]
        conn.execute(
            _UPSERT_BET,
            {
                "txn": payload["transaction_uuid"],
                "request": request_uuid(payload["transaction_uuid"]),
                "operator": operator_of(player),
                "player": player,
                "table": payload["table_id"],
                "round": payload["round_id"],
                "spot": payload["spot"],
                "amount": payload["amount"],
                "state": "confirmed" if kind == StakeDebited.type else "refused",
                "version": event.version,
                "at": at,
            },
        )
        if kind == WalletCallRefused.type:
            # Its rollback is owed too: see seamless_owed.py.
            rollback = transaction_uuid(ROLLBACK, event.stream_id, event.version, bet)
            _owe(conn, event, ROLLBACK, rollback, payload["amount"], [bet])
            conn.execute(_CLOSE, [rollback, bet])
    elif kind == WalletCallOwed.type:
        bet = payload["reference_transaction_uuid"]
        conn.execute(
            _UPSERT_BET,
            {
                "txn": bet,
                "request": request_uuid(bet),
                "operator": operator_of(player),
                "player": player,
                "table": payload["table_id"],
                "round": payload["round_id"],
                "spot": payload["spot"],
                "amount": payload["amount"],
                "state": "uncertain",
                "version": event.version,
                "at": at,
            },
        )
        _owe(conn, event, payload["kind"], payload["transaction_uuid"], payload["amount"], [bet])
        conn.execute(_CLOSE, [payload["transaction_uuid"], bet])
    elif kind == WalletCallConfirmed.type:
        _mark(conn, payload["transaction_uuid"], "confirmed", at)
    elif kind == WalletCallParked.type:
        _mark(conn, payload["transaction_uuid"], "parked", at)


def _mark(conn: Connection[TupleRow], transaction: str, state: str, at: datetime) -> None:
    conn.execute(_MARK, [state, state, at, state, at, transaction])


def _table(conn: Connection[TupleRow], event: RecordedEvent) -> None:
    kind = event.type
    if kind not in (StakeReturned.type, BetSettled.type, SettlementReversed.type):
        return
    payload: Any = event.payload
    spot_key = [id_of(event.stream_id), payload["round_id"], payload["player_id"], payload["spot"]]
    stream, version = event.stream_id, event.version
    # The append that owed these calls most likely queued them itself (seamless_owed.py), and
    # the debits of later bets on this spot may be confirmed by now, their appends having
    # come after this one: when it did, exactly what it queued is owed, never more.
    if kind == SettlementReversed.type:
        # "All pays and play void": the win is taken back and each of its debits returned.
        wins = conn.execute(_OPEN_WINS, spot_key).fetchall()
        taken_back = {win: transaction_uuid(ROLLBACK, stream, version, win) for win, _ in wins}
        queued = _queued(conn, list(taken_back.values()))
        for win, amount in wins:
            rollback = taken_back[win]
            if queued and rollback not in queued:
                continue
            _owe(conn, event, ROLLBACK, rollback, amount, [win])
            conn.execute(_CLOSE, [rollback, win])
            for debit, stake in conn.execute(_DEBITS_OF_WIN, [win]).fetchall():
                returned = transaction_uuid(ROLLBACK, stream, version, debit)
                _owe(conn, event, ROLLBACK, returned, stake, [debit])
        return
    if kind == BetSettled.type:
        win = transaction_uuid(WIN, stream, version)
        found = conn.execute(_REFERENCE_OF, [win]).fetchone()
        if found is not None:
            for debit in found[0]:
                conn.execute(_CLOSE, [win, debit])
            return
    debits = conn.execute(_OPEN_DEBITS, spot_key).fetchall()
    if not debits:
        return  # an internal-wallet player's bet, or one already closed
    if kind == StakeReturned.type:
        owed_back = {d: transaction_uuid(ROLLBACK, stream, version, d) for d, _ in debits}
        queued = _queued(conn, list(owed_back.values()))
        for debit, stake in debits:
            rollback = owed_back[debit]
            if queued and rollback not in queued:
                continue  # a later bet's debit on the spot: not this return's
            _owe(conn, event, ROLLBACK, rollback, stake, [debit])
            conn.execute(_CLOSE, [rollback, debit])
        return
    win = transaction_uuid(WIN, stream, version)
    _owe(conn, event, WIN, win, int(payload["payout"]), [debit for debit, _ in debits])
    for debit, _ in debits:
        conn.execute(_CLOSE, [win, debit])


def _queued(conn: Connection[TupleRow], transactions: list[str]) -> set[str]:
    """Which of these calls are in `seamless_calls` already."""
    rows = conn.execute(_QUEUED, [transactions]).fetchall()
    return {row[0] for row in rows}


def _owe(
    conn: Connection[TupleRow],
    event: RecordedEvent,
    kind: str,
    transaction: str,
    amount: int,
    reference: list[str],
) -> None:
    payload: Any = event.payload
    if event.category == SEAMLESS:
        player, table_id = id_of(event.stream_id), payload["table_id"]
    else:
        player, table_id = payload["player_id"], id_of(event.stream_id)
    conn.execute(
        _INSERT_OWED,
        [
            transaction,
            request_uuid(transaction),
            kind,
            operator_of(player),
            player,
            table_id,
            payload["round_id"],
            payload["spot"],
            amount,
            reference,
            event.recorded_at,
            event.recorded_at,
        ],
    )


# -- delivery ----------------------------------------------------------------------------


@dataclass(slots=True)
class Delivery:
    """What one run of `deliver_due` did."""

    projected: int = 0
    orphans: int = 0
    confirmed: list[str] = field(default_factory=list)
    retrying: list[str] = field(default_factory=list)
    parked: list[tuple[str, str]] = field(default_factory=list)
    """(operator, transaction) of each call parked by this run."""
    flagged: list[tuple[str, str]] = field(default_factory=list)
    """(operator, transaction) of each call flagged by this run."""
    skipped: int = 0

    def summary(self) -> str:
        """One line for the job's result."""
        return (
            f"projected {self.projected}, orphans {self.orphans}, confirmed"
            f" {len(self.confirmed)}, retrying {len(self.retrying)}, parked {len(self.parked)},"
            f" flagged {len(self.flagged)}, busy {self.skipped}"
        )


_DUE = """
SELECT c.transaction_uuid, c.request_uuid, c.kind, c.operator, c.player_id, c.table_id,
    c.round_id, c.amount, c.reference, c.attempts, c.created_at, c.flagged_at
FROM seamless_calls AS c
WHERE c.state = 'owed' AND c.next_attempt_at <= %s
  -- A rollback of a win waits for the win: the wallet must see them in that order.
  AND NOT EXISTS (
    SELECT 1 FROM seamless_calls AS r
    WHERE r.transaction_uuid = ANY(c.reference) AND r.kind = 'win' AND r.state <> 'confirmed')
ORDER BY c.next_attempt_at, c.created_at, c.transaction_uuid
LIMIT %s
"""
_STILL_OWED = "SELECT state FROM seamless_calls WHERE transaction_uuid = %s"
_RETRY = """
UPDATE seamless_calls SET attempts = attempts + 1, next_attempt_at = %s, last_reason = %s,
    flagged_at = CASE WHEN %s THEN coalesce(flagged_at, %s) ELSE flagged_at END
WHERE transaction_uuid = %s
"""
_DONE = """
UPDATE seamless_calls SET state = %s, attempts = attempts + 1, last_reason = %s,
    confirmed_at = CASE WHEN %s = 'confirmed' THEN %s END,
    parked_at = CASE WHEN %s = 'parked' THEN %s END
WHERE transaction_uuid = %s
"""
_ORPHANED = """
SELECT DISTINCT player_id FROM seamless_calls
WHERE state = 'in_flight' AND created_at < %s
"""
_RESUME = """
UPDATE seamless_calls SET state = 'owed', next_attempt_at = %s, parked_at = NULL
WHERE transaction_uuid = %s AND state = 'parked' AND kind IN ('win', 'rollback')
"""


class SeamlessCalls:
    """The owed calls: kept up with the log, and delivered."""

    def __init__(
        self,
        pool: Pool,
        clock: Callable[[], datetime],
        seamless: SeamlessService,
        *,
        batch_size: int = 500,
    ) -> None:
        self._pool = pool
        self._clock = clock
        self._seamless = seamless
        self.subscription = CatchUpSubscription(
            pool,
            SUBSCRIPTION,
            project,
            batch_size=batch_size,
            categories=(TABLE, SEAMLESS),
            listen=False,
            upcasters=upcasters(),
            clock=clock,
        )

    @property
    def seamless(self) -> SeamlessService:
        """The seamless service the calls are delivered through."""
        return self._seamless

    def catch_up(self) -> int:
        """Project every sequenced event not yet seen; how many were handed over."""
        return self.subscription.run_until_caught_up()

    def deliver_due(
        self, limit: int = DUE_BATCH, budget_seconds: float = RUN_BUDGET_SECONDS
    ) -> Delivery:
        """Catch up with the log, roll back orphan debits, and send the calls due now."""
        started = time.monotonic()
        delivery = Delivery(projected=self.catch_up())
        delivery.orphans = self.sweep_orphans()
        if delivery.orphans:
            delivery.projected += self.catch_up()
        with self._pool.connection() as conn:
            rows = conn.execute(_DUE, [self._clock(), limit]).fetchall()
        for row in rows:
            if time.monotonic() - started > budget_seconds:
                break  # the rest are still due: the next run takes them
            self._deliver(row, delivery)
        return delivery

    def sweep_orphans(self) -> int:
        """Owe a rollback of each debit left without an outcome for 30 s; how many players."""
        cutoff = self._clock() - timedelta(seconds=ORPHAN_AFTER_SECONDS)
        with self._pool.connection() as conn:
            players = [row[0] for row in conn.execute(_ORPHANED, [cutoff]).fetchall()]
        settled = 0
        for player in players:
            with self._seamless.try_player_lock(player) as conn:
                if conn is None:
                    continue  # a bet of theirs is in flight now; its outcome is coming
                self._seamless.settle_orphans(player, conn, SYSTEM)
                settled += 1
        return settled

    def resume(self, transaction: str) -> bool:
        """Send a parked win or rollback again (its cause fixed); False if none is parked."""
        # Caught up first: a WalletCallParked not yet projected would park it again after.
        self.catch_up()
        with self._pool.connection() as conn:
            cursor = conn.execute(_RESUME, [self._clock(), transaction])
            return cursor.rowcount == 1

    def _deliver(self, row: tuple[Any, ...], delivery: Delivery) -> None:
        (txn, request, kind, operator, player, table_id, round_id, amount, reference) = row[:9]
        attempts, created_at, flagged_at = row[9:]
        wallet = self._seamless.wallet(operator)
        if wallet is None:
            log.error("owed %s %s: operator %s has no seamless wallet", kind, txn, operator)
            delivery.skipped += 1
            return
        config, sender = wallet
        with self._seamless.try_player_lock(player) as conn:
            if conn is None:
                delivery.skipped += 1
                return
            state = conn.execute(_STILL_OWED, [txn]).fetchone()
            conn.commit()
            if state is None or state[0] != "owed":
                return  # delivered by another worker since it was read
            call = WalletCall(
                kind,
                request,
                player_ref(player).player_id,
                None,
                config.currency,
                config.exponent,
                txn,
                table_id,
                round_id,
                int(amount),
                tuple(reference),
            )
            result = sender.send(call)
            now = self._clock()
            if result.outcome is Outcome.OK:
                self._seamless.append_outcome(
                    player,
                    WalletCallConfirmed(
                        kind,
                        txn,
                        result.reason,
                        result.balance,
                        int(amount),
                        tuple(reference),
                    ),
                    SYSTEM,
                )
                conn.execute(_DONE, ["confirmed", result.reason, "confirmed", now, "", now, txn])
                conn.commit()
                delivery.confirmed.append(txn)
            elif result.outcome is Outcome.UNCERTAIN:
                # Same ids, later: 1 s, 2 s, 4 s... up to a minute, forever.
                backoff = min(2.0**attempts, LONGEST_BACKOFF_SECONDS)
                flag = flagged_at is None and (
                    now - created_at >= timedelta(seconds=config.flag_after_seconds)
                )
                conn.execute(
                    _RETRY, [now + timedelta(seconds=backoff), result.reason, flag, now, txn]
                )
                conn.commit()
                delivery.retrying.append(txn)
                if flag:
                    delivery.flagged.append((operator, txn))
                    log.error(
                        "ALERT: owed %s %s of %s unconfirmed since %s (%s); still retrying",
                        kind,
                        txn,
                        player,
                        created_at.isoformat(),
                        result.reason,
                        extra={"transaction_uuid": txn, "operator": operator},
                    )
            else:
                # A refusal of a win or rollback is classified fatal: the wallet broke the
                # protocol. Parked, never dropped; `resume` sends it again.
                self._seamless.append_outcome(
                    player, WalletCallParked(kind, txn, result.reason, result.detail), SYSTEM
                )
                conn.execute(_DONE, ["parked", result.reason, "", now, "parked", now, txn])
                conn.commit()
                delivery.parked.append((operator, txn))
                log.error(
                    "ALERT: owed %s %s of %s parked: the wallet answered %s",
                    kind,
                    txn,
                    player,
                    result.reason,
                    extra={"transaction_uuid": txn, "operator": operator},
                )


# -- reconciliation ----------------------------------------------------------------------

_CALLS_OF = """
SELECT transaction_uuid, kind, player_id, amount, reference, state FROM seamless_calls
WHERE operator = %s AND created_at >= %s AND created_at < %s
ORDER BY created_at, transaction_uuid
"""
_STATES: Final = {
    ("bet", "confirmed"): CallState.CONFIRMED,
    ("bet", "refused"): CallState.REFUSED,
    ("bet", "uncertain"): CallState.UNCERTAIN,
    ("bet", "parked"): CallState.UNCERTAIN,
    ("bet", "in_flight"): CallState.PENDING,
}


def shoebox_calls(
    pool: Pool, operator: str, currency: str, since: datetime, until: datetime
) -> list[ShoeboxCall]:
    """Every money call of `operator` recorded in [since, until), as reconciliation reads it.

    Read from `seamless_calls`, the log's projection: catch it up first (`catch_up`).
    """
    with pool.connection() as conn:
        rows = conn.execute(_CALLS_OF, [operator, since, until]).fetchall()
    calls = []
    for transaction, kind, player, amount, reference, state in rows:
        if kind == "bet":
            known = _STATES[kind, state]
        else:
            known = CallState.CONFIRMED if state == "confirmed" else CallState.PENDING
        calls.append(
            ShoeboxCall(
                transaction_uuid=transaction,
                kind=kind,
                player_id=player_ref(player).player_id,
                amount=int(amount),
                currency=currency,
                reference=tuple(reference),
                state=known,
            )
        )
    return calls
