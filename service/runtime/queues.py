"""Whether anything consumes the work queued in Redis: jobs, window deadlines and live workers.

Jobs and deadlines can pile up with nobody to take them: the API schedules every round's
window on the windows' queue whether or not a `shoebox worker` runs (the tests of the pages
run the API and the projector only, and the README's old screenshot showed 215 jobs waiting
on a Redis shared with other tests). A depth alone does not say which; rq's worker
registrations do. Each worker lists its key in the queue's set of workers and keeps the key
alive with its heartbeat: rq sets it to expire 60 s after the worker's TTL
(rq_worker.WORKER_TTL_SECONDS, so 90 s), and before a job to the job's timeout plus 60 s, so a
worker busy with a long rebuild still counts. A registration whose key has expired is a
worker that died without unregistering; one stopped dead stops counting within 90 s.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from redis import Redis
from rq.worker_registration import WORKERS_BY_QUEUE_KEY

from service.runtime.scheduler import REBUILD_QUEUE, WINDOW_QUEUE, deadlines_key

OVERDUE_AFTER: Final = timedelta(seconds=2)
"""A deadline this far past is one no timer took: the worker's timer takes each within ms."""


@dataclass(frozen=True, slots=True)
class QueueHealth:
    """One queue's waiting work and the workers that serve it, read at one moment."""

    queue: str
    jobs: int
    deadlines: int
    overdue: int
    workers: int

    @property
    def unconsumed(self) -> bool:
        """Work is waiting and no worker with a live heartbeat serves the queue."""
        return self.workers == 0 and (self.jobs > 0 or self.overdue > 0)

    def warning(self) -> str | None:
        """What an operator should read about the queue, in words; None when all is well."""
        if self.workers > 0:
            return None
        if not self.unconsumed:
            return f"No worker serves {self.queue} (no heartbeat seen); nothing waits on it yet."
        waiting = [f"{self.jobs} {'job' if self.jobs == 1 else 'jobs'}"] if self.jobs else []
        if self.overdue == 1:
            waiting.append("1 betting window past its deadline")
        elif self.overdue:
            waiting.append(f"{self.overdue} betting windows past their deadline")
        one = len(waiting) == 1 and (self.jobs == 1 or self.overdue == 1)
        return (
            f"No worker is consuming the queue {self.queue}: {' and '.join(waiting)}"
            f" {'waits' if one else 'wait'}, and no worker heartbeat is seen."
            " Start `shoebox worker`" + (" --rebuilds." if self.queue == REBUILD_QUEUE else ".")
        )


def queue_health(
    connection: Redis[bytes],
    now: datetime,
    queues: Sequence[str] = (WINDOW_QUEUE, REBUILD_QUEUE),
) -> list[QueueHealth]:
    """Each queue's jobs, window deadlines (due and overdue) and live workers: two round trips."""
    overdue_before = (now - OVERDUE_AFTER).timestamp()
    pipe = connection.pipeline(transaction=False)
    for name in queues:
        pipe.llen(f"rq:queue:{name}")
        pipe.zcard(deadlines_key(name))
        pipe.zcount(deadlines_key(name), "-inf", overdue_before)
        pipe.smembers(WORKERS_BY_QUEUE_KEY % name)
    answers = pipe.execute()
    registered = [sorted(answers[i * 4 + 3]) for i in range(len(queues))]
    alive: list[int] = []
    if any(registered):
        pipe = connection.pipeline(transaction=False)
        for keys in registered:
            for key in keys:
                pipe.exists(key)
        found = iter(pipe.execute())
        alive = [sum(1 for _ in keys if next(found)) for keys in registered]
    else:
        alive = [0] * len(queues)
    return [
        QueueHealth(
            queue=name,
            jobs=int(answers[i * 4]),
            deadlines=int(answers[i * 4 + 1]),
            overdue=int(answers[i * 4 + 2]),
            workers=alive[i],
        )
        for i, name in enumerate(queues)
    ]
