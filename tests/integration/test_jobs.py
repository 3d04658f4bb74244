"""The window timer and the periodic jobs through a real Redis, rq and a PostgreSQL log."""

import json
import logging
import os
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta

import pytest
import redis
from rq import Queue, SimpleWorker
from rq.job import JobStatus
from rq.serializers import JSONSerializer

from domain.outcome import Spot
from domain.table import TableSettings
from events import deadlines
from events.postgres import Pool, PostgresEventStore
from events.store import EventStore, utc_now
from service.application.actor import Actor
from service.application.game.tables import GameService
from service.application.wallets import WalletService
from service.runtime import jobs
from service.runtime.scheduler import (
    RedisWindowScheduler,
    WindowTimer,
    deadlines_key,
    redis_for_requests,
)
from service.runtime.settings import Settings
from service.web.resources.ops import REBUILD_JOB, REBUILD_TIMEOUT_SECONDS

OPS = Actor("ops-1", "ops")
FRONTEND = Actor("frontend-1", "frontend")
WINDOW = timedelta(seconds=1)
# A bound on waiting for the worker, far above what any of it takes: not a speed assertion.
DUE_WITHIN_SECONDS = 15.0


def lapsed_clock() -> datetime:
    """The time a betting window and a second ago: a round opened then is due to close now."""
    return utc_now() - WINDOW - timedelta(seconds=1)


def abandoned_clock() -> datetime:
    """A time far enough back that a round opened then is past the recovery sweep's grace."""
    return lapsed_clock() - jobs.RECOVERY_GRACE


class ManualClock:
    """A clock the test moves by hand."""

    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now

    def advance(self, by: timedelta) -> None:
        self.now += by


@pytest.fixture
def redis_url() -> str:
    return os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/0"


@pytest.fixture
def queue(redis_url: str) -> Iterator[Queue]:
    """A queue of this test's own on the shared Redis, every key it made deleted afterwards."""
    connection = redis.Redis.from_url(redis_url)
    name = f"shoebox-test-{secrets.token_hex(6)}"
    queue = Queue(name, connection=connection, serializer=JSONSerializer)
    try:
        yield queue
    finally:
        job_ids = set(queue.get_job_ids())
        for registry in (
            queue.scheduled_job_registry,
            queue.started_job_registry,
            queue.finished_job_registry,
            queue.failed_job_registry,
            queue.deferred_job_registry,
        ):
            job_ids.update(registry.get_job_ids(cleanup=False))
        # A job's own keys (rq:job:ID, rq:results:ID, ...) do not carry the queue's name.
        for pattern in [f"*{name}*", *(f"rq:*{job_id}*" for job_id in job_ids)]:
            for key in connection.scan_iter(match=pattern):
                connection.delete(key)
        connection.srem("rq:queues", f"rq:queue:{name}")
        connection.close()


@pytest.fixture
def configured_jobs(fresh_database: str, redis_url: str, queue: Queue) -> Iterator[None]:
    """The jobs module configured as `shoebox worker` configures it, and reset afterwards."""
    jobs.reset()
    jobs.configure(Settings(database_url=fresh_database, redis_url=redis_url), queue.name)
    try:
        yield
    finally:
        jobs.reset()


def burst(queue: Queue) -> None:
    """Run rq's scheduler once, then every job that is due, as `shoebox worker --burst` does."""
    worker = SimpleWorker(
        [queue],
        connection=queue.connection,
        serializer=JSONSerializer,
        name=f"{queue.name}-{secrets.token_hex(3)}",
    )
    worker.work(burst=True, with_scheduler=True)


def open_round(games: GameService, store: EventStore, table_id: str) -> str:
    """A table with a one-second window and two seated players: alice bets and presses Deal."""
    wallets = WalletService(store, utc_now)
    games.create_table(table_id, TableSettings(seats=3, betting_window=WINDOW), OPS)
    for seat, player in enumerate(("alice", "bob"), start=1):
        wallets.deposit(player, 10_000, "float", OPS)
        games.sit(table_id, player, seat, FRONTEND)
    games.place_bet(table_id, "alice", Spot.BANKER, 1_000, FRONTEND)
    games.press_deal(table_id, "alice", FRONTEND)
    current = games.table(table_id).round
    assert current is not None
    return current.round_id


def wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DUE_WITHIN_SECONDS
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def scheduled(queue: Queue) -> dict[str, float]:
    """The timer's sorted set: `table_id round_id` -> the deadline's epoch seconds."""
    entries = queue.connection.zrange(deadlines_key(queue.name), 0, -1, withscores=True)
    return {" ".join(json.loads(member)): score for member, score in entries}


