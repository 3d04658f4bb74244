"""The PostgreSQL event store: one exclusive-lock append transaction, orjson-decoded reads."""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping, Sequence
from typing import Any, Final

import orjson
import psycopg
from psycopg import Connection, sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.rows import RowMaker, TupleRow
from psycopg.types.json import set_json_loads
from psycopg_pool import ConnectionPool

from events.canonical import chain_events, metadata_document, metadata_from_document, normalise
from events.store import (
    NOTIFY_CHANNEL,
    AppendResult,
    Clock,
    ConcurrencyConflict,
    EventMetadata,
    EventStore,
    Idempotency,
    IdempotencyKeyReused,
    IdempotencyRecord,
    JsonValue,
    RecordedEvent,
    ShoeSecretAlreadyStored,
    StreamAppend,
    UnknownIdempotencyKey,
    check_appends,
    stamp_metadata,
    to_utc,
    utc_now,
)
from events.upcasting import Upcasters

APP_ROLE: Final = "shoebox_app"
APP_URL_VARIABLE: Final = "SHOEBOX_APP_DATABASE_URL"

Pool = ConnectionPool[Connection[TupleRow]]

_LOCK_AND_HEAD = "SELECT head_position, head_hash FROM lock_events_for_append()"
# One index probe per stream, newest version first, rather than max() over a whole stream.
_STREAM_VERSIONS = """
SELECT s.stream_id,
       (SELECT e.version FROM events AS e WHERE e.stream_id = s.stream_id
        ORDER BY e.version DESC LIMIT 1)
FROM unnest(%s::text[]) AS s (stream_id)
"""
_FIND_KEY = "SELECT fingerprint, result FROM idempotency_keys WHERE key = %s"
# One statement for any number of events: a round trip per append, not per event.
_INSERT_EVENTS = """
INSERT INTO events (position, stream_id, category, version, type, schema_version,
                    payload, metadata, recorded_at, prev_hash, hash)
SELECT * FROM unnest(%s::bigint[], %s::text[], %s::text[], %s::integer[], %s::text[],
                     %s::integer[], %s::jsonb[], %s::jsonb[], %s::timestamptz[],
                     %s::text[], %s::text[])
"""
_INSERT_KEY = """
INSERT INTO idempotency_keys (key, fingerprint, result, recorded_at)
VALUES (%s, %s, %s::jsonb, %s)
"""
_NOTIFY = "SELECT pg_notify(%s, %s)"
# jsonb is fetched as text and decoded with orjson in the row maker: psycopg's per-cell JSON
# loader dispatch costs about 3 µs a column, more than the decoding itself.
_COLUMNS = (
    "position, stream_id, category, version, type, schema_version,"
    " payload::text, metadata::text, recorded_at, prev_hash, hash"
)
# Built from constants only; no caller text ever reaches the query string.
_READ_STREAM = (
    "SELECT " + _COLUMNS + " FROM events WHERE stream_id = %s AND version >= %s ORDER BY version"  # noqa: S608
)
_HEAD = "SELECT coalesce(max(position), 0) FROM events"
_FIND_RECORD = """
SELECT k.fingerprint, k.result, r.response
FROM idempotency_keys AS k LEFT JOIN idempotency_responses AS r USING (key)
WHERE k.key = %s
"""
_INSERT_RESPONSE = """
INSERT INTO idempotency_responses (key, response, recorded_at) VALUES (%s, %s::jsonb, %s)
ON CONFLICT (key) DO NOTHING
"""
_INSERT_SECRET = "INSERT INTO shoe_secrets (shoe_id, server_seed, created_at) VALUES (%s, %s, %s)"  # noqa: S105
_LOAD_SECRET = "SELECT server_seed FROM shoe_secrets WHERE shoe_id = %s"  # noqa: S105


