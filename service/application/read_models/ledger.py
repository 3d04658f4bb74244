"""The house ledger per table, UTC day, bet type and operator: bets, wagered, paid, commission.

Hold (wagered less paid out) and observed return to player are derived when read. A reversal
is booked against the day of the settlement it reverses, so a voided round nets to nothing on
that day; the day each round settled is kept for that in proj_ledger_rounds. The table's
decks are kept for the theoretical return of a fresh shoe (domain.odds).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, date
from typing import Any, Final

from psycopg import Connection
from psycopg.rows import TupleRow

from domain.round import BetSettled, SettlementReversed
from domain.table import TableCreated
from events.projections.base import Projection, add_rows, insert_new, load_rows
from events.store import RecordedEvent
from service.application.operators import operator_of

SUMS: Final = ("bets", "wagered", "paid_out", "commission")


class LedgerProjection(Projection):
    """The house's side of every settled bet, by table, day, spot and the player's operator."""

    name = "ledger"
    categories = ("table",)
    tables = ("proj_ledger", "proj_ledger_rounds", "proj_ledger_tables")

    def apply(self, conn: Connection[TupleRow], events: Sequence[RecordedEvent]) -> None:
        """Add settlements to their day's figures and take reversals back off them."""
        reversed_rounds = {
            e.payload["round_id"]
            for e in events
            if e.category == "table" and e.type == SettlementReversed.type
        }
        days: dict[str, list[Any]] = load_rows(
            conn,
            self.table("proj_ledger_rounds"),
            ("table_id", "day"),
            "round_id",
            reversed_rounds,  # type: ignore[arg-type]
        )
        new_days: list[tuple[str, str, date]] = []
        decks: list[tuple[str, int]] = []
        figures: dict[tuple[str, date, str, str], list[int]] = {}
        for event in events:
            if event.category != "table":
                continue
            kind = event.type
            payload: Any = event.payload
            if kind == TableCreated.type:
                decks.append((event.stream_id.partition(":")[2], payload["decks"]))
                continue
            if kind != BetSettled.type and kind != SettlementReversed.type:
                continue
            round_id = payload["round_id"]
            table_id = event.stream_id.partition(":")[2]
            if kind == BetSettled.type:
                sign = 1
                known = days.get(round_id)
                if known is None:
                    day = event.recorded_at.astimezone(UTC).date()
                    days[round_id] = [table_id, day]
                    new_days.append((round_id, table_id, day))
                else:
                    day = known[1]
            else:
                sign = -1
                day = days[round_id][1]
            key = (table_id, day, payload["spot"], operator_of(payload["player_id"]))
            row = figures.get(key)
            if row is None:
                row = figures[key] = [0, 0, 0, 0]
            row[0] += sign
            row[1] += sign * payload["stake"]
            row[2] += sign * payload["payout"]
            row[3] += sign * payload["commission"]
        insert_new(conn, self.table("proj_ledger_tables"), ("table_id", "decks"), decks)
        insert_new(
            conn, self.table("proj_ledger_rounds"), ("round_id", "table_id", "day"), new_days
        )
        add_rows(
            conn,
            self.table("proj_ledger"),
            ("table_id", "day", "spot", "operator"),
            SUMS,
            ((*key, *row) for key, row in figures.items()),
        )
