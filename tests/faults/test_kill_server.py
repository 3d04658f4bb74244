"""kill -9 of a gunicorn worker, then of the whole server, under a load of concurrent rounds.

Threads play rounds (a bet, then Deal) at tables of their own against a real `shoebox serve`,
each request with its own X-Request-Id. A worker is killed mid-load, then the whole server's
process group; a new server is started on the same database (recovering interrupted rounds)
and the load goes on. Then: every 2xx is in the log, the chain verifies, every stake is settled
or returned exactly once or open in its table's current round, no wallet was overdrawn, and
money is conserved.
"""

from __future__ import annotations

import http.client
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.faults.figures import Figures
from tests.faults.load import Load, check_books, cli_key, setup_tables
from tests.ports import listening_socket, port_of

SHOEBOX = Path(sys.executable).with_name("shoebox")
START_TIMEOUT_SECONDS = 60.0
TABLES = 4
PHASE_SECONDS = 3.0
WORKERS = ("--workers", "2", "--threads", "2")


@contextmanager
def server(database_url: str) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """`shoebox serve` with two workers, in a process group of its own."""
    environment = {**os.environ, "DATABASE_URL": database_url}
    environment.pop("SHOEBOX_APP_DATABASE_URL", None)
    environment["SHOEBOX_RATE_LIMIT_PER_SECOND"] = "0"
    with listening_socket() as listener:
        base = f"http://127.0.0.1:{port_of(listener)}"
        process = subprocess.Popen(
            [str(SHOEBOX), "serve", "--bind", f"fd://{listener.fileno()}", *WORKERS],
            env=environment,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            pass_fds=(listener.fileno(),),
            start_new_session=True,  # so that killpg reaches every worker
        )
    try:
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while True:
            assert process.poll() is None, "shoebox serve exited"
            host, _, port = base.removeprefix("http://").partition(":")
            connection = http.client.HTTPConnection(host, int(port), timeout=5)
            try:
                connection.request("GET", "/v1/ping")
                connection.getresponse().read()
                break
            except OSError:
                assert time.monotonic() < deadline, "shoebox serve did not start"
                time.sleep(0.2)
            finally:
                connection.close()
        yield base, process
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


def workers_of(master: int) -> list[int]:
    """The pids of a gunicorn master's workers, from /proc."""
    children = Path(f"/proc/{master}/task/{master}/children").read_text().split()
    return [int(pid) for pid in children]


@pytest.mark.slow
def test_kill_9_of_a_worker_then_the_server_under_load_loses_nothing_acknowledged(
    fresh_database: str,
) -> None:
    ops, frontend = cli_key(fresh_database, "ops"), cli_key(fresh_database, "frontend")
    load = Load(frontend)
    with server(fresh_database) as (base, process):
        pairs = setup_tables(base, ops, frontend, TABLES)
        load.base = base
        load.start(pairs)
        try:
            time.sleep(PHASE_SECONDS)
            os.kill(workers_of(process.pid)[0], signal.SIGKILL)  # one worker, mid-load
            time.sleep(PHASE_SECONDS)
            os.killpg(process.pid, signal.SIGKILL)  # the whole server, master and workers
            time.sleep(0.5)
            with server(fresh_database) as (again, _):  # recovers interrupted rounds first
                load.base = again
                time.sleep(PHASE_SECONDS)
                load.finish()
        finally:
            load.stop.set()

    acknowledged = load.acknowledged
    _, found = check_books(fresh_database, acknowledged)
    assert load.statuses.get(500, 0) == 0, load.statuses
    assert len(acknowledged) > 20, load.statuses
    print("kill -9 statuses:", load.statuses)
    Figures(
        "kill -9 of a worker, then of the whole server",
        sent=len(load.sent),
        acknowledged=len(acknowledged),
        found_in_log=found,
    ).record()
