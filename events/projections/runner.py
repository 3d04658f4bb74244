"""Following the log into every read model, rebuilding a model beside the live one, and lag.

The projector runs one catch-up subscription per projection, named after it: each batch of a
projection is applied and its checkpoint moved in one transaction that holds the checkpoint
row's lock, so twin projectors never apply a batch twice (events/subscription.py).

A rebuild fills a shadow copy of a projection's tables from position 0 while the live tables
keep serving and the live projector keeps following. It then takes the live checkpoint's lock
(which stops that projection's live batches), applies the events that arrived meanwhile to the
shadow, swaps the shadow tables in and moves the checkpoint to match, all in one transaction:
a reader sees the old model or the rebuilt one, never a half-built one.
"""

from __future__ import annotations

import logging
import multiprocessing
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from typing import Final

import psycopg
from psycopg import Connection, sql
from psycopg.rows import TupleRow

from events.postgres import (
    EVENT_COLUMNS,
    READ_AHEAD,
    Pool,
    PostgresEventStore,
    event_rows,
    open_pool,
)
from events.projections.base import LIVE, SHADOW, Projection
from events.store import Clock, RecordedEvent, to_utc, utc_now
from events.subscription import BatchHandler, CatchUpSubscription, LogFollower
from events.upcasting import Upcasters

_logger = logging.getLogger(__name__)

Catalogue = Sequence[type[Projection]]
"""The read models a caller runs: the concrete ones live with the service, not in events/."""

LIVE_BATCH: Final = 1000
REBUILD_BATCH: Final = 20_000
GATHER_SECONDS: Final = 0.05
"""The least time between the starts of two passes of the projector under a stream of appends."""
RETRY_SECONDS: Final = 5.0
"""How long a projection whose batch raised sits out before it is tried again."""

_REBUILD_LOCK: Final = "shoebox projection rebuild: "
_ENSURE_CHECKPOINT = """
INSERT INTO checkpoints (subscription, position, updated_at) VALUES (%s, 0, %s)
ON CONFLICT (subscription) DO NOTHING
"""
_LOCK_CHECKPOINT = "SELECT position FROM checkpoints WHERE subscription = %s FOR UPDATE"
_MOVE_CHECKPOINT = "UPDATE checkpoints SET position = %s, updated_at = %s WHERE subscription = %s"
_HEAD = "SELECT coalesce(max(position), 0) FROM events"
_TAIL = (
    "SELECT " + EVENT_COLUMNS + " FROM events"  # noqa: S608 - constants only
    " WHERE position > %s AND position <= %s AND category = ANY(%s) ORDER BY position"
)
_STATUS = """
SELECT c.position, c.updated_at, e.recorded_at
FROM checkpoints AS c LEFT JOIN events AS e ON e.position = c.position + 1
WHERE c.subscription = %s
"""
_HEAD_EVENT = "SELECT position, recorded_at FROM events ORDER BY position DESC LIMIT 1"
# A plain read first: a pass that finds nothing new locks no row, so it takes no transaction
# id and commits without writing WAL.
_BEHIND = """
SELECT (SELECT position FROM events ORDER BY position DESC LIMIT 1),
       (SELECT min(position) FROM checkpoints WHERE subscription = ANY(%s))
"""
# SKIP LOCKED: a checkpoint locked elsewhere (a twin projector's pass, a rebuild's swap) is
# that holder's to move; this pass leaves its projection out rather than waiting, so it never
# waits on, or deadlocks with, a rebuild locking the rows one by one.
_LOCK_CHECKPOINTS = """
SELECT subscription, position FROM checkpoints WHERE subscription = ANY(%s)
ORDER BY subscription FOR UPDATE SKIP LOCKED
"""
_READ_AFTER = (
    "SELECT " + EVENT_COLUMNS + " FROM events"  # noqa: S608 - constants only
    " WHERE position > %s AND category = ANY(%s) ORDER BY position LIMIT %s"
)
# The projector's commits need not wait for their WAL to reach the disk: see
# docs/architecture.md, "The projector's commits".
_ASYNC_COMMIT = "SET LOCAL synchronous_commit = off"


