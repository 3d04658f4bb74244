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
- A host lost with the worker whose scheduler held the queue's scheduler lock left that lock in
  Redis for its whole lease (61 s), and no other worker's scheduler moved a scheduled job to
  the queue until it expired: checkpoint signing, recovery and the seamless wallets' owed calls
  stopped for a minute or two (tests/faults/test_failover_two_hosts.py). The holder renews
  its lease every second; maintenance here frees a lease not renewed for
  STALE_SCHEDULER_SECONDS, and rq's own maintenance then takes it.

And one thing went wrong with stopping it (a fresh clone's `make test` failed on it): told to
stop, the worker could hang for up to a minute after its last job. rq listens for commands on
a pubsub thread of redis-py's that waits up to 60 s a read, and on teardown calls its `stop()`,
which since redis-py 8 joins that thread with no timeout; rq expected it not to, and bounded
only its own second join. Whether the thread was in that long wait depended on timing, so on a
busy machine the worker often was (4 of 8 SIGTERMs under CPU load: each hung past 30 s). Here
the thread waits at most PUBSUB_WAIT_SECONDS a read, and every wait of the teardown is bounded:
the thread's, the scheduler process's, and the process's as a whole (service/runtime/stopping.py).
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import sys
import time
from collections.abc import Callable
from datetime import timedelta
from types import FrameType
from typing import Final

from redis import Redis
from redis.exceptions import RedisError
from rq import Queue, SimpleWorker
from rq.registry import ScheduledJobRegistry
from rq.scheduler import RQScheduler
from rq.serializers import JSONSerializer

from service.runtime.stopping import StopWatch

log = logging.getLogger(__name__)

MAINTENANCE_SECONDS: Final = 10
SCHEDULER_INTERVAL_SECONDS: Final = 1  # rq's default, which the workers keep
WORKER_TTL_SECONDS: Final = 30  # rq waits for a job for this less 15 s, then looks around
RESTART_SECONDS: Final = 2.0
PUBSUB_WAIT_SECONDS: Final = 1.0
"""The longest the command listener's thread waits for a message before it looks at whether it
was told to stop (rq's own is 60 s)."""
STALE_SCHEDULER_SECONDS: Final = 5
"""A scheduler lock not renewed for this long belongs to a scheduler that is gone: five missed
beats of rq's one-second heartbeat (a beat that is merely late costs, at worst, a job enqueued
twice, and every periodic job here is safe to run twice)."""
# Deletes the lock if its holder has not renewed the lease for ARGV[1] seconds: the lease is
# set to ARGV[2] seconds at each renewal, so its remaining TTL says when that last was, on
# Redis's own clock. One script, so a renewal cannot fall between the look and the delete.
_FREE_STALE_LOCK: Final = """
local ttl = redis.call('ttl', KEYS[1])
if ttl >= 0 and ttl <= tonumber(ARGV[2]) - tonumber(ARGV[1]) then
  return redis.call('del', KEYS[1])
end
return 0
"""
STOP_WAIT_SECONDS: Final = 3.0
"""How long the teardown waits for each thing it stops: the listener's thread, rq's scheduler
process (which looks at its stop flag once a second), before leaving it behind or killing it."""

Periodic = tuple[str, Callable[[Queue, timedelta], None]]
"""A periodic job: the prefix of its ids, and what schedules it after a delay."""


class ShoeboxWorker(SimpleWorker):
    """A SimpleWorker that notes a stop request and keeps its periodic jobs scheduled."""

    def __init__(
        self, queue: Queue, periodic: tuple[Periodic, ...], watch: StopWatch | None = None
    ) -> None:
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
        self._watch = watch if watch is not None else StopWatch("worker")

    def request_stop(self, signum: int, frame: FrameType | None) -> None:
        """rq's warm shutdown (the job in hand is finished), timed from this signal on."""
        self._watch.request(signal.Signals(signum).name)
        super().request_stop(signum, frame)  # type: ignore[no-untyped-call]

    def handle_warm_shutdown_request(self) -> None:
        """SIGTERM or SIGINT: this loop ends for good, not to be started again."""
        self.stopping = True
        super().handle_warm_shutdown_request()  # type: ignore[no-untyped-call]

    def _install_signal_handlers(self) -> None:
        super()._install_signal_handlers()  # type: ignore[no-untyped-call]
        # A signal that came while rq was starting, before its handlers: stop at the loop's top.
        if self._watch.requested:
            self.stopping = True
            self._stop_requested = True

    def subscribe(self) -> None:
        """rq's command listener, on a thread that looks at its stop flag every second."""
        self.pubsub = self.connection.pubsub()
        self.pubsub.subscribe(**{self.pubsub_channel_name: self.handle_payload})
        self.pubsub_thread = self.pubsub.run_in_thread(
            sleep_time=PUBSUB_WAIT_SECONDS,
            daemon=True,
            exception_handler=self._pubsub_exception_handler,
        )

    def unsubscribe(self) -> None:
        """Stop the command listener, waiting for its thread at most STOP_WAIT_SECONDS."""
        thread = self.pubsub_thread
        if thread is None:
            return
        with contextlib.suppress(RedisError):
            self.pubsub.unsubscribe()
        # Bounded: redis-py's stop() joins the thread, without a timeout unless given one. The
        # thread is a daemon, so one still waiting holds nothing up.
        thread.stop(timeout=STOP_WAIT_SECONDS)
        if thread.is_alive():
            log.warning("the worker's command listener did not stop in time; left behind")
        with contextlib.suppress(RedisError):
            self.pubsub.close()

    def free_stale_scheduler_lock(self) -> bool:
        """Delete the queue's scheduler lock if its holder stopped renewing it; whether it did.

        rq's maintenance, which follows, then takes the lock for this worker's scheduler.
        """
        process = self.scheduler._process if self.scheduler is not None else None
        if process is not None and process.is_alive():
            return False  # this worker's scheduler holds it, or is renewing it
        key = RQScheduler.get_locking_key(self._queue.name)
        lease = SCHEDULER_INTERVAL_SECONDS + 60  # rq's lease on the lock (scheduler.py)
        evaluate = self.connection.eval  # untyped in redis-py
        freed = bool(evaluate(_FREE_STALE_LOCK, 1, key, STALE_SCHEDULER_SECONDS, lease))  # type: ignore[no-untyped-call]
        if freed:
            log.warning(
                "the scheduler lock of queue %s was not renewed for %d s (its worker is gone);"
                " freed for this worker's scheduler",
                self._queue.name,
                STALE_SCHEDULER_SECONDS,
            )
        return freed

    def stop_scheduler(self) -> None:
        """Stop rq's scheduler process: SIGTERM, then SIGKILL if it is still there after a while."""
        process = self.scheduler._process if self.scheduler is not None else None
        if process is None or process.pid is None:
            return
        with contextlib.suppress(OSError):
            os.kill(process.pid, signal.SIGTERM)
        process.join(STOP_WAIT_SECONDS)
        if process.is_alive():
            log.warning("rq's scheduler process %d did not stop in time; killed", process.pid)
            process.kill()
            process.join(STOP_WAIT_SECONDS)

    def run_maintenance_tasks(self) -> None:
        """rq's own (which restarts a dead scheduler), then any periodic job Redis forgot."""
        self.free_stale_scheduler_lock()
        super().run_maintenance_tasks()  # type: ignore[no-untyped-call]
        registry = ScheduledJobRegistry(queue=self._queue)  # type: ignore[no-untyped-call]
        scheduled = registry.get_job_ids()
        known = [*scheduled, *self._queue.get_job_ids()]
        for prefix, schedule in self._periodic:
            if not any(job_id.startswith(prefix) for job_id in known):
                log.warning("the periodic job %s was missing from Redis; scheduled again", prefix)
                schedule(self._queue, timedelta(0))


_PR_SET_PDEATHSIG: Final = 1  # linux/prctl.h
_forking_parent = 0


def _note_parent() -> None:
    global _forking_parent
    _forking_parent = os.getpid()


def _die_with_parent() -> None:
    # rq forks its scheduler. A child outliving a killed worker kept the worker's database
    # sockets (events/postgres.py now cuts those off in children) and its scheduler role: the
    # kernel kills it when its parent goes instead. Linux only: elsewhere nothing happens.
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            return
    except (OSError, AttributeError):
        return
    # The parent may have died between the fork and the prctl, leaving no one to signal.
    if os.getppid() != _forking_parent:
        os._exit(1)


_hooked = False


def die_with_parent_in_children() -> None:
    """Have every process forked from this one from now on killed when its parent dies.

    The kernel's signal follows the forking thread, not the process: rq forks its scheduler
    from the worker's main thread, which lives as long as the worker does. Idempotent.
    """
    global _hooked
    if sys.platform.startswith("linux") and not _hooked:
        os.register_at_fork(before=_note_parent, after_in_child=_die_with_parent)
        _hooked = True


def work(
    url: str,
    queue_name: str,
    periodic: tuple[Periodic, ...],
    *,
    burst: bool = False,
    watch: StopWatch | None = None,
) -> None:
    """Serve the queue until SIGTERM or SIGINT, starting rq's loop again whenever Redis ends it.

    `watch` times the stop and bounds it; its request, if made before this is called (by
    `stop_on_signals`), is honoured at once.
    """
    watch = watch if watch is not None else stop_on_signals("worker")
    die_with_parent_in_children()
    while not watch.requested:
        worker: ShoeboxWorker | None = None
        try:
            # Even building the worker talks to Redis (it names its connection).
            queue = Queue(queue_name, connection=Redis.from_url(url), serializer=JSONSerializer)
            worker = ShoeboxWorker(queue, periodic, watch)
            for _, schedule in periodic:
                schedule(queue, timedelta(0))
            # rq logs every job it starts and finishes, and the scheduler each minute's jobs,
            # at INFO; the jobs log what they did, so the worker is quiet when nothing happens.
            worker.work(burst=burst, with_scheduler=True, logging_level="WARNING")
        except RedisError as error:
            log.warning("the worker lost Redis (%s)", error)
        # rq's handlers were installed only while its loop ran: ours again, in case it restarts.
        _install(watch)
        if burst or watch.requested or (worker is not None and worker.stopping):
            return
        log.warning("the worker's loop ended unasked; starting it again in %g s", RESTART_SECONDS)
        deadline = time.monotonic() + RESTART_SECONDS
        while not watch.requested and time.monotonic() < deadline:
            time.sleep(0.1)


def stop_on_signals(process: str) -> StopWatch:
    """A StopWatch that SIGTERM and SIGINT start, until rq's loop installs its own handlers."""
    watch = StopWatch(process)
    _install(watch)
    return watch


def _install(watch: StopWatch) -> None:
    def _stop(signum: int, frame: FrameType | None) -> None:
        watch.request(signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
