"""Catch-up subscriptions: read the log after a checkpoint, exactly once, and wait for more.

Each batch runs in one transaction that locks the subscription's checkpoint row, reads the
events after it, hands the open connection and the batch to the handler, and moves the
checkpoint. The handler's writes and the checkpoint commit together or not at all, which is
what makes processing exactly-once (the tracking-record pattern of pyeventsourcing).
"""

from __future__ import annotations

import logging
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Sequence
from contextlib import closing
from dataclasses import dataclass
from typing import Any, Final, TypeAlias

import psycopg
from psycopg import Connection, sql
from psycopg.rows import TupleRow

from events.postgres import EVENT_COLUMNS, Pool, event_rows, keep_from_forks
from events.store import NOTIFY_CHANNEL, Clock, RecordedEvent, to_utc, utc_now
from events.upcasting import Upcasters

_logger = logging.getLogger(__name__)

BatchHandler: TypeAlias = Callable[[Connection[TupleRow], Sequence[RecordedEvent]], None]
"""Applies a batch of events using the connection of the transaction that will commit it."""

# A waiting subscriber looks at its stop event this often, so `run` returns promptly even
# with a long poll interval.
STOP_CHECK_SECONDS: Final = 0.1

# ON CONFLICT because a twin subscriber of the same name may be creating it at this moment;
# the loser waits for the winner's transaction and then finds the row.
_ENSURE_CHECKPOINT = """
INSERT INTO checkpoints (subscription, position, updated_at) VALUES (%s, 0, %s)
ON CONFLICT (subscription) DO NOTHING
"""
# FOR UPDATE rather than pg_advisory_xact_lock: the lock is on the very row this transaction
# will update, its key is the subscription's own name (no hashing of names into a shared
# bigint space where two names could collide), and it needs only the privileges the
# application already has. A twin blocked here resumes with the checkpoint its rival
# committed, because READ COMMITTED re-reads a locked row once the lock is granted.
_LOCK_CHECKPOINT = "SELECT position FROM checkpoints WHERE subscription = %s FOR UPDATE"
# The checkpoint lock's wait is bounded: a holder that never lets go (a session whose client
# died unseen, events/postgres.py's _detach_in_child) otherwise hangs every twin forever. Set
# for the transaction's lock statements only, then back to the session's own.
CHECKPOINT_LOCK_WAIT: Final = "5s"
CHECKPOINT_LOCK_ATTEMPTS: Final = 3
"""Waits of CHECKPOINT_LOCK_WAIT a batch before its caller hears of it (as an OperationalError,
which `run` logs and retries after its poll interval)."""
# The target list is evaluated in order: the session's own setting is read before it is set.
_BOUND_LOCK_WAIT = "SELECT current_setting('lock_timeout'), set_config('lock_timeout', %s, true)"
_RESTORE_LOCK_WAIT = "SELECT set_config('lock_timeout', %s, true)"
_HEAD = "SELECT position FROM events ORDER BY position DESC LIMIT 1"
_MOVE_CHECKPOINT = "UPDATE checkpoints SET position = %s, updated_at = %s WHERE subscription = %s"
_READ_CHECKPOINT = "SELECT position FROM checkpoints WHERE subscription = %s"
_PEEK = (
    "SELECT (SELECT position FROM checkpoints WHERE subscription = %s),"
    " (SELECT position FROM events ORDER BY position DESC LIMIT 1)"
)


@dataclass(frozen=True, slots=True)
class BatchOutcome:
    """What one batch did: the events it handed over and the checkpoints before and after."""

    handled: int
    checkpoint_before: int
    checkpoint_after: int

    @property
    def advanced(self) -> bool:
        """Whether the checkpoint moved, that is, whether the log had anything new."""
        return self.checkpoint_after > self.checkpoint_before


