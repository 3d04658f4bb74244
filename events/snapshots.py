"""Snapshots: a stream's folded state at a version, kept beside the log so loads skip replaying it.

A snapshot is derived and disposable: the log is the truth, and a snapshot can be dropped or
rebuilt at any time. A reader trusts one only after checking it: of the schema the reader
folds into (anything else is ignored), at a version the stream has reached, and decodable.
What the state means is the caller's business; this module stores a JSON document per
(stream, version, schema) and answers the newest one of a schema.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass
from datetime import datetime
from typing import Final

import orjson

from events.postgres import Pool
from events.store import Clock, JsonObject, to_utc, utc_now


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A stream's state after its event `version`, encoded under `schema`."""

    stream_id: str
    version: int
    schema: str
    state: JsonObject


class SnapshotStore(ABC):
    """Where snapshots are kept; every write is best-effort, every read is checked by its caller."""

    @abstractmethod
    def latest(self, stream_id: str, schema: str) -> Snapshot | None:
        """The stream's snapshot of this schema with the highest version, or None."""

    @abstractmethod
    def save(self, snapshot: Snapshot, *, replacing: int = 0) -> None:
        """Keep a snapshot (a twin at the same version is left as it is).

        Snapshots of the stream below `replacing` (the version of the one this supersedes) are
        dropped: the newest two are kept, so a reader that just found the previous one still
        finds a snapshot.
        """


class InMemorySnapshotStore(SnapshotStore):
    """The same contract as PostgresSnapshotStore, in a dictionary behind a lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._streams: dict[str, dict[int, Snapshot]] = {}

    def latest(self, stream_id: str, schema: str) -> Snapshot | None:
        """The stream's snapshot of this schema with the highest version, or None."""
        with self._lock:
            found = [s for s in self._streams.get(stream_id, {}).values() if s.schema == schema]
        return max(found, key=lambda s: s.version, default=None)

    def save(self, snapshot: Snapshot, *, replacing: int = 0) -> None:
        """Keep a snapshot; drop the stream's snapshots below `replacing`."""
        if snapshot.version < 1:
            raise ValueError("a snapshot follows at least one event")
        with self._lock:
            kept = self._streams.setdefault(snapshot.stream_id, {})
            kept.setdefault(snapshot.version, snapshot)
            for version in [v for v in kept if v < replacing]:
                del kept[version]


# Through the primary key (stream_id, version), backwards: the newest snapshot first, whatever
# the stream's age. Snapshots of another schema are stepped over; there are at most a couple.
_LATEST: Final = """
SELECT version, state::text FROM snapshots
WHERE stream_id = %s AND schema = %s
ORDER BY version DESC LIMIT 1
"""
# One statement: the new snapshot, and the ones it makes redundant gone. A twin that took the
# same snapshot first wins (ON CONFLICT), which is harmless: both folded the same events.
_SAVE: Final = """
WITH saved AS (
    INSERT INTO snapshots (stream_id, version, schema, state, taken_at)
    VALUES (%(stream_id)s, %(version)s, %(schema)s, %(state)s::jsonb, %(taken_at)s)
    ON CONFLICT (stream_id, version) DO NOTHING
)
DELETE FROM snapshots WHERE stream_id = %(stream_id)s AND version < %(replacing)s
"""


class PostgresSnapshotStore(SnapshotStore):
    """Snapshots in the `snapshots` table (migrations/0006), over the caller's pool."""

    def __init__(self, pool: Pool, clock: Clock = utc_now) -> None:
        self._pool = pool
        self._clock = clock

    def latest(self, stream_id: str, schema: str) -> Snapshot | None:
        """The stream's snapshot of this schema with the highest version, or None."""
        with self._pool.connection() as conn:
            conn.autocommit = True
            try:
                row = conn.execute(_LATEST, [stream_id, schema]).fetchone()
            finally:
                conn.autocommit = False
        if row is None:
            return None
        version, state = row
        return Snapshot(stream_id, int(version), schema, orjson.loads(state))

    def save(self, snapshot: Snapshot, *, replacing: int = 0) -> None:
        """Keep a snapshot; drop the stream's snapshots below `replacing`."""
        if snapshot.version < 1:
            raise ValueError("a snapshot follows at least one event")
        taken_at: datetime = to_utc(self._clock())
        with self._pool.connection() as conn:
            conn.execute(
                _SAVE,
                {
                    "stream_id": snapshot.stream_id,
                    "version": snapshot.version,
                    "schema": snapshot.schema,
                    "state": orjson.dumps(snapshot.state).decode(),
                    "taken_at": taken_at,
                    "replacing": replacing,
                },
            )
