"""The RQ worker's teardown is bounded: its command listener stops within seconds, whatever it
was waiting for. rq's own (with redis-py 8) joined the listener's thread with no timeout while
the thread sat in a 60 s wait, so a worker told to stop could hang for a minute."""

from __future__ import annotations

import os
import secrets
import threading
import time
from collections.abc import Iterator

import pytest
import redis
from rq import Queue
from rq.serializers import JSONSerializer

from service.runtime.rq_worker import ShoeboxWorker

STOP_BOUND_SECONDS = 10.0


@pytest.fixture
def worker() -> Iterator[ShoeboxWorker]:
    """A worker on a queue of the test's own on the shared Redis, its keys deleted afterwards."""
    connection = redis.Redis.from_url(os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/0")
    queue = Queue(
        f"shoebox-test-{secrets.token_hex(6)}", connection=connection, serializer=JSONSerializer
    )
    worker = ShoeboxWorker(queue, ())
    try:
        yield worker
    finally:
        connection.delete(worker.key)
        connection.close()


def test_the_command_listener_stops_in_seconds_when_it_was_waiting_for_a_subscription(
    worker: ShoeboxWorker,
) -> None:
    worker.subscribe()
    pubsub = worker.pubsub
    assert pubsub is not None
    # The race a busy machine lost: the listener reads the unsubscribe's reply and goes back
    # to wait, no longer subscribed, before the teardown has told it to stop.
    pubsub.unsubscribe()
    deadline = time.monotonic() + 5
    while pubsub.subscribed:
        assert time.monotonic() < deadline, "the unsubscribe was never answered"
        time.sleep(0.01)
    time.sleep(0.1)  # into its wait
    stopping = threading.Thread(target=worker.unsubscribe, daemon=True)
    started = time.monotonic()
    stopping.start()
    stopping.join(STOP_BOUND_SECONDS)
    took = time.monotonic() - started
    assert not stopping.is_alive(), f"unsubscribe still waiting after {took:.1f} s"
    listener = worker.pubsub_thread
    assert listener is not None
    assert not listener.is_alive()
