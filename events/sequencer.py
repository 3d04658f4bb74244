"""The sequencer: gives committed appends their positions and hashes, in batches.

Appends commit in parallel into `unsequenced_events` (migration 0030). One sequencer at a
time moves them into `events`: one call of `sequence_appends()` is one transaction and one
batch, which reads the head, gives the batch's events the next positions in append order,
chains their hashes and inserts them, under the sequencer's advisory lock. This module is the
piece that drives it, kept apart so that the log's later structure (a Merkle tree built per
batch) has one place to grow.

`sequence_batch` runs one batch on a connection. `SequencerRole` is the role a long-running
process stands for: whichever holds the sequencer's PostgreSQL advisory lock is the sequencer,
and every other candidate polls for the lock, so that the role passes to another process
within STANDBY_POLL_SECONDS of the holder's connection ending (a `kill -9` ends it at once).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import psycopg
from psycopg import Connection
from psycopg.rows import TupleRow
from psycopg_pool import ConnectionPool

log = logging.getLogger(__name__)

MAX_APPENDS: Final = 512
"""Appends in one batch at most: a bound on one transaction's work and on a batch's delay."""
POLL_SECONDS: Final = 0.01
"""The longest the active sequencer waits between batches, once idle.

Appends do not NOTIFY (a notifying transaction holds a database-wide lock through its commit's
flush: the serial point this design removes), so the sequencer polls; an empty batch is one
index probe, so 100 a second cost little (BUSY_POLL_SECONDS says why not faster)."""
BUSY_POLL_SECONDS: Final = POLL_SECONDS
"""The wait after a batch that found appends, doubled after each empty one up to POLL_SECONDS.

The same as POLL_SECONDS: a steady cadence. It was 1 ms, so that under load the next batch
took the appends committed meanwhile; but at the load test's rates (about 110 appends a second
at 50 tables) that made four or five polls an append and nearly a batch (a transaction and a
flush) for each one. In `bench/load.py --levels 50`, 1 ms and 10 ms taking turns on a quiet
machine (docs/benchmarks.md): the process holding the role 20% of a core against 14-16%, this
database's backends 57-58% against 54-55%, 108-109 bets a second against 116-121, and the
oldest unsequenced append's age p99 14-29 ms against 25-37 ms, inside the 50 ms goal."""
STANDBY_POLL_SECONDS: Final = 0.5
"""How often a standby tries to take the role: well within the 2 s a takeover may take."""
RETRY_SECONDS: Final = 0.5
"""How long a candidate waits after losing its connection before it connects again."""
STOP_SECONDS: Final = 1.0
"""How long `stop` waits for the role's thread at each of its two steps: its own leaving, then
the cancel of a statement in flight. A process told to stop (service/runtime/stopping.py)
must leave within seconds, and this was a join of up to 5 s on top of the work in hand."""

_TAKE_ROLE = "SELECT pg_try_advisory_lock(hashtext('shoebox_sequencer'))"
_SEQUENCE = "SELECT sequenced, last_position, oldest_wait FROM sequence_appends(%s, %s)"


@dataclass(frozen=True, slots=True)
class Batch:
    """One batch the sequencer committed: its events, the new head, the oldest one's wait."""

    events: int
    last_position: int
    # Seconds from the oldest append's commit to its batch (the server's clock); None if empty.
    oldest_wait: float | None


def sequence_batch(
    conn: Connection[TupleRow],
    max_appends: int = MAX_APPENDS,
    *,
    wait: bool = True,
    before_commit: Callable[[], None] | None = None,
) -> Batch | None:
    """Sequence up to `max_appends` committed appends; None when another sequencer is at it.

    With `wait`, waits for a batch another session runs to finish; without, gives up at once.
    `before_commit` runs inside the batch's transaction, after its inserts: a test's failpoint.
    """
    if before_commit is None and conn.autocommit:
        row = conn.execute(_SEQUENCE, [max_appends, wait], prepare=True).fetchone()
    else:
        with conn.transaction():
            row = conn.execute(_SEQUENCE, [max_appends, wait], prepare=True).fetchone()
            if before_commit is not None:
                before_commit()
    assert row is not None
    sequenced, last_position, oldest_wait = row
    if sequenced < 0:
        return None
    return Batch(int(sequenced), int(last_position), oldest_wait)


