"""Redis stopped under load: bets still taken, windows still closed, scheduling resumes after.

A private Redis (never the shared one) serves a real `shoebox serve`, `shoebox worker` and
`shoebox projector` over a database of the test's own. Players bet at tables of their own with
a one-second betting window and then only watch the table (a read never closes a window), so
every window is closed by the RQ job at its deadline or by the projector's sweeper. Redis is
stopped for a few seconds and started again, empty, on the same port. Then:

- every bet was answered, none 500, none cut off or timed out by the client;
- while Redis was down, bets were still acknowledged and every window was still closed (by the
  sweeper, or by a player's command that came after its deadline) within the sweeper's
  interval plus slack of its deadline (a correctness bound, not a speed one: the lateness is
  measured and printed);
- once Redis was back, windows were again closed by the worker's RQ jobs, and the periodic
  recovery job, forgotten by the restarted Redis, was scheduled again;
- every 2xx is in the log, the chain verifies, every stake settles once, money is conserved.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest
from redis import Redis

from domain.round import CardDrawn, RoundEndedWithoutPlay, RoundOpened, RoundVoided
from events.postgres import PostgresEventStore, app_conninfo, open_pool
from service.runtime.jobs import RECOVERY_JOB_PREFIX
from tests.e2e.servers import serve
from tests.faults.figures import Figures
from tests.faults.load import (
    REQUEST_TIMEOUT_SECONDS,
    Watchers,
    check_books,
    cli_key,
    setup_tables,
    shoebox,
)
from tests.faults.private_servers import private_redis

SHOEBOX = Path(sys.executable).with_name("shoebox")
TABLES = 4
WINDOW_MS = 1_000
# Longer than rq's scheduler's one-second tick, so that with Redis up the RQ job usually
# closes a window first and both closers are seen at work.
SWEEP_SECONDS = 2.0
# How late the sweeper may close a window with Redis down: its interval, plus the projector's
# lag and a busy two-core machine's slack. A bound on correctness, not a speed target.
LATENESS_BOUND_SECONDS = SWEEP_SECONDS + 6.0
UP_SECONDS = 4.0
OUTAGE_SECONDS = 6.0
RESUME_BOUND_SECONDS = 30.0
# The first event of a closed window: its deal, or the round's end when nobody may play.
DEALT = (CardDrawn.type, RoundEndedWithoutPlay.type, RoundVoided.type)
CLOSED_BY_WORKER = "closed the window of round "
CLOSED_BY_SWEEPER = "swept the lapsed window of round "


def closed_rounds(log: Path, marker: str) -> set[str]:
    """The rounds a worker's or projector's JSON log says it closed."""
    found = set()
    for line in log.read_text().splitlines():
        try:
            message = str(json.loads(line).get("message", ""))
        except ValueError:
            continue
        if marker in message:
            found.add(message.split(marker, 1)[1].split()[0])
    return found


def lateness(database_url: str, rounds: set[str]) -> dict[str, float]:
    """Seconds between each round's deadline and the first event after it closed, from the log."""
    deadlines: dict[str, datetime] = {}
    closed: dict[str, datetime] = {}
    with open_pool(app_conninfo(database_url, environ={}), max_size=1) as pool:
        store = PostgresEventStore(pool)
        position = 0
        while batch := store.read_all(position, 2_000, upcast=False):
            for event in batch:
                round_id = event.payload.get("round_id")
                if round_id not in rounds:
                    continue
                if event.type == RoundOpened.type:
                    deadline = str(event.payload["deadline"])
                    deadlines[str(round_id)] = datetime.fromisoformat(deadline)
                elif event.type in DEALT and round_id not in closed:
                    closed[str(round_id)] = event.recorded_at
            position = batch[-1].position
    return {r: (closed[r] - deadlines[r]).total_seconds() for r in rounds if r in closed}


