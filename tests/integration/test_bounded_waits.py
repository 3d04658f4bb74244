"""An append never hangs: behind a held lock it gives up quickly, appends nothing, and the
API answers a retryable 503 with Retry-After instead of a 500 or a request that never ends.

Since migration 0030 the lock an append waits for is a row of its streams' heads (there is no
table-wide lock left to hold), so the tests hold the rows of the streams the append needs."""

import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import timedelta

import psycopg
import pytest
from psycopg_pool import PoolTimeout

from events import deadlines
from events.deadlines import DeadlinePassed
from events.postgres import (
    DeadlineExceeded,
    Pool,
    PostgresEventStore,
    _GroupCommit,
    _PendingAppend,
    app_conninfo,
    open_pool,
)
from events.store import AppendTimedOut, ConcurrencyConflict, EventMetadata, NewEvent, StreamAppend
from service.web.problems import PROBLEM_MIMETYPE
from tests.api_harness import Api

ACTOR = EventMetadata(actor="test", role="cli")


@contextmanager
def log_locked(database_url: str) -> Iterator[None]:
    """Hold the row lock of every stream's head, as a stuck append to all of them would."""
    with psycopg.connect(database_url) as holder:
        holder.execute(
            "INSERT INTO stream_heads (stream_id, version) VALUES ('wallet:alice', 0)"
            " ON CONFLICT DO NOTHING"
        )
        holder.commit()
        holder.execute("SELECT * FROM stream_heads ORDER BY stream_id FOR UPDATE")
        try:
            yield
        finally:
            holder.rollback()


def _one_event(stream_id: str = "wallet:alice") -> list[StreamAppend]:
    return [StreamAppend(stream_id, 0, [NewEvent("Deposited", {"amount": 1, "reason": "r"})])]


@pytest.fixture
def single_pool(fresh_database: str) -> Iterator[Pool]:
    """One connection, so that a test can see what an append left on it."""
    pool = open_pool(app_conninfo(fresh_database, environ={}), max_size=1)
    try:
        yield pool
    finally:
        pool.close()


def test_an_append_behind_a_held_lock_gives_up_at_its_lock_timeout(
    fresh_database: str, single_pool: Pool
) -> None:
    store = PostgresEventStore(single_pool, lock_timeout=timedelta(milliseconds=150))
    with log_locked(fresh_database):
        started = time.monotonic()
        with pytest.raises(AppendTimedOut, match="lock"):
            store.append(_one_event(), ACTOR)
        waited = time.monotonic() - started
    assert 0.1 < waited < 2.0
    assert store.head() == 0
    store.append(_one_event(), ACTOR)
    assert store.head() == 1


def test_an_append_gives_up_at_its_statement_timeout_and_leaves_the_session_unbounded(
    fresh_database: str, single_pool: Pool
) -> None:
    store = PostgresEventStore(
        single_pool,
        lock_timeout=timedelta(seconds=5),
        statement_timeout=timedelta(milliseconds=150),
    )
    with log_locked(fresh_database), pytest.raises(AppendTimedOut, match="statement"):
        store.append(_one_event(), ACTOR)
    with single_pool.connection() as conn:
        # The limits were the append's alone: the pooled session is back to the defaults.
        settings = (
            conn.execute("SHOW statement_timeout").fetchone(),
            conn.execute("SHOW lock_timeout").fetchone(),
        )
    assert settings == (("0",), ("0",))
    assert store.head() == 0


def test_a_bet_behind_a_held_log_lock_is_a_503_with_retry_after_and_nothing_appended(
    fresh_database: str, app_pool: Pool
) -> None:
    api = Api(PostgresEventStore(app_pool, lock_timeout=timedelta(milliseconds=200)))
    api.create_table("T1")
    api.fund("alice")
    api.sit("T1", "alice", 1)
    head = api.store.head()
    bet = {"player_id": "alice", "spot": "player", "stake_pence": 500}
    headers = {"Idempotency-Key": "bet-1"}
    with log_locked(fresh_database):
        response = api.call("POST", "/v1/tables/T1/bets", bet, headers=headers)
    assert response.status_code == 503
    assert response.mimetype == PROBLEM_MIMETYPE
    assert response.headers["Retry-After"] == "1"
    problem = response.get_json()
    assert problem["type"].endswith("/log-busy")
    assert problem["status"] == 503
    assert api.store.head() == head
    # Retryable as promised: the same request, same key, goes through once the log is free.
    again = api.call("POST", "/v1/tables/T1/bets", bet, headers=headers)
    assert again.status_code == 201, again.get_json()
    assert api.store.head() > head


