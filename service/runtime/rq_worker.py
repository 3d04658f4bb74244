"""`shoebox worker`'s rq worker, made to outlive Redis going away and to put back what it forgot.

Three things go wrong with a plain rq worker when Redis stops for a few seconds (proved by
tests/faults/test_redis_stopped.py):

- rq's scheduler, a child process, dies, and rq starts it again only in its maintenance: every
  ten minutes by default, looked at between two waits for a job of up to seven minutes. Until
  then no scheduled window job reaches the queue. Maintenance here runs every 10 s, and a wait
  lasts at most 15 s.
- A Redis error outside rq's own retrying wait for a job (the heartbeat after a job, say) ends
  the worker's loop "quitting", and with it the process. Here the loop is started again after
  a pause, until a signal asks the worker to stop.
- A Redis restarted empty has forgotten the periodic jobs (recovery, checkpoint signing), which
  each reschedule themselves when they run and so never would again. Maintenance puts back any
  that is neither scheduled nor queued.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable
from datetime import timedelta
from types import FrameType
from typing import Final

from redis import Redis
from redis.exceptions import RedisError
from rq import Queue, SimpleWorker
from rq.registry import ScheduledJobRegistry
from rq.serializers import JSONSerializer

log = logging.getLogger(__name__)

MAINTENANCE_SECONDS: Final = 10
WORKER_TTL_SECONDS: Final = 30  # rq waits for a job for this less 15 s, then looks around
RESTART_SECONDS: Final = 2.0

Periodic = tuple[str, Callable[[Queue, timedelta], None]]
"""A periodic job: the prefix of its ids, and what schedules it after a delay."""


class ShoeboxWorker(SimpleWorker):
    """A SimpleWorker that notes a stop request and keeps its periodic jobs scheduled."""

    def __init__(self, queue: Queue, periodic: tuple[Periodic, ...]) -> None:
        super().__init__(
            [queue],
            connection=queue.connection,
            serializer=JSONSerializer,
            maintenance_interval=MAINTENANCE_SECONDS,
            worker_ttl=WORKER_TTL_SECONDS,
        )
        self.stopping = False
        self._queue = queue
        self._periodic = periodic

    def handle_warm_shutdown_request(self) -> None:
        """SIGTERM or SIGINT: this loop ends for good, not to be started again."""
        self.stopping = True
        super().handle_warm_shutdown_request()  # type: ignore[no-untyped-call]

    def run_maintenance_tasks(self) -> None:
        """rq's own (which restarts a dead scheduler), then any periodic job Redis forgot."""
        super().run_maintenance_tasks()  # type: ignore[no-untyped-call]
        registry = ScheduledJobRegistry(queue=self._queue)  # type: ignore[no-untyped-call]
        scheduled = registry.get_job_ids()
        known = [*scheduled, *self._queue.get_job_ids()]
        for prefix, schedule in self._periodic:
            if not any(job_id.startswith(prefix) for job_id in known):
                log.warning("the periodic job %s was missing from Redis; scheduled again", prefix)
                schedule(self._queue, timedelta(0))


def work(url: str, queue_name: str, periodic: tuple[Periodic, ...], *, burst: bool = False) -> None:
    """Serve the queue until SIGTERM or SIGINT, starting rq's loop again whenever Redis ends it."""
    stop = threading.Event()
    while not stop.is_set():
        worker: ShoeboxWorker | None = None
        try:
            # Even building the worker talks to Redis (it names its connection).
            queue = Queue(queue_name, connection=Redis.from_url(url), serializer=JSONSerializer)
            worker = ShoeboxWorker(queue, periodic)
            for _, schedule in periodic:
                schedule(queue, timedelta(0))
            # rq logs every job it starts and finishes, and the scheduler each minute's jobs,
            # at INFO; the jobs log what they did, so the worker is quiet when nothing happens.
            worker.work(burst=burst, with_scheduler=True, logging_level="WARNING")
        except RedisError as error:
            log.warning("the worker lost Redis (%s)", error)
        if burst or (worker is not None and worker.stopping):
            return
        log.warning("the worker's loop ended unasked; starting it again in %g s", RESTART_SECONDS)

        # rq's handlers are installed only while its loop runs.
        def _stop(signum: int, frame: FrameType | None) -> None:
            stop.set()

        signal.signal(signal.SIGTERM, _stop)
        signal.signal(signal.SIGINT, _stop)
        stop.wait(RESTART_SECONDS)