def test_the_worker_timer_closes_the_window_at_its_deadline_with_no_request(
    app_pool: Pool, queue: Queue, configured_jobs: None
) -> None:
    store = PostgresEventStore(app_pool, utc_now)
    games = GameService(
        store, utc_now, RedisWindowScheduler(queue.connection, queue_name=queue.name)
    )
    table_id = f"T-{secrets.token_hex(4)}"
    round_id = open_round(games, store, table_id)
    current = games.table(table_id).round
    assert current is not None
    # The deadline exactly as the round has it, to the microsecond: never rounded to a second.
    assert scheduled(queue) == {f"{table_id} {round_id}": current.deadline.timestamp()}

    timer = WindowTimer(
        queue.connection, jobs.close_betting_window, queue_name=queue.name, clock=utc_now
    )
    timer.start()
    try:
        # Nobody sends the table anything: only the timer can close the window and deal.
        wait_for(lambda: bool(store.read_all(types=["CoupCompleted"])), "the timer's deal")
    finally:
        timer.stop()

    coups = store.read_all(types=["CoupCompleted"])
    assert [event.payload["round_id"] for event in coups] == [round_id]
    # The table's own append, not a request's, and never before the deadline.
    assert coups[0].metadata.actor == "shoebox"
    (excluded,) = store.read_all(types=["PlayerExcluded"])
    assert excluded.payload["player_id"] == "bob"
    assert excluded.recorded_at >= current.deadline
    # Bob never acted and was excluded when the window closed; alice's bet was dealt.
    settled = store.read_all(types=["BetSettled"])
    assert [(e.payload["player_id"], e.payload["spot"]) for e in settled] == [("alice", "banker")]
    # The deal opened the next round, whose deadline the worker's own scheduler added.
    following = games.table(table_id).round
    assert following is not None
    assert following.round_id != round_id
    assert scheduled(queue) == {f"{table_id} {following.round_id}": following.deadline.timestamp()}


def test_the_timer_takes_only_what_is_due_and_two_timers_take_each_deadline_once(
    queue: Queue,
) -> None:
    scheduler = RedisWindowScheduler(queue.connection, queue_name=queue.name)
    now = utc_now()
    for number in range(20):
        scheduler.schedule_window_close("T1", f"T1-{number}", now)
    scheduler.schedule_window_close("T2", "T2-1", now + timedelta(minutes=5))
    closed: list[str] = []
    lock = threading.Lock()

    def close(table_id: str, round_id: str) -> None:
        with lock:
            closed.append(round_id)

    timers = [
        WindowTimer(queue.connection, close, queue_name=queue.name, clock=utc_now) for _ in range(2)
    ]
    for timer in timers:
        timer.start()
    try:
        wait_for(lambda: len(closed) >= 20, "both timers to take the due deadlines")
    finally:
        for timer in timers:
            timer.stop()
    assert sorted(closed) == sorted(f"T1-{number}" for number in range(20))
    assert list(scheduled(queue)) == ["T2 T2-1"]


def test_a_close_that_fails_is_tried_again(queue: Queue) -> None:
    scheduler = RedisWindowScheduler(queue.connection, queue_name=queue.name)
    scheduler.schedule_window_close("T1", "T1-1", utc_now())
    calls: list[str] = []

    def close(table_id: str, round_id: str) -> None:
        calls.append(round_id)
        if len(calls) == 1:
            raise ConnectionError("PostgreSQL is away for a moment")

    timer = WindowTimer(
        queue.connection, close, queue_name=queue.name, clock=utc_now, retry_after=0.05
    )
    timer.start()
    try:
        wait_for(lambda: len(calls) >= 2, "the second try")
    finally:
        timer.stop()
    assert calls == ["T1-1", "T1-1"]
    assert scheduled(queue) == {}


def test_window_job_run_twice_deals_the_round_once(
    app_pool: Pool, queue: Queue, configured_jobs: None
) -> None:
    store = PostgresEventStore(app_pool, utc_now)
    # The round opens a window and a second ago, so the job, on the real clock, finds it due.
    games = GameService(store, lapsed_clock)
    table_id = f"T-{secrets.token_hex(4)}"
    round_id = open_round(games, store, table_id)

    assert jobs.close_betting_window(table_id, round_id) == jobs.CLOSED
    assert jobs.close_betting_window(table_id, round_id) == jobs.NOTHING_DUE
    assert len(store.read_all(types=["CoupCompleted"])) == 1
    assert len(store.read_all(categories=["wallet"], types=["PayoutCredited"])) == 1


