"""Following the log's head live: one reader per process, fanning new events out to waiters.

A live feed has many clients and few new events. Were each client to query the log when an
append is announced, every append would cost a query per client. Instead one `LogTail` per
process LISTENs on the append channel, reads each new batch once (by primary key, after the
last position it has seen), keeps the recent events in memory, and wakes only the waiters
whose streams the batch touched. A waiter then reads what it missed from that memory, or, if
it is further behind than the memory reaches, from the log itself through `read_after`.

Appends commit in position order (the append lock of migrations/0002), so "everything after
position p" read at any moment is a gapless prefix of what will ever follow p: a reader that
resumes after the last position it delivered misses nothing and repeats nothing.

A tail that cannot LISTEN (a hot standby's) polls every `poll_seconds` instead, and `wake`
lets a signal from elsewhere (the sequencer's, over Redis: service/runtime/head_signal.py)
cut the wait short.

Everything here uses `threading` primitives, which gevent's monkey-patching makes
cooperative: under gunicorn's gevent worker the tail is a greenlet and each waiter another.
"""

from __future__ import annotations

import bisect
import logging
import threading
import time
from collections.abc import Callable, Collection, Sequence
from contextlib import closing
from dataclasses import dataclass, field
from typing import Any, Final

import psycopg
from psycopg import Connection, sql
from psycopg.rows import TupleRow

from events.postgres import EVENT_COLUMNS, event_rows
from events.store import NOTIFY_CHANNEL, RecordedEvent
from events.upcasting import Upcasters

_logger = logging.getLogger(__name__)

BATCH: Final = 1000
"""Events read from the log in one query."""
MEMORY: Final = 20_000
"""Recent events a tail keeps; a waiter further behind reads the log instead."""
POLL_SECONDS: Final = 1.0
"""How long the tail waits for a NOTIFY before looking at the log anyway."""
RETRY_SECONDS: Final = 1.0
COALESCE_SECONDS: Final = 0.02
"""How long the tail lets appends gather after a NOTIFY before it reads them: a bound on the
latency it adds, and what turns a burst of appends into one wake-up of each client."""
"""How long the tail waits before reconnecting after losing the database."""
REPLAY_WAIT_SECONDS: Final = 0.005
"""Woken with a head its standby has not replayed yet, how long the tail waits to look again."""

_HEAD = "SELECT coalesce(max(position), 0) FROM events"
# The primary key's range: only what was appended since the tail last looked.
_AFTER = (
    "SELECT " + EVENT_COLUMNS + " FROM events WHERE position > %s"  # noqa: S608 - constants only
    " ORDER BY position LIMIT %s"
)


def _after_query(column: str, count: int) -> sql.Composed:
    # One index range per stream (events_stream_position, migration 0008) or category
    # (events_category_position, 0001), each already in position order and limited, merged
    # by the outer ORDER BY: never a scan of other streams' events.
    one = sql.SQL(
        "(SELECT {columns} FROM events WHERE {column} = %s AND position > %s"
        " ORDER BY position LIMIT %s)"
    ).format(columns=sql.SQL(EVENT_COLUMNS), column=sql.Identifier(column))
    return sql.SQL("SELECT * FROM ({}) AS e ORDER BY 1 LIMIT %s").format(
        sql.SQL(" UNION ALL ").join([one] * count)
    )


def read_after(
    conn: Connection[Any],
    after: int,
    *,
    stream_ids: Collection[str] = (),
    categories: Collection[str] = (),
    limit: int = BATCH,
    upcasters: Upcasters | None = None,
) -> list[RecordedEvent]:
    """Up to `limit` events after `after`, in log order, of the given streams or categories."""
    if bool(stream_ids) == bool(categories):
        raise ValueError("name streams or categories, one of the two")
    column, names = (
        ("stream_id", sorted(stream_ids)) if stream_ids else ("category", sorted(categories))
    )
    params: list[object] = []
    for name in names:
        params += [name, after, limit]
    cursor = conn.cursor(row_factory=event_rows)
    cursor.execute(_after_query(column, len(names)), [*params, limit])
    return (upcasters or Upcasters()).upcast_all(cursor.fetchall())


@dataclass(eq=False)
class Waiter:
    """One client of a tail: the streams it follows (None: every stream) and its wake-up."""

    streams: frozenset[str] | None
    woken: threading.Event = field(default_factory=threading.Event)


