"""The calls an append owes seamless wallets, as rows written in the append's own transaction.

Issue 24: "the queue of calls still owed (rollbacks, wins) lives in PostgreSQL, written in the
same transaction as the events that owe them". Every append that owes a call (a BetSettled's
win, a StakeReturned's or a SettlementReversed's rollbacks, the rollback of an uncertain or
orphan debit) carries its rows in `seamless_calls` as outbox rows (events/store.py's
OutboxRow): committed with its events or not at all, so no crash between the append and any
later reader of the log can lose a call, and an append that fails queues none.

The rows are the very ones the log's projection (service/application/seamless_calls.py)
derives from the same events, under the same transaction ids (from the owing event's stream
and version): whichever writes first, the other finds the id taken and adds nothing. The
projection stays to mark the calls' state and close the debits a call settles, and to queue
the calls of a log written before this existed.

Which debits a settlement or a return owes a call for is read from `seamless_calls` before the
append: the spot's confirmed debits that no win or rollback names yet. Those rows are written
in their bets' own appends (StakeDebited marks its debit confirmed here, in the bet's
transaction), and every later append of that round goes through the table's stream after
them, so a settlement always sees the debits it settles.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Final

from domain.round import BetSettled, SettlementReversed, StakeReturned
from domain.seamless import StakeDebited, WalletCallOwed, WalletCallParked, WalletCallRefused
from events.postgres import Pool
from events.store import OutboxRow, StreamAppend, category_of
from service.application.operators import operator_of
from service.application.seamless import ROLLBACK, WIN, request_uuid, transaction_uuid
from service.application.streams import SEAMLESS, TABLE, id_of

CALLS: Final = "seamless_calls"
_KEY: Final = ("transaction_uuid",)
_BET_OUTCOMES: Final = {
    StakeDebited.type: "confirmed",
    WalletCallRefused.type: "refused",
    WalletCallOwed.type: "uncertain",
}
_OWING_TABLE_EVENTS: Final = (StakeReturned.type, BetSettled.type, SettlementReversed.type)
# A spot's debits or wins that nothing settles yet: neither closed by the projection nor named
# by a win or rollback already queued (by an append the projection has not reached).
_OPEN = """
SELECT c.transaction_uuid, c.amount, c.reference FROM seamless_calls AS c
WHERE c.table_id = %s AND c.round_id = %s AND c.player_id = %s AND c.spot = %s
  AND c.kind = %s AND (c.kind <> 'bet' OR c.state = 'confirmed') AND c.closed_by IS NULL
  AND NOT EXISTS (
    SELECT 1 FROM seamless_calls AS s
    WHERE s.table_id = c.table_id AND s.round_id = c.round_id AND s.player_id = c.player_id
      AND s.spot = c.spot AND s.kind IN ('win', 'rollback')
      AND c.transaction_uuid = ANY(s.reference))
