"""Writers of one stream taking turns across processes: a PostgreSQL advisory lock per stream.

Optimistic concurrency keeps a stream correct however many processes write it, but not
fair: when several processes keep writing one stream, the one whose last append was the
stream's last decides its next on a current cache and tends to win every race, and the others
can lose for seconds. A writer that has lost races takes the stream's lock (waiters are served
in order by PostgreSQL's lock queue), reads the stream, decides and appends while holding it,
so the writers that hold it in turn never race one another. A writer that does not take it
still appends correctly; it can only cost a holder one more try.

The lock is a session lock held on a connection of the pool for the turn; the append itself
goes through the store as always, on another connection. So that holders always find a
connection for their reads and appends, at most `max_size - 2` of the pool's connections of
a process hold or wait for a stream lock at once. A wait is bounded (`lock_timeout`, set for
the statement alone), and a connection whose unlock failed is closed, which ends its session
and with it the lock.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Final, Protocol

import psycopg
from psycopg.rows import TupleRow

from events.postgres import Pool
from events.store import EventStoreError

# The first key of the two-key advisory locks: the stream locks' own space, apart from the
# single-key locks the roles and rebuilds take ("SBSL", for Shoebox stream lock).
_NAMESPACE: Final = 0x5342534C

_LOCK = """
SELECT set_config('lock_timeout', %s, true), pg_advisory_lock(%s, hashtext(%s))
"""
_UNLOCK = "SELECT pg_advisory_unlock(%s, hashtext(%s))"


class StreamBusy(EventStoreError):  # noqa: N818 -- named for what happened
    """The stream's turn did not come within the caller's time; nothing was written."""

    def __init__(self, stream_id: str) -> None:
        super().__init__(f"stream {stream_id!r} was not free to write in time")
        self.stream_id = stream_id


class StreamLocks(Protocol):
    """Turns at writing a stream, across every process that writes it."""

    def hold(self, stream_id: str, timeout: float) -> AbstractContextManager[None]:
        """Hold the stream's lock for the block; raise StreamBusy after `timeout` seconds."""


class PostgresStreamLocks:
    """Stream locks as PostgreSQL advisory locks, on connections of the process's pool."""

    def __init__(self, pool: Pool, *, spare: int = 2) -> None:
        self._pool = pool
        self._slots_count = max(1, pool.max_size - spare)
        self._guard = threading.Lock()
        # Made on first use, not here: under gevent it must be gevent's semaphore, and the
        # worker patches threading after this may have been constructed.
        self._slots: threading.BoundedSemaphore | None = None

    @contextmanager
    def hold(self, stream_id: str, timeout: float) -> Iterator[None]:
        """Hold the stream's lock for the block; raise StreamBusy after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        slots = self._slots_now()
        if not slots.acquire(timeout=max(0.0, timeout)):
            raise StreamBusy(stream_id)
        try:
            left = deadline - time.monotonic()
            if left <= 0:
                raise StreamBusy(stream_id)
            with self._pool.connection(timeout=left) as conn:
                # Each statement its own transaction, as the store's reads are; the pool's other
                # users expect transactions, so the flag is put back (no round trip either way).
                conn.autocommit = True
                self._lock(conn, stream_id, deadline)
                try:
                    yield
                finally:
                    self._unlock(conn, stream_id)
                    conn.autocommit = False
        finally:
            slots.release()

    def _slots_now(self) -> threading.BoundedSemaphore:
        with self._guard:
            if self._slots is None:
                self._slots = threading.BoundedSemaphore(self._slots_count)
            return self._slots

    @staticmethod
    def _lock(conn: psycopg.Connection[TupleRow], stream_id: str, deadline: float) -> None:
        milliseconds = max(1, int(1000 * (deadline - time.monotonic())))
        try:
            conn.execute(_LOCK, [f"{milliseconds}ms", _NAMESPACE, stream_id])
        except psycopg.errors.LockNotAvailable:
            raise StreamBusy(stream_id) from None
        except BaseException:
            # Interrupted mid-wait (a request's own timeout): the lock may have been granted
            # on the way; closing the session is the one sure way to let it go.
            conn.close()
            raise

    @staticmethod
    def _unlock(conn: psycopg.Connection[TupleRow], stream_id: str) -> None:
        try:
            conn.execute(_UNLOCK, [_NAMESPACE, stream_id])
        except BaseException:
            conn.close()  # the session, and every lock it held, ends with it
            raise
