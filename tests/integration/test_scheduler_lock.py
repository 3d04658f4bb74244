"""A scheduler lock left by a worker that is gone is freed within seconds, not its 61 s lease.

rq lets one worker's scheduler move a queue's due jobs (the periodic checkpoint, recovery and
wallet-delivery jobs) onto the queue, under a lock whose lease it renews every second. A host
lost with that worker left the lock for its whole lease, and scheduled jobs stopped for a
minute or more (tests/faults/test_failover_two_hosts.py). Real Redis, this test's own queue.
"""

import os
import secrets
from collections.abc import Iterator

import pytest
import redis
from rq import Queue
from rq.scheduler import RQScheduler
from rq.serializers import JSONSerializer

from service.runtime.rq_worker import (
    SCHEDULER_INTERVAL_SECONDS,
    STALE_SCHEDULER_SECONDS,
    ShoeboxWorker,
)

LEASE = SCHEDULER_INTERVAL_SECONDS + 60


@pytest.fixture
def queue() -> Iterator[Queue]:
    connection = redis.Redis.from_url(os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/0")
    name = f"shoebox-test-{secrets.token_hex(6)}"
    try:
        yield Queue(name, connection=connection, serializer=JSONSerializer)
    finally:
        for key in connection.scan_iter(match=f"*{name}*"):
            connection.delete(key)
        connection.srem("rq:queues", f"rq:queue:{name}")
        connection.close()


def held(queue: Queue, renewed_seconds_ago: int) -> str:
    """The queue's scheduler lock, held by another worker's scheduler, renewed so long ago."""
    key: str = RQScheduler.get_locking_key(queue.name)
    queue.connection.set(key, "a-scheduler-on-a-lost-host", ex=LEASE - renewed_seconds_ago)
    return key


def test_a_lock_not_renewed_for_five_seconds_is_freed_and_the_next_acquire_takes_it(
    queue: Queue,
) -> None:
    key = held(queue, renewed_seconds_ago=STALE_SCHEDULER_SECONDS + 1)
    worker = ShoeboxWorker(queue, ())
    assert worker.free_stale_scheduler_lock()
    assert queue.connection.exists(key) == 0
    # What rq's maintenance does next: this worker's scheduler now holds the queue's lock.
    scheduler = RQScheduler([queue], connection=queue.connection, serializer=JSONSerializer)
    assert scheduler.acquire_locks() == {queue.name}  # type: ignore[no-untyped-call]
    assert queue.connection.get(key) == scheduler.name.encode()


def test_a_lock_its_holder_keeps_renewing_is_left_alone(queue: Queue) -> None:
    for renewed in (0, 1, STALE_SCHEDULER_SECONDS - 1):
        key = held(queue, renewed_seconds_ago=renewed)
        assert not ShoeboxWorker(queue, ()).free_stale_scheduler_lock()
        assert queue.connection.get(key) == b"a-scheduler-on-a-lost-host"


def test_no_lock_at_all_is_nothing_to_free(queue: Queue) -> None:
    assert not ShoeboxWorker(queue, ()).free_stale_scheduler_lock()