ORDER BY c.stream_version, c.created_at, c.transaction_uuid
"""
_AMOUNTS = """
SELECT transaction_uuid, amount FROM seamless_calls WHERE transaction_uuid = ANY(%s)
ORDER BY stream_version, transaction_uuid
"""


class OwedCalls:
    """Computes the outbox rows of an append: the calls it owes, and its debits' outcomes."""

    def __init__(
        self, pool: Pool, clock: Callable[[], datetime], is_seamless: Callable[[str], bool]
    ) -> None:
        self._pool = pool
        self._clock = clock
        self._is_seamless = is_seamless

    def __call__(self, appends: Sequence[StreamAppend]) -> list[OutboxRow]:
        """The rows `appends` owe; none (and no query) when they touch no seamless money."""
        rows: list[OutboxRow] = []
        # Calls owed earlier in this same append: the spot's state the database cannot show.
        settled: set[str] = set()
        now = self._clock()
        for stream in appends:
            category = category_of(stream.stream_id)
            if category not in (SEAMLESS, TABLE):
                continue
            # A fatal bet's rollback is parked in the append that owes it: an operator must
            # look before it goes out, so it is never queued as due, not even for a moment.
            parked = {
                str(event.payload["transaction_uuid"])
                for event in stream.events
                if event.type == WalletCallParked.type
            }
            for offset, event in enumerate(stream.events):
                version = stream.expected_version + offset + 1
                payload: Any = event.payload
                if category == SEAMLESS and event.type in _BET_OUTCOMES:
                    rows.extend(
                        _seamless(stream.stream_id, version, event.type, payload, now, parked)
                    )
                elif (
                    category == TABLE
                    and event.type in _OWING_TABLE_EVENTS
                    and self._is_seamless(str(payload["player_id"]))
                ):
                    rows.extend(
                        self._table(stream.stream_id, version, event.type, payload, now, settled)
                    )
        return rows

    def _table(
        self,
        stream: str,
        version: int,
        kind: str,
        payload: Any,
        now: datetime,
        settled: set[str],
    ) -> list[OutboxRow]:
        table_id, player = id_of(stream), str(payload["player_id"])
        spot_key = [table_id, payload["round_id"], player, payload["spot"]]

        def owe(call: str, transaction: str, amount: int, reference: list[str]) -> OutboxRow:
            settled.update(reference)
            return owed_row(
                call, transaction, player, table_id, payload["round_id"], payload["spot"],
                amount, reference, now,
            )  # fmt: skip

        rows: list[OutboxRow] = []
        with self._pool.connection() as conn:
            if kind == SettlementReversed.type:
                # "All pays and play void": the win taken back, and each of its debits.
                wins = conn.execute(_OPEN, [*spot_key, WIN]).fetchall()
                for win, amount, debits in wins:
                    if win in settled:
                        continue
                    rows.append(
                        owe(
                            ROLLBACK,
                            transaction_uuid(ROLLBACK, stream, version, win),
                            amount,
                            [win],
                        )
                    )
                    for debit, stake in conn.execute(_AMOUNTS, [list(debits)]).fetchall():
                        returned = transaction_uuid(ROLLBACK, stream, version, debit)
                        rows.append(owe(ROLLBACK, returned, int(stake), [debit]))
                return rows
            debits = [
                (debit, int(stake))
                for debit, stake, _ in conn.execute(_OPEN, [*spot_key, "bet"]).fetchall()
                if debit not in settled
            ]
        if not debits:
            return rows  # a bet already settled or returned
        if kind == StakeReturned.type:
            for debit, stake in debits:
                rollback = transaction_uuid(ROLLBACK, stream, version, debit)
                rows.append(owe(ROLLBACK, rollback, stake, [debit]))
            return rows
        win = transaction_uuid(WIN, stream, version)
        rows.append(owe(WIN, win, int(payload["payout"]), [debit for debit, _ in debits]))
        return rows


def _seamless(
    stream: str, version: int, kind: str, payload: Any, now: datetime, parked: set[str]
) -> list[OutboxRow]:
    """A bet's outcome on its row, and the rollback an uncertain or orphan debit owes."""
    player = id_of(stream)
    bet = payload["reference_transaction_uuid"] if kind == WalletCallOwed.type else None
    transaction = bet if bet is not None else payload["transaction_uuid"]
    refused = kind == WalletCallRefused.type
    rows = [
        OutboxRow(
            CALLS,
            {
                "transaction_uuid": transaction,
                "request_uuid": request_uuid(transaction),
                "kind": "bet",
                "operator": operator_of(player),
                "player_id": player,
                "table_id": payload["table_id"],
                "round_id": payload["round_id"],
                "spot": payload["spot"],
                "amount": int(payload["amount"]),
                "state": _BET_OUTCOMES[kind],
                "stream_version": version,
                "created_at": now,
            },
            _KEY,
            update=("state", "stream_version"),
        )
    ]
    if refused:
        # A refused bet moved nothing, but its rollback is owed all the same (docs/wallets.md):
        # a wallet that applied what it refused gives the stake back, and one that did not
        # remembers the id, so the bet can never be applied later.
        rows.append(
            owed_row(
                ROLLBACK,
                transaction_uuid(ROLLBACK, stream, version, transaction),
                player,
                payload["table_id"],
                payload["round_id"],
                payload["spot"],
                int(payload["amount"]),
                [transaction],
                now,
            )
        )
    if bet is not None:
        rows.append(
            owed_row(
                str(payload["kind"]),
                payload["transaction_uuid"],
                player,
                payload["table_id"],
                payload["round_id"],
                payload["spot"],
                int(payload["amount"]),
                [bet],
                now,
                parked=payload["transaction_uuid"] in parked,
            )
        )
    return rows


def owed_row(
    kind: str,
    transaction: str,
    player: str,
    table_id: str,
    round_id: str,
    spot: str,
    amount: int,
    reference: list[str],
    at: datetime,
    *,
    parked: bool = False,
) -> OutboxRow:
    """A win or rollback owed from now on (or parked), as the projection would queue it."""
    return OutboxRow(
        CALLS,
        {
            "transaction_uuid": transaction,
            "request_uuid": request_uuid(transaction),
            "kind": kind,
            "operator": operator_of(player),
            "player_id": player,
            "table_id": table_id,
            "round_id": round_id,
            "spot": spot,
            "amount": amount,
            "reference": tuple(reference),
            "state": "parked" if parked else "owed",
            "created_at": at,
            "next_attempt_at": at,
            "parked_at": at if parked else None,
        },
        _KEY,
    )
