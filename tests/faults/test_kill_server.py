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
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from click.testing import CliRunner

from events.postgres import PostgresEventStore, app_conninfo, open_pool
from service.cli import main
from tests.faults.figures import Figures, count_found
from tests.ports import listening_socket, port_of
from tests.stateful import Books

SHOEBOX = Path(sys.executable).with_name("shoebox")
START_TIMEOUT_SECONDS = 60.0
REQUEST_TIMEOUT_SECONDS = 10.0
TABLES = 4
PHASE_SECONDS = 3.0
WORKERS = ("--workers", "2", "--threads", "2")


class Load:
    """Concurrent rounds, one thread a table, against whichever server `base` names."""

    def __init__(self, frontend: str) -> None:
        self.frontend = frontend
        self.base = ""
        self.sent = 0
        self.acknowledged: list[str] = []
        self.statuses: dict[int | str, int] = {}
        self.lock = threading.Lock()
        self.stop = threading.Event()

    def request(self, method: str, path: str, body: object) -> int | str:
        host, _, port = self.base.removeprefix("http://").partition(":")
        request_id = uuid.uuid4().hex
        headers = {
            "Authorization": f"Bearer {self.frontend}",
            "Content-Type": "application/json",
            "X-Request-Id": request_id,
        }
        connection = http.client.HTTPConnection(host, int(port), timeout=REQUEST_TIMEOUT_SECONDS)
        status: int | str
        try:
            connection.request(method, path, json.dumps(body).encode(), headers)
            status = connection.getresponse().status
        except OSError as error:  # refused, reset or timed out: not acknowledged
            status = type(error).__name__
            time.sleep(0.05)  # a client backs off while the server is away
        finally:
            connection.close()
        with self.lock:
            self.sent += 1
            self.statuses[status] = self.statuses.get(status, 0) + 1
            if isinstance(status, int) and 200 <= status < 300:
                self.acknowledged.append(request_id)
        return status

    def play(self, table: str, player: str) -> None:
        deadline = time.monotonic() + 60  # bounded, whatever happens to the server
        while not self.stop.is_set() and time.monotonic() < deadline:
            bet = {"player_id": player, "spot": "banker", "stake_pence": 100}
            self.request("POST", f"/v1/tables/{table}/bets", bet)
            self.request("POST", f"/v1/tables/{table}/deal", {"player_id": player})


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


def cli_key(database_url: str, role: str) -> str:
    created = CliRunner().invoke(
        main,
        ["keys", "create", "--role", role, "--name", f"fault-{role}"],
        env={"DATABASE_URL": database_url},
    )
    assert created.exit_code == 0, created.output
    return str(created.stdout.strip().splitlines()[-1])


def setup_tables(base: str, ops: str) -> list[tuple[str, str]]:
    load = Load(ops)
    load.base = base
    pairs = [(f"K{n}", f"p{n}") for n in range(TABLES)]
    for table, player in pairs:
        body = {"table_id": table, "seats": 7, "decks": 8, "minimum_pence": 100}
        assert load.request("POST", "/v1/tables", {**body, "maximum_pence": 250_000}) == 201
        deposit = {"amount_pence": 1_000_000, "reason": "fault float"}
        assert load.request("POST", f"/v1/wallets/{player}/deposits", deposit) == 201
    return pairs


@pytest.mark.slow
def test_kill_9_of_a_worker_then_the_server_under_load_loses_nothing_acknowledged(
    fresh_database: str,
) -> None:
    ops, frontend = cli_key(fresh_database, "ops"), cli_key(fresh_database, "frontend")
    load = Load(frontend)
    with server(fresh_database) as (base, process):
        pairs = setup_tables(base, ops)
        load.base = base
        for table, player in pairs:
            load.request("POST", f"/v1/tables/{table}/seats", {"player_id": player, "seat": 1})
        threads = [threading.Thread(target=load.play, args=pair) for pair in pairs]
        for thread in threads:
            thread.start()
        try:
            time.sleep(PHASE_SECONDS)
            os.kill(workers_of(process.pid)[0], signal.SIGKILL)  # one worker, mid-load
            time.sleep(PHASE_SECONDS)
            os.killpg(process.pid, signal.SIGKILL)  # the whole server, master and workers
            time.sleep(0.5)
            with server(fresh_database) as (again, _):  # recovers interrupted rounds first
                load.base = again
                time.sleep(PHASE_SECONDS)
                load.stop.set()
                for thread in threads:
                    thread.join(timeout=2 * REQUEST_TIMEOUT_SECONDS)
        finally:
            load.stop.set()
    assert not any(thread.is_alive() for thread in threads)

    with open_pool(app_conninfo(fresh_database, environ={}), max_size=2) as pool:
        store = PostgresEventStore(pool)
        books = Books()
        books.follow(store)  # verifies the chain; settles each stake exactly once
        found = count_found(load.acknowledged, store)
    balances = sum(books.available.values()) + sum(books.reserved.values())
    assert books.credits == balances + books.house_net, "money is not conserved"
    # No round half-applied: a table's stakes are open in one round at most, its current one.
    open_rounds = {(table, round_id) for (_, table, round_id, _) in books.open_stakes}
    assert len(open_rounds) == len({table for table, _ in open_rounds}), open_rounds
    assert load.statuses.get(500, 0) == 0, load.statuses
    assert len(load.acknowledged) > 20, load.statuses
    print("kill -9 statuses:", load.statuses)
    Figures(
        "kill -9 of a worker, then of the whole server",
        sent=load.sent,
        acknowledged=len(load.acknowledged),
        found_in_log=found,
    ).record()
