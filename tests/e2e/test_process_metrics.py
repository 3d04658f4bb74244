"""The worker's and the projector's own /metrics, as compose's Prometheus scrapes them (issue 21).

In compose each process has a container of its own, so the API's /metrics cannot add their
figures up: the window's lateness, measured by the worker, was scraped nowhere. A real `shoebox
serve`, `shoebox worker --metrics-port` (on a private Redis, so no other test's worker takes
the windows) and `shoebox projector --metrics-port`, over a database of the test's own.
"""

import os
import re
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from service.runtime.settings import MULTIPROC_VARIABLE
from tests.e2e.servers import SHOEBOX, create_key, private_database, serve
from tests.faults.private_servers import private_redis

pytestmark = pytest.mark.slow

WAIT_SECONDS = 30.0


@contextmanager
def started(arguments: list[str], environment: dict[str, str], log: Path) -> Iterator[str]:
    """A `shoebox` process with `--metrics-port 0`; the address of its /metrics."""
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [str(SHOEBOX), *arguments, "--metrics-port", "0"],
            env=environment,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + WAIT_SECONDS
        while not (found := re.search(r"metrics on (http://\S+/metrics)", log.read_text())):
            assert process.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        yield found.group(1)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()


def scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        return str(response.read().decode())


def sample(text: str, name: str) -> float:
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith((name + " ", name + "{"))
    )


def test_the_worker_and_the_projector_serve_their_own_metrics_for_prometheus(
    postgres_server_url: str, tmp_path: Path
) -> None:
    with (
        private_database(postgres_server_url) as database,
        private_redis(tmp_path / "redis") as redis,
    ):
        environment = {**os.environ, "DATABASE_URL": database, "REDIS_URL": redis.url}
        environment.pop("SHOEBOX_APP_DATABASE_URL", None)
        environment.pop(MULTIPROC_VARIABLE, None)  # each its own process, as in compose
        ops, frontend = create_key(database, "ops"), create_key(database, "frontend")
        with (
            serve(database, tmp_path / "serve.log", {"REDIS_URL": redis.url}) as server,
            started(["worker"], environment, tmp_path / "worker.log") as worker,
            # Its sweeper slowed right down, so that the worker is the one to close the window.
            started(
                ["projector", "--poll-interval", "0.2", "--sweep-interval", "3600"],
                environment,
                tmp_path / "projector.log",
            ) as projector,
        ):
            server.ok("POST", "/v1/tables", ops, {"table_id": "T1", "betting_window_ms": 1_000})
            deposit = {"amount_pence": 10_000, "reason": "metrics"}
            server.ok("POST", "/v1/wallets/alice/deposits", ops, deposit)
            server.ok("POST", "/v1/tables/T1/seats", frontend, {"player_id": "alice", "seat": 1})
            bet = {"player_id": "alice", "spot": "banker", "stake_pence": 100}
            server.ok("POST", "/v1/tables/T1/bets", frontend, bet)

            # The worker's timer closes the window at its deadline, and says how late it was.
            deadline = time.monotonic() + WAIT_SECONDS
            while sample(scrape(worker), "shoebox_window_close_delay_seconds_count") < 1:
                assert time.monotonic() < deadline, (tmp_path / "worker.log").read_text()
                time.sleep(0.2)
            text = scrape(worker)
            # What the close appended (alice never pressed Deal: excluded, her stake returned).
            assert sample(text, "shoebox_events_appended_total") >= 1
            # Scrape-time gauges are the API's and the projector's, never counted twice.
            assert "shoebox_projection_lag_events" not in text

            text = scrape(projector)
            assert re.search(r'shoebox_projection_lag_events\{projection="overview"\} \d', text)