@pytest.mark.slow
def test_redis_stopped_under_load_bets_taken_windows_closed_scheduling_resumes(
    tmp_path: Path, fresh_database: str
) -> None:
    url = fresh_database
    ops, frontend = cli_key(url, "ops"), cli_key(url, "frontend")
    with private_redis(tmp_path / "redis") as redis:
        environment = {
            **os.environ,
            "DATABASE_URL": url,
            "REDIS_URL": redis.url,
            "SHOEBOX_RATE_LIMIT_PER_SECOND": "0",
        }
        environment.pop("SHOEBOX_APP_DATABASE_URL", None)
        worker_log, projector_log = tmp_path / "worker.log", tmp_path / "projector.log"
        sweep = ["projector", "--sweep-interval", str(SWEEP_SECONDS), "--poll-interval", "1"]
        with (
            shoebox(["worker"], environment, worker_log) as worker,
            shoebox(sweep, environment, projector_log) as projector,
            serve(url, tmp_path / "serve.log", environment, workers=2) as server,
        ):
            pairs = setup_tables(
                server.base, ops, frontend, TABLES, window_ms=WINDOW_MS, companions=True
            )
            load = Watchers(frontend)
            load.base = server.base
            load.start(pairs)
            try:
                time.sleep(UP_SECONDS)
                redis.stop()
                down = time.monotonic()
                time.sleep(OUTAGE_SECONDS)
                restarting = time.monotonic()
                redis.start()
                back = time.monotonic()
                resumed = wait_for_worker(load, worker_log, back)
                periodic = wait_for_periodic_job(redis.url, back)
            finally:
                load.finish()
            assert worker.poll() is None, worker_log.read_text()[-2000:]
            assert projector.poll() is None, projector_log.read_text()[-2000:]

    sent = list(load.sent)
    statuses = load.statuses
    assert all(isinstance(s.status, int) and s.status < 500 for s in sent), statuses
    assert max(s.finished - s.started for s in sent) < REQUEST_TIMEOUT_SECONDS
    stuck = [r for r, _, over in load.rounds if over is None]
    assert not stuck, f"windows never closed: {stuck}"

    # Rounds whose bet was taken while Redis was down (its deadline a second later).
    outage = {r for r, at, _ in load.rounds if down <= at and at + WINDOW_MS / 1000 < restarting}
    assert outage, "no bet was taken while Redis was down"
    by_worker = closed_rounds(worker_log, CLOSED_BY_WORKER)
    by_sweeper = closed_rounds(projector_log, CLOSED_BY_SWEEPER)
    # Closed by the sweeper, or by a player's next command when it came after the deadline
    # (every command closes a lapsed window first); never by the worker, which had no Redis.
    assert not outage & by_worker, outage & by_worker
    swept = outage & by_sweeper
    assert swept, "the sweeper closed none of the windows while Redis was down"
    late = lateness(url, outage)
    assert set(late) == outage
    assert max(late.values()) < LATENESS_BOUND_SECONDS, late

    _, found = check_books(url, load.acknowledged)
    print(
        f"Redis stopped: {len(outage)} rounds bet while it was down, {len(swept)} closed by the"
        f" sweeper and the others by a player's next command;"
        f" lateness median {statistics.median(late.values()):.2f} s, max"
        f" {max(late.values()):.2f} s; closed by the worker again {resumed:.2f} s after its"
        f" return, the periodic recovery job back in Redis after {periodic:.2f} s;"
        f" {len(by_worker)} rounds closed by the worker, {len(by_sweeper)} by the"
        f" sweeper in all; statuses {statuses}"
    )
    Figures(
        "Redis stopped under load",
        sent=len(sent),
        acknowledged=len(load.acknowledged),
        found_in_log=found,
    ).record()


def wait_for_worker(load: Watchers, worker_log: Path, back: float) -> float:
    """Seconds from Redis's return until the worker closed a round bet after it returned."""
    deadline = back + RESUME_BOUND_SECONDS
    while time.monotonic() < deadline:
        with load.lock:
            since = {r for r, at, _ in load.rounds if at >= back}
        if since & closed_rounds(worker_log, CLOSED_BY_WORKER):
            return time.monotonic() - back
        time.sleep(0.2)
    raise AssertionError(f"the worker closed no window within {RESUME_BOUND_SECONDS:g} s")


def wait_for_periodic_job(url: str, back: float) -> float:
    """Seconds from Redis's return until the recovery job, forgotten with it, is back."""
    client = Redis.from_url(url)
    try:
        deadline = back + RESUME_BOUND_SECONDS
        while time.monotonic() < deadline:
            if client.keys(f"rq:job:{RECOVERY_JOB_PREFIX}-*"):
                return time.monotonic() - back
            time.sleep(0.2)
    finally:
        client.close()
    raise AssertionError(f"no recovery job was scheduled within {RESUME_BOUND_SECONDS:g} s")
