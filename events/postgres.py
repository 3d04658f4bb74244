"""The PostgreSQL event store: appends in one server-side statement, orjson-decoded reads."""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Final, Literal, TypeVar, cast

import orjson
import psycopg
from psycopg import Connection, sql
from psycopg.abc import Buffer
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.rows import RowMaker, TupleRow
from psycopg.types.datetime import TimestamptzLoader
from psycopg.types.json import set_json_loads
from psycopg_pool import ConnectionPool, PoolTimeout

from events import deadlines
from events.canonical import (
    RecordedRow,
    metadata_from_document,
    normalise,
    split_event_documents,
)
from events.sequencer import MAX_APPENDS, sequence_batch, wait_until_sequenced
from events.store import (
    AppendResult,
    AppendTimedOut,
    Clock,
    ConcurrencyConflict,
    EventMetadata,
    EventStore,
    EventStoreError,
    Idempotency,
    IdempotencyKeyReused,
    IdempotencyRecord,
    JsonObject,
    JsonValue,
    LogBusy,
    OutboxRow,
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

log = logging.getLogger(__name__)

APP_ROLE: Final = "shoebox_app"
APP_URL_VARIABLE: Final = "SHOEBOX_APP_DATABASE_URL"

Pool = ConnectionPool[Connection[TupleRow]]
T = TypeVar("T")
Sequencing = Literal["inline", "background"]
"""Who places a store's appends in the log: the store itself, before `append` returns
("inline": tests, one-off commands, a process alone), or the sequencer's role in a long-running
process ("background": the API's bets never wait for it)."""
_DEADLOCK_RETRIES: Final = 3

# migrations/0030: row locks on the streams' heads in sorted order, the idempotency key, the
# versions, and the events written without positions into unsequenced_events, all in one
# statement run in autocommit, so that the statement is the whole transaction. Several appends
# go in one call (group commit: one commit and one disk flush for all of them), each storing
# the response to its idempotency key in the same transaction; a replay returns the stored
# result and response, and a refused append is reported in its row. Each append also names its
# guards (streams it read and adds nothing to). The sequencer gives positions later
# (events/sequencer.py).
_APPEND_BATCH = (
    "SELECT append_id, replayed_result, replayed_response, error_code, error_detail"
    " FROM append_batch(%b::text[], %b::text[], %b::text[], %b::text[], %b::text[], %s, %s)"
)
# %b: in binary, a text array's elements travel as they are; the text format escapes every
# double quote of every document with a regular expression, which cost a bet more time than
# the rest of its Python together. The two last arguments bound the append's wait for its
# rows' locks and the sequencer's backlog, so the append is one statement and one round trip.
# One append in a longer transaction (a writer in its stream's turn, an append with outbox
# rows), or one that append_fast() below did not take: migrations/0070's append_one(), which
# takes a fresh, well-formed append in one statement and hands anything else to
# append_batch() in the same transaction.
WAL_POSITION: Final = "SELECT pg_current_wal_lsn()::text"
"""The primary's WAL write position; read after a commit, at or past its commit record."""
_APPEND_ONE = (
    "SELECT append_id, replayed_result, replayed_response, error_code, error_detail"
    " FROM append_one(%s, %s, %s, %s, %s, %s, %s)"
)
# The same append alone, as its own transaction (the store's autocommit call): first
# migrations/0080's append_fast(), which takes the usual append in the fewest executor nodes
# and refuses anything else with _NOT_TAKEN, rolled back whole; then append_one() answers it.
_APPEND_FAST = "SELECT append_fast(%s, %s, %s, %s, %s, %s, %s)"
_NOT_TAKEN = "SB004"
MAX_BATCH: Final = 64
"""Appends in one call at most: a bound on one statement's work and on the lock's hold."""
_CONCURRENCY_CONFLICT = "SB001"
_LOG_BUSY = "SB003"
_DEADLOCK = "40P01"
_LOCK_NOT_AVAILABLE = "55P03"
_QUERY_CANCELED = "57014"
LOCK_TIMEOUT: Final = timedelta(seconds=2)
"""How long an append waits for its streams' row locks. An append holds them for about a
millisecond, so two seconds is a queue of a thousand appends to one stream: past that the
server is in trouble, and a quick retryable refusal serves a caller better than a hang."""
BACKLOG_BOUND: Final = timedelta(seconds=2)
"""How far behind the sequencer may fall before appends are refused with LogBusy."""
SEQUENCED_WAIT: Final = timedelta(seconds=5)
"""How long an inline-sequencing store waits for another sequencer to place its append."""
STATEMENT_TIMEOUT: Final = timedelta(seconds=5)
"""How long an append may wait in all. Its one wait is for its streams' row locks, bounded by
the smaller of this and the lock's own bound; the rest of the statement is bounded by its size."""
READ_AHEAD: Final = 2
"""Batches that iter_all and iter_rows keep in flight, each on a pooled connection of its own.

Two, because the server's time to produce a batch is about the client's time to decode one:
with two queries out, the server always has one to work on while the client decodes.
"""
_IDEMPOTENCY_KEY_REUSED = "SB002"
# jsonb is fetched as text and decoded with orjson in the row maker: psycopg's per-cell JSON
# loader dispatch costs about 3 µs a column, more than the decoding itself.
EVENT_COLUMNS: Final = (
    "position, stream_id, category, version, type, schema_version,"
    " payload::text, metadata::text, recorded_at, prev_hash, hash"
)
"""The events columns in RecordedEvent's field order, for `event_rows` and `verify_rows`."""
# Built from constants only; no caller text ever reaches the query string.
# An unsequenced event as a row of EVENT_COLUMNS: its document rebuilt from the two halves the
# append was sent as, position UNSEQUENCED (0) and no hashes yet.
_UNSEQUENCED_COLUMNS = (
    "0::bigint, u.stream_id, d.doc ->> 'category', u.version, d.doc ->> 'type',"
    " (d.doc ->> 'schema_version')::integer, (d.doc -> 'payload')::text,"
    " (d.doc -> 'metadata')::text, (d.doc ->> 'recorded_at')::timestamptz, '', ''"
)
# current_schema() is PostgreSQL's cheapest parallel-unsafe function (stable, no side effect):
# naming it keeps the whole statement out of parallel plans, which 0012 ruled out for the log
# (a Parallel Append over the two tables ignores the tables' parallel_workers = 0).
_UNSEQUENCED_OF_STREAM = (
    " FROM unsequenced_events AS u,"
    " LATERAL (SELECT (u.prefix || '0' || u.suffix)::jsonb AS doc) AS d"
    " WHERE current_schema() IS NOT NULL AND u.stream_id = %s"
)
# Both tables in one statement, so one snapshot: the sequencer moves an event from one to the
# other in one transaction, so it is seen exactly once. Through the unique (stream_id,
# version) index of each table.
_READ_STREAM = (
    "SELECT " + EVENT_COLUMNS + " FROM events WHERE stream_id = %s AND version >= %s"  # noqa: S608
    " UNION ALL SELECT " + _UNSEQUENCED_COLUMNS + _UNSEQUENCED_OF_STREAM + " AND u.version >= %s"
    " ORDER BY version"
)
_HEAD = "SELECT coalesce(max(position), 0) FROM events"
# Through the primary key (stream_id, version), backwards: one row however long the stream.
# Built from constants only; the newest of the two tables' newest (column 4 is the version).
_LAST_OF_STREAM = "".join(
    [
        "(SELECT ",
        _UNSEQUENCED_COLUMNS,
        _UNSEQUENCED_OF_STREAM,
        " ORDER BY u.version DESC LIMIT 1) UNION ALL (SELECT ",
        EVENT_COLUMNS,
        " FROM events WHERE stream_id = %s ORDER BY version DESC LIMIT 1) ORDER BY 4 DESC LIMIT 1",
    ]
)
_FIND_RECORD = """
SELECT k.fingerprint, k.result, r.response
FROM idempotency_keys AS k LEFT JOIN idempotency_responses AS r USING (key)
WHERE k.key = %s
"""
# Inserts the response, or, when a twin stored one first, returns the twin's: one round trip.
_INSERT_RESPONSE = """
WITH inserted AS (
    INSERT INTO idempotency_responses (key, response, recorded_at) VALUES (%s, %s::jsonb, %s)
    ON CONFLICT (key) DO NOTHING RETURNING response
)
SELECT response FROM inserted
UNION ALL
SELECT r.response FROM idempotency_responses AS r
WHERE r.key = %s AND NOT EXISTS (SELECT 1 FROM inserted)
"""
_FIND_RESPONSE = "SELECT response FROM idempotency_responses WHERE key = %s"
_LOAD_SECRET = "SELECT server_seed FROM shoe_secrets WHERE shoe_id = %s"  # noqa: S105
# Through shoe_secrets_table_nonce (0021), the unique index the conflict is on.
_CLAIM_SECRET = """
WITH inserted AS (
    INSERT INTO shoe_secrets (shoe_id, server_seed, created_at, table_id, nonce)
    VALUES (%(shoe_id)s, %(server_seed)s, %(created_at)s, %(table_id)s, %(nonce)s)
    ON CONFLICT (table_id, nonce) DO NOTHING RETURNING shoe_id, server_seed
)
SELECT shoe_id, server_seed FROM inserted
UNION ALL
SELECT s.shoe_id, s.server_seed FROM shoe_secrets AS s
WHERE s.table_id = %(table_id)s AND s.nonce = %(nonce)s AND NOT EXISTS (SELECT 1 FROM inserted)
"""  # noqa: S105
_FIND_CLAIMED_SECRET = """
SELECT shoe_id, server_seed FROM shoe_secrets WHERE table_id = %(table_id)s AND nonce = %(nonce)s
"""  # noqa: S105


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


CONNECT_TIMEOUT_SECONDS: Final = 2
"""How long opening a connection may take (libpq's connect_timeout, whose least is 2 s).

Unset, libpq waits as long as the kernel does: a server that is hung (SIGSTOP, a full backlog)
or unreachable (packets dropped) leaves a connection attempt waiting minutes, and the pool's
few reconnecting threads waiting with it."""
DEADLINE_MARGIN: Final = timedelta(milliseconds=200)
"""How much sooner than the caller's deadline the server is told to give up an append's wait:
its clean refusal (nothing appended) then arrives before the client stops listening for it."""


class DeadlineExceeded(psycopg.OperationalError):
    """The caller's deadline (events/deadlines.py) passed while it waited on the database.

    An OperationalError, as a lost connection is: the connection is closed, and a statement it
    had sent may or may not have run, which an idempotency key settles on the retry.
    """


class DeadlineConnection(Connection[TupleRow]):
    """A connection whose every wait for the server keeps to the caller's deadline, if any.

    psycopg waits for the server without a bound; PostgreSQL's own timeouts cannot help when
    the server itself is stopped mid-step or unreachable. Past the deadline the connection is
    closed (its protocol state is unknown, so it cannot go back to the pool as it is).
    """

    def wait(self, gen: Any, interval: float = 0.1, timeout: float | None = None) -> Any:
        """psycopg's wait, bounded by the deadline: DeadlineExceeded when it passes."""
        left = deadlines.remaining()
        if left is None or (timeout is not None and timeout <= left):
            return super().wait(gen, interval, timeout)
        # Never 0, which some of psycopg's wait functions could read as "no bound". A step
        # that needs no round trip (a commit with no transaction open, the autocommit flag)
        # still completes however little time is left.
        try:
            return super().wait(gen, interval, max(left, 0.001))
        except psycopg.OperationalError as error:
            still_left = deadlines.remaining()
            if still_left is not None and still_left > 0:
                raise  # the server's own error (a lost connection, say), in time
            self.close()
            raise DeadlineExceeded(
                "the database did not answer within the request's time; the connection is closed"
            ) from error


# Checkouts from any DeadlinePool in this context (thread or greenlet): a request compares two
# readings to know that it has not touched the database between them.
_CHECKOUTS: ContextVar[int] = ContextVar("shoebox_pool_checkouts", default=0)


def checkouts() -> int:
    """How many connections this context has taken from a DeadlinePool so far."""
    return _CHECKOUTS.get()


class DeadlinePool(ConnectionPool[Connection[TupleRow]]):
    """A pool whose checkout waits at most its timeout and never past the caller's deadline."""

    def getconn(self, timeout: float | None = None) -> Connection[TupleRow]:
        """A connection, waiting at most `timeout` (else the pool's), within the deadline."""
        _CHECKOUTS.set(_CHECKOUTS.get() + 1)
        bound = deadlines.bounded(self.timeout if timeout is None else timeout)
        if bound is not None and bound <= 0:
            raise PoolTimeout("no time left in the request's deadline to wait for a connection")
        return super().getconn(bound)


KEEPALIVES: Final[Mapping[str, int]] = {
    "keepalives": 1,
    "keepalives_idle": 2,
    "keepalives_interval": 2,
    "keepalives_count": 3,
    "tcp_user_timeout": 8000,
}
"""libpq's TCP keepalives on every connection Shoebox opens: a server that vanished (its host
lost, a partition) is noticed within about 8 s (2 s idle, then 3 probes 2 s apart; data left
unacknowledged 8 s), not Linux's default of two hours. The server side, which releases a lost
client's locks, is service/embedded/postgres.py's SERVER_KEEPALIVES (docs/reliability.md)."""


def connect_kwargs(conninfo: str) -> dict[str, Any]:
    """psycopg.connect's keywords: CONNECT_TIMEOUT_SECONDS and KEEPALIVES.

    Any of them the caller wrote in the conninfo (DATABASE_URL) is kept, as is a
    PGCONNECT_TIMEOUT from the environment.
    """
    written = conninfo_to_dict(conninfo)
    kwargs: dict[str, Any] = {k: v for k, v in KEEPALIVES.items() if k not in written}
    if "connect_timeout" not in written and not os.environ.get("PGCONNECT_TIMEOUT"):
        kwargs["connect_timeout"] = CONNECT_TIMEOUT_SECONDS
    return kwargs


_SESSIONS: weakref.WeakSet[Connection[Any]] = weakref.WeakSet()
_SESSIONS_LOCK = threading.Lock()


def keep_from_forks(conn: Connection[Any]) -> None:
    """Cut `conn`'s socket off in any process forked from this one (see _detach_in_child).

    Every connection Shoebox keeps open registers: the pools' (in _configure) and the
    subscriptions' LISTEN connections.
    """
    with _SESSIONS_LOCK:
        _SESSIONS.add(conn)


def _detach_in_child() -> None:
    # A forked child (rq's scheduler, forked by `shoebox worker`) shares its parent's sockets.
    # It can then speak on a session that the parent has mid-transaction, close it under the
    # parent (libpq sends Terminate), and, worst, keep it open after the parent is killed: the
    # server sees no disconnect, so an idle-in-transaction session goes on holding its locks
    # (the checkpoint row of `open_rounds`, which hung every other worker's projector). Each
    # inherited socket is pointed at /dev/null instead: the child's copy of the socket is
    # closed, and a child that uses the connection reads end of file and fails at once.
    # The lock is not taken: a child has one thread, and a lock held mid-fork stays held.
    sessions = list(_SESSIONS)
    if not sessions:
        return
    null = os.open(os.devnull, os.O_RDWR)
    try:
        for conn in sessions:
            try:
                fd = conn.pgconn.socket
            except psycopg.Error:
                continue  # closed already: no socket to cut off
            os.dup2(null, fd)
    finally:
        os.close(null)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_detach_in_child)


