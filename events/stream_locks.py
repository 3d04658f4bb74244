"""Writers of one stream taking turns across processes, in the append's own transaction.

Optimistic concurrency keeps a stream correct however many processes write it, but not
fair: when several processes keep writing one stream, the one whose last append was the
stream's last decides its next on a current cache and tends to win every race, and the others
can lose for seconds. A writer that has lost races takes the stream's turn (waiters are served
in order by PostgreSQL's lock queue), reads the stream, decides and appends while holding it,
so the writers that hold it in turn never race one another. A writer that does not take it
still appends correctly; it can only cost a holder one more try.

The turn is a transaction-scoped advisory lock on one pooled connection, and the turn's
append is made in that same transaction (PostgresEventStore.append_in_transaction): so a
turn is two round trips on one connection: BEGIN, the lock and the read of the stream's new
events in one message, then the append and COMMIT in another, whose commit ends the turn
(bench/hot_bet_round_trips.py counts them). It was four on two connections: a session lock,
the read, the append through the group commit, and the unlock. A turn that appends nothing
is rolled back, which ends it too. The wait for the turn ends on the server shortly before
the request's deadline, so that the caller hears a clean refusal and keeps its connection.

Why an advisory lock and not the stream's `stream_heads` row, which the append locks anyway:
the row would make every other append to the stream wait for the holder's decision,
including the ones the holder itself makes on other connections while deciding (a lapsed
window's catch-up append), which would wait for it forever; and the row would be taken
before the append's other rows (the players' limits sort before `table:`), against the
sorted order that keeps appends free of deadlocks. The advisory lock is taken first, alone,
and only by turns, so a holder waits for rows while holding no row, and no append waits for
a turn. Its key is the session locks' of before, so the two kinds exclude each other while
a deployment runs old and new processes side by side.

So that holders always find a connection for their other reads and appends, at most
`max_size - 2` of the pool's connections of a process hold or wait for a turn at once. A
wait is bounded (`lock_timeout`, set for the transaction), and a connection whose rollback
failed is closed, which ends its session and with it the lock.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Final, Protocol

import psycopg
from psycopg.rows import TupleRow

from events import deadlines
from events.postgres import (
    DEADLINE_MARGIN,
    Pool,
    PostgresEventStore,
    end_transaction,
    one_statement,
)
from events.store import (
    AppendResult,
    AppendTimedOut,
    DelegatingEventStore,
    EventMetadata,
    EventStore,
    EventStoreError,
    Idempotency,
    OutboxRow,
    RecordedEvent,
    StreamAppend,
)

# The first key of the two-key advisory locks: the stream locks' own space, apart from the
# single-key locks the roles and rebuilds take ("SBSL", for Shoebox stream lock).
_NAMESPACE: Final = 0x5342534C

_LOCK = "SELECT set_config('lock_timeout', %s, true), pg_advisory_xact_lock(%s, hashtext(%s))"


class StreamBusy(EventStoreError):  # noqa: N818 -- named for what happened
    """The stream's turn did not come within the caller's time; nothing was written."""

    def __init__(self, stream_id: str) -> None:
        super().__init__(f"stream {stream_id!r} was not free to write in time")
        self.stream_id = stream_id


class StreamTurn(Protocol):
    """A writer's turn at a stream: what it read under the turn, and its one append."""

    @property
    def read_from(self) -> int | None:
        """The version the turn's read began at, or None if it read nothing."""

    @property
    def events(self) -> list[RecordedEvent] | None:
        """The stream's events from `read_from` on, read once the turn was granted."""

    @property
    def open(self) -> bool:
        """Whether the turn still holds: its append has not been made."""

    def append(
        self,
        streams: Sequence[StreamAppend],
        metadata: EventMetadata,
        idempotency: Idempotency | None = None,
        outbox: Sequence[OutboxRow] = (),
    ) -> AppendResult:
        """Append as EventStore.append does, and end the turn with the append's commit."""


class StreamLocks(Protocol):
    """Turns at writing a stream, across every process that writes it."""

    def hold(
        self, stream_id: str, timeout: float, *, read_from: int | None = None
    ) -> AbstractContextManager[StreamTurn]:
        """The stream's turn for the block, reading it from `read_from` if given; StreamBusy
        after `timeout` seconds."""


class _PostgresTurn:
    """A turn held by a transaction open on `conn`."""

    def __init__(
        self,
        store: PostgresEventStore,
        conn: psycopg.Connection[TupleRow],
        read_from: int | None,
        events: list[RecordedEvent] | None,
    ) -> None:
        self._store = store
        self._conn = conn
        self._read_from = read_from
        self._events = events
        self._open = True

    @property
    def read_from(self) -> int | None:
        return self._read_from

    @property
    def events(self) -> list[RecordedEvent] | None:
        return self._events

    @property
    def open(self) -> bool:
        return self._open

    def append(
        self,
        streams: Sequence[StreamAppend],
        metadata: EventMetadata,
        idempotency: Idempotency | None = None,
        outbox: Sequence[OutboxRow] = (),
    ) -> AppendResult:
        if not self._open:
            raise RuntimeError("a turn makes one append; it has made it")
        self._open = False
        return self._store.append_in_transaction(self._conn, streams, metadata, idempotency, outbox)


