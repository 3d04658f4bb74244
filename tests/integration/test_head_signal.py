"""The feed's tail without LISTEN (a replica's) woken by the sequencer's head signal over Redis.

Against the real PostgreSQL and the shared Redis (a channel of this test's database alone).
The tail here reads the primary with LISTEN off, as it reads a standby: what the signal adds
is the same either way, and the replica itself is covered by tests/faults.
"""

import os
import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
import redis

from events.postgres import Pool, PostgresEventStore, app_conninfo
from events.sequencer import SequencerRole
from events.store import EventMetadata, NewEvent, StreamAppend
from events.tail import LogTail
from service.runtime.head_signal import HeadSubscriber, head_channel
from service.runtime.sequencing import start_sequencer_role

DEALER = EventMetadata(actor="dealer-7", role="dealer")
# Longer than the test waits: an event the tail shows was read on a signal, not a poll.
NEVER = 3600.0
HANG_GUARD = 30.0


@pytest.fixture
def redis_url() -> str:
    return os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/0"


def _tail(database: str, redis_url: str, poll_seconds: float) -> LogTail:
    conninfo = app_conninfo(database, environ={})

    def connect() -> psycopg.Connection[Any]:
        return psycopg.connect(conninfo, autocommit=True)

    wakes: list[HeadSubscriber] = []
    tail = LogTail(
        connect,
        listen=False,
        poll_seconds=poll_seconds,
        on_start=lambda: wakes[0].start(),
    )
    wakes.append(HeadSubscriber(redis_url, head_channel(conninfo), tail.wake))
    return tail


@pytest.fixture
def sequencer(fresh_database: str, redis_url: str) -> Iterator[SequencerRole]:
    role = start_sequencer_role(app_conninfo(fresh_database, environ={}), redis_url)
    try:
        yield role
    finally:
        role.stop()


def _appended_and_seen(tail: LogTail, store: PostgresEventStore, stream: str) -> bool:
    waiter = tail.subscribe({stream})
    try:
        store.append([StreamAppend(stream, 0, [NewEvent("StakeReserved", {"amount": 1})])], DEALER)
        deadline = threading.Event()
        timer = threading.Timer(HANG_GUARD, deadline.set)
        timer.start()
        try:
            while not deadline.is_set():
                if [e.stream_id for e in tail.recent(frozenset({stream}), 0) or []] == [stream]:
                    return True
                waiter.woken.wait(0.05)
                waiter.woken.clear()
            return False
        finally:
            timer.cancel()
    finally:
        tail.unsubscribe(waiter)


def test_a_tail_that_cannot_listen_reads_a_new_event_on_the_sequencers_signal(
    fresh_database: str, app_pool: Pool, redis_url: str, sequencer: SequencerRole
) -> None:
    tail = _tail(fresh_database, redis_url, NEVER)
    try:
        assert tail.start()
        # The subscription is made on the tail's start, on a thread: a signal before it is lost.
        client = redis.Redis.from_url(redis_url)
        channel = head_channel(app_conninfo(fresh_database, environ={}))
        for _ in range(int(HANG_GUARD / 0.05)):
            if any(count >= 1 for _, count in client.pubsub_numsub(channel)):
                break
            threading.Event().wait(0.05)
        store = PostgresEventStore(app_pool, sequencing="background")
        assert _appended_and_seen(tail, store, "wallet:signalled")
        assert _appended_and_seen(tail, store, "wallet:again")
    finally:
        tail.stop()


def test_with_redis_away_the_tail_still_polls(
    fresh_database: str, app_pool: Pool, sequencer: SequencerRole
) -> None:
    # Nothing listens on port 9 of this machine's loopback: every Redis call fails at once.
    tail = _tail(fresh_database, "redis://127.0.0.1:9/0", poll_seconds=0.05)
    try:
        assert tail.start()
        store = PostgresEventStore(app_pool, sequencing="background")
        assert _appended_and_seen(tail, store, "wallet:polled")
    finally:
        tail.stop()