def subscriptions(
    pool: Pool,
    projections: Catalogue,
    *,
    poll_interval: float = 5.0,
    listen: bool = True,
    batch_size: int = LIVE_BATCH,
    clock: Clock = utc_now,
    upcasters: Upcasters | None = None,
    after_apply: Callable[[], None] | None = None,
) -> list[CatchUpSubscription]:
    """One catch-up subscription per named projection, each checkpointed under its name.

    Each projection reads events through `upcasters` (none when not given): the caller, which
    knows the events, passes the registry its stores use. `after_apply`, if given, runs inside
    each batch's transaction once the projection has applied it and before the checkpoint moves
    (a test failpoint: a process killed there dies mid-batch).
    """
    found: list[CatchUpSubscription] = []
    for cls in projections:
        projection = cls(LIVE)
        handler = projection.apply if after_apply is None else _then(projection.apply, after_apply)
        found.append(
            CatchUpSubscription(
                pool,
                projection.name,
                handler,
                batch_size=batch_size,
                categories=projection.categories,
                poll_interval=poll_interval,
                listen=listen,
                clock=clock,
                upcasters=upcasters,
            )
        )
    return found


def _then(handler: BatchHandler, after: Callable[[], None]) -> BatchHandler:
    def apply_then(conn: Connection[TupleRow], events: Sequence[RecordedEvent]) -> None:
        handler(conn, events)
        after()

    return apply_then


def catch_up(pool: Pool, projections: Catalogue, *, upcasters: Upcasters | None = None) -> int:
    """Bring the projections up to the log's head now; the events handed to them."""
    return sum(
        s.run_until_caught_up()
        for s in subscriptions(pool, projections, listen=False, upcasters=upcasters)
    )