def _configure(conn: Connection[TupleRow]) -> None:
    keep_from_forks(conn)
    # Timestamps come back in UTC, as the in-memory store returns them.
    conn.execute("SET TIME ZONE 'UTC'")
    conn.commit()


# psycopg_pool retries a lost connection after 1, 2, 4, 8... seconds with no cap, so after an
# outage of minutes its next attempt could come minutes after the server is back. Giving up
# a slot's attempts after this long bounds the gap: a waiting checkout then grows the pool
# afresh, its first attempt at once and the next a second later, so no gap between attempts
# exceeds about 2 s. It was 20 s (gaps of up to 8 s) while a checkout could wait 5 s; a
# request now waits at most 2.5 s in all (events/deadlines.py), so a longer gap would answer
# 503 for seconds after PostgreSQL is back.
RECONNECT_GIVE_UP_SECONDS: Final = 4.0


def open_pool(
    conninfo: str,
    *,
    min_size: int = 1,
    max_size: int = 8,
    timeout: float = 30.0,
    pool_class: type[DeadlinePool] = DeadlinePool,
) -> Pool:
    """An open pool whose sessions read timestamps in UTC; a checkout waits at most `timeout` s.

    Every wait keeps to the caller's deadline too, if it set one (events/deadlines.py): the
    checkout and each round trip on a connection it gives out (DeadlinePool, DeadlineConnection).
    A connection lost (a restarted server) is discarded when it is returned, and the pool
    reconnects in the background with exponential backoff (psycopg_pool's own), bounded by
    RECONNECT_GIVE_UP_SECONDS, each attempt by CONNECT_TIMEOUT_SECONDS.

    `pool_class` lets the service route a pool's checkouts elsewhere (a replica for reads,
    service/runtime/read_pools.py); the connections are made here all the same.
    """
    return pool_class(
        conninfo,
        connection_class=DeadlineConnection,
        kwargs=connect_kwargs(conninfo),
        min_size=min_size,
        max_size=max_size,
        configure=_configure,
        open=True,
        timeout=timeout,
        reconnect_timeout=RECONNECT_GIVE_UP_SECONDS,
    )


