"""Wallet balances (available and reserved) and each wallet's statement with running balance.

It follows the wallet aggregate's own evolve (domain/wallet.py) step for step, so the figures
agree to the penny with what the table service used when it accepted each bet. Each statement
row also names its player's operator, which the listing of an operator's movements is indexed
by (migrations/0019). It also keeps
each wallet's credits (deposits, positive corrections) and debits (withdrawals, negative
corrections), which money conservation is checked against.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from psycopg import Connection
from psycopg.rows import TupleRow

from domain.wallet import (
    Corrected,
    Deposited,
    PayoutCredited,
    SettlementReversed,
    StakeReserved,
    StakeReturned,
    Withdrawn,
)
from events.projections.base import (
    Projection,
    by_key,
    copy_lines,
    copy_text_or_null,
    load_rows,
    upsert,
)
from events.store import RecordedEvent
from service.application.operators import operator_of

WALLET_COLUMNS: Final = (
    "available",
    "reserved",
    "version",
    "position",
    "credits",
    "debits",
    "updated_at",
)
STATEMENT_COLUMNS: Final = (
    "player_id",
    "version",
    "position",
    "recorded_at",
    "type",
    "amount",
    "reserved_change",
    "available_after",
    "reserved_after",
    "reason",
    "table_id",
    "round_id",
    "spot",
    "stake",
    "payout",
    "commission",
    "operator",
)
_AVAILABLE, _RESERVED, _VERSION, _POSITION, _CREDITS, _DEBITS, _UPDATED = range(7)


class WalletsProjection(Projection):
    """Balances per player and the statement of every wallet movement."""

    name = "wallets"
    categories = ("wallet",)
    tables = ("proj_wallets", "proj_wallet_statement")

    def apply(self, conn: Connection[TupleRow], events: Sequence[RecordedEvent]) -> None:
        """Fold wallet events into balances and statement rows."""
        wallets = load_rows(
            conn,
            self.table("proj_wallets"),
            WALLET_COLUMNS,
            "player_id",
            {e.stream_id.partition(":")[2] for e in events if e.category == "wallet"},
        )
        statement: list[str] = []
        for event in events:
            if event.category != "wallet":
                continue
            player_id = event.stream_id.partition(":")[2]
            wallet = wallets.get(player_id)
            if wallet is None:
                wallet = wallets[player_id] = [0, 0, 0, 0, 0, 0, None]
            statement.append(_fold(wallet, player_id, event))
        upsert(conn, self.table("proj_wallets"), ("player_id",), WALLET_COLUMNS, by_key(wallets))
        copy_lines(conn, self.table("proj_wallet_statement"), STATEMENT_COLUMNS, statement)


def _fold(wallet: list[Any], player_id: str, event: RecordedEvent) -> str:
    """Move `wallet` by one event, as domain.wallet.evolve_wallet does; its statement row.

    The row comes back as a line of COPY text, written here in one f-string: a rebuild writes
    one for every wallet event, and formatting them value by value was its largest cost.
    """
    payload: Any = event.payload
    kind = event.type
    available = reserved = 0
    reason = table_id = round_id = spot = stake = payout = commission = None
    if kind == Deposited.type or kind == Withdrawn.type or kind == Corrected.type:
        amount = payload["amount"]
        reason = payload["reason"]
        if kind == Withdrawn.type:
            available = -amount
            wallet[_DEBITS] += amount
        else:
            available = amount
            if amount >= 0:
                wallet[_CREDITS] += amount
            else:
                wallet[_DEBITS] -= amount
    else:
        table_id, round_id, spot, stake = (
            payload["table_id"],
            payload["round_id"],
            payload["spot"],
            payload["stake"],
        )
        if kind == StakeReserved.type:
            available, reserved = -stake, stake
        elif kind == StakeReturned.type:
            available, reserved = stake, -stake
            reason = payload["reason"]
        elif kind == PayoutCredited.type:
            payout, commission = payload["payout"], payload["commission"]
            available, reserved = payout, -stake
        elif kind == SettlementReversed.type:
            payout, commission = payload["payout"], payload["commission"]
            available = stake - payout
        else:
            raise ValueError(f"the wallets projection does not know {kind!r} events")
    wallet[_AVAILABLE] += available
    wallet[_RESERVED] += reserved
    wallet[_VERSION] = event.version
    wallet[_POSITION] = event.position
    wallet[_UPDATED] = event.recorded_at
    text = copy_text_or_null
    # `kind` needs no escaping: it is one of the seven names checked above.
    return (
        f"{text(player_id)}\t{event.version}\t{event.position}\t"
        f"{event.recorded_at.isoformat()}\t{kind}\t{available}\t{reserved}\t"
        f"{wallet[_AVAILABLE]}\t{wallet[_RESERVED]}\t{text(reason)}\t{text(table_id)}\t"
        f"{text(round_id)}\t{text(spot)}\t{text(stake)}\t{text(payout)}\t{text(commission)}\t"
        f"{text(operator_of(player_id))}\n"
    )