class ProjectionFollower(LogFollower):
    """Follows the log into several projections, all of them in one transaction a batch.

    A pass reads the events of the projections' categories once, after the lowest of their
    checkpoints; each projection folds those after its own checkpoint, and every checkpoint
    moves, all in one transaction over the checkpoint rows it has locked. One commit a pass
    instead of one a projection (and of a second per projection to find nothing new): at the
    load benchmark's ceiling the projector's commits were most of PostgreSQL's work.

    A projection whose fold raises does not hold the others back: the pass is rolled back and
    tried again with each projection in a transaction of its own; the one that failed sits
    out for `retry_after` seconds.
    """

    def __init__(
        self,
        pool: Pool,
        projections: Sequence[Projection],
        *,
        name: str = "projector",
        batch_size: int = LIVE_BATCH,
        poll_interval: float = 5.0,
        listen: bool = True,
        gather: float = GATHER_SECONDS,
        retry_after: float = RETRY_SECONDS,
        asynchronous_commit: bool = True,
        clock: Clock = utc_now,
        upcasters: Upcasters | None = None,
        after_apply: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(pool, name, poll_interval=poll_interval, listen=listen, gather=gather)
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        if not projections:
            raise ValueError("a follower needs a projection")
        self.projections = tuple(projections)
        self._batch_size = batch_size
        self._retry_after = retry_after
        self._asynchronous_commit = asynchronous_commit
        self._clock = clock
        self._upcasters = upcasters if upcasters is not None else Upcasters()
        self._resting: dict[str, float] = {}
        self._ensured = False
        self._after_apply = after_apply

    def run_until_caught_up(self) -> int:
        """Process batches until the log has nothing new for any projection; events handled."""
        handled = 0
        while True:
            count, full = self.process_batch()
            handled += count
            if not full:
                return handled

    def process_batch(self) -> tuple[int, bool]:
        """One pass: the events folded (counted per projection) and whether the read was full.

        A read shorter than the batch size reached the head read under the locks, so the
        projections it covered are caught up to it; a later append NOTIFYs again.
        """
        now = time.monotonic()
        working = [p for p in self.projections if self._resting.get(p.name, 0.0) <= now]
        if not working:
            return 0, False
        if not self._ensured:
            # Without its row a projection would never be locked, hence never followed.
            with self._pool.connection() as conn, conn.transaction():
                at = to_utc(self._clock())
                for projection in self.projections:
                    conn.execute(_ENSURE_CHECKPOINT, [projection.name, at])
            self._ensured = True
        try:
            return self._pass(working)
        except psycopg.OperationalError:
            raise
        except Exception:
            if len(working) == 1:
                raise
        # Some projection's fold raised: each alone, so that the others still move.
        handled, full = 0, False
        for projection in working:
            try:
                count, more = self._pass([projection])
            except psycopg.OperationalError:
                raise
            except Exception:
                _logger.exception(
                    "projection %s failed; retrying in %.0f s", projection.name, self._retry_after
                )
                self._resting[projection.name] = time.monotonic() + self._retry_after
                continue
            handled += count
            full = full or more
        return handled, full

    def _pass(self, projections: Sequence[Projection]) -> tuple[int, bool]:
        names = [p.name for p in projections]
        with self._pool.connection() as conn, conn.transaction():
            head, low = _behind(conn, names)
            if head <= low:
                return 0, False
            if self._asynchronous_commit:
                conn.execute(_ASYNC_COMMIT)
            locked = {str(n): int(p) for n, p in conn.execute(_LOCK_CHECKPOINTS, [names])}
            if not locked:
                return 0, False
            # The head again, now under the locks and before the read (as in
            # events/subscription.py): the read's later snapshot holds every event up to it.
            head, _ = _behind(conn, names)
            low = min(locked.values())
            if head <= low:
                return 0, False
            categories = sorted({c for p in projections if p.name in locked for c in p.categories})
            cursor = conn.cursor(row_factory=event_rows)
            cursor.execute(_READ_AFTER, [low, categories, self._batch_size])
            events = self._upcasters.upcast_all(cursor.fetchall())
            full = len(events) == self._batch_size
            upto = events[-1].position if full else max(head, events[-1].position if events else 0)
            at = to_utc(self._clock())
            handled = 0
            for projection in projections:
                checkpoint = locked.get(projection.name)
                if checkpoint is None or upto <= checkpoint:
                    continue
                wanted = [
                    e
                    for e in events
                    if e.position > checkpoint and e.category in projection.categories
                ]
                if wanted:
                    projection.apply(conn, wanted)
                    handled += len(wanted)
                    if self._after_apply is not None:
                        self._after_apply()
                conn.execute(_MOVE_CHECKPOINT, [upto, at, projection.name])
        return handled, full


def _behind(conn: Connection[TupleRow], names: Sequence[str]) -> tuple[int, int]:
    """The log's head and the lowest of the named checkpoints."""
    row = conn.execute(_BEHIND, [list(names)]).fetchone()
    assert row is not None  # an aggregate's row
    head, low = row
    return (0 if head is None else int(head)), (0 if low is None else int(low))


def follower(
    pool: Pool,
    projections: Catalogue,
    *,
    poll_interval: float = 5.0,
    listen: bool = True,
    batch_size: int = LIVE_BATCH,
    gather: float = GATHER_SECONDS,
    asynchronous_commit: bool = True,
    clock: Clock = utc_now,
    upcasters: Upcasters | None = None,
    after_apply: Callable[[], None] | None = None,
) -> ProjectionFollower:
    """One follower of the log into every named projection, a transaction a batch.

    `after_apply`, if given, runs inside each pass's transaction once a projection has folded
    its events and before its checkpoint moves (a test failpoint: a process killed there dies
    mid-batch).
    """
    return ProjectionFollower(
        pool,
        [cls(LIVE) for cls in projections],
        batch_size=batch_size,
        poll_interval=poll_interval,
        listen=listen,
        gather=gather,
        asynchronous_commit=asynchronous_commit,
        clock=clock,
        upcasters=upcasters,
        after_apply=after_apply,
    )


class Projector:
    """Runs every projection's subscription on a thread of its own until stopped."""

    def __init__(self, subscriptions: Sequence[LogFollower]) -> None:
        self._subscriptions = subscriptions
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        """Start following the log."""
        for subscription in self._subscriptions:
            thread = threading.Thread(
                target=self._follow,
                args=(subscription,),
                name=f"projector-{subscription.name}",
                daemon=True,
            )
            thread.start()
            self._threads.append(thread)

    def _follow(self, subscription: LogFollower) -> None:
        # A handler error ends the subscription's run with its batch unapplied; it is retried
        # after a pause rather than given up, so one bad moment does not stop a read model.
        while not self._stop.is_set():
            try:
                subscription.run(self._stop)
            except Exception:
                _logger.exception("projection %s failed; retrying", subscription.name)
                self._stop.wait(5.0)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop following and wait for the threads to finish their batch."""
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout)

    def alive(self) -> bool:
        """Whether every projection's thread is still running."""
        return bool(self._threads) and all(t.is_alive() for t in self._threads)


@dataclass(frozen=True, slots=True)
class RebuildResult:
    """What a rebuild did: the projections swapped in, the events read, and the checkpoint."""

    names: tuple[str, ...]
    events: int
    position: int


def rebuild(
    pool: Pool,
    projections: Catalogue,
    *,
    batch_size: int = REBUILD_BATCH,
    clock: Clock = utc_now,
    upcasters: Upcasters | None = None,
) -> RebuildResult:
    """Rebuild the projections from position 0 beside the live ones; swap them in.

    `upcasters` must pickle (its steps top-level functions): it reaches the processes that
    fill the shadows by reference.
    """
    registry = upcasters if upcasters is not None else Upcasters()
    classes = {cls.name: cls for cls in projections}
    chosen = tuple(sorted(classes))
    shadows = [classes[name](SHADOW) for name in chosen]
    with pool.connection() as lock:
        # Two rebuilds of one projection would drop each other's shadow tables: the second
        # waits for the first, then rebuilds again (harmlessly: the result is the same rows).
        for name in chosen:
            lock.execute("SELECT pg_advisory_lock(hashtext(%s))", [_REBUILD_LOCK + name])
        lock.commit()
        try:
            return _rebuild(pool, chosen, shadows, batch_size, clock, registry)
        finally:
            for name in chosen:
                lock.execute("SELECT pg_advisory_unlock(hashtext(%s))", [_REBUILD_LOCK + name])
            lock.commit()


def _rebuild(
    pool: Pool,
    chosen: tuple[str, ...],
    shadows: Sequence[Projection],
    batch_size: int,
    clock: Clock,
    upcasters: Upcasters,
) -> RebuildResult:
    categories = sorted({c for p in shadows for c in p.categories})
    with pool.connection() as conn:
        for projection in shadows:
            conn.execute("SELECT projection_prepare_shadow(%s)", [projection.name])
        conn.commit()
    built = PostgresEventStore(pool, clock).head()
    conninfo = pool.conninfo
    target = conninfo() if callable(conninfo) else conninfo
    # The models that read the same categories fill their shadows together, from one read of
    # those events; each such group in a process of its own (spawned, as a process with open
    # connections and threads must not fork), since folding is Python work that one
    # interpreter's lock would otherwise serialise. One group needs no process.
    groups: dict[tuple[str, ...], list[type[Projection]]] = {}
    for projection in shadows:
        groups.setdefault(tuple(sorted(projection.categories)), []).append(type(projection))
    if len(groups) == 1:
        (classes_of_group,) = groups.values()
        handled = fill_shadows(target, tuple(classes_of_group), batch_size, built, upcasters)
    else:
        spawn = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(len(groups), mp_context=spawn) as processes:
            fills = [
                processes.submit(fill_shadows, target, tuple(group), batch_size, built, upcasters)
                for group in groups.values()
            ]
            handled = sum(fill.result() for fill in fills)
    with pool.connection() as conn, conn.transaction():
        for projection in shadows:
            _lock_checkpoint(conn, projection.name, clock)
        head_row = conn.execute(_HEAD).fetchone()
        head = 0 if head_row is None else int(head_row[0])
        cursor = conn.cursor(row_factory=event_rows)
        tail = cursor.execute(_TAIL, [built, head, categories]).fetchall()
        tail = upcasters.upcast_all(tail)
        if tail:
            _apply_all(conn, shadows, tail)
        handled += len(tail)
        for projection in shadows:
            conn.execute("SELECT projection_swap_shadow(%s)", [projection.name])
            conn.execute(_MOVE_CHECKPOINT, [head, to_utc(clock()), projection.name])
    _logger.info("rebuilt %s from %d events up to %d", ", ".join(chosen), handled, head)
    return RebuildResult(chosen, handled, head)


def fill_shadows(
    conninfo: str,
    projections: tuple[type[Projection], ...],
    batch_size: int,
    built: int,
    upcasters: Upcasters | None = None,
) -> int:
    """Fill the named models' shadow tables from the log up to `built`; the events read.

    One pass over the events of the models' categories feeds every shadow. Each shadow is
    filled by a thread of its own on a connection of its own, so one model's statements run on
    the server while another folds in Python; each batch commits on its own, since a shadow is
    invisible to readers until the swap whatever state it is in.
    """
    # Classes reach a spawned process by reference: their module is imported there.
    shadows = [cls(SHADOW) for cls in projections]
    categories = sorted({c for p in shadows for c in p.categories})
    handled = 0
    # Two read-ahead connections, and one a model.
    pool = open_pool(conninfo, min_size=1, max_size=len(shadows) + READ_AHEAD + 1)
    try:
        store = PostgresEventStore(pool, upcasters=upcasters)
        with ThreadPoolExecutor(len(shadows), thread_name_prefix="shoebox-rebuild") as threads:
            previous: list[Future[None]] = []
            for events in store.iter_all(0, batch_size, categories, to_position=built):
                # At most two batches in flight per model: the one applying and the next.
                for done in previous:
                    done.result()
                split = _by_category(events)
                previous = [
                    threads.submit(_apply_alone, pool, projection, split) for projection in shadows
                ]
                handled += len(events)
            for done in previous:
                done.result()
    finally:
        pool.close()
    return handled


def _by_category(events: Sequence[RecordedEvent]) -> dict[str, list[RecordedEvent]]:
    split: dict[str, list[RecordedEvent]] = {}
    for event in events:
        found = split.get(event.category)
        if found is None:
            split[event.category] = [event]
        else:
            found.append(event)
    return split


def _apply_alone(pool: Pool, projection: Projection, split: dict[str, list[RecordedEvent]]) -> None:
    categories = projection.categories
    if len(categories) == 1:
        wanted = split.get(categories[0], [])
    else:
        wanted = sorted((e for c in categories for e in split.get(c, [])), key=lambda e: e.position)
    if wanted:
        with pool.connection() as conn, conn.transaction():
            projection.apply(conn, wanted)


def _apply_all(
    conn: Connection[TupleRow], projections: Sequence[Projection], events: Sequence[RecordedEvent]
) -> None:
    for projection in projections:
        wanted = [e for e in events if e.category in projection.categories]
        if wanted:
            projection.apply(conn, wanted)


def _lock_checkpoint(conn: Connection[TupleRow], name: str, clock: Clock) -> int:
    row = conn.execute(_LOCK_CHECKPOINT, [name]).fetchone()
    if row is None:
        conn.execute(_ENSURE_CHECKPOINT, [name, to_utc(clock())])
        row = conn.execute(_LOCK_CHECKPOINT, [name]).fetchone()
        assert row is not None  # inserted above, or by a twin that has committed
    return int(row[0])


@dataclass(frozen=True, slots=True)
class ProjectionStatus:
    """Where a projection has read to, against the head of the log."""

    name: str
    checkpoint: int
    updated_at: datetime | None
    head: int
    lag_events: int
    lag_seconds: float


def status(pool: Pool, now: datetime, names: Iterable[str]) -> list[ProjectionStatus]:
    """Each projection's checkpoint, the log's head, and the lag in events and seconds.

    The lag in seconds is how long the oldest event it has not applied has been in the log
    (0 when caught up): a projection that is idle but current is not lagging.
    """
    found: list[ProjectionStatus] = []
    with pool.connection() as conn:
        head_row = conn.execute(_HEAD_EVENT).fetchone()
        head = 0 if head_row is None else int(head_row[0])
        for name in names:
            row = conn.execute(_STATUS, [name]).fetchone()
            checkpoint, updated_at, waiting_since = (0, None, None) if row is None else row
            if row is None and head > 0:
                first = conn.execute("SELECT recorded_at FROM events WHERE position = 1").fetchone()
                waiting_since = None if first is None else first[0]
            lag = max(0, head - int(checkpoint))
            seconds = (
                max(0.0, (now - waiting_since).total_seconds())
                if lag and waiting_since is not None
                else 0.0
            )
            found.append(ProjectionStatus(name, int(checkpoint), updated_at, head, lag, seconds))
    return found


def table_dump(conn: Connection[TupleRow], table: str) -> list[tuple[object, ...]]:
    """Every row of a projection table, ordered by every column: for comparing two builds."""
    columns = conn.execute(
        "SELECT count(*) FROM information_schema.columns WHERE table_name = %s", [table]
    ).fetchone()
    assert columns is not None
    order = sql.SQL(", ").join(sql.Literal(i) for i in range(1, int(columns[0]) + 1))
    query = sql.SQL("SELECT * FROM {} ORDER BY {}").format(sql.Identifier(table), order)
    return [tuple(row) for row in conn.execute(query)]
