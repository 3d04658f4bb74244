"""The tables' overview: a row a table with what the ops dashboard shows of it at a glance.

Its settings, who sits where, the round under way and its window, the open shoe and the
latest coup, whether a malfunction suspended it. The dashboard reads every table in one
statement from here and the statistics, ledger and rounds models beside it
(queries.ProjectionService.overview), instead of five calls a table. It is a summary, not the
table: seats' bets and the cards of a coup being dealt stay with GET /v1/tables/{id}/state.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from psycopg import Connection
from psycopg.rows import TupleRow
from psycopg.types.json import Jsonb

from domain.round import (
    CardDrawn,
    CoupCompleted,
    Phase,
    RoundEndedWithoutPlay,
    RoundOpened,
    RoundSettled,
    RoundVoided,
)
from domain.table import (
    PlayerChangedSeat,
    PlayerLeft,
    PlayerRemoved,
    PlayerSat,
    ShoeOpened,
    ShoeRetired,
    TableCreated,
    TableReopened,
    TableSuspended,
)
from events.projections.base import Projection, load_rows, upsert
from events.store import RecordedEvent

COLUMNS: Final = (
    "position",
    "version",
    "settings",
    "seats",
    "round_id",
    "round_number",
    "round_phase",
    "window_closes_at",
    "shoe_id",
    "shoe_hash",
    "shoe_hands",
    "shoe_coups",
    "latest_coup",
    "suspended",
    "updated_at",
)
_JSON: Final = frozenset({"settings", "seats", "latest_coup"})
# The round's phase as the events move it; the live state's "closing" (a lapsed window) is a
# matter of the reader's clock, so the reader works it out from window_closes_at.
_PHASE_AFTER: Final = {
    CardDrawn.type: Phase.DEALING,
    CoupCompleted.type: Phase.SETTLING,
    RoundSettled.type: Phase.SETTLED,
    RoundEndedWithoutPlay.type: Phase.ENDED_WITHOUT_PLAY,
    RoundVoided.type: Phase.VOIDED,
}


class OverviewProjection(Projection):
    """Each table's settings, seats, round, shoe and latest coup, a row a table."""

    name = "overview"
    categories = ("table",)
    tables = ("proj_table_overview",)

    def apply(self, conn: Connection[TupleRow], events: Sequence[RecordedEvent]) -> None:
        """Fold the tables' events into their rows: one read and one write a batch."""
        mine = [e for e in events if e.category == "table"]
        if not mine:
            return
        loaded = load_rows(
            conn,
            self.table("proj_table_overview"),
            COLUMNS,
            "table_id",
            {_table_id(e) for e in mine if e.type != TableCreated.type},
        )
        rows = {key: dict(zip(COLUMNS, values, strict=True)) for key, values in loaded.items()}
        touched: set[str] = set()
        for event in mine:
            table_id = _table_id(event)
            if event.type == TableCreated.type:
                rows[table_id] = _created(event)
            row = rows.get(table_id)
            if row is None:
                continue  # a table whose creation a rebuild has not reached cannot happen
            _fold(row, event)
            touched.add(table_id)
        upsert(
            conn,
            self.table("proj_table_overview"),
            ("table_id",),
            COLUMNS,
            ([table_id, *(_stored(c, rows[table_id][c]) for c in COLUMNS)] for table_id in touched),
        )


def _table_id(event: RecordedEvent) -> str:
    return event.stream_id.partition(":")[2]


def _stored(column: str, value: Any) -> Any:
    return Jsonb(value) if column in _JSON and value is not None else value


def _created(event: RecordedEvent) -> dict[str, Any]:
    payload: Any = event.payload
    # The settings as TableSchema writes them, so the dashboard shows them unchanged.
    settings = {
        "table_id": payload["table_id"],
        "seats": payload["seats"],
        "decks": payload["decks"],
        "minimum_pence": payload["minimum"],
        "maximum_pence": payload["maximum"],
        "chips_pence": list(payload["chips"]),
        "currency": payload["currency"],
        "betting_window_ms": payload["betting_window_ms"],
    }
    return {
        "position": event.position,
        "version": event.version,
        "settings": settings,
        "seats": [None] * int(payload["seats"]),
        "round_id": None,
        "round_number": None,
        "round_phase": None,
        "window_closes_at": None,
        "shoe_id": None,
        "shoe_hash": None,
        "shoe_hands": None,
        "shoe_coups": None,
        "latest_coup": None,
        "suspended": False,
        "updated_at": event.recorded_at,
    }


def _fold(row: dict[str, Any], event: RecordedEvent) -> None:
    payload: Any = event.payload
    row["version"] = event.version
    row["updated_at"] = event.recorded_at
    kind = event.type
    if kind == PlayerSat.type:
        row["seats"] = _seated(row["seats"], payload["seat"], payload["player_id"])
    elif kind == PlayerChangedSeat.type:
        moved = _seated(row["seats"], payload["from_seat"], None)
        row["seats"] = _seated(moved, payload["seat"], payload["player_id"])
    elif kind == PlayerLeft.type or (kind == PlayerRemoved.type and payload["seat"] is not None):
        row["seats"] = _seated(row["seats"], payload["seat"], None)
    elif kind == ShoeOpened.type:
        row.update(
            shoe_id=payload["shoe_id"],
            shoe_hash=payload["server_seed_hash"],
            shoe_hands=payload["hands"],
            shoe_coups=0,
        )
    elif kind == ShoeRetired.type and payload["shoe_id"] == row["shoe_id"]:
        row.update(shoe_id=None, shoe_hash=None, shoe_hands=None, shoe_coups=None)
    elif kind == TableSuspended.type:
        row["suspended"] = True
    elif kind == TableReopened.type:
        row["suspended"] = False
    elif kind == RoundOpened.type:
        row.update(
            round_id=payload["round_id"],
            round_number=payload["number"],
            round_phase=str(Phase.BETTING),
            window_closes_at=payload["deadline"],
        )
    elif kind in _PHASE_AFTER and payload.get("round_id") == row["round_id"]:
        # A void may name a round long over (a malfunction over a time range): only the
        # current round's phase moves.
        row["round_phase"] = str(_PHASE_AFTER[kind])
        if kind == CoupCompleted.type:
            row["shoe_coups"] = (row["shoe_coups"] or 0) + 1
            row["latest_coup"] = {
                "round_id": payload["round_id"],
                "outcome": payload["outcome"],
                "player_total": payload["player_total"],
                "banker_total": payload["banker_total"],
            }


def _seated(seats: list[str | None], seat: int, player_id: str | None) -> list[str | None]:
    changed = list(seats)
    changed[seat - 1] = player_id
    return changed
