"""kill -9 of the RQ worker and of the projector, each mid-batch, under load: nothing is lost.

A real `shoebox serve`, `shoebox worker` (on a private Redis) and `shoebox projector` over a
database of the test's own. Players bet at tables with a one-second betting window and then
watch, so the windows are closed by the worker's jobs (or the projector's sweeper).

- The worker is started with the test-only failpoint that pauses a deal just before its
  append: its first window job stops there, and the worker is SIGKILLed mid-job, then started
  again without it.
- The projector is started with the failpoint that pauses inside a batch's transaction, once
  a read model has applied the batch and before its checkpoint moves: it is SIGKILLed with the
  batch written but not committed, then started again without it.

The load goes on throughout. Then every window was closed, the restarted projector caught up
by itself, and every read model (and the index of open rounds) equals a rebuild from position
0; every 2xx is in the log, the chain verifies, every stake settles once, money is conserved.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from events.postgres import Pool, app_conninfo, open_pool
from events.projections import runner
from events.projections.base import Projection
from events.projections.runner import ProjectionStatus
from events.store import utc_now
from service.application.game.open_rounds import OpenRoundsProjection
from service.application.read_models import projector as read_models
from service.application.upcasters import upcasters
from service.runtime.failpoints import (
    CONSENT,
    FAILPOINT,
    FAILPOINT_CONSENT,
    FAILPOINT_MARKER,
    PAUSE_BEFORE_DEAL_APPEND,
    PAUSE_IN_PROJECTION_BATCH,
)
from tests.e2e.servers import serve
from tests.faults.figures import Figures
from tests.faults.load import Watchers, check_books, cli_key, setup_tables, shoebox
from tests.faults.private_servers import private_redis

TABLES = 4
WINDOW_MS = 1_000
MARKER_SECONDS = 30.0
AFTER_RESTART_SECONDS = 4.0
CATCH_UP_SECONDS = 30.0
QUIET_SECONDS = 3.0
MODELS: tuple[type[Projection], ...] = (*read_models.PROJECTIONS, OpenRoundsProjection)


def armed(environment: dict[str, str], failpoint: str, marker: Path) -> dict[str, str]:
    return {
        **environment,
        FAILPOINT: failpoint,
        FAILPOINT_CONSENT: CONSENT,
        FAILPOINT_MARKER: str(marker),
    }


def kill_when_paused(child: subprocess.Popen[bytes], marker: Path, log: Path) -> None:
    """Wait (boundedly) until the process reports its failpoint reached, then SIGKILL it."""
    deadline = time.monotonic() + MARKER_SECONDS
    # Written by the paused process (by each of the projector's threads that gets there): seen
    # empty for a moment between its creation and its write.
    while not (marker.exists() and marker.read_text().strip()):
        assert child.poll() is None, log.read_text()[-2000:]
        assert time.monotonic() < deadline, f"the failpoint was not reached: {log.read_text()}"
        time.sleep(0.05)
    assert int(marker.read_text()) == child.pid
    os.kill(child.pid, signal.SIGKILL)
    child.wait(timeout=10)


def dumps(pool: Pool) -> dict[str, list[tuple[object, ...]]]:
    with pool.connection() as conn:
        return {t: read_models.table_dump(conn, t) for model in MODELS for t in model.tables}


def lags(pool: Pool) -> list[ProjectionStatus]:
    return runner.status(pool, utc_now(), [model.name for model in MODELS])


def wait_until_caught_up_and_quiet(pool: Pool) -> None:
    """Until every model has read the log's head, and the head has not moved for a while.

    The projector's sweeper may still be closing a window (and so appending): quiet means it
    had nothing left to do, so the models are compared with a log nobody writes any more.
    """
    # The bound is on making no progress, not on the whole wait: on a busy machine (a whole
    # suite on two cores) the restarted projector's catch-up is slow but never stuck, and a
    # model that stops advancing for CATCH_UP_SECONDS is what this must catch.
    head, since = -1, time.monotonic()
    checkpoints: tuple[int, ...] = ()
    deadline = time.monotonic() + CATCH_UP_SECONDS
    while True:
        found = lags(pool)
        if found[0].head != head:
            head, since = found[0].head, time.monotonic()
        reached = tuple(item.checkpoint for item in found)
        if reached != checkpoints:
            checkpoints, deadline = reached, time.monotonic() + CATCH_UP_SECONDS
        caught_up = all(item.lag_events == 0 for item in found)
        if caught_up and time.monotonic() - since >= QUIET_SECONDS:
            return
        assert time.monotonic() < deadline, [
            (item.name, item.checkpoint, item.head, item.lag_events) for item in found
        ]
        time.sleep(0.2)


@pytest.mark.slow
def test_kill_9_of_worker_and_projector_mid_batch_then_projections_equal_a_rebuild(
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
        worker_marker, projector_marker = tmp_path / "worker.paused", tmp_path / "projector.paused"
        with serve(url, tmp_path / "serve.log", environment, workers=2) as server:
            pairs = setup_tables(
                server.base, ops, frontend, TABLES, window_ms=WINDOW_MS, companions=True
            )
            load = Watchers(frontend)
            load.base = server.base
            try:
                worker_armed = armed(environment, PAUSE_BEFORE_DEAL_APPEND, worker_marker)
                with shoebox(["worker"], worker_armed, worker_log) as worker:
                    load.start(pairs)
                    kill_when_paused(worker, worker_marker, worker_log)
                projector_armed = armed(environment, PAUSE_IN_PROJECTION_BATCH, projector_marker)
                with shoebox(["projector"], projector_armed, projector_log) as projector:
                    kill_when_paused(projector, projector_marker, projector_log)
                with (
                    shoebox(["worker"], environment, worker_log) as worker,
                    shoebox(["projector"], environment, projector_log) as projector,
                ):
                    time.sleep(AFTER_RESTART_SECONDS)
                    load.finish()  # each player's last round watched until it is over
                    assert worker.poll() is None, worker_log.read_text()[-2000:]
                    worker.send_signal(signal.SIGTERM)  # no writer left but the sweeper
                    worker.wait(timeout=15)
                    with open_pool(app_conninfo(url, environ={}), max_size=2) as pool:
                        wait_until_caught_up_and_quiet(pool)
                    assert projector.poll() is None, projector_log.read_text()[-2000:]
            finally:
                load.stop.set()

    statuses = load.statuses
    assert all(isinstance(s.status, int) and s.status < 500 for s in load.sent), statuses
    stuck = [r for r, _, over in load.rounds if over is None]
    assert not stuck, f"windows never closed: {stuck}"
    with open_pool(app_conninfo(url, environ={}), max_size=4) as pool:
        after = lags(pool)
        assert all(item.lag_events == 0 for item in after), after  # nobody wrote since
        live = dumps(pool)
        read_models.rebuild(pool)
        runner.rebuild(pool, [OpenRoundsProjection], upcasters=upcasters())
        rebuilt = dumps(pool)
    # Each differing table, with a few rows only the live model has and only the rebuild has.
    differing = {
        table: (
            [row for row in live[table] if row not in rebuilt[table]][:3],
            [row for row in rebuilt[table] if row not in live[table]][:3],
        )
        for table in live
        if live[table] != rebuilt[table]
    }
    assert not differing, differing
    assert live["proj_wallets"], "the read models hold nothing: the test proved nothing"
    acknowledged = load.acknowledged
    _, found = check_books(url, acknowledged)
    print(
        f"kill -9 of worker and projector: {len(load.rounds)} rounds, statuses {statuses},"
        f" {sum(len(rows) for rows in live.values())} read-model rows equal to a rebuild"
    )
    Figures(
        "kill -9 of the RQ worker and of the projector, mid-batch",
        sent=len(load.sent),
        acknowledged=len(acknowledged),
        found_in_log=found,
    ).record()