def _fast_constructor() -> Callable[..., RecordedEvent]:
    # RecordedEvent's frozen __init__ goes through object.__setattr__ once a field; calling the
    # slots' own descriptors builds the same object (same type, same equality) in 60% of the
    # time, and that is a tenth of what reading an event costs.
    if RecordedEvent.__slots__ != tuple(RecordedEvent.__dataclass_fields__):
        raise TypeError("RecordedEvent's slots no longer follow its fields")
    setters = [getattr(RecordedEvent, name).__set__ for name in RecordedEvent.__slots__]
    set_p, set_s, set_c, set_v, set_t, set_sv, set_pl, set_m, set_at, set_prev, set_h = setters
    new = object.__new__

    def build(
        p: int,
        s: str,
        c: str,
        v: int,
        t: str,
        sv: int,
        payload: JsonObject,
        metadata: EventMetadata,
        at: datetime,
        prev: str,
        digest: str,
    ) -> RecordedEvent:
        event: RecordedEvent = new(RecordedEvent)
        set_p(event, p)
        set_s(event, s)
        set_c(event, c)
        set_v(event, v)
        set_t(event, t)
        set_sv(event, sv)
        set_pl(event, payload)
        set_m(event, metadata)
        set_at(event, at)
        set_prev(event, prev)
        set_h(event, digest)
        return event

    return build


_new_recorded_event = _fast_constructor()


def event_decoder() -> Callable[[Sequence[Any]], RecordedEvent]:
    """A function from a row of EVENT_COLUMNS to its RecordedEvent, sharing metadata objects.

    The events of one append share their metadata text; EventMetadata is immutable, so
    consecutive rows can share one object and skip decoding it again.
    """
    loads, build = orjson.loads, _new_recorded_event
    last: list[Any] = [None, None]

    def decode(values: Sequence[Any]) -> RecordedEvent:
        p, s, c, v, t, sv, payload, metadata, at, prev, digest = values
        if metadata != last[0]:
            last[0], last[1] = metadata, metadata_from_document(loads(metadata))
        return build(p, s, c, v, t, sv, loads(payload), last[1], at, prev, digest)

    return decode


