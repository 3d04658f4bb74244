"""Shoes by id and by table: each shoe's published facts, what it has dealt, and where in its
table's stream its events lie, so that a shoe is read back from that range, never the stream.

A shoe's events are its own (opened, cards, retired, revealed) and every event of a round dealt
from it: the round's bets come before its first card, and a void may come long after the shoe
retired, so the range runs from the earliest of them to the latest.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from psycopg import Connection
from psycopg.rows import TupleRow

from domain.round import CardDrawn, CoupCompleted, RoundOpened
from domain.table import ShoeOpened, ShoeRetired, ShoeRevealed
from events.projections.base import Projection, by_key, load_rows, upsert
from events.store import RecordedEvent
from service.application.streams import TABLE, id_of

SHOE_COLUMNS: Final = (
    "table_id",
    "position",
    "server_seed_hash",
    "client_seed",
    "nonce",
    "decks",
    "hands",
    "hands_dealt",
    "cards_dealt",
    "retired",
    "server_seed",
    "first_version",
    "last_version",
)
(
    _TABLE,
    _POSITION,
    _HASH,
    _CLIENT_SEED,
    _NONCE,
    _DECKS,
    _HANDS,
    _HANDS_DEALT,
    _CARDS_DEALT,
    _RETIRED,
    _SERVER_SEED,
    _FIRST,
    _LAST,
) = range(len(SHOE_COLUMNS))
ROUND_COLUMNS: Final = ("table_id", "opened_version", "shoe_id")
_ROUND_TABLE, _OPENED_VERSION, _ROUND_SHOE = range(len(ROUND_COLUMNS))


class ShoesProjection(Projection):
    """One row per shoe, and the shoe that dealt each round."""

    name = "shoes"
    categories = (TABLE,)
    tables = ("proj_shoes", "proj_shoe_rounds")

    def apply(self, conn: Connection[TupleRow], events: Sequence[RecordedEvent]) -> None:
        """Fold the batch's shoe and round events into the shoes' rows."""
        shoe_ids: set[str] = {
            str(e.payload["shoe_id"])
            for e in events
            if e.type != ShoeOpened.type and isinstance(e.payload.get("shoe_id"), str)
        }
        round_ids = {
            str(e.payload["round_id"]) for e in events if isinstance(e.payload.get("round_id"), str)
        }
        rounds = load_rows(
            conn, self.table("proj_shoe_rounds"), ROUND_COLUMNS, "round_id", round_ids
        )
        shoe_ids |= {row[_ROUND_SHOE] for row in rounds.values() if row[_ROUND_SHOE]}
        shoes = load_rows(conn, self.table("proj_shoes"), SHOE_COLUMNS, "shoe_id", shoe_ids)
        changed_rounds: set[str] = set()
        changed_shoes: set[str] = set()
        for event in events:
            payload: Any = event.payload
            kind = event.type
            if kind == ShoeOpened.type:
                shoes[payload["shoe_id"]] = _opened(event, payload)
                changed_shoes.add(payload["shoe_id"])
                continue
            if kind == RoundOpened.type:
                rounds[payload["round_id"]] = [id_of(event.stream_id), event.version, None]
                changed_rounds.add(payload["round_id"])
                continue
            round_row = rounds.get(payload.get("round_id")) if "round_id" in payload else None
            shoe_id = payload.get("shoe_id")
            if kind == CardDrawn.type and round_row is not None and round_row[_ROUND_SHOE] is None:
                round_row[_ROUND_SHOE] = shoe_id
                changed_rounds.add(payload["round_id"])
            if not isinstance(shoe_id, str) and round_row is not None:
                shoe_id = round_row[_ROUND_SHOE]
            shoe = shoes.get(shoe_id) if isinstance(shoe_id, str) else None
            if shoe is None:
                continue
            changed_shoes.add(str(shoe_id))
            shoe[_LAST] = max(shoe[_LAST], event.version)
            if round_row is not None:
                shoe[_FIRST] = min(shoe[_FIRST], round_row[_OPENED_VERSION])
            if kind == CardDrawn.type:
                shoe[_CARDS_DEALT] += 1
            elif kind == CoupCompleted.type:
                shoe[_HANDS_DEALT] += 1
            elif kind == ShoeRetired.type:
                shoe[_RETIRED] = True
            elif kind == ShoeRevealed.type:
                shoe[_SERVER_SEED] = payload["server_seed"]
        if changed_shoes:
            upsert(
                conn,
                self.table("proj_shoes"),
                ("shoe_id",),
                SHOE_COLUMNS,
                by_key({k: shoes[k] for k in changed_shoes}),
            )
        if changed_rounds:
            upsert(
                conn,
                self.table("proj_shoe_rounds"),
                ("round_id",),
                ROUND_COLUMNS,
                by_key({k: rounds[k] for k in changed_rounds}),
            )


def _opened(event: RecordedEvent, payload: Any) -> list[Any]:
    return [
        id_of(event.stream_id),
        event.position,
        payload["server_seed_hash"],
        payload["client_seed"],
        payload["nonce"],
        payload["decks"],
        payload["hands"],
        0,
        0,
        False,
        None,
        event.version,
        event.version,
    ]