class LogTail:
    """The process's reader of the log's head; see the module's docstring."""

    def __init__(
        self,
        connect: Callable[[], Connection[TupleRow]],
        *,
        keep: Callable[[RecordedEvent], bool] = lambda event: True,
        memory: int = MEMORY,
        poll_seconds: float = POLL_SECONDS,
        coalesce_seconds: float = COALESCE_SECONDS,
        upcasters: Upcasters | None = None,
        listen: bool = True,
        on_start: Callable[[], None] | None = None,
    ) -> None:
        self._connect = connect
        # Started with the tail: what calls `wake` (a replica's Redis signal), if anything.
        self._on_start = on_start
        # A hot standby refuses LISTEN (and no NOTIFY reaches it): a tail there polls the
        # log's positions every `poll_seconds` instead (docs/scaling.md, "Reads from replicas").
        self._listen = listen
        self._coalesce_seconds = coalesce_seconds
        self._keep = keep
        self._memory = memory
        self._poll_seconds = poll_seconds
        self._upcasters = upcasters if upcasters is not None else Upcasters()
        self._lock = threading.Lock()
        self._waiters: set[Waiter] = set()
        # The kept events after `_floor`, in log order, and their positions for bisecting:
        # every kept event in (_floor, _head] is here.
        self._events: list[RecordedEvent] = []
        self._positions: list[int] = []
        self._floor = 0
        self._head = 0
        self._started = threading.Event()
        self._ready = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        # Without LISTEN: the head a signal announced, when, and the wake-up it set.
        self._wanted = 0
        self._wanted_at = 0.0
        self._woken = threading.Event()

    @property
    def head(self) -> int:
        """The last position the tail has read (the log's head, give or take a moment)."""
        with self._lock:
            return self._head

    @property
    def stopping(self) -> bool:
        """Whether the tail was told to stop, and its waiters to leave."""
        return self._stopping.is_set()

    def start(self, timeout: float = 10.0) -> bool:
        """Start following the log, once; wait until the head is known; whether it is."""
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="log-tail", daemon=True)
                self._thread.start()
                if self._on_start is not None:
                    self._on_start()
        return self._ready.wait(timeout)

    def stop(self) -> None:
        """Stop following the log and wake every waiter, so that each can say goodbye."""
        self._stopping.set()
        self._woken.set()
        with self._lock:
            waiters = list(self._waiters)
        for waiter in waiters:
            waiter.woken.set()
        if self._thread is not None:
            self._thread.join(timeout=2 * self._poll_seconds)

    def subscribe(self, streams: Collection[str] | None) -> Waiter:
        """A waiter woken by every batch holding an event of `streams` (None: of any stream)."""
        self.start()
        waiter = Waiter(None if streams is None else frozenset(streams))
        with self._lock:
            self._waiters.add(waiter)
        return waiter

    def wake(self, head: int) -> None:
        """The log's head is at `head` (a signal from the sequencer): read it now, not at the
        next poll. Only a tail without LISTEN needs it; a late or lost call costs one poll."""
        with self._lock:
            if head > self._wanted:
                self._wanted = head
                self._wanted_at = time.monotonic()
        self._woken.set()

    def unsubscribe(self, waiter: Waiter) -> None:
        """Forget a waiter."""
        with self._lock:
            self._waiters.discard(waiter)

    def recent(self, streams: frozenset[str] | None, after: int) -> list[RecordedEvent] | None:
        """The kept events of `streams` (None: any) after `after`, or None if `after` is older
        than the tail's memory reaches (read the log instead)."""
        with self._lock:
            if after < self._floor:
                return None
            found = self._events[bisect.bisect_right(self._positions, after) :]
        if streams is not None:
            found = [event for event in found if event.stream_id in streams]
        return found

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                with self._connect() as conn:
                    conn.autocommit = True
                    if self._listen:
                        conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(NOTIFY_CHANNEL)))
                    if not self._ready.is_set():
                        row = conn.execute(_HEAD).fetchone()
                        with self._lock:
                            self._head = self._floor = int(row[0]) if row else 0
                        self._ready.set()
                    while not self._stopping.is_set():
                        self._catch_up(conn)
                        self._await_notification(conn)
            except psycopg.OperationalError:
                _logger.exception("the log tail lost the database; reconnecting")
                self._stopping.wait(RETRY_SECONDS)

    def _catch_up(self, conn: Connection[TupleRow]) -> None:
        while True:
            cursor = conn.cursor(row_factory=event_rows)
            cursor.execute(_AFTER, [self._head, BATCH])
            batch: Sequence[RecordedEvent] = cursor.fetchall()
            if not batch:
                return
            kept = self._upcasters.upcast_all([e for e in batch if self._keep(e)])
            touched = {event.stream_id for event in kept}
            with self._lock:
                self._events += kept
                self._positions += [event.position for event in kept]
                self._head = batch[-1].position
                if len(self._events) > 2 * self._memory:
                    # Trimmed in halves, so that the copying costs O(1) an event.
                    cut = len(self._events) - self._memory
                    self._floor = self._positions[cut - 1]
                    del self._events[:cut], self._positions[:cut]
                woken = [
                    w
                    for w in self._waiters
                    if w.streams is None or not w.streams.isdisjoint(touched)
                ]
            for waiter in woken:
                waiter.woken.set()
            if len(batch) < BATCH:
                return

    def _await_notification(self, conn: Connection[TupleRow]) -> None:
        if not self._listen:
            with self._lock:
                # Woken with a head its standby has not replayed yet (a few ms behind the
                # primary): look again shortly, for at most one poll interval.
                behind = self._wanted > self._head
                if behind and time.monotonic() - self._wanted_at > self._poll_seconds:
                    behind = False
                    self._wanted = self._head
            if behind:
                self._stopping.wait(REPLAY_WAIT_SECONDS)
                return
            if self._woken.wait(self._poll_seconds):
                # As after a NOTIFY: the batches that follow within a moment are read with it,
                # and the standby's replay (a few ms behind) most often has it by then.
                self._stopping.wait(self._coalesce_seconds)
            self._woken.clear()
            return
        # closing(): the generator holds the connection's lock until it is closed.
        with closing(conn.notifies(timeout=self._poll_seconds, stop_after=1)) as notifies:
            for _ in notifies:
                break
        # A moment for the appends committing alongside this one: one read and one wake-up of
        # each client then carry them all, which is what keeps hundreds of clients cheap.
        self._stopping.wait(self._coalesce_seconds)
        # One catch-up answers a burst of appends: drop the notifications already queued.
        with closing(conn.notifies(timeout=0)) as queued:
            for _ in queued:
                pass
