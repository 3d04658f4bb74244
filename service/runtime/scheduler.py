"""The betting window's punctual closing: each deadline in a Redis sorted set, to the microsecond.

The API adds a round's deadline to a sorted set (score: the deadline's epoch seconds, never
rounded) and publishes a wake-up; `shoebox worker` runs a `WindowTimer` that sleeps until the
earliest deadline in the set, woken early when an earlier one is added, takes every due entry
atomically (so several workers close each window once) and closes it at once. rq's own
scheduler keeps whole seconds and polls each second, which let a one-second window close up to
two seconds late; the timer closes it within milliseconds of its deadline.

This is a promptness device only. `GameService` also closes a lapsed window lazily on the next
command to its table, and the projector's sweeper closes every lapsed window it finds in the
open-rounds index within a fraction of a second, needing only PostgreSQL; so when Redis or the
worker is down nothing is lost and windows still close. Scheduling therefore never fails a
request: an unreachable Redis is logged, and for a short while not asked again.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Final, Self

from redis import Redis
from redis.backoff import NoBackoff
from redis.exceptions import RedisError
from redis.retry import Retry as RedisRetry

from events import deadlines

log = logging.getLogger(__name__)

WINDOW_QUEUE: Final = "shoebox-windows"
"""The queue that `shoebox worker` serves and the API schedules on."""

REBUILD_QUEUE: Final = "shoebox-rebuilds"
"""The queue of projection rebuilds, served by `shoebox worker --rebuilds`.

