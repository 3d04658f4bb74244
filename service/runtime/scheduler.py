"""The betting window's punctual closing: an RQ job per round, scheduled with rq's own scheduler.

This is a promptness device only. `GameService` also closes a lapsed window lazily on the next
command to its table, and the projector's sweeper closes every lapsed window it finds in the
open-rounds index within a fraction of a second, needing only PostgreSQL; so when Redis or the
worker is down nothing is lost and windows still close on time. Scheduling therefore never
fails a request: an unreachable Redis is logged, and for a short while not asked again.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Final, Self

from redis import Redis
from redis.backoff import NoBackoff
from redis.exceptions import RedisError
from redis.retry import Retry as RedisRetry
from rq import Queue, Retry
from rq.serializers import JSONSerializer

log = logging.getLogger(__name__)

WINDOW_QUEUE: Final = "shoebox-windows"
"""The queue that `shoebox worker` serves and the API schedules on."""

REBUILD_QUEUE: Final = "shoebox-rebuilds"
"""The queue of projection rebuilds, served by `shoebox worker --rebuilds`.

Its own queue and its own worker process, because a worker runs one job at a time: a rebuild
of a large log takes minutes, and on the windows' queue every betting window would wait for it.
"""

CLOSE_WINDOW_JOB: Final = "service.runtime.jobs.close_betting_window"
# A job that cannot reach PostgreSQL is retried after these pauses (seconds), then given up:
# by then the next request to the table will have closed the window anyway.
RETRY_INTERVALS: Final = (1, 2, 4, 8, 16)
# Long enough to see what a job did when debugging, short enough not to pile up in Redis.
RESULT_TTL_SECONDS: Final = 3600
FAILURE_TTL_SECONDS: Final = 24 * 3600
# A request must not wait on a dead Redis: one quick try, no redis-py retries, and after a
# failure no further try from this process for a while.
CONNECT_TIMEOUT_SECONDS: Final = 0.5
SOCKET_TIMEOUT_SECONDS: Final = 1.0
QUIET_AFTER_FAILURE_SECONDS: Final = 5.0


def window_job_id(table_id: str, round_id: str) -> str:
    """The RQ job id of a round's window closing: one per round, whatever the ids contain."""
    # rq admits only letters, digits, '-' and '_' in ids; a digest keeps any table id usable.
    digest = hashlib.sha256(f"{table_id}\n{round_id}".encode()).hexdigest()[:40]
    return f"shoebox-window-{digest}"


def redis_for_requests(url: str) -> Redis[bytes]:
    """A Redis client that fails fast, for use inside an HTTP request."""
    return Redis.from_url(
        url,
        socket_connect_timeout=CONNECT_TIMEOUT_SECONDS,
        socket_timeout=SOCKET_TIMEOUT_SECONDS,
        retry=RedisRetry(NoBackoff(), 0),
    )


class RqWindowScheduler:
    """Schedules `service.runtime.jobs.close_betting_window` at a round's deadline, with rq."""

    def __init__(
        self,
        connection: Redis[bytes],
        *,
        queue_name: str = WINDOW_QUEUE,
        quiet_after_failure: float = QUIET_AFTER_FAILURE_SECONDS,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        # Building a Queue connects to nothing; the first enqueue does.
        self._queue = Queue(queue_name, connection=connection, serializer=JSONSerializer)
        self._quiet_after_failure = quiet_after_failure
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._quiet_until: float | None = None

    @classmethod
    def from_url(cls, url: str, *, queue_name: str = WINDOW_QUEUE) -> Self:
        """A scheduler on the Redis at `url`, with a client that fails fast."""
        return cls(redis_for_requests(url), queue_name=queue_name)

    @property
    def queue(self) -> Queue:
        """The queue jobs are scheduled on."""
        return self._queue

    def schedule_window_close(self, table_id: str, round_id: str, at: datetime) -> None:
        """Have the worker close the round's window at `at`; on a Redis failure, log and return."""
        if self._quiet():
            log.debug("Redis failed recently; round %s's window closes lazily", round_id)
            return
        try:
            self._queue.enqueue_at(
                _second_not_before(at),
                CLOSE_WINDOW_JOB,
                table_id,
                round_id,
                # The same id for the same round: scheduling twice overwrites one entry
                # instead of adding a second job (and a second run would be harmless anyway).
                job_id=window_job_id(table_id, round_id),
                retry=Retry(max=len(RETRY_INTERVALS), interval=list(RETRY_INTERVALS)),
                result_ttl=RESULT_TTL_SECONDS,
                failure_ttl=FAILURE_TTL_SECONDS,
                description=f"close the betting window of round {round_id} at table {table_id}",
            )
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


def _second_not_before(at: datetime) -> datetime:
    """`at` rounded up to a whole second.

    rq's scheduled registry keeps whole seconds, truncating: a deadline of 12:00:15.7 would be
    due at 12:00:15, find the window still open, and have to be scheduled again.
    """
    if at.tzinfo is None:
        raise ValueError(f"a window's deadline must be timezone-aware, not {at!r}")
    whole = at.replace(microsecond=0)
    return whole if whole == at else whole + timedelta(seconds=1)
