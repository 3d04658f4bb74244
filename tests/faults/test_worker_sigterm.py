"""SIGTERM to `shoebox worker` and `shoebox projector`: the work in hand finishes, and they leave.

A worker told to stop must finish the window it is closing (its events are in the log) and
leave within a few seconds on any machine, saying why. It once hung for up to a minute: rq's
command listener thread, joined without a timeout (service/runtime/rq_worker.py).

- A close in flight: the worker runs with the test-only failpoint that delays a deal for a
  few seconds just before its append; a round's window comes due, the worker's timer starts
  closing it, and SIGTERM is sent while the close waits in the failpoint.
- Idle, on a busy machine: SIGTERM to a worker and to a projector with nothing in hand, while
  busy processes keep every core occupied (the machine on which `make test` failed was busy).
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from domain.round import RoundSettled
from events.postgres import PostgresEventStore, app_conninfo, open_pool
from service.application.streams import table_stream
from service.runtime.failpoints import (
    CONSENT,
    DELAY_BEFORE_DEAL_APPEND,
    FAILPOINT,
    FAILPOINT_CONSENT,
    FAILPOINT_MARKER,
    FAILPOINT_SECONDS,
)
from service.runtime.stopping import EXIT_BOUND_SECONDS
from tests.e2e.servers import serve
from tests.faults.load import Load, cli_key, companion, setup_tables, shoebox
from tests.faults.private_servers import private_redis

WINDOW_MS = 1_000
DELAY_SECONDS = 3.0
MARKER_SECONDS = 30.0
STARTED_SECONDS = 30.0
# The close in hand may take its delay; past that, leaving takes a few seconds at most.
LEAVE_BOUND_SECONDS = DELAY_SECONDS + 5.0
ROUNDS_ON_A_BUSY_MACHINE = 3


def environment_for(database_url: str, redis_url: str) -> dict[str, str]:
    environment = {
        **os.environ,
        "DATABASE_URL": database_url,
        "REDIS_URL": redis_url,
        "SHOEBOX_RATE_LIMIT_PER_SECOND": "0",
    }
    environment.pop("SHOEBOX_APP_DATABASE_URL", None)
    return environment


def wait_for_line(log: Path, text: str, child: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + STARTED_SECONDS
    while text not in log.read_text():
        assert child.poll() is None, log.read_text()[-2000:]
        assert time.monotonic() < deadline, f"{text!r} never logged: {log.read_text()[-2000:]}"
        time.sleep(0.05)


def stop_and_time(child: subprocess.Popen[bytes], log: Path) -> float:
    """SIGTERM, then the seconds until it has left (failing the test past a generous bound)."""
    sent = time.monotonic()
    child.send_signal(signal.SIGTERM)
    try:
        child.wait(timeout=2 * EXIT_BOUND_SECONDS)
    except subprocess.TimeoutExpired:
        took = time.monotonic() - sent
        tail = log.read_text()[-3000:]
        raise AssertionError(f"still running {took:.1f} s after SIGTERM: {tail}") from None
    return time.monotonic() - sent


def _spin(stop: Any) -> None:
    while not stop.is_set():
        pass


@contextmanager
def busy_cores() -> Iterator[None]:
    """A process spinning on each core for the block."""
    stop = multiprocessing.get_context("spawn").Event()
    spinners = [
        multiprocessing.get_context("spawn").Process(target=_spin, args=(stop,), daemon=True)
        for _ in range(os.cpu_count() or 1)
    ]
    for spinner in spinners:
        spinner.start()
    try:
        yield
    finally:
        stop.set()
        for spinner in spinners:
            spinner.join(timeout=5)
            if spinner.is_alive():
                spinner.kill()


@pytest.mark.slow
def test_sigterm_during_a_window_close_finishes_the_close_and_the_worker_leaves(
    tmp_path: Path, fresh_database: str
) -> None:
    url = fresh_database
    ops, frontend = cli_key(url, "ops"), cli_key(url, "frontend")
    with private_redis(tmp_path / "redis") as redis:
        environment = environment_for(url, redis.url)
        marker, worker_log = tmp_path / "worker.closing", tmp_path / "worker.log"
        delayed = {
            **environment,
            FAILPOINT: DELAY_BEFORE_DEAL_APPEND,
            FAILPOINT_CONSENT: CONSENT,
            FAILPOINT_MARKER: str(marker),
            FAILPOINT_SECONDS: str(DELAY_SECONDS),
        }
        with (
            serve(url, tmp_path / "serve.log", environment, workers=1) as server,
            shoebox(["worker"], delayed, worker_log) as worker,
        ):
            wait_for_line(worker_log, "worker serving queue", worker)
            [(table, player)] = setup_tables(
                server.base, ops, frontend, 1, window_ms=WINDOW_MS, companions=True
            )
            client = Load(frontend)
            client.base = server.base
            bet = {"player_id": player, "spot": "banker", "stake_pence": 100}
            placed = client.request("POST", f"/v1/tables/{table}/bets", bet)
            assert placed.status == 201, placed
            round_id = placed.document["round_id"]
            silent = {**bet, "player_id": companion(player), "spot": "player"}
            assert client.request("POST", f"/v1/tables/{table}/bets", silent).status == 201
            deal = client.request("POST", f"/v1/tables/{table}/deal", {"player_id": player})
            assert deal.acknowledged, deal
            # The companion never presses Deal: the worker's timer closes the window at its
            # deadline and deals, pausing in the failpoint just before the deal's append.
            deadline = time.monotonic() + MARKER_SECONDS
            while not (marker.exists() and marker.read_text().strip()):
                assert time.monotonic() < deadline, worker_log.read_text()[-2000:]
                assert worker.poll() is None, worker_log.read_text()[-2000:]
                time.sleep(0.02)
            took = stop_and_time(worker, worker_log)
            exit_code = worker.returncode

    with open_pool(app_conninfo(url, environ={}), max_size=1) as pool:
        events = PostgresEventStore(pool).read_stream(table_stream(table))
    settled = [
        e for e in events if e.type == RoundSettled.type and e.payload["round_id"] == round_id
    ]
    print(f"worker SIGTERM mid-close: left {took:.2f} s after it (delay {DELAY_SECONDS:g} s)")
    assert settled, "the close in flight did not finish: its round is not settled in the log"
    assert took < LEAVE_BOUND_SECONDS, worker_log.read_text()[-3000:]
    assert exit_code == 0, worker_log.read_text()[-3000:]
    logged = worker_log.read_text()
    assert "worker stopping (SIGTERM)" in logged, logged[-2000:]
    assert "worker stopped (SIGTERM)" in logged, logged[-2000:]


@pytest.mark.slow
def test_sigterm_to_an_idle_worker_and_projector_on_a_busy_machine_and_they_leave(
    tmp_path: Path, fresh_database: str
) -> None:
    url = fresh_database
    with private_redis(tmp_path / "redis") as redis:
        environment = environment_for(url, redis.url)
        times: dict[str, list[float]] = {"worker": [], "projector": []}
        left: list[tuple[str, int | None, Path]] = []
        with busy_cores():
            for attempt in range(ROUNDS_ON_A_BUSY_MACHINE):
                for command, started in (
                    ("worker", "worker serving queue"),
                    ("projector", "projector following the log"),
                ):
                    log = tmp_path / f"{command}-{attempt}.log"
                    with shoebox([command], environment, log) as child:
                        wait_for_line(log, started, child)
                        # Long enough for rq's scheduler, its listener and the timer to be up.
                        time.sleep(1.0 + attempt)
                        times[command].append(stop_and_time(child, log))
                        left.append((command, child.returncode, log))
    print(f"SIGTERM on a busy machine, seconds to leave: {times}")
    slowest = max(max(taken) for taken in times.values())
    assert slowest < EXIT_BOUND_SECONDS, times
    for command, code, log in left:
        # 0: it left by itself, not by the watchdog (service/runtime/stopping.py).
        assert code == 0, log.read_text()[-3000:]
        assert f"{command} stopped (SIGTERM)" in log.read_text(), log.read_text()
