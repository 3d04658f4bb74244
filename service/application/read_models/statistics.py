"""Table statistics: every coup's outcome in log order and each table's current shoe.

The roads themselves (Big Road, Bead Plate, the three derived roads, the counts) are drawn
from these rows with domain.roads when read, for the current shoe or for all time: a void
takes a hand out of the middle of a road, and everything after it must be redrawn anyway.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from psycopg import Connection, sql
from psycopg.rows import TupleRow

from domain.round import CoupCompleted, RoundVoided
from domain.table import ShoeOpened, TableCreated
from events.projections.base import Projection, by_key, insert_new, load_rows, upsert
from events.store import RecordedEvent

COUP_COLUMNS: Final = ("round_id", "table_id", "shoe_id", "position", "outcome", "voided")
_TYPES: Final = frozenset(
    {TableCreated.type, ShoeOpened.type, CoupCompleted.type, RoundVoided.type}
)


class StatisticsProjection(Projection):
    """The outcomes the roads are drawn from, and which shoe each table is dealing."""

    name = "statistics"
    categories = ("table",)
    tables = ("proj_tables", "proj_coups")

    def apply(self, conn: Connection[TupleRow], events: Sequence[RecordedEvent]) -> None:
        """Record new tables and shoes, each coup's outcome, and voids."""
        mine = [e for e in events if e.category == "table" and e.type in _TYPES]
        if not mine:
            return
        tables = load_rows(
            conn,
            self.table("proj_tables"),
            ("decks", "current_shoe"),
            "table_id",
            {e.stream_id.partition(":")[2] for e in mine if e.type != TableCreated.type},
        )
        coups: list[tuple[Any, ...]] = []
        voided: list[str] = []
        for event in mine:
            payload: Any = event.payload
            table_id = event.stream_id.partition(":")[2]
            if event.type == TableCreated.type:
                tables[table_id] = [payload["decks"], None]
            elif event.type == ShoeOpened.type:
                tables[table_id][1] = payload["shoe_id"]
            elif event.type == CoupCompleted.type:
                # The coup is dealt from the open shoe: its retirement follows in the same append.
                shoe_id = tables[table_id][1]
                coups.append(
                    (
                        payload["round_id"],
                        table_id,
                        shoe_id,
                        event.position,
                        payload["outcome"],
                        False,
                    )
                )
            else:
                voided.append(payload["round_id"])
        upsert(
            conn,
            self.table("proj_tables"),
            ("table_id",),
            ("decks", "current_shoe"),
            by_key(tables),
        )
        insert_new(conn, self.table("proj_coups"), COUP_COLUMNS, coups)
        if voided:
            conn.execute(
                sql.SQL("UPDATE {} SET voided = true WHERE round_id = ANY(%s)").format(
                    sql.Identifier(self.table("proj_coups"))
                ),
                [voided],
            )