class LogFollower(ABC):
    """Catches up with the log, then waits for a NOTIFY (or the poll interval) and again."""

    def __init__(
        self,
        pool: Pool,
        name: str,
        *,
        poll_interval: float = 5.0,
        listen: bool = True,
        listen_conninfo: str | None = None,
        gather: float = 0.0,
    ) -> None:
        if not name:
            raise ValueError("a subscription needs a name")
        if poll_interval <= 0:
            raise ValueError("poll_interval must be positive")
        if gather < 0:
            raise ValueError("gather must not be negative")
        self.name = name
        self._pool = pool
        self._poll_interval = poll_interval
        self._listen = listen
        self._listen_conninfo = listen_conninfo
        self._gather = gather

    @abstractmethod
    def run_until_caught_up(self) -> int:
        """Process batches until the log has nothing after the checkpoint; the events handled."""

    def run(self, stop: threading.Event) -> None:
        """Catch up, then wait for NOTIFY or the poll interval and catch up again, until `stop`.

        A handler's error ends the run (its batch stays unprocessed); a lost connection to
        the server is logged and retried after the poll interval.
        """
        listener: Connection[TupleRow] | None = None
        try:
            while not stop.is_set():
                # LISTEN before catching up, so that an append committed while this catches
                # up leaves a notification behind rather than falling between the two.
                if self._listen and listener is None:
                    listener = self._open_listener()
                started = time.monotonic()
                try:
                    self.run_until_caught_up()
                except psycopg.OperationalError:
                    _logger.exception("subscription %s lost the database; retrying", self.name)
                if listener is None:
                    stop.wait(self._poll_interval)
                elif not self._await_notification(listener, stop):
                    listener.close()
                    listener = None
                else:
                    # Passes start at least `gather` apart: under a stream of appends each
                    # pass (one commit) takes what arrived meanwhile, while the first event
                    # after a quiet spell is handled at once.
                    pause = started + self._gather - time.monotonic()
                    if pause > 0:
                        stop.wait(pause)
        finally:
            if listener is not None:
                listener.close()

    def _listener_conninfo(self) -> tuple[str, dict[str, Any]]:
        if self._listen_conninfo is not None:
            return self._listen_conninfo, {}
        conninfo = self._pool.conninfo
        kwargs = self._pool.kwargs
        return (
            conninfo() if callable(conninfo) else conninfo,
            dict(kwargs() if callable(kwargs) else kwargs or {}),
        )

    def _open_listener(self) -> Connection[TupleRow] | None:
        conninfo, kwargs = self._listener_conninfo()
        try:
            listener = psycopg.connect(conninfo, **kwargs, autocommit=True)
            keep_from_forks(listener)
        except psycopg.OperationalError:
            # Polling alone still delivers every event; only latency suffers.
            _logger.exception("subscription %s cannot LISTEN; polling instead", self.name)
            return None
        try:
            listener.execute(sql.SQL("LISTEN {}").format(sql.Identifier(NOTIFY_CHANNEL)))
        except psycopg.OperationalError:
            _logger.exception("subscription %s cannot LISTEN; polling instead", self.name)
            listener.close()
            return None
        return listener

    def _await_notification(self, listener: Connection[TupleRow], stop: threading.Event) -> bool:
        """Wait for a notification, the poll interval or `stop`; False if the listener broke."""
        deadline = time.monotonic() + self._poll_interval
        try:
            while not stop.is_set():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return True
                timeout = min(remaining, STOP_CHECK_SECONDS)
                # closing(): the generator holds the connection's lock until it is closed.
                with closing(listener.notifies(timeout=timeout, stop_after=1)) as notifies:
                    if next(notifies, None) is not None:
                        break
            else:
                return True
            # One catch-up answers a burst of appends: drop the notifications already queued.
            with closing(listener.notifies(timeout=0)) as queued:
                for _ in queued:
                    pass
        except psycopg.OperationalError:
            _logger.exception("subscription %s lost its LISTEN connection", self.name)
            return False
        return True


class _CheckpointLockTimedOutError(Exception):
    def __init__(self, error: psycopg.errors.LockNotAvailable) -> None:
        super().__init__(str(error))
        self.error = error