def event_rows(cursor: psycopg.Cursor[Any]) -> RowMaker[RecordedEvent]:
    """A psycopg row factory that builds RecordedEvents from rows of EVENT_COLUMNS."""
    return event_decoder()


def _decode_rows(rows: list[RecordedRow]) -> list[RecordedEvent]:
    decode = event_decoder()
    return [decode(row) for row in rows]


def _keep_rows(rows: list[RecordedRow]) -> list[RecordedRow]:
    return rows


class _TimestampOrText(TimestamptzLoader):
    """A timestamptz as a datetime, or as its text where Python has none ('infinity', 10000 AD).

    For the rows a verifier reads: a damaged recorded_at must reach the chain check, which
    names its position, instead of failing the whole batch's query with no position at all.
    """

    def load(self, data: Buffer) -> Any:  # a datetime, or the text of an unreadable one
        try:
            return super().load(data)
        except psycopg.DataError:
            return bytes(data).decode("utf-8", "replace")


def append_documents(
    streams: Sequence[StreamAppend], metadata: EventMetadata, recorded_at: datetime
) -> str:
    """The `documents` argument of the append_events() function: split documents, one a line."""
    return b"\n".join(
        part for pair in split_event_documents(streams, metadata, recorded_at) for part in pair
    ).decode()


def _milliseconds(limit: timedelta) -> str:
    if limit <= timedelta(0):
        raise ValueError(f"a timeout must be positive, not {limit}")
    # At least 1 ms: PostgreSQL reads 0 as "no limit", the very hang this bounds.
    return f"{max(1, limit // timedelta(milliseconds=1))}ms"


def _json(value: object) -> str:
    return orjson.dumps(value).decode()


def _outbox_insert(row: OutboxRow) -> tuple[sql.Composed, list[object]]:
    """The INSERT of one outbox row, its names quoted as identifiers, and its parameters."""
    names = list(row.values)
    if row.update:
        on_conflict = sql.SQL("DO UPDATE SET {}").format(
            sql.SQL(", ").join(
                sql.SQL("{0} = excluded.{0}").format(sql.Identifier(name)) for name in row.update
            )
        )
    else:
        on_conflict = sql.Composed([sql.SQL("DO NOTHING")])
    statement = sql.SQL("INSERT INTO {} ({}) VALUES ({}) ON CONFLICT ({}) {}").format(
        sql.Identifier(row.table),
        sql.SQL(", ").join(sql.Identifier(name) for name in names),
        sql.SQL(", ").join(sql.Placeholder() for _ in names),
        sql.SQL(", ").join(sql.Identifier(name) for name in row.key),
        on_conflict,
    )
    params: list[object] = [
        list(value) if isinstance(value, tuple) else value for value in row.values.values()
    ]
    return statement, params


def _guards(streams: Sequence[StreamAppend]) -> str | None:
    """The append's guards as append_batch() takes them: [[stream_id, version], ...], or None.

    A stream with no events has no document, so without this its version would go unchecked.
    """
    guards = [[s.stream_id, s.expected_version] for s in streams if not s.events]
    return _json(guards) if guards else None


def _filters(
    categories: Collection[str] | None, types: Collection[str] | None
) -> tuple[sql.Composable, list[object]]:
    """The extra WHERE conditions (each starting with AND) and their parameters."""
    conditions: list[sql.Composable] = []
    params: list[object] = []
    if categories is not None:
        conditions.append(sql.SQL(" AND category = ANY(%s::text[])"))
        params.append(list(categories))
    if types is not None:
        conditions.append(sql.SQL(" AND type = ANY(%s::text[])"))
        params.append(list(types))
    return sql.Composed(conditions), params


def _store_error(error: psycopg.Error, key: str | None) -> EventStoreError | None:
    """The typed error for one of the append function's own SQLSTATEs, else None."""
    if error.sqlstate == _LOCK_NOT_AVAILABLE:
        return AppendTimedOut("its streams' locks")
    if error.sqlstate == _LOG_BUSY:
        behind = float(error.diag.message_detail or 0)
        return LogBusy(behind)
    if error.sqlstate == _QUERY_CANCELED:
        return AppendTimedOut("its statement to finish")
    if error.sqlstate == _CONCURRENCY_CONFLICT and error.diag.message_detail:
        detail = orjson.loads(error.diag.message_detail)
        return ConcurrencyConflict(detail["stream_id"], detail["expected"], detail["actual"])
    if error.sqlstate == _IDEMPOTENCY_KEY_REUSED and key is not None:
        return IdempotencyKeyReused(key)
    return None


def end_transaction(conn: Connection[TupleRow]) -> None:
    """Roll back whatever `conn` has open, or close it if that fails: either way it ends.

    A transaction holds its locks (a stream's turn among them) until it ends; closing the
    session is the one sure end when the server cannot be asked.
    """
    if conn.closed:
        return
    try:
        if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            conn.rollback()
    except Exception:
        conn.close()  # the session, and everything its transaction held, ends with it
    except BaseException:
        conn.close()
        raise


@contextmanager
def one_statement(pool: Pool, timeout: float | None = None) -> Iterator[Connection[TupleRow]]:
    """A pooled connection for statements that are each their own transaction (or that send
    their own BEGIN and COMMIT), checked out within `timeout` (else the pool's).

    In autocommit a statement is one round trip; the pool's transactional default would add a
    COMMIT round trip to every read. The pool's other users expect transactions, so the switch
    (a client-side flag, no round trip) is undone before the connection goes back.
    """
    with pool.connection(timeout) as conn:
        conn.autocommit = True
        try:
            yield conn
        finally:
            # A connection closed under it (a lost server, a passed deadline) is discarded by
            # the pool as it is; asking a closed one to change its mode would raise instead.
            if not conn.closed:
                conn.autocommit = False


def _position_after_commit(conn: Connection[TupleRow]) -> str | None:
    """The WAL position read after an autocommit statement on `conn`: at or past its commit
    record (the write's consistency token, service/web/consistency.py); None if it could not be
    read, which must not fail appends already committed (the token then asks on its own)."""
    try:
        row = conn.execute(WAL_POSITION, prepare=True).fetchone()
    except Exception as error:  # whatever it is, the appends are committed: never theirs
        log.info("appended, but could not read the WAL position after it: %s", error)
        return None
    return None if row is None or row[0] is None else str(row[0])


