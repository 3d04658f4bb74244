"""The index of open rounds: one row per table whose round has opened and not ended.

Recovery and the sweeper look only here, never at the tables' streams: finding the rounds whose
window has lapsed is one indexed query, whatever the number of tables and the age of the log.
The index is a read model kept by the projector (RoundOpened inserts a table's row; the round
settling, ending without play or being voided deletes it), so it may lag the log by a moment:
every candidate it names is confirmed by loading its table before anything is appended, and a
caller that cannot wait for the projector catches the index up itself first (cheap: only the
events since its checkpoint).
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import ClassVar, Final

from psycopg import Connection, sql
from psycopg.rows import TupleRow

from domain.round import RoundEndedWithoutPlay, RoundOpened, RoundSettled, RoundVoided
from events.postgres import Pool
from events.projections import runner
from events.projections.base import Projection
from events.store import EventStore, RecordedEvent
from events.upcasting import Upcasters
from service.application.streams import TABLE, id_of

ENDED: Final = frozenset({RoundSettled.type, RoundEndedWithoutPlay.type, RoundVoided.type})
"""The events after which a round is no longer open."""
DUE_LIMIT: Final = 1000
"""At most this many due rounds per look; a sweep takes the rest on its next pass."""


@dataclass(frozen=True, slots=True)
class OpenRound:
    """A round that has opened and not ended, and when its betting window closes."""

    table_id: str
    round_id: str
    window_closes_at: datetime


class OpenRounds(ABC):
    """The open rounds whose window has closed: the only candidates for closing or recovery."""

    @abstractmethod
    def due(self, now: datetime, limit: int = DUE_LIMIT) -> list[OpenRound]:
        """Up to `limit` open rounds whose window closed at or before `now`, oldest first."""


class OpenRoundsProjection(Projection):
    """The `open_rounds` table (migrations/0007), folded from the tables' streams."""

    name: ClassVar[str] = "open_rounds"
    categories: ClassVar[tuple[str, ...]] = (TABLE,)
    tables: ClassVar[tuple[str, ...]] = ("open_rounds",)

    def apply(self, conn: Connection[TupleRow], events: Sequence[RecordedEvent]) -> None:
        """Open a table's row on RoundOpened, drop it when that round ends."""
        table = sql.Identifier(self.table("open_rounds"))
        opened = sql.SQL(
            "INSERT INTO {} (table_id, round_id, window_closes_at, position)"
            " VALUES (%s, %s, %s, %s) ON CONFLICT (table_id) DO UPDATE SET"
            " round_id = excluded.round_id, window_closes_at = excluded.window_closes_at,"
            " position = excluded.position"
        ).format(table)
        ended = sql.SQL("DELETE FROM {} WHERE table_id = %s AND round_id = %s").format(table)
        # Only 2 or 3 events of a coup's 15-45 matter; one statement each keeps it obvious.
        for event in events:
            if event.type == RoundOpened.type:
                deadline = datetime.fromisoformat(str(event.payload["deadline"]))
                round_id = str(event.payload["round_id"])
                conn.execute(opened, [id_of(event.stream_id), round_id, deadline, event.position])
            elif event.type in ENDED:
                conn.execute(ended, [id_of(event.stream_id), str(event.payload["round_id"])])


# Through open_rounds_window_closes_at: a range scan of the due rows alone, however many
# tables are idle or betting.
_DUE: Final = """
SELECT table_id, round_id, window_closes_at FROM open_rounds
WHERE window_closes_at <= %s ORDER BY window_closes_at, table_id LIMIT %s
"""


class PostgresOpenRounds(OpenRounds):
    """The index in PostgreSQL; with `catch_up`, brought up to the log's head before each look."""

    def __init__(
        self, pool: Pool, upcasters: Upcasters | None = None, *, catch_up: bool = True
    ) -> None:
        self._pool = pool
        self._upcasters = upcasters
        self._catch_up = catch_up

    def due(self, now: datetime, limit: int = DUE_LIMIT) -> list[OpenRound]:
        """Up to `limit` open rounds whose window closed at or before `now`, oldest first."""
        if self._catch_up:
            runner.catch_up(self._pool, [OpenRoundsProjection], upcasters=self._upcasters)
        with self._pool.connection() as conn:
            rows = conn.execute(_DUE, [now, limit]).fetchall()
        return [OpenRound(str(t), str(r), at) for t, r, at in rows]


class InMemoryOpenRounds(OpenRounds):
    """The same index folded from any store's log, for the in-memory wiring of the unit tests."""

    def __init__(self, store: EventStore) -> None:
        self._store = store
        self._lock = threading.Lock()
        self._after = 0
        self._open: dict[str, OpenRound] = {}

    def due(self, now: datetime, limit: int = DUE_LIMIT) -> list[OpenRound]:
        """Up to `limit` open rounds whose window closed at or before `now`, oldest first."""
        with self._lock:
            while batch := self._store.read_all(self._after, 1000, categories=[TABLE]):
                for event in batch:
                    self._fold(event)
                self._after = batch[-1].position
            found = sorted(
                (r for r in self._open.values() if r.window_closes_at <= now),
                key=lambda r: (r.window_closes_at, r.table_id),
            )
        return found[:limit]

    def _fold(self, event: RecordedEvent) -> None:
        table_id = id_of(event.stream_id)
        if event.type == RoundOpened.type:
            deadline = datetime.fromisoformat(str(event.payload["deadline"]))
            self._open[table_id] = OpenRound(table_id, str(event.payload["round_id"]), deadline)
        elif event.type in ENDED:
            current = self._open.get(table_id)
            if current is not None and current.round_id == event.payload["round_id"]:
                del self._open[table_id]