class PostgresStreamLocks:
    """Turns as transaction-scoped advisory locks, on connections of the process's pool."""

    def __init__(
        self, pool: Pool, *, spare: int = 2, store: PostgresEventStore | None = None
    ) -> None:
        self._pool = pool
        # The store whose appends the turns make: its clock, upcasters and sequencing.
        self._store = store if store is not None else PostgresEventStore(pool)
        self._slots_count = max(1, pool.max_size - spare)
        self._guard = threading.Lock()
        # Made on first use, not here: under gevent it must be gevent's semaphore, and the
        # worker patches threading after this may have been constructed.
        self._slots: threading.BoundedSemaphore | None = None

    @contextmanager
    def hold(
        self, stream_id: str, timeout: float, *, read_from: int | None = None
    ) -> Iterator[StreamTurn]:
        """The stream's turn for the block, reading it from `read_from` if given; StreamBusy
        after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        slots = self._slots_now()
        if not slots.acquire(timeout=max(0.0, timeout)):
            raise StreamBusy(stream_id)
        try:
            left = deadline - time.monotonic()
            if left <= 0:
                raise StreamBusy(stream_id)
            # The turn sends its own BEGIN and COMMIT with its statements.
            with one_statement(self._pool, timeout=left) as conn:
                turn = self._begin(conn, stream_id, deadline, read_from)
                try:
                    yield turn
                finally:
                    # A turn that made no append (a refusal, an error) ends here; one that
                    # did has committed or rolled back already: this sends nothing.
                    end_transaction(conn)
        finally:
            slots.release()

    def _slots_now(self) -> threading.BoundedSemaphore:
        with self._guard:
            if self._slots is None:
                self._slots = threading.BoundedSemaphore(self._slots_count)
            return self._slots

    def _begin(
        self,
        conn: psycopg.Connection[TupleRow],
        stream_id: str,
        deadline: float,
        read_from: int | None,
    ) -> _PostgresTurn:
        left = deadline - time.monotonic()
        request_left = deadlines.remaining()
        by_deadline = False
        if request_left is not None and request_left - _MARGIN < left:
            # The server gives up first, so that the caller hears its clean refusal (the
            # connection goes back to the pool) rather than its own timeout, which closes the
            # connection: under a convoy, a reconnect a refused bet is CPU nobody has.
            left, by_deadline = request_left - _MARGIN, True
        if left <= 0:
            raise _not_in_time(stream_id, by_deadline)
        milliseconds = max(1, int(1000 * left))
        try:
            # One round trip: BEGIN, the lock, and the read of what others wrote since.
            events = self._store.begin_turn(
                conn, _LOCK, [f"{milliseconds}ms", _NAMESPACE, stream_id], stream_id, read_from
            )
        except psycopg.errors.LockNotAvailable:
            end_transaction(conn)
            raise _not_in_time(stream_id, by_deadline) from None
        except BaseException:
            # Interrupted mid-wait (a request's own timeout): the lock may have been granted
            # on the way; closing the session is the one sure way to let it go.
            conn.close()
            raise
        return _PostgresTurn(self._store, conn, read_from, events)


_MARGIN: Final = DEADLINE_MARGIN.total_seconds()


def _not_in_time(stream_id: str, by_deadline: bool) -> EventStoreError:
    """The error of a turn that did not come in time.

    Within the request's deadline, the same as any write refused for want of time (a 503
    log-busy, nothing written, as before the turn's wait ended on the server); within the
    command's own budget alone, StreamBusy, which the command answers as a conflict.
    """
    if by_deadline:
        waited_for = f"the turn of {stream_id!r} within the request's time"
        return AppendTimedOut(waited_for, by_deadline=True)
    return StreamBusy(stream_id)


class TurnStore(DelegatingEventStore):
    """The store a command sees in its turn: the turn's read and append, else `inner`'s.

    The stream's first read from the turn's `read_from` is the one the turn made, and the
    first append goes in the turn's transaction; a retry after that append (a writer that
    took no turn moved a stream first) reads and appends through `inner`, as any writer does.
    """

    def __init__(self, inner: EventStore, stream_id: str, turn: StreamTurn) -> None:
        super().__init__(inner)
        self._stream_id = stream_id
        self._turn = turn
        self._unread = turn.events

    def append(
        self,
        streams: Sequence[StreamAppend],
        metadata: EventMetadata,
        idempotency: Idempotency | None = None,
        outbox: Sequence[OutboxRow] = (),
    ) -> AppendResult:
        """In the turn's transaction if it still holds, else through the inner store."""
        if self._turn.open:
            return self._turn.append(streams, metadata, idempotency, outbox)
        return self._inner.append(streams, metadata, idempotency, outbox)

    def read_stream(
        self, stream_id: str, from_version: int = 1, *, upcast: bool = True
    ) -> list[RecordedEvent]:
        """The turn's read, once, if this is it; else the inner store's."""
        unread = self._unread
        if (
            unread is not None
            and upcast
            and stream_id == self._stream_id
            and from_version == self._turn.read_from
        ):
            self._unread = None
            return unread
        return self._inner.read_stream(stream_id, from_version, upcast=upcast)