def app_conninfo(
    admin_url: str, role: str = APP_ROLE, environ: Mapping[str, str] | None = None
) -> str:
    """The application's connection string: SHOEBOX_APP_DATABASE_URL, else the admin's as `role`.

    The password is dropped with the user; a server that needs one for the application role
    must be given SHOEBOX_APP_DATABASE_URL.
    """
    override = (os.environ if environ is None else environ).get(APP_URL_VARIABLE)
    if override:
        return override
    params = conninfo_to_dict(admin_url)
    params.pop("password", None)
    params["user"] = role
    return make_conninfo(**params)  # type: ignore[arg-type]


def _configure(conn: Connection[TupleRow]) -> None:
    # Timestamps come back in UTC, as the in-memory store returns them.
    conn.execute("SET TIME ZONE 'UTC'")
    conn.commit()


def open_pool(conninfo: str, *, min_size: int = 1, max_size: int = 8) -> Pool:
    """An open pool whose sessions read timestamps in UTC."""
    return ConnectionPool(
        conninfo, min_size=min_size, max_size=max_size, configure=_configure, open=True
    )


def _event_rows(cursor: psycopg.Cursor[Any]) -> RowMaker[RecordedEvent]:
    """A psycopg row factory that builds RecordedEvents straight from the wire values."""
    loads = orjson.loads
    # The events of one append share their metadata text; EventMetadata is immutable, so
    # consecutive rows can share one object and skip decoding it again.
    last: list[Any] = [None, None]

    def make(values: Sequence[Any]) -> RecordedEvent:
        p, s, c, v, t, sv, payload, metadata, at, prev, digest = values
        if metadata != last[0]:
            last[0], last[1] = metadata, metadata_from_document(loads(metadata))
        return RecordedEvent(p, s, c, v, t, sv, loads(payload), last[1], at, prev, digest)

    return make


def _json(value: object) -> str:
    return orjson.dumps(value).decode()


