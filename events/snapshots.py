"""Snapshots: a stream's folded state at a version, kept beside the log so loads skip replaying it.

A snapshot is derived and disposable: the log is the truth, and a snapshot can be dropped or
rebuilt at any time. A reader trusts one only after checking it: of the schema the reader
folds into (anything else is ignored), at a version the stream has reached, and decodable.
What the state means is the caller's business; this module stores a JSON document per
(stream, version, schema) and answers the newest one of a schema, or the newest at or before
a version (a stream's past state, for the regulator's export).

A stream keeps its newest two snapshots, and, when its saver asks for it with `keep_every`,
the last snapshot of every block of that many versions: a wallet's history has a snapshot at
most about `keep_every` events before any version, so reading its state at an old version
folds no more than that, whatever the wallet's age.
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
    def at_or_before(self, stream_id: str, schema: str, version: int) -> Snapshot | None:
        """The stream's snapshot of this schema with the highest version up to `version`."""

    @abstractmethod
    def save(
        self, snapshot: Snapshot, *, replacing: int = 0, keep_every: int | None = None
    ) -> None:
        """Keep a snapshot (a twin at the same version is left as it is).

        Snapshots of the stream below `replacing` (the version of the one this supersedes) are
        dropped: the newest two are kept, so a reader that just found the previous one still
        finds a snapshot. With `keep_every`, only those in the same block of `keep_every`
        versions as `replacing` are dropped, so the last of each earlier block stays.
        """


def _dropped(version: int, replacing: int, keep_every: int | None) -> bool:
    """Whether saving a snapshot that supersedes the one at `replacing` drops this one."""
    if version >= replacing:
        return False
    return keep_every is None or version // keep_every == replacing // keep_every


def _check(snapshot: Snapshot, keep_every: int | None) -> None:
    if snapshot.version < 1:
        raise ValueError("a snapshot follows at least one event")
    if keep_every is not None and keep_every < 1:
        raise ValueError("keep_every must be at least 1")


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

    def at_or_before(self, stream_id: str, schema: str, version: int) -> Snapshot | None:
        """The stream's snapshot of this schema with the highest version up to `version`."""
        with self._lock:
            found = [
                s
                for s in self._streams.get(stream_id, {}).values()
                if s.schema == schema and s.version <= version
            ]
        return max(found, key=lambda s: s.version, default=None)

    def save(
        self, snapshot: Snapshot, *, replacing: int = 0, keep_every: int | None = None
    ) -> None:
        """Keep a snapshot; drop the stream's snapshots below `replacing` (see SnapshotStore)."""
        _check(snapshot, keep_every)
        with self._lock:
            kept = self._streams.setdefault(snapshot.stream_id, {})
            kept.setdefault(snapshot.version, snapshot)
            for version in [v for v in kept if _dropped(v, replacing, keep_every)]:
                del kept[version]


# Through the primary key (stream_id, version), backwards: the newest snapshot first, whatever
# the stream's age. Snapshots of another schema are stepped over: a few, but for the kept
# blocks of an older schema, which only a past read (`at_or_before`) walks down to.
_LATEST: Final = """
SELECT version, state::text FROM snapshots
WHERE stream_id = %s AND schema = %s
ORDER BY version DESC LIMIT 1
"""
# Both run with bitmap scans off: without statistics (a live database before autovacuum's
# first analyze) the planner expects a stream to have a snapshot or two, and takes a bitmap
# scan of all of them and a sort, which reads every kept snapshot of a wallet (one in every
# WALLET_KEEP_EVERY versions: 200 at 100x the growth bench's history) and every dead one.
# With bitmaps off, the only plans that do not walk the key in its order need a sort.
_ORDERED_INDEX: Final = "SET LOCAL enable_bitmapscan = off"
# The same backwards walk from `version` down: a stream's state in the past.
_AT_OR_BEFORE: Final = """
SELECT version, state::text FROM snapshots
WHERE stream_id = %s AND schema = %s AND version <= %s
ORDER BY version DESC LIMIT 1
"""
# One statement: the new snapshot, and the ones it makes redundant gone (with a block size,
# only those of the replaced one's block: see SnapshotStore.save). A twin that took the same
# snapshot first wins (ON CONFLICT), which is harmless: both folded the same events.
_SAVE: Final = """
WITH saved AS (
    INSERT INTO snapshots (stream_id, version, schema, state, taken_at)
    VALUES (%(stream_id)s, %(version)s, %(schema)s, %(state)s::jsonb, %(taken_at)s)
    ON CONFLICT (stream_id, version) DO NOTHING
)
DELETE FROM snapshots WHERE stream_id = %(stream_id)s AND version < %(replacing)s
  AND (%(keep_every)s::integer IS NULL
       OR div(version, %(keep_every)s::integer)
          = div(%(replacing)s::integer, %(keep_every)s::integer))
"""


class PostgresSnapshotStore(SnapshotStore):
    """Snapshots in the `snapshots` table (migrations/0006), over the caller's pool."""

    def __init__(self, pool: Pool, clock: Clock = utc_now) -> None:
        self._pool = pool
        self._clock = clock

    def latest(self, stream_id: str, schema: str) -> Snapshot | None:
        """The stream's snapshot of this schema with the highest version, or None."""
        return self._one(stream_id, schema, _LATEST, [stream_id, schema])

    def at_or_before(self, stream_id: str, schema: str, version: int) -> Snapshot | None:
        """The stream's snapshot of this schema with the highest version up to `version`."""
        return self._one(stream_id, schema, _AT_OR_BEFORE, [stream_id, schema, version])

    def _one(
        self, stream_id: str, schema: str, query: str, params: list[object]
    ) -> Snapshot | None:
        with self._pool.connection() as conn, conn.transaction():
            conn.execute(_ORDERED_INDEX)
            row = conn.execute(query, params).fetchone()
        if row is None:
            return None
        version, state = row
        return Snapshot(stream_id, int(version), schema, orjson.loads(state))

    def save(
        self, snapshot: Snapshot, *, replacing: int = 0, keep_every: int | None = None
    ) -> None:
        """Keep a snapshot; drop the stream's snapshots below `replacing` (see SnapshotStore)."""
        _check(snapshot, keep_every)
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
                    "keep_every": keep_every,
                },
            )