Its own queue and its own worker process, because a worker runs one job at a time: a rebuild
of a large log takes minutes, and on the windows' queue every betting window would wait for it.
"""

# A close that fails (PostgreSQL away for a moment) is tried again after this long, this many
# times; by then the sweeper or the table's next request will have closed the window anyway.
RETRY_AFTER_SECONDS: Final = 1.0
RETRIES: Final = 5
# The longest the timer sleeps without looking at the set again: a wake-up lost with a
# dropped connection costs at most this.
MAX_SLEEP_SECONDS: Final = 1.0
# Windows being scheduled after their requests at most: each waits at most a Redis timeout,
# and past this many (a Redis that hangs) the sweeper closes the rest.
LATER_BOUND: Final = 100
# Due entries taken at once; a busy second's deadlines come in a few takes.
TAKE_LIMIT: Final = 100
# Closing windows at once: each is a few milliseconds of PostgreSQL, and a slow one must not
# hold up the deadlines behind it.
CLOSERS: Final = 4
# A request must not wait on a dead Redis: one quick try, no redis-py retries, and after a
# failure no further try from this process for a while.
CONNECT_TIMEOUT_SECONDS: Final = 0.5
SOCKET_TIMEOUT_SECONDS: Final = 1.0
QUIET_AFTER_FAILURE_SECONDS: Final = 5.0
# Longer than the timer's longest wait for a wake-up (MAX_SLEEP_SECONDS), which is a read too.
TIMER_SOCKET_TIMEOUT_SECONDS: Final = 5.0


def deadlines_key(queue_name: str = WINDOW_QUEUE) -> str:
    """The sorted set of the windows to close: member `[table_id, round_id]`, score the deadline."""
    return f"{queue_name}:deadlines"


def wake_channel(queue_name: str = WINDOW_QUEUE) -> str:
    """The channel a scheduler publishes on so that a sleeping timer looks again."""
    return f"{queue_name}:wake"


def redis_for_timer(url: str) -> Redis[bytes]:
    """A Redis client for the window timer: a Redis that hangs fails its calls in seconds, so the
    timer tries again, and a worker that is stopping is not held by a call that never returns."""
    return Redis.from_url(
        url,
        socket_connect_timeout=TIMER_SOCKET_TIMEOUT_SECONDS,
        socket_timeout=TIMER_SOCKET_TIMEOUT_SECONDS,
    )


def redis_for_requests(url: str) -> Redis[bytes]:
    """A Redis client that fails fast, for use inside an HTTP request, and within its deadline.

    Made inside a request (readiness, metrics, a queued rebuild), its connection and its first
    command share what is left of the request's deadline (events/deadlines.py): a Redis that
    hangs fails it, rather than the request's answer. The first command that times out ends
    the request's use of it, so one command's bound is all it waits.
    """
    connect, read = CONNECT_TIMEOUT_SECONDS, SOCKET_TIMEOUT_SECONDS
    left = deadlines.remaining()
    if left is not None:
        left = max(left, 0.001)
        connect, read = min(connect, left / 3), min(read, left * 2 / 3)
    return Redis.from_url(
        url,
        socket_connect_timeout=connect,
        socket_timeout=read,
        retry=RedisRetry(NoBackoff(), 0),
    )


def _score(at: datetime) -> float:
    if at.tzinfo is None:
        raise ValueError(f"a window's deadline must be timezone-aware, not {at!r}")
    # A float of epoch seconds keeps microseconds exactly enough (about 0.2 us at this epoch).
    return at.timestamp()


def _member(table_id: str, round_id: str) -> str:
    return json.dumps([table_id, round_id], separators=(",", ":"))


class RedisWindowScheduler:
    """Adds a round's deadline to the worker's sorted set of deadlines, and wakes its timer."""

    def __init__(
        self,
        connection: Redis[bytes],
        *,
        queue_name: str = WINDOW_QUEUE,
        quiet_after_failure: float = QUIET_AFTER_FAILURE_SECONDS,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        # Building a client connects to nothing; the first schedule does.
        self._connection = connection
        self._key = deadlines_key(queue_name)
        self._channel = wake_channel(queue_name)
        self._quiet_after_failure = quiet_after_failure
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._quiet_until: float | None = None
        # Windows handed to threads by requests too late to wait for Redis (`_schedule_later`).
        self._later_waiting = 0

    @classmethod
    def from_url(cls, url: str, *, queue_name: str = WINDOW_QUEUE) -> Self:
        """A scheduler on the Redis at `url`, with a client that fails fast."""
        return cls(redis_for_requests(url), queue_name=queue_name)

    @property
    def connection(self) -> Redis[bytes]:
        """The Redis the deadlines go to."""
        return self._connection

    def schedule_window_close(self, table_id: str, round_id: str, at: datetime) -> None:
        """Have the worker close the round's window at `at`; on a Redis failure, log and return."""
        if self._quiet():
            log.debug("Redis failed recently; round %s's window closes lazily", round_id)
            return
        left = deadlines.remaining()
        if left is not None and left < CONNECT_TIMEOUT_SECONDS + SOCKET_TIMEOUT_SECONDS:
            # A Redis that hangs would hold the request past its deadline (events/deadlines.py):
            # the round is recorded, so its window is scheduled after the request, on a thread
            # of the scheduler's own, rather than left to the sweeper (a second or more late
            # when a loaded server's requests run short of time).
            self._schedule_later(table_id, round_id, at)
            return
        self._send(table_id, round_id, at)

    def _schedule_later(self, table_id: str, round_id: str, at: datetime) -> None:
        # A daemon thread each (a greenlet under gevent's patching, which a pool's threads
        # made before the patch would not be), bounded in number; never waited for at exit.
        with self._lock:
            full = self._later_waiting >= LATER_BOUND
            if not full:
                self._later_waiting += 1
        if full:
            log.warning(
                "too many windows waiting to be scheduled; round %s's closes lazily", round_id
            )
            return
        try:
            threading.Thread(
                target=self._send_later,
                args=(table_id, round_id, at),
                name="window-schedule",
                daemon=True,
            ).start()
        except RuntimeError:  # no thread to be had: the sweeper closes it
            with self._lock:
                self._later_waiting -= 1
            log.warning("could not schedule round %s's window; it closes lazily", round_id)

    def _send_later(self, table_id: str, round_id: str, at: datetime) -> None:
        try:
            if self._quiet():
                log.debug("Redis failed recently; round %s's window closes lazily", round_id)
                return
            self._send(table_id, round_id, at)
        finally:
            with self._lock:
                self._later_waiting -= 1

    def _send(self, table_id: str, round_id: str, at: datetime) -> None:
        score = _score(at)
        try:
            # One round trip: the same member for the same round, so scheduling twice moves
            # one entry instead of adding a second (and a second close would be harmless).
            pipe = self._connection.pipeline(transaction=False)
            pipe.zadd(self._key, {_member(table_id, round_id): score})
            pipe.publish(self._channel, repr(score))
            pipe.execute()
        except RedisError as error:
            self._fail()
            log.warning(
                "could not schedule the window of round %s at table %s (%s); it will close"
                " on the table's next command or by the projector's sweeper instead",
                round_id,
                table_id,
                error,
            )
            return
        with self._lock:
            self._quiet_until = None

    def _quiet(self) -> bool:
        with self._lock:
            return self._quiet_until is not None and self._monotonic() < self._quiet_until

    def _fail(self) -> None:
        with self._lock:
            self._quiet_until = self._monotonic() + self._quiet_after_failure


# Every member due at ARGV[1] or before, up to ARGV[2] of them, removed and returned in one
# step: with several workers each deadline is taken by exactly one.
_TAKE_DUE: Final = """
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, ARGV[2])
if #due > 0 then redis.call('ZREM', KEYS[1], unpack(due)) end
return due
"""


