"""Player history: what each player wagered and won in each round, for their totals.

Kept per round rather than as running totals so that a void can take its round back out:
`SettlementReversed` subtracts what `BetSettled` added and marks the round voided.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from psycopg import Connection
from psycopg.rows import TupleRow

from domain.round import BetSettled, SettlementReversed
from events.projections.base import Projection, add_rows
from events.store import RecordedEvent

KEYS: Final = ("player_id", "round_id")
SUMS: Final = ("wagered", "won", "commission")


class PlayersProjection(Projection):
    """Per player and round: stakes settled, payouts, commission, and whether voided."""

    name = "players"
    categories = ("table",)
    tables = ("proj_player_rounds",)

    def apply(self, conn: Connection[TupleRow], events: Sequence[RecordedEvent]) -> None:
        """Add each settlement to its player's round, and take reversed ones back out."""
        totals: dict[tuple[str, str], list[Any]] = {}
        for event in events:
            if event.category != "table":
                continue
            kind = event.type
            if kind != BetSettled.type and kind != SettlementReversed.type:
                continue
            payload: Any = event.payload
            key = (payload["player_id"], payload["round_id"])
            row = totals.get(key)
            if row is None:
                row = totals[key] = [event.stream_id.partition(":")[2], 0, 0, 0, False]
            sign = 1 if kind == BetSettled.type else -1
            row[1] += sign * payload["stake"]
            row[2] += sign * payload["payout"]
            row[3] += sign * payload["commission"]
            row[4] = row[4] or sign < 0
        add_rows(
            conn,
            self.table("proj_player_rounds"),
            KEYS,
            SUMS,
            ((*key, *row) for key, row in totals.items()),
            fixed=("table_id",),
            flags=("voided",),
        )