def _append_fast(conn: Connection[TupleRow], arguments: list[Any]) -> tuple[Any, ...] | None:
    """append_fast()'s answer to one append sent as its own transaction on `conn` (in
    autocommit), in append_one()'s columns; None where it does not take the append."""
    try:
        row = conn.execute(_APPEND_FAST, arguments, prepare=True).fetchone()
    except psycopg.Error as error:
        if error.sqlstate == _NOT_TAKEN:
            return None
        raise
    assert row is not None  # the function returns the append's place, or raises
    return (row[0], None, None, None, None)


def _refusal(code: str, detail: str | None, key: str | None) -> EventStoreError:
    """The typed error for an append that append_batch() reported as refused."""
    if code == _CONCURRENCY_CONFLICT and detail:
        conflict = orjson.loads(detail)
        return ConcurrencyConflict(conflict["stream_id"], conflict["expected"], conflict["actual"])
    if code == _IDEMPOTENCY_KEY_REUSED and key is not None:
        return IdempotencyKeyReused(key)
    raise RuntimeError(f"append_batch reported an unknown refusal {code!r}: {detail}")


@dataclass(slots=True)
class _PendingAppend:
    """One append waiting for its batch: its arguments, then its row or its error."""

    documents: str
    key: str | None
    fingerprint: str | None
    response: str | None
    guards: str | None = None
    # The caller's deadline (events/deadlines.py), which its batch keeps to.
    deadline: float | None = None
    row: tuple[Any, ...] | None = None
    error: BaseException | None = None
    done: bool = False
    # The WAL write position read after the append's commit, where the same message read it.
    commit_lsn: str | None = None

    def arguments(self) -> tuple[str | None, ...]:
        """Its entries in append_batch()'s five arrays."""
        return self.documents, self.key, self.fingerprint, self.response, self.guards


class _GroupCommit:
    """Sends the appends of this process's threads (or greenlets) in batches, one call each.

    The first append to arrive while no call is in flight leads: it sends itself at once. The
    appends that arrive while a call is in flight queue up, and when it returns one of them
    leads the next call for all of them. So a lone append waits for nothing, and under load one
    commit and one disk flush serve many appends. (Under the log's lock of before migration
    0030, held through the commit, it was what let appends run faster than one per flush.)
    """

    def __init__(self, send: Callable[[Sequence[_PendingAppend]], None]) -> None:
        self._send = send
        self._turn = threading.Condition()
        self._queue: list[_PendingAppend] = []
        self._in_flight = False

    def submit(self, pending: _PendingAppend) -> None:
        """Return once `pending` has its row or its error.

        A caller with a deadline waits for its turn no longer than that: still queued when it
        passes, it leaves the queue unsent (AppendTimedOut). Once taken into a batch it waits
        for the batch, whose call keeps to the earliest deadline in it.
        """
        with self._turn:
            self._queue.append(pending)
            while self._in_flight and not pending.done:
                left = deadlines.remaining()
                if left is None:
                    self._turn.wait()
                    continue
                if left > 0 and self._turn.wait(left):
                    continue
                if pending in self._queue:
                    self._queue.remove(pending)
                    raise AppendTimedOut("its turn in the log's queue", by_deadline=True)
                # In a batch already: its call is bounded by this very deadline.
                self._turn.wait(0.05)
            if pending.done:
                return
            # The leader goes first: the queue may hold more than one batch ahead of it.
            self._queue.remove(pending)
            batch = [pending, *self._queue[: MAX_BATCH - 1]]
            del self._queue[: MAX_BATCH - 1]
            self._in_flight = True
        try:
            with deadlines.until(_earliest(batch)):
                self._send(batch)
        finally:
            with self._turn:
                for sent in batch:
                    sent.done = True
                self._in_flight = False
                self._turn.notify_all()


def _earliest(batch: Sequence[_PendingAppend]) -> float | None:
    """The earliest deadline of the appends in a batch, or None if none has one."""
    found = [pending.deadline for pending in batch if pending.deadline is not None]
    return min(found) if found else None