def test_a_refused_append_leaves_the_session_unbounded_and_the_connection_usable(
    single_pool: Pool,
) -> None:
    store = PostgresEventStore(single_pool, statement_timeout=timedelta(milliseconds=300))
    store.append(_one_event(), ACTOR)
    for _ in range(8):  # past psycopg's prepare threshold
        with pytest.raises(ConcurrencyConflict):
            store.append(_one_event(), ACTOR)
    store.append(_one_event("wallet:bob"), ACTOR)
    with single_pool.connection() as conn:
        assert conn.execute("SHOW statement_timeout").fetchone() == ("0",)
    assert store.head() == 2


# A request's deadline (events/deadlines.py): each wait keeps to the time left, whatever its own
# bound, and the waits of one request share it.


def test_a_query_outlasting_the_deadline_is_cut_off_and_its_connection_dropped(
    single_pool: Pool,
) -> None:
    token = deadlines.start(0.3)
    try:
        started = time.monotonic()
        with pytest.raises(DeadlineExceeded), single_pool.connection() as conn:
            conn.execute("SELECT pg_sleep(5)")
        waited = time.monotonic() - started
    finally:
        deadlines.stop(token)
    assert 0.2 < waited < 1.5
    # The cut connection was not given back as it was: the pool serves a working one.
    with single_pool.connection() as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)


def test_a_checkout_waits_for_a_connection_no_longer_than_the_deadline(
    single_pool: Pool,
) -> None:
    with single_pool.connection():  # the pool's only connection, taken
        token = deadlines.start(0.3)
        try:
            started = time.monotonic()
            with pytest.raises(PoolTimeout), single_pool.connection():
                pass
            waited = time.monotonic() - started
        finally:
            deadlines.stop(token)
    assert waited < 1.5  # not the pool's own 30 s


def test_an_append_behind_a_held_lock_gives_up_before_the_deadline_having_appended_nothing(
    fresh_database: str, single_pool: Pool
) -> None:
    store = PostgresEventStore(single_pool, lock_timeout=timedelta(seconds=5))
    with log_locked(fresh_database):
        token = deadlines.start(0.6)
        try:
            started = time.monotonic()
            # The server's own refusal, sent before the deadline: certainly nothing appended.
            with pytest.raises(AppendTimedOut, match="request's time"):
                store.append(_one_event(), ACTOR)
            waited = time.monotonic() - started
        finally:
            deadlines.stop(token)
    assert waited < 0.6
    assert store.head() == 0


def test_an_append_queued_behind_a_hung_batch_leaves_the_queue_at_its_deadline_unsent() -> None:
    release, sent = threading.Event(), []

    def send(batch: Sequence[_PendingAppend]) -> None:
        sent.append(len(batch))
        release.wait(10)  # the batch in flight hangs until released

    group = _GroupCommit(send)
    leader = threading.Thread(target=group.submit, args=[_PendingAppend("d", None, None, None)])
    leader.start()
    while not sent:
        time.sleep(0.01)
    token = deadlines.start(0.3)
    try:
        started = time.monotonic()
        follower = _PendingAppend("d", None, None, None, deadline=deadlines.current())
        with pytest.raises(AppendTimedOut, match="turn"):
            group.submit(follower)
        waited = time.monotonic() - started
    finally:
        deadlines.stop(token)
        release.set()
        leader.join(10)
    assert 0.2 < waited < 1.5
    assert sent == [1]  # the follower was never sent


def test_a_lock_held_across_a_slow_refresh_is_waited_for_no_longer_than_the_deadline() -> None:
    lock = threading.Lock()
    with lock:
        token = deadlines.start(0.2)
        try:
            with pytest.raises(DeadlinePassed), deadlines.holding(lock, "the refresh"):
                pass
        finally:
            deadlines.stop(token)
    with deadlines.holding(lock, "the refresh"):  # no deadline: waits as a plain lock does
        assert lock.locked()
