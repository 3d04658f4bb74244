"""Work waiting in Redis with no worker to take it is reported in words (issue 21): the README's
old dashboard showed "Queue depth 215" with nothing saying that no worker was running."""

import os
import secrets
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
import redis
from rq import Queue
from rq.serializers import JSONSerializer

from service.runtime.queues import queue_health
from service.runtime.rq_worker import ShoeboxWorker
from service.runtime.scheduler import deadlines_key

NOW = datetime(2026, 12, 4, 16, 0, tzinfo=UTC)


@pytest.fixture
def queue() -> Iterator[Queue]:
    """A queue of this test's own on the shared Redis, every key it made deleted afterwards."""
    connection = redis.Redis.from_url(os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/0")
    name = f"shoebox-test-{secrets.token_hex(6)}"
    try:
        yield Queue(name, connection=connection, serializer=JSONSerializer)
    finally:
        for key in connection.scan_iter(match=f"*{name}*"):
            connection.delete(key)
        for key in connection.smembers("rq:workers"):
            if name in key.decode():
                connection.srem("rq:workers", key)
        connection.srem("rq:queues", f"rq:queue:{name}")
        connection.close()


def health(queue: Queue) -> tuple[int, int, int, int, bool, str | None]:
    (found,) = queue_health(queue.connection, NOW, [queue.name])
    return (
        found.jobs,
        found.deadlines,
        found.overdue,
        found.workers,
        found.unconsumed,
        found.warning(),
    )


def test_jobs_and_overdue_windows_with_no_worker_say_no_worker_is_consuming_the_queue(
    queue: Queue,
) -> None:
    for _ in range(3):
        queue.enqueue("service.runtime.jobs.recover_interrupted_rounds")
    deadlines: dict[str | bytes, float] = {
        '["T1","T1-1"]': (NOW - timedelta(seconds=30)).timestamp(),  # long past: nobody took it
        '["T2","T2-1"]': (NOW + timedelta(seconds=10)).timestamp(),  # not due yet
    }
    queue.connection.zadd(deadlines_key(queue.name), deadlines)
    jobs, scheduled, overdue, workers, unconsumed, warning = health(queue)
    assert (jobs, scheduled, overdue, workers, unconsumed) == (3, 2, 1, 0, True)
    assert warning is not None
    assert f"No worker is consuming the queue {queue.name}" in warning
    assert "3 jobs and 1 betting window past its deadline wait" in warning
    assert "no worker heartbeat is seen" in warning


def test_a_worker_with_a_live_heartbeat_consumes_the_queue_and_a_dead_ones_registration_does_not(
    queue: Queue,
) -> None:
    queue.enqueue("service.runtime.jobs.recover_interrupted_rounds")
    worker = ShoeboxWorker(queue, ())
    worker.register_birth()  # type: ignore[no-untyped-call]
    try:
        assert health(queue)[3:] == (1, False, None)
        # A worker killed outright leaves its registration; its key expires with the heartbeat.
        queue.connection.delete(worker.key)
        assert health(queue)[3:] == (
            0,
            True,
            f"No worker is consuming the queue {queue.name}: 1 job waits, and no worker"
            " heartbeat is seen. Start `shoebox worker`.",
        )
    finally:
        worker.register_death()  # type: ignore[no-untyped-call]


def test_an_empty_queue_with_no_worker_is_noted_but_not_alarming(queue: Queue) -> None:
    jobs, scheduled, overdue, workers, unconsumed, warning = health(queue)
    assert (jobs, scheduled, overdue, workers, unconsumed) == (0, 0, 0, 0, False)
    assert warning == f"No worker serves {queue.name} (no heartbeat seen); nothing waits on it yet."