class CatchUpSubscription(LogFollower):
    """A named reader of the log that hands each new batch to a handler exactly once."""

    def __init__(
        self,
        pool: Pool,
        name: str,
        handler: BatchHandler,
        *,
        batch_size: int = 500,
        categories: Collection[str] | None = None,
        types: Collection[str] | None = None,
        poll_interval: float = 5.0,
        listen: bool = True,
        listen_conninfo: str | None = None,
        upcasters: Upcasters | None = None,
        clock: Clock = utc_now,
        gather: float = 0.0,
    ) -> None:
        super().__init__(
            pool,
            name,
            poll_interval=poll_interval,
            listen=listen,
            listen_conninfo=listen_conninfo,
            gather=gather,
        )
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        self._handler = handler
        self._batch_size = batch_size
        self._categories = None if categories is None else sorted(categories)
        self._types = None if types is None else sorted(types)
        self._upcasters = upcasters if upcasters is not None else Upcasters()
        self._clock = clock
        self._read_events = self._build_read_query()

    def _build_read_query(self) -> sql.Composed:
        conditions = [sql.SQL("position > %(after)s")]
        if self._categories is not None:
            conditions.append(sql.SQL("category = ANY(%(categories)s::text[])"))
        if self._types is not None:
            conditions.append(sql.SQL("type = ANY(%(types)s::text[])"))
        return sql.SQL("SELECT {} FROM events WHERE {} ORDER BY position LIMIT %(limit)s").format(
            sql.SQL(EVENT_COLUMNS), sql.SQL(" AND ").join(conditions)
        )

    def checkpoint(self) -> int:
        """The position this subscription has processed up to (0 before its first batch)."""
        with self._pool.connection() as conn:
            row = conn.execute(_READ_CHECKPOINT, [self.name]).fetchone()
        return 0 if row is None else int(row[0])

    def process_batch(self) -> BatchOutcome:
        """Handle the next batch after the checkpoint and move the checkpoint, in one transaction.

        If the handler raises, the transaction rolls back, the checkpoint stays where it was and
        the error propagates; the next call retries the same batch. A wait for the checkpoint's
        lock past CHECKPOINT_LOCK_WAIT is given up and tried again, CHECKPOINT_LOCK_ATTEMPTS
        times, then raised (LockNotAvailable).
        """
        for attempt in range(1, CHECKPOINT_LOCK_ATTEMPTS + 1):
            try:
                return self._process_batch()
            except _CheckpointLockTimedOutError as timed_out:
                _logger.warning(
                    "subscription %s waited %s for its checkpoint's lock (attempt %d of %d)",
                    self.name,
                    CHECKPOINT_LOCK_WAIT,
                    attempt,
                    CHECKPOINT_LOCK_ATTEMPTS,
                )
                if attempt == CHECKPOINT_LOCK_ATTEMPTS:
                    raise timed_out.error from None
        raise AssertionError("unreachable")  # pragma: no cover

    def _lock_checkpoint(self, conn: Connection[TupleRow]) -> tuple[Any, ...] | None:
        bound = conn.execute(_BOUND_LOCK_WAIT, [CHECKPOINT_LOCK_WAIT]).fetchone()
        assert bound is not None  # a SELECT without FROM: always a row
        try:
            locked = conn.execute(_LOCK_CHECKPOINT, [self.name]).fetchone()
        except psycopg.errors.LockNotAvailable as error:
            raise _CheckpointLockTimedOutError(error) from error
        conn.execute(_RESTORE_LOCK_WAIT, [bound[0]])
        return locked

    def _process_batch(self) -> BatchOutcome:
        with self._pool.connection() as conn, conn.transaction():
            # A plain read first: finding nothing new then takes no row lock, hence no
            # transaction id and no WAL flush at commit (the sweeper catches the index of open
            # rounds up this way five times a second). A checkpoint only moves forward, so one
            # at the head, however stale the read, has nothing to do.
            peeked = conn.execute(_PEEK, [self.name]).fetchone()
            assert peeked is not None  # scalar subqueries: always a row
            seen, newest = peeked
            if seen is not None and (newest or 0) <= seen:
                return BatchOutcome(0, int(seen), int(seen))
            locked = self._lock_checkpoint(conn)
            if locked is None:
                conn.execute(_ENSURE_CHECKPOINT, [self.name, to_utc(self._clock())])
                locked = self._lock_checkpoint(conn)
                assert locked is not None  # inserted above, or by a twin that has committed
            before = int(locked[0])
            # Read the head BEFORE the batch: the batch's later snapshot then holds every
            # event up to this head. Appends commit in position order (the append lock), so no
            # event at or below a visible head can commit later; a filtered subscription may
            # therefore move its checkpoint to the head when the batch is short, and skip
            # past the events it does not want without rescanning them next time.
            head_row = conn.execute(_HEAD).fetchone()
            head = 0 if head_row is None else int(head_row[0])
            if head <= before:
                return BatchOutcome(0, before, before)
            events = self._read(conn, before)
            if len(events) == self._batch_size:
                after = events[-1].position
            else:
                after = max(head, events[-1].position) if events else head
            if events:
                self._handler(conn, events)
            conn.execute(_MOVE_CHECKPOINT, [after, to_utc(self._clock()), self.name])
        return BatchOutcome(len(events), before, after)

    def _read(self, conn: Connection[TupleRow], after: int) -> list[RecordedEvent]:
        # The store's own row factory: orjson, and one metadata object per append.
        cursor = conn.cursor(row_factory=event_rows)
        cursor.execute(
            self._read_events,
            {
                "after": after,
                "categories": self._categories,
                "types": self._types,
                "limit": self._batch_size,
            },
        )
        return self._upcasters.upcast_all(cursor.fetchall())

    def run_until_caught_up(self) -> int:
        """Process batches until the log has nothing after the checkpoint; the events handled."""
        handled = 0
        while True:
            outcome = self.process_batch()
            handled += outcome.handled
            if not outcome.advanced:
                return handled