def test_window_job_before_the_deadline_leaves_the_round_open(
    app_pool: Pool, queue: Queue, configured_jobs: None
) -> None:
    store = PostgresEventStore(app_pool, utc_now)
    games = GameService(store, utc_now)
    table_id = f"T-{secrets.token_hex(4)}"
    round_id = open_round(games, store, table_id)

    assert jobs.close_betting_window(table_id, round_id) == jobs.NOTHING_DUE
    assert not store.read_all(types=["CoupCompleted"])
    # It asked, through the worker's own scheduler, to be run again at the deadline.
    current = games.table(table_id).round
    assert current is not None
    assert scheduled(queue) == {f"{table_id} {round_id}": current.deadline.timestamp()}


def test_scheduling_twice_keeps_one_entry_for_the_round_at_its_exact_deadline(
    queue: Queue,
) -> None:
    scheduler = RedisWindowScheduler(queue.connection, queue_name=queue.name)
    deadline = (datetime.now(UTC) + timedelta(minutes=5)).replace(microsecond=250_001)
    scheduler.schedule_window_close("T1", "T1-1", deadline)
    scheduler.schedule_window_close("T1", "T1-1", deadline)
    (score,) = scheduled(queue).values()
    # Kept to the microsecond, not rounded to a whole second as rq's scheduler would.
    assert datetime.fromtimestamp(score, UTC) == deadline


def test_a_request_too_late_to_wait_for_redis_still_has_its_window_scheduled_after_it(
    queue: Queue,
) -> None:
    """A loaded server's request may run short of time after its round is recorded: it does
    not wait for Redis then, but the window is scheduled after it, on time, rather than left
    to the sweeper."""
    scheduler = RedisWindowScheduler(queue.connection, queue_name=queue.name)
    deadline = (datetime.now(UTC) + timedelta(minutes=5)).replace(microsecond=0)
    with deadlines.until(time.monotonic() + 0.1):
        scheduler.schedule_window_close("T1", "T1-1", deadline)
    wait_for(lambda: "T1 T1-1" in scheduled(queue), "the window scheduled after the request")
    assert datetime.fromtimestamp(scheduled(queue)["T1 T1-1"], UTC) == deadline


def test_scheduling_on_a_dead_redis_logs_and_the_bet_still_succeeds(
    app_pool: Pool, caplog: pytest.LogCaptureFixture
) -> None:
    # Nothing listens on port 1; the client gives up at once instead of retrying.
    scheduler = RedisWindowScheduler.from_url("redis://127.0.0.1:1/0")
    store = PostgresEventStore(app_pool, utc_now)
    clock = ManualClock(utc_now())
    games = GameService(store, clock, scheduler)
    table_id = f"T-{secrets.token_hex(4)}"

    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="service.runtime.scheduler"):
        round_id = open_round(games, store, table_id)
    assert time.monotonic() - started < 5

    (warning,) = [r.getMessage() for r in caplog.records if r.name == "service.runtime.scheduler"]
    assert warning.startswith(f"could not schedule the window of round {round_id} at table")
    assert warning.endswith(
        "it will close on the table's next command or by the projector's sweeper instead"
    )
    assert len(store.read_all(types=["BetPlaced"])) == 1
    # The lazy path still closes the window: the next command after the deadline deals.
    clock.advance(WINDOW + timedelta(milliseconds=1))
    assert games.live_state(table_id).phase == "closing"
    games.sit(table_id, "carol", 3, FRONTEND)
    assert games.live_state(table_id).round_id != round_id
    assert len(store.read_all(types=["CoupCompleted"])) == 1


