"""Reads from a streaming replica: the pool they use, and how a read waits for a write.

When DATABASE_READ_URL names a replica, the API opens a second pool on it. Nothing else in the
service has to know: the primary's pool is a `RoutingPool`, whose checkouts go to the replica's
pool while a request has routed them there (`read_from`). So a GET's services (the store's
reads, the read models, the Merkle tree) read from the replica, while every write, and every
read outside a routed request (the sequencer, the workers, the idempotency records), stays on
the primary. docs/scaling.md, "Reads from replicas", says which endpoints use which pool.

A read with a consistency token (service/runtime/consistency.py) waits here, within a bound,
until the replica has replayed the write's commit and, for a read model, until the models'
checkpoints cover the write's last event; otherwise the caller goes to the primary.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar, Token
from typing import Final

import psycopg
from psycopg import Connection
from psycopg.rows import TupleRow
from psycopg_pool import PoolTimeout

from events import deadlines
from events.postgres import DeadlinePool, Pool, one_statement
from service.application.read_models.projector import NAMES
from service.runtime.consistency import Consistency
from service.runtime.metrics import REPLICA_LAG

log = logging.getLogger(__name__)

WAIT_SECONDS: Final = 2.0
"""The longest a read waits for its node to hold a write before it goes to the primary."""
ANSWER_MARGIN_SECONDS: Final = 0.4
"""What a wait leaves of the request's deadline for the read itself (events/deadlines.py)."""
SAMPLE_SECONDS: Final = 1.0
"""How often a process looks at its replica's lag (and health), on the reads' own way."""
SAMPLE_BOUND_SECONDS: Final = 0.5
"""How long that look may take before the replica is taken for down."""
DOWN_SECONDS: Final = 2.0
"""How long reads go to the primary after the replica failed to answer."""
POLL_START_SECONDS: Final = 0.002
POLL_MAX_SECONDS: Final = 0.05

# NULL on a primary (a read URL that names one, or a replica since promoted): it holds
# every write it acknowledged, so the answer is yes.
_REPLAYED: Final = "SELECT coalesce(pg_last_wal_replay_lsn() >= %s::pg_lsn, true)"
# The write's last event, once sequenced on this node, and every read model's checkpoint at
# or past its position; a model with no checkpoint row yet covers nothing.
_COVERED: Final = """
SELECT e.position <= (
    SELECT CASE WHEN count(*) = %(models)s THEN min(c.position) ELSE 0 END
    FROM checkpoints AS c WHERE c.subscription = ANY(%(names)s))
FROM events AS e WHERE e.stream_id = %(stream)s AND e.version = %(version)s
"""
# Seconds since the last transaction replayed, unless everything received is replayed (an idle
# primary writes nothing, and the timestamp would age without any lag). 0 on a primary.
_LAG: Final = """
SELECT CASE
    WHEN NOT pg_is_in_recovery() THEN 0
    WHEN pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn() THEN 0
    ELSE coalesce(extract(epoch FROM now() - pg_last_xact_replay_timestamp()), 0)
END::float8
"""

_READ_FROM: ContextVar[Pool | None] = ContextVar("shoebox_read_from", default=None)


class RoutingPool(DeadlinePool):
    """The primary's pool, whose checkouts go to another pool while a context routes them."""

    @contextmanager
    def connection(self, timeout: float | None = None) -> Iterator[Connection[TupleRow]]:
        """A connection from the pool this context reads from: the replica's, or this one."""
        other = _READ_FROM.get()
        if other is None or other is self:
            with super().connection(timeout) as conn:
                yield conn
            return
        with other.connection(timeout) as conn:
            yield conn


def read_from(pool: Pool | None) -> Token[Pool | None]:
    """Route this context's checkouts of a RoutingPool to `pool` (None: the primary itself)."""
    return _READ_FROM.set(pool)


def stop_reading_from(token: Token[Pool | None]) -> None:
    """Undo `read_from`."""
    _READ_FROM.reset(token)


def reading_from() -> Pool | None:
    """The pool this context's reads are routed to; None for the primary."""
    return _READ_FROM.get()


class ReplicaHealth:
    """A process's view of its replica: its lag, and whether it answered lately.

    Looked at on the way of the reads themselves, at most once a SAMPLE_SECONDS, so that an
    idle process costs the replica nothing, and a replica gone costs at most one short wait a
    second before reads go to the primary for DOWN_SECONDS.
    """

    def __init__(self, pool: Pool, clock: Callable[[], float] = time.monotonic) -> None:
        self._pool = pool
        self._clock = clock
        self._lock = threading.Lock()
        self._next_sample = 0.0
        self._down_until = 0.0

    def usable(self) -> bool:
        """Whether reads may go to the replica now (sampling its lag when that is due)."""
        now = self._clock()
        with self._lock:
            if now < self._down_until:
                return False
            due = now >= self._next_sample
            if due:
                self._next_sample = now + SAMPLE_SECONDS
        if due:
            return self._sample()
        return True

    def failed(self) -> None:
        """The replica failed a read's wait: send reads to the primary for a while."""
        with self._lock:
            self._down_until = self._clock() + DOWN_SECONDS

    def _sample(self) -> bool:
        try:
            with (
                deadlines.until(time.monotonic() + SAMPLE_BOUND_SECONDS),
                self._pool.connection(timeout=SAMPLE_BOUND_SECONDS) as conn,
            ):
                row = conn.execute(_LAG).fetchone()
                conn.rollback()
        except (psycopg.Error, PoolTimeout) as error:
            log.warning("the read replica did not answer; reads go to the primary: %s", error)
            self.failed()
            return False
        REPLICA_LAG.set(float(row[0]) if row is not None and row[0] is not None else 0.0)
        return True


def wait_budget(seconds: float = WAIT_SECONDS) -> float:
    """When a read's waits for its token must end (time.monotonic()): `seconds` from now, and
    ANSWER_MARGIN_SECONDS before the request's deadline."""
    until = time.monotonic() + seconds
    left = deadlines.remaining()
    if left is not None:
        until = min(until, time.monotonic() + left - ANSWER_MARGIN_SECONDS)
    return until


def _wait(pool: Pool, check: Callable[[Connection[TupleRow]], bool], until: float) -> bool:
    """Ask `check` on one connection of `pool` until it holds or `until` passes; whether it held.

    A node that fails to answer (down, hung past `until`) counts as not holding.
    """
    pause = POLL_START_SECONDS
    try:
        with deadlines.until(until), one_statement(pool) as conn:
            while True:
                if check(conn):
                    return True
                if time.monotonic() + pause >= until:
                    return False
                time.sleep(pause)
                pause = min(pause * 2, POLL_MAX_SECONDS)
    except (psycopg.Error, PoolTimeout) as error:
        log.info("a read's node did not show its write in time: %s", error)
        return False


def replayed(pool: Pool, token: Consistency, until: float) -> bool:
    """Whether `pool`'s node has replayed the token's LSN by `until`."""

    def check(conn: Connection[TupleRow]) -> bool:
        row = conn.execute(_REPLAYED, [token.lsn_text]).fetchone()
        return bool(row and row[0])

    return _wait(pool, check, until)


def models_cover(pool: Pool, token: Consistency, until: float) -> bool:
    """Whether every read model on `pool`'s node holds the token's write by `until`."""
    if token.stream is None:
        return True
    params = {
        "models": len(NAMES),
        "names": list(NAMES),
        "stream": token.stream,
        "version": token.version,
    }

    def check(conn: Connection[TupleRow]) -> bool:
        row = conn.execute(_COVERED, params).fetchone()
        return bool(row and row[0])

    return _wait(pool, check, until)