class PostgresEventStore(EventStore):
    """The event store in PostgreSQL, over connections from a pool the caller owns."""

    def __init__(
        self,
        pool: Pool,
        clock: Clock = utc_now,
        upcasters: Upcasters | None = None,
        *,
        lock_timeout: timedelta = LOCK_TIMEOUT,
        statement_timeout: timedelta = STATEMENT_TIMEOUT,
        group_commit: bool = True,
        sequencing: Sequencing = "inline",
        backlog_bound: timedelta | None = BACKLOG_BOUND,
    ) -> None:
        super().__init__(clock, upcasters)
        self._pool = pool
        # The append's one wait is for its rows' locks (and a key's row), so the two bounds
        # are one: the smaller, set by the append on its own transaction (migration 0013),
        # where a session setting would need two more statements a bet to set and reset.
        self._wait_limit = min(lock_timeout, statement_timeout)
        self._statement_binds = statement_timeout < lock_timeout
        self._backlog_bound = None if backlog_bound is None else _milliseconds(backlog_bound)
        # Off only to measure what it buys (bench/contention.py): each append its own call.
        self._group = _GroupCommit(self._append_batch) if group_commit else None
        self._sequencing = sequencing

    def append(
        self,
        streams: Sequence[StreamAppend],
        metadata: EventMetadata,
        idempotency: Idempotency | None = None,
        outbox: Sequence[OutboxRow] = (),
    ) -> AppendResult:
        """Append every stream's events atomically, or none; raise ConcurrencyConflict if stale.

        Returns once the append is durable, with its streams' versions: its positions come
        from the sequencer, later ("background"), or before this returns ("inline").
        Appends that arrive while this process's previous call is in flight go together in
        the next call (group commit: one commit, one flush for all of them); a lone append is
        sent at once. An append with `outbox` rows goes alone, in a transaction of its own that
        writes the rows too (`_append_with_outbox`).
        """
        pending = self._pending(streams, metadata, idempotency)
        if outbox:
            self._append_with_outbox(pending, outbox)
        elif self._group is not None:
            self._group.submit(pending)
        else:
            self._append_batch([pending])
        return self._answer(pending, streams)

    def append_in_transaction(
        self,
        conn: Connection[TupleRow],
        streams: Sequence[StreamAppend],
        metadata: EventMetadata,
        idempotency: Idempotency | None = None,
        outbox: Sequence[OutboxRow] = (),
    ) -> AppendResult:
        """Append in `conn`'s open transaction and commit it, in one round trip; as `append`.

        For a writer that took its stream's turn in that transaction (events/stream_locks.py):
        the commit that makes the append durable also ends the turn, and the append bypasses
        the group commit, whose batch cannot join a transaction that another caller holds
        open. On any error the transaction is rolled back (or the connection closed), so the
        turn ends with nothing written. `outbox` rows are written in the same transaction,
        once append_batch() has reported the append made (not refused, not a replay): a round
        trip for the append, one a row, and the COMMIT, as `_append_with_outbox` does.
        """
        try:
            pending = self._pending(streams, metadata, idempotency)
            wait_limit, deadline_binds = self._wait_within_deadline()
            arguments = [*pending.arguments(), _milliseconds(wait_limit), self._backlog_bound]
            cursor = psycopg.ClientCursor(conn)
            if not outbox:
                # The append and the COMMIT in one message (simple query protocol, the
                # arguments bound client-side): one round trip, answered after the flush. The
                # WAL position read after the COMMIT, in its own implicit transaction, is at or
                # past the commit record: the write's consistency token, with no round trip
                # of its own (service/web/consistency.py).
                cursor.execute(_APPEND_ONE + "; COMMIT; " + WAL_POSITION, arguments)
                pending.row = cursor.fetchone()
                cursor.nextset()  # the COMMIT's
                if cursor.nextset():
                    position = cursor.fetchone()
                    if position is not None and position[0] is not None:
                        pending.commit_lsn = str(position[0])
            else:
                cursor.execute(_APPEND_ONE, arguments)
                row = cursor.fetchone()
                assert row is not None  # one row for the append given
                if row[1] is None and row[3] is None:
                    for statement, params in (_outbox_insert(r) for r in outbox):
                        cursor.execute(statement, params)
                    cursor.execute("COMMIT")
                else:
                    # Replayed (its rows went in with its first use) or refused: none now.
                    cursor.execute("ROLLBACK")
                pending.row = row
        except psycopg.Error as error:
            end_transaction(conn)
            typed = self._append_error(error, deadline_binds)
            if typed is not None:
                raise typed from error
            raise
        except BaseException:
            end_transaction(conn)
            raise
        return self._answer(pending, streams)

    def begin_turn(
        self,
        conn: Connection[TupleRow],
        lock: str,
        lock_arguments: Sequence[object],
        stream_id: str,
        read_from: int | None,
    ) -> list[RecordedEvent] | None:
        """BEGIN, `lock`, and the stream's events from `read_from` on, in one round trip.

        For a writer taking its stream's turn (events/stream_locks.py) on `conn`, which must
        be in autocommit, so that psycopg sends no BEGIN of its own first. One message in the
        simple query protocol, the arguments bound client-side: in a psycopg pipeline each
        statement goes out and is answered on its own (two exchanges here, not one). The
        read's snapshot is taken after the lock is granted: each statement of a
        read-committed transaction takes its own. None when `read_from` is None.
        """
        cursor = psycopg.ClientCursor(conn, row_factory=event_rows)
        query, arguments = "BEGIN; " + lock, list(lock_arguments)
        if read_from is not None:
            query += "; " + _READ_STREAM
            arguments += [stream_id, read_from, stream_id, read_from]
        cursor.execute(query, arguments)
        if read_from is None:
            return None
        cursor.nextset()  # the lock's
        cursor.nextset()  # the read's
        return self._upcast(cursor.fetchall())

    def _pending(
        self,
        streams: Sequence[StreamAppend],
        metadata: EventMetadata,
        idempotency: Idempotency | None,
    ) -> _PendingAppend:
        check_appends(streams)
        metadata = stamp_metadata(metadata, idempotency)
        recorded_at = to_utc(self._clock())
        documents = append_documents(streams, metadata, recorded_at)
        key = fingerprint = response = None
        if idempotency is not None:
            key, fingerprint = idempotency.key, idempotency.fingerprint
            if idempotency.response is not None:
                response = _json(normalise(idempotency.response))
        return _PendingAppend(
            documents, key, fingerprint, response, _guards(streams), deadlines.current()
        )

    def _answer(self, pending: _PendingAppend, streams: Sequence[StreamAppend]) -> AppendResult:
        """The result of a sent append, or its error raised; sequenced first if inline."""
        if pending.error is not None:
            raise pending.error
        row = pending.row
        assert row is not None  # the batch reports every append it was given
        append_id, replayed, replayed_response, code, detail = row
        if code is not None:
            raise _refusal(code, detail, pending.key)
        if replayed is not None:
            stored = AppendResult.from_json(orjson.loads(replayed), replayed=True)
            if replayed_response is None:
                return stored
            return replace(stored, response=orjson.loads(replayed_response))
        if self._sequencing == "inline":
            try:
                self.sequence(append_id)
            except psycopg.Error as error:
                # The append is durable and answered as such: it keeps its place in the
                # sequencer's order, and the next batch (this store's or the role's) places it.
                log.warning("appended, but could not sequence it now: %s", error)
        result = AppendResult.of(streams)
        return (
            result if pending.commit_lsn is None else replace(result, commit_lsn=pending.commit_lsn)
        )

    def sequence(self, append_id: int | None = None) -> None:
        """Place committed appends in the log now, or wait (bounded) for the sequencer to.

        Runs batches until everything committed so far is sequenced, unless another session
        holds the sequencer's lock: then, for `append_id` (if given), tries the lock again
        until the append is placed (by either), for SEQUENCED_WAIT or the caller's deadline.
        """
        # Within the caller's deadline too (events/deadlines.py), with the append's margin:
        # the append is durable, and its answer must not wait past the deadline for its place.
        wait = SEQUENCED_WAIT
        left = deadlines.remaining()
        if left is not None:
            wait = min(wait, timedelta(seconds=left) - DEADLINE_MARGIN)
        give_up = time.monotonic() + wait.total_seconds()
        pause = 0.001
        with one_statement(self._pool) as conn:
            while True:
                batch = sequence_batch(conn, wait=False)
                if batch is not None:
                    if batch.events < MAX_APPENDS:
                        # Not a full batch: it took every append committed before it began,
                        # this one's included.
                        return
                    continue
                if append_id is None or time.monotonic() >= give_up:
                    return
                # Another session holds the sequencer's lock. The role places the append
                # within its poll, but another inline store's batch may have begun before
                # this append committed and end without it: so the lock is tried again too,
                # not only waited on (waiting alone left appends unplaced for 5 s, and the
                # log refusing every append meanwhile).
                if wait_until_sequenced(conn, [append_id], 0):
                    return
                time.sleep(pause)
                pause = min(pause * 2, 0.02)

    def _append_batch(self, batch: Sequence[_PendingAppend]) -> None:
        """One call for these appends, each getting its row or the error: append_fast() (else
        append_one()) for one append alone, the usual call; append_batch() for several."""
        columns: list[Any] = [[], [], [], [], []]
        if len(batch) == 1:
            columns = list(batch[0].arguments())
        else:
            for pending in batch:
                for column, value in zip(columns, pending.arguments(), strict=True):
                    column.append(value)
        # One autocommit statement is one transaction and one round trip: the commit (and its
        # flush) ends the statement before the server answers.
        deadline_binds = False
        position: str | None = None
        try:
            for attempt in range(_DEADLOCK_RETRIES):
                try:
                    with one_statement(self._pool) as conn:
                        # Taken after the checkout (and before each retry), which may have
                        # used up some of the time left.
                        wait_limit, deadline_binds = self._wait_within_deadline()
                        arguments = [*columns, _milliseconds(wait_limit), self._backlog_bound]
                        # Prepared: parsing, analysing and planning the call afresh was a
                        # tenth of an append's server CPU. (It was never prepared while it
                        # ran in a pipeline, where a failed statement's Parse is skipped.)
                        if len(batch) > 1:
                            rows = conn.execute(_APPEND_BATCH, arguments, prepare=True).fetchall()
                        elif (taken := _append_fast(conn, arguments)) is not None:
                            rows = [taken]
                        else:
                            # Not taken, and nothing of it kept: append_one() answers it,
                            # within what is left of the deadline. The backlog was checked
                            # before any wait of the first call, and not again after one, as
                            # append_one() checks it (a replay that waited for its rows is
                            # answered, not refused as busy).
                            wait_limit, deadline_binds = self._wait_within_deadline()
                            again = [*columns, _milliseconds(wait_limit), None]
                            rows = conn.execute(_APPEND_ONE, again, prepare=True).fetchall()
                        # Once for the batch, on the connection it holds: every caller's
                        # consistency token then needs no checkout and no round trip of its own.
                        position = _position_after_commit(conn)
                    break
                except psycopg.errors.DeadlockDetected:
                    # Two batches whose keys' twins met in opposite orders (their streams are
                    # locked in sorted order and cannot deadlock): nothing was written, and
                    # the retry finds the twin committed. Never a client's error.
                    if attempt == _DEADLOCK_RETRIES - 1:
                        raise
        except psycopg.Error as error:
            typed = self._append_error(error, deadline_binds)
            if typed is None and len(batch) > 1 and not isinstance(error, psycopg.OperationalError):
                # An error of one append's own making (the function refuses malformed input)
                # fails the whole transaction: try each alone, so only its own caller sees it.
                # Not a lost server or an empty pool (OperationalError): that is everyone's,
                # and trying each alone would make the last caller wait once per batch mate.
                for pending in batch:
                    self._append_batch([pending])
                return
            for pending in batch:
                pending.error = typed if typed is not None else error
            return
        except BaseException as error:  # the pool's timeout, a lost connection: everyone's
            for pending in batch:
                pending.error = error
            return
        for pending, row in zip(batch, rows, strict=True):
            pending.row = row
            pending.commit_lsn = position

    def _append_with_outbox(self, pending: _PendingAppend, outbox: Sequence[OutboxRow]) -> None:
        """One append and its outbox rows in one transaction: both committed, or neither.

        append_batch() runs here as one statement of a longer transaction rather than as the
        whole of one: a refusal or a replay it reports in its row rolls the transaction back, so
        no row outlives an append that was not made. Not in a group-commit batch, whose other
        appends would share the rows' fate; outbox appends are rare beside bets.
        """
        columns = pending.arguments()
        statements = [_outbox_insert(row) for row in outbox]
        deadline_binds = False
        try:
            for attempt in range(_DEADLOCK_RETRIES):
                try:
                    with self._pool.connection() as conn:
                        wait_limit, deadline_binds = self._wait_within_deadline()
                        with conn.transaction() as transaction:
                            row = conn.execute(
                                _APPEND_ONE,
                                [*columns, _milliseconds(wait_limit), self._backlog_bound],
                                prepare=False,
                            ).fetchone()
                            assert row is not None  # one row for each append given
                            if row[1] is None and row[3] is None:
                                for statement, params in statements:
                                    conn.execute(statement, params)
                            else:
                                # Replayed (its rows went in with its first use) or refused.
                                raise psycopg.Rollback(transaction)
                    break
                except psycopg.errors.DeadlockDetected:
                    if attempt == _DEADLOCK_RETRIES - 1:
                        raise
        except psycopg.Error as error:
            typed = self._append_error(error, deadline_binds)
            pending.error = typed if typed is not None else error
            return
        pending.row = row

    def _append_error(self, error: psycopg.Error, deadline_binds: bool) -> EventStoreError | None:
        """The store's typed error for an append's database error, None if it has none; a
        timeout names what bound it (the statement's limit, or the request's deadline)."""
        typed = _store_error(error, None)
        if isinstance(typed, AppendTimedOut) and self._statement_binds:
            typed = AppendTimedOut("its statement to finish")
        if isinstance(typed, AppendTimedOut) and deadline_binds:
            typed = AppendTimedOut("the log within the request's time", by_deadline=True)
        return typed

    def _wait_within_deadline(self) -> tuple[timedelta, bool]:
        """How long the append may wait for the log, and whether the deadline set that.

        The server gives up DEADLINE_MARGIN before the deadline, so that its refusal (nothing
        appended) is what the caller hears, not the client's own timeout (an unknown outcome).
        Raises AppendTimedOut, sending nothing, when no time is left for even that.
        """
        left = deadlines.remaining()
        if left is None:
            return self._wait_limit, False
        server_left = timedelta(seconds=left) - DEADLINE_MARGIN
        if server_left <= timedelta(0):
            raise AppendTimedOut("the log within the request's time", by_deadline=True)
        if server_left < self._wait_limit:
            return server_left, True
        return self._wait_limit, False

    def _read(self, query: sql.Composable | str, params: Sequence[object]) -> list[RecordedEvent]:
        with one_statement(self._pool) as conn:
            cursor = conn.cursor(row_factory=event_rows)
            cursor.execute(query, params)  # type: ignore[arg-type]
            return cursor.fetchall()

    def read_stream(
        self, stream_id: str, from_version: int = 1, *, upcast: bool = True
    ) -> list[RecordedEvent]:
        """A stream's events from `from_version` on, upcast to their latest schema unless told."""
        events = self._read(_READ_STREAM, [stream_id, from_version, stream_id, from_version])
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
        conditions, params = _filters(categories, types)
        query = sql.SQL(
            "SELECT {} FROM events WHERE position > %s{} ORDER BY position LIMIT %s"
        ).format(sql.SQL(EVENT_COLUMNS), conditions)
        events = self._read(query, [from_position, *params, limit])
        return self._upcast(events) if upcast else events

    def iter_all(
        self,
        from_position: int = 0,
        batch_size: int = 1000,
        categories: Collection[str] | None = None,
        types: Collection[str] | None = None,
        *,
        to_position: int | None = None,
        upcast: bool = True,
    ) -> Iterator[list[RecordedEvent]]:
        """Every event after `from_position` in log order, in batches, to the log's end.

        Each batch covers the next `batch_size` positions (fewer events when filtered; empty
        batches are skipped). The next READ_AHEAD batches are fetched and decoded on other
        threads and connections while the caller uses this one. Events appended meanwhile are
        included: it stops at `to_position`, or at a head that did not move while it read.
        """
        batches = self._batches(
            _decode_rows, from_position, batch_size, categories, types, to_position
        )
        for events in batches:
            yield self._upcast(events) if upcast else events

    def iter_rows(
        self, from_position: int = 0, batch_size: int = 1000, *, to_position: int | None = None
    ) -> Iterator[list[RecordedRow]]:
        """Every row after `from_position` as recorded, batched as `iter_all` does, to verify."""
        return self._batches(
            _keep_rows, from_position, batch_size, None, None, to_position, as_recorded=True
        )

    def _batches(
        self,
        convert: Callable[[list[RecordedRow]], list[T]],
        from_position: int,
        batch_size: int,
        categories: Collection[str] | None,
        types: Collection[str] | None,
        to_position: int | None,
        *,
        as_recorded: bool = False,
    ) -> Iterator[list[T]]:
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        conditions, params = _filters(categories, types)
        query = sql.SQL(
            "SELECT {} FROM events WHERE position > %s AND position <= %s{} ORDER BY position"
        ).format(sql.SQL(EVENT_COLUMNS), conditions)
        # Why fetching ahead is safe: positions are gapless and become visible in position
        # order (only the sequencer writes events, one batch's transaction after another).
        # Once a head h is visible, every position up to h has committed, so the range (a, b]
        # with b <= h returns the same events whenever and on whichever connection it is read:
        # a batch fetched early can never miss an event that commits late.
        after, head = from_position, self._head_until(to_position)
        with ThreadPoolExecutor(READ_AHEAD, thread_name_prefix="shoebox-read-ahead") as ahead:
            pending: deque[Future[list[T]]] = deque()
            while True:
                while len(pending) < READ_AHEAD and after < head:
                    end = min(after + batch_size, head)
                    bounds = [after, end, *params]
                    pending.append(ahead.submit(self._fetch, convert, query, bounds, as_recorded))
                    after = end
                if not pending:
                    # Everything up to the head is handed over: look again for later appends.
                    if to_position is not None and after >= to_position:
                        return
                    head = self._head_until(to_position)
                    if after >= head:
                        return
                    continue
                batch = pending.popleft().result()
                if batch:
                    yield batch

    def _head_until(self, to_position: int | None) -> int:
        head = self.head()
        return head if to_position is None else min(head, to_position)

    def _fetch(
        self,
        convert: Callable[[list[RecordedRow]], list[T]],
        query: sql.Composed,
        params: Sequence[object],
        as_recorded: bool = False,
    ) -> list[T]:
        # Converted on the read-ahead thread too: while one thread decodes, the other's query
        # runs on the server, and the caller gets a batch that is ready to use.
        with one_statement(self._pool) as conn:
            cursor = conn.cursor()
            if as_recorded:
                cursor.adapters.register_loader("timestamptz", _TimestampOrText)
            rows = cursor.execute(query, params).fetchall()
        return convert(cast("list[RecordedRow]", rows))

    def head(self) -> int:
        """The position of the last event in the log (0 when it is empty)."""
        with one_statement(self._pool) as conn:
            row = conn.execute(_HEAD).fetchone()
        assert row is not None
        return int(row[0])

    def last_of_stream(self, stream_id: str, *, upcast: bool = True) -> RecordedEvent | None:
        """A stream's last event, or None for an empty stream."""
        events = self._read(_LAST_OF_STREAM, [stream_id, stream_id])
        events = self._upcast(events) if upcast else events
        return events[0] if events else None

    def idempotency_record(self, key: str) -> IdempotencyRecord | None:
        """What an idempotency key was used for, or None if no append recorded it."""
        with one_statement(self._pool) as conn:
            cursor = conn.cursor()
            set_json_loads(orjson.loads, cursor)
            row = cursor.execute(_FIND_RECORD, [key]).fetchone()
        if row is None:
            return None
        fingerprint, result, response = row
        return IdempotencyRecord(
            key, fingerprint, AppendResult.from_json(result, replayed=True), response
        )

    def record_response(self, key: str, response: JsonValue) -> JsonValue:
        """Store the caller's response to replay for a key; return the one now stored."""
        document = _json(normalise(response))
        created_at = to_utc(self._clock())
        try:
            with one_statement(self._pool) as conn:
                cursor = conn.cursor()
                set_json_loads(orjson.loads, cursor)
                row = cursor.execute(_INSERT_RESPONSE, [key, document, created_at, key]).fetchone()
                if row is None:
                    # A twin's insert committed while ours waited on it, after this statement's
                    # snapshot was taken: its response is visible to the next statement.
                    row = cursor.execute(_FIND_RESPONSE, [key]).fetchone()
        except psycopg.errors.ForeignKeyViolation as error:
            raise UnknownIdempotencyKey(key) from error
        assert row is not None  # inserted, or lost to a twin whose row now exists
        stored: JsonValue = row[0]
        return stored

    def claim_shoe_secret(
        self, table_id: str, nonce: int, shoe_id: str, server_seed: str
    ) -> tuple[str, str]:
        """The shoe id and seed kept for a table's `nonce`-th shoe: these, unless some are."""
        values = {
            "shoe_id": shoe_id,
            "server_seed": server_seed,
            "created_at": to_utc(self._clock()),
            "table_id": table_id,
            "nonce": nonce,
        }
        try:
            with one_statement(self._pool) as conn:
                row = conn.execute(_CLAIM_SECRET, values).fetchone()
                if row is None:
                    # A twin's claim committed while ours waited on it, after this statement's
                    # snapshot was taken: its row is visible to the next statement.
                    row = conn.execute(_FIND_CLAIMED_SECRET, values).fetchone()
        except psycopg.errors.UniqueViolation as error:
            raise ShoeSecretAlreadyStored(shoe_id) from error
        assert row is not None  # inserted, or lost to a twin whose row now exists
        return str(row[0]), str(row[1])

    def load_shoe_secret(self, shoe_id: str) -> str | None:
        """A live shoe's server seed, or None if none was stored."""
        with one_statement(self._pool) as conn:
            row = conn.execute(_LOAD_SECRET, [shoe_id]).fetchone()
        return None if row is None else str(row[0])