class WindowTimer:
    """Closes each window in the sorted set at its deadline, on a thread of its own.

    It sleeps until the earliest deadline (at most MAX_SLEEP_SECONDS), woken early by the
    scheduler's message when an earlier one is added, takes the due entries and hands each to
    `close(table_id, round_id)` on a small pool of closers. A close that raises is tried again
    a few times; one that keeps failing is left to the sweeper and recovery.
    """

    def __init__(
        self,
        connection: Redis[bytes],
        close: Callable[[str, str], object],
        *,
        queue_name: str = WINDOW_QUEUE,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        closers: int = CLOSERS,
        retry_after: float = RETRY_AFTER_SECONDS,
    ) -> None:
        self._connection = connection
        self._close = close
        self._key = deadlines_key(queue_name)
        self._channel = wake_channel(queue_name)
        self._clock = clock
        self._retry_after = retry_after
        self._take = connection.register_script(_TAKE_DUE)
        self._closers = ThreadPoolExecutor(closers, thread_name_prefix="window-closer")
        self._failures: dict[str, int] = {}
        self._failures_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Run the timer on a daemon thread until `stop`."""
        self._thread = threading.Thread(target=self._run, name="window-timer", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 3.0) -> None:
        """Stop taking deadlines, and wait for the closes under way (each bounded by its own
        deadline: service/runtime/jobs.py); those not yet begun are left to the sweeper."""
        self._stop.set()
        if self._thread is not None:
            # It looks at the stop flag at least once a MAX_SLEEP_SECONDS.
            self._thread.join(timeout)
        self._closers.shutdown(wait=True, cancel_futures=True)

    def alive(self) -> bool:
        """Whether the timer's thread is running."""
        return self._thread is not None and self._thread.is_alive()

    def take_due(self) -> float | None:
        """Hand every due window to the closers; seconds until the next deadline, if any."""
        now = self._clock().timestamp()
        due = self._take(keys=[self._key], args=[repr(now), TAKE_LIMIT])
        for member in due:
            table_id, round_id = json.loads(member)
            self._closers.submit(self._run_close, table_id, round_id)
        if len(due) >= TAKE_LIMIT:
            return 0.0  # more are due: take them before sleeping
        earliest = self._connection.zrange(self._key, 0, 0, withscores=True)
        if not earliest:
            return None
        return max(0.0, float(earliest[0][1]) - self._clock().timestamp())

    def _run_close(self, table_id: str, round_id: str) -> None:
        member = _member(table_id, round_id)
        try:
            self._close(table_id, round_id)
        except Exception:
            with self._failures_lock:
                failures = self._failures.get(member, 0) + 1
                self._failures[member] = failures
            if failures > RETRIES:
                log.exception(
                    "could not close round %s at table %s; the sweeper or recovery will",
                    round_id,
                    table_id,
                )
                with self._failures_lock:
                    self._failures.pop(member, None)
                return
            log.warning("closing round %s failed; trying again", round_id, exc_info=True)
            try:
                self._connection.zadd(
                    self._key, {member: self._clock().timestamp() + self._retry_after}
                )
            except RedisError:
                log.warning("could not reschedule round %s; the sweeper will close it", round_id)
            return
        with self._failures_lock:
            self._failures.pop(member, None)

    def _run(self) -> None:
        pubsub = None
        while not self._stop.is_set():
            try:
                if pubsub is None:
                    # Subscribed before looking at the set, so no wake-up falls between them.
                    pubsub = self._connection.pubsub(ignore_subscribe_messages=True)
                    pubsub.subscribe(self._channel)
                wait = self.take_due()
                sleep = MAX_SLEEP_SECONDS if wait is None else min(wait, MAX_SLEEP_SECONDS)
                if sleep > 0:
                    # Returns at the timeout, or at once on a wake-up (an earlier deadline).
                    pubsub.get_message(timeout=sleep)
                    # Drain any other wake-ups already here: one look covers them all.
                    while pubsub.get_message(timeout=0.0) is not None:
                        pass
            except RedisError:
                log.warning("the window timer lost Redis; trying again", exc_info=True)
                if pubsub is not None:
                    with contextlib.suppress(RedisError):
                        pubsub.close()
                pubsub = None
                self._stop.wait(MAX_SLEEP_SECONDS)
            except Exception:
                log.exception("the window timer failed a pass; trying again")
                self._stop.wait(MAX_SLEEP_SECONDS)
        if pubsub is not None:
            pubsub.close()