def test_scheduler_stays_quiet_for_a_while_after_redis_fails(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [100.0]
    scheduler = RedisWindowScheduler(
        redis_for_requests("redis://127.0.0.1:1/0"),
        quiet_after_failure=5.0,
        monotonic=lambda: now[0],
    )
    deadline = datetime.now(UTC) + timedelta(seconds=15)
    with caplog.at_level(logging.WARNING, logger="service.runtime.scheduler"):
        scheduler.schedule_window_close("T1", "T1-1", deadline)
        now[0] += 4.9
        scheduler.schedule_window_close("T1", "T1-2", deadline)
        now[0] += 0.2
        scheduler.schedule_window_close("T1", "T1-3", deadline)
    warned = [r.getMessage() for r in caplog.records if r.name == "service.runtime.scheduler"]
    assert len(warned) == 2
    assert "round T1-1" in warned[0]
    assert "round T1-3" in warned[1]


def test_the_periodic_recovery_job_deals_a_lapsed_round_and_schedules_its_next_run(
    app_pool: Pool, queue: Queue, configured_jobs: None
) -> None:
    store = PostgresEventStore(app_pool, utc_now)
    # No scheduler: nothing but the periodic recovery job will look at this table again. The
    # round opened before a window, a second and the sweep's grace, so recovery, on the real
    # clock, finds it abandoned.
    games = GameService(store, abandoned_clock)
    table_id = f"T-{secrets.token_hex(4)}"
    round_id = open_round(games, store, table_id)

    jobs.schedule_recovery(queue, timedelta(0))
    burst(queue)

    coups = store.read_all(types=["CoupCompleted"])
    assert [event.payload["round_id"] for event in coups] == [round_id]
    assert coups[0].metadata.actor == "recovery"
    # It comes again in a minute's time, under that slot's id (the dealt round opened no
    # new one: nobody is left to play it, so no window job is scheduled beside it).
    scheduled = queue.scheduled_job_registry.get_job_ids()
    assert [job_id for job_id in scheduled if job_id.startswith("shoebox-recovery-")], scheduled


def test_the_recovery_job_is_silent_when_nothing_is_due_and_says_what_it_recovers_at_info(
    configured_jobs: None, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG, logger="service.runtime.jobs"):
        assert jobs.recover_interrupted_rounds() == "recovered 0 round(s)"
    assert [r for r in caplog.records if r.name == "service.runtime.jobs"] == []

    store = jobs._built().store
    games = GameService(store, abandoned_clock)
    table_id = f"T-{secrets.token_hex(4)}"
    round_id = open_round(games, store, table_id)
    with caplog.at_level(logging.DEBUG, logger="service.runtime.jobs"):
        assert jobs.recover_interrupted_rounds() == "recovered 1 round(s)"
    (record,) = [r for r in caplog.records if r.name == "service.runtime.jobs"]
    assert record.levelno == logging.INFO
    assert round_id in record.getMessage()


def test_the_recovery_job_leaves_a_window_that_has_only_just_closed_to_its_timer(
    app_pool: Pool, configured_jobs: None
) -> None:
    # Closed a second ago: a live timer may be a moment late, and dealing it here would record a
    # healthy round as a recovery. The sweep leaves it; the window's own close deals it.
    store = PostgresEventStore(app_pool, utc_now)
    games = GameService(store, lapsed_clock)
    table_id = f"T-{secrets.token_hex(4)}"
    round_id = open_round(games, store, table_id)

    assert jobs.recover_interrupted_rounds() == "recovered 0 round(s)"
    assert store.read_all(types=["CoupCompleted"]) == []
    assert jobs.close_betting_window(table_id, round_id) == jobs.CLOSED
    coups = store.read_all(types=["CoupCompleted"])
    assert [(e.payload["round_id"], e.metadata.actor) for e in coups] == [(round_id, "shoebox")]


def test_a_queued_rebuild_never_holds_up_a_betting_window(
    app_pool: Pool, queue: Queue, configured_jobs: None
) -> None:
    # The rebuild waits on a queue of its own (here a private twin of REBUILD_QUEUE): the
    # windows' timer closes the window on time, and only the rebuilds' worker (`shoebox worker
    # --rebuilds`) runs the rebuild.
    rebuilds = Queue(
        f"{queue.name}-rebuilds", connection=queue.connection, serializer=JSONSerializer
    )
    store = PostgresEventStore(app_pool, utc_now)
    games = GameService(
        store, utc_now, RedisWindowScheduler(queue.connection, queue_name=queue.name)
    )
    table_id = f"T-{secrets.token_hex(4)}"
    round_id = open_round(games, store, table_id)
    rebuild = rebuilds.enqueue(REBUILD_JOB, "rounds", job_timeout=REBUILD_TIMEOUT_SECONDS)
    timer = WindowTimer(
        queue.connection, jobs.close_betting_window, queue_name=queue.name, clock=utc_now
    )
    timer.start()
    try:
        wait_for(lambda: bool(store.read_all(types=["CoupCompleted"])), "the timer's deal")
        timer.stop()
        assert [e.payload["round_id"] for e in store.read_all(types=["CoupCompleted"])] == [
            round_id
        ]
        assert rebuild.get_status(refresh=True) is JobStatus.QUEUED

        burst(rebuilds)

        assert rebuild.get_status(refresh=True) is JobStatus.FINISHED
        assert rebuild.return_value() == f"rebuilt rounds up to {store.head()}"
    finally:
        timer.stop()
        for key in queue.connection.scan_iter(match=f"*{rebuilds.name}*"):
            queue.connection.delete(key)
        queue.connection.delete(f"rq:job:{rebuild.id}", f"rq:results:{rebuild.id}")
        queue.connection.srem("rq:queues", f"rq:queue:{rebuilds.name}")