class SequencerRole:
    """Stands for the sequencer's role in this process, and runs it while it holds it.

    A thread (a greenlet under gevent) on a connection of its own: it tries the advisory lock
    every STANDBY_POLL_SECONDS; once it has it, it runs a batch every BUSY_POLL_SECONDS (at
    once after a full one), for as long as its connection lives.
    """

    def __init__(
        self,
        connect: Callable[[], Connection[TupleRow]],
        *,
        on_batch: Callable[[Batch], None] | None = None,
        on_role: Callable[[bool], None] | None = None,
        before_commit: Callable[[], None] | None = None,
        max_appends: int = MAX_APPENDS,
        poll_seconds: float = POLL_SECONDS,
        busy_poll_seconds: float = BUSY_POLL_SECONDS,
        standby_poll_seconds: float = STANDBY_POLL_SECONDS,
    ) -> None:
        self._connect = connect
        self._on_batch = on_batch
        self._on_role = on_role
        self._before_commit = before_commit
        self._max_appends = max_appends
        self._poll = poll_seconds
        self._busy_poll = min(busy_poll_seconds, poll_seconds)
        self._standby_poll = standby_poll_seconds
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        # The role's connection while it has one: `stop` cancels its statement in flight.
        self._conn: Connection[TupleRow] | None = None
        self.active = False
        """True while this process is the sequencer."""

    def start(self) -> None:
        """Start standing for the role, on a daemon thread."""
        self._thread = threading.Thread(target=self._run, name="sequencer", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = STOP_SECONDS) -> None:
        """Give the role up: the lock goes with the connection, to a standby at once.

        Bounded: a thread still in a statement after `timeout` (a batch waiting on a lock, a
        server that stopped answering) has the statement cancelled, and is left behind, a
        daemon, if even that does not end it within `timeout` more: the process's exit closes
        its connection, which gives up the lock, and a batch not committed leaves no trace.
        """
        self._stopping.set()
        thread = self._thread
        if thread is None:
            return
        thread.join(timeout)
        if not thread.is_alive():
            return
        conn = self._conn
        if conn is not None:
            try:
                conn.cancel_safe(timeout=timeout)
            except (psycopg.Error, OSError) as error:
                log.warning("sequencer: could not cancel its statement to stop: %s", error)
        thread.join(timeout)
        if thread.is_alive():
            log.warning("sequencer: still in a statement after the stop; leaving it behind")

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                with self._connect() as conn:
                    conn.autocommit = True
                    self._conn = conn
                    try:
                        self._serve(conn)
                    finally:
                        self._conn = None
            except psycopg.Error as error:
                # Once stopping, most likely the stop's own cancel: nothing to report.
                if not self._stopping.is_set():
                    log.warning("sequencer: lost its connection (%s); trying again", error)
            except Exception:
                log.exception("sequencer: failed; trying again")
            self._set_active(False)
            self._stopping.wait(RETRY_SECONDS)

    def _serve(self, conn: Connection[TupleRow]) -> None:
        while not self._stopping.is_set():
            row = conn.execute(_TAKE_ROLE).fetchone()
            if row is not None and row[0]:
                break
            self._stopping.wait(self._standby_poll)
        else:
            return
        self._set_active(True)
        log.info("sequencer: this process now gives out the log's positions")
        pause = self._poll
        while not self._stopping.is_set():
            batch = sequence_batch(conn, self._max_appends, before_commit=self._before_commit)
            assert batch is not None  # this session holds the lock: its batches never wait
            if batch.events:
                if self._on_batch is not None:
                    self._on_batch(batch)
                # A full batch left appends behind: the next at once. Otherwise more are
                # likely on their way (BUSY_POLL_SECONDS).
                if batch.events >= self._max_appends:
                    continue
                pause = self._busy_poll
            else:
                pause = min(pause * 2, self._poll)
            self._stopping.wait(pause)

    def _set_active(self, active: bool) -> None:
        if active != self.active:
            self.active = active
            if self._on_role is not None:
                self._on_role(active)


def wait_until_sequenced(conn: Connection[TupleRow], append_ids: list[int], timeout: float) -> bool:
    """Wait (polling) until none of `append_ids` is left unsequenced; False after `timeout`."""
    deadline = time.monotonic() + timeout
    pause = 0.001
    while True:
        row = conn.execute(
            "SELECT NOT EXISTS (SELECT 1 FROM unsequenced_events WHERE append_id = ANY(%s))",
            [append_ids],
        ).fetchone()
        if row is not None and row[0]:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(pause)
        pause = min(pause * 2, 0.02)


def place_queued(conn: Connection[TupleRow]) -> int:
    """Sequence every append the queue holds now, batch after batch; the events placed.

    For a process that must see the log whole before it writes, with no sequencer running:
    `shoebox restore`, whose recovery keeps the appends committed before its target that the
    lost timeline had not placed yet.
    """
    placed = 0
    while True:
        batch = sequence_batch(conn)
        assert batch is not None  # it waits for another sequencer's batch
        if batch.events == 0:
            return placed
        placed += batch.events


# Two probes of the queue's primary key, from each end: never a scan of the queue, whose
# dead rows (deleted since the last vacuum) can outnumber its live ones many times over
# under load. The oldest append is the lowest append_id above the sequencer's floor (every
# append at or below it has left the queue for good: migration 0060), as append_batch()'s
# bound reads it, so the dead rows below the floor are not walked either.
_BACKLOG = (
    "SELECT coalesce((SELECT max(append_id) FROM unsequenced_events) - o.append_id + 1, 0),"
    " coalesce(extract(epoch FROM clock_timestamp() - o.queued_at), 0)"
    " FROM (SELECT NULL) AS nothing LEFT JOIN LATERAL (SELECT u.append_id, u.queued_at"
    " FROM unsequenced_events AS u"
    " WHERE u.append_id > (SELECT f.floor_id FROM sequencer_floor AS f WHERE f.only_row)"
    " ORDER BY u.append_id, u.n LIMIT 1) AS o ON true"
)


def unsequenced_backlog(pool: ConnectionPool[Connection[TupleRow]]) -> tuple[int, float]:
    """Appends committed and not yet sequenced (at most), and the oldest one's wait in seconds.

    An upper bound, read in two index probes: the span of the waiting appends' ids, which
    counts too an append already placed between the oldest waiting and the newest (one that
    committed late holds the span open) and one that was refused after drawing its id.
    """
    with pool.connection() as conn:
        row = conn.execute(_BACKLOG).fetchone()
        conn.rollback()
    assert row is not None
    return int(row[0]), float(row[1])