class PostgresEventStore(EventStore):
    """The event store in PostgreSQL, over connections from a pool the caller owns."""

    def __init__(
        self, pool: Pool, clock: Clock = utc_now, upcasters: Upcasters | None = None
    ) -> None:
        super().__init__(clock, upcasters)
        self._pool = pool

    def append(
        self,
        streams: Sequence[StreamAppend],
        metadata: EventMetadata,
        idempotency: Idempotency | None = None,
    ) -> AppendResult:
        """Append every stream's events atomically, or none; raise ConcurrencyConflict if stale."""
        check_appends(streams)
        metadata = stamp_metadata(metadata, idempotency)
        recorded_at = to_utc(self._clock())
        stream_ids = [stream.stream_id for stream in streams]
        # Pipeline mode sends the lock, the version probe and the key lookup in one flush, then
        # the insert, the notification and the commit in another: two round trips an append.
        with self._pool.connection() as conn, conn.pipeline():
            head_cursor = conn.execute(_LOCK_AND_HEAD)
            versions_cursor = conn.execute(_STREAM_VERSIONS, [stream_ids])
            key_cursor = conn.execute(_FIND_KEY, [idempotency.key]) if idempotency else None
            head = head_cursor.fetchone()
            assert head is not None  # the function always returns one row
            if key_cursor is not None and idempotency is not None:
                found = key_cursor.fetchone()
                if found is not None:
                    if found[0] != idempotency.fingerprint:
                        raise IdempotencyKeyReused(idempotency.key)
                    return AppendResult.from_json(found[1], replayed=True)
            actual_versions: dict[str, int | None] = dict(versions_cursor.fetchall())
            for stream in streams:
                actual = actual_versions.get(stream.stream_id) or 0
                if actual != stream.expected_version:
                    raise ConcurrencyConflict(stream.stream_id, stream.expected_version, actual)
            records = chain_events(streams, metadata, recorded_at, head[0], head[1])
            metadata_json = _json(metadata_document(metadata))
            conn.execute(
                _INSERT_EVENTS,
                [
                    [r.position for r in records],
                    [r.stream_id for r in records],
                    [r.category for r in records],
                    [r.version for r in records],
                    [r.type for r in records],
                    [r.schema_version for r in records],
                    [_json(r.payload) for r in records],
                    [metadata_json] * len(records),
                    [recorded_at] * len(records),
                    [r.prev_hash for r in records],
                    [r.hash for r in records],
                ],
            )
            result = AppendResult(
                records[0].position,
                records[-1].position,
                {s.stream_id: s.expected_version + len(s.events) for s in streams},
            )
            if idempotency is not None:
                conn.execute(
                    _INSERT_KEY,
                    [
                        idempotency.key,
                        idempotency.fingerprint,
                        _json(result.to_json()),
                        recorded_at,
                    ],
                )
            conn.execute(_NOTIFY, [NOTIFY_CHANNEL, str(result.last_position)])
            conn.commit()
        return result

    def _read(self, query: sql.Composable | str, params: Sequence[object]) -> list[RecordedEvent]:
        with self._pool.connection() as conn:
            cursor = conn.cursor(row_factory=_event_rows)
            cursor.execute(query, params)  # type: ignore[arg-type]
            return cursor.fetchall()

    def read_stream(
        self, stream_id: str, from_version: int = 1, *, upcast: bool = True
    ) -> list[RecordedEvent]:
        """A stream's events from `from_version` on, upcast to their latest schema unless told."""
        events = self._read(_READ_STREAM, [stream_id, from_version])
        return self._upcast(events) if upcast else events

    def read_all(
        self,
        from_position: int = 0,
        limit: int = 1000,
        categories: Collection[str] | None = None,
        types: Collection[str] | None = None,
        *,
        upcast: bool = True,
    ) -> list[RecordedEvent]:
        """Up to `limit` events after `from_position` in log order, optionally filtered."""
        if limit < 1:
            raise ValueError("limit must be at least 1")
        conditions: list[sql.Composable] = [sql.SQL("position > %s")]
        params: list[object] = [from_position]
        if categories is not None:
            conditions.append(sql.SQL("category = ANY(%s::text[])"))
            params.append(list(categories))
        if types is not None:
            conditions.append(sql.SQL("type = ANY(%s::text[])"))
            params.append(list(types))
        params.append(limit)
        query = sql.SQL("SELECT {} FROM events WHERE {} ORDER BY position LIMIT %s").format(
            sql.SQL(_COLUMNS), sql.SQL(" AND ").join(conditions)
        )
        events = self._read(query, params)
        return self._upcast(events) if upcast else events

    def head(self) -> int:
        """The position of the last event in the log (0 when it is empty)."""
        with self._pool.connection() as conn:
            row = conn.execute(_HEAD).fetchone()
        assert row is not None
        return int(row[0])

    def idempotency_record(self, key: str) -> IdempotencyRecord | None:
        """What an idempotency key was used for, or None if no append recorded it."""
        with self._pool.connection() as conn:
            cursor = conn.cursor()
            set_json_loads(orjson.loads, cursor)
            row = cursor.execute(_FIND_RECORD, [key]).fetchone()
        if row is None:
            return None
        fingerprint, result, response = row
        return IdempotencyRecord(
            key, fingerprint, AppendResult.from_json(result, replayed=True), response
        )

    def record_response(self, key: str, response: JsonValue) -> None:
        """Store the caller's response to replay for a key; the first response stored wins."""
        document = _json(normalise(response))
        created_at = to_utc(self._clock())
        try:
            with self._pool.connection() as conn:
                conn.execute(_INSERT_RESPONSE, [key, document, created_at])
        except psycopg.errors.ForeignKeyViolation as error:
            raise UnknownIdempotencyKey(key) from error

    def store_shoe_secret(self, shoe_id: str, server_seed: str) -> None:
        """Keep a live shoe's server seed outside the log until the shoe is revealed."""
        created_at = to_utc(self._clock())
        try:
            with self._pool.connection() as conn:
                conn.execute(_INSERT_SECRET, [shoe_id, server_seed, created_at])
        except psycopg.errors.UniqueViolation as error:
            raise ShoeSecretAlreadyStored(shoe_id) from error

    def load_shoe_secret(self, shoe_id: str) -> str | None:
        """A live shoe's server seed, or None if none was stored."""
        with self._pool.connection() as conn:
            row = conn.execute(_LOAD_SECRET, [shoe_id]).fetchone()
        return None if row is None else str(row[0])
