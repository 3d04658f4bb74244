"""PostgreSQL stopped, then hung, under load: every request is answered within 3 s, as a 503.

A private PostgreSQL (never the shared one) serves a real `shoebox serve`. Threads play rounds
at tables of their own (a bet, Deal, the table's state, the wallet), and another opens the live
feed now and then. Every client gives up after ANSWER_BOUND_SECONDS, so a request the server
holds longer is counted as unanswered. Two faults, each longer than any one of the service's
waits:

- stopped: `pg_ctl stop --mode fast`, which closes every session; a new connection is refused
  at once, so every wait is the service's own (the pool's checkout, a lock, a retry);
- hung: every PostgreSQL process SIGSTOPped. The kernel still accepts connections and
  acknowledges what is sent, so nothing fails by itself: each wait must be cut by the service.

Then: every request was answered, none 500; each one that failed is a 503 problem with
Retry-After; the service recovered after each fault by itself; every 2xx is in the log.
"""

from __future__ import annotations

import http.client
import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import pytest

from service.web.api import ANSWER_BOUND_SECONDS
from tests.e2e.servers import serve
from tests.faults.figures import Figures
from tests.faults.load import Load, Sent, check_books, cli_key, setup_tables
from tests.faults.private_servers import PrivatePostgres, private_postgres

TABLES = 4
# Longer than the pool's checkout wait (5 s) and than a request's deadline, so that requests
# meet every bounded wait, and several of them in a row.
FAULT_SECONDS = 8.0
RECOVERY_BOUND_SECONDS = 30.0
ENVIRONMENT = {"SHOEBOX_RATE_LIMIT_PER_SECOND": "0", "REDIS_URL": ""}
FEED_EVERY_SECONDS = 0.5


class Mixed(Load):
    """Rounds (bet, Deal) with reads between them, each request recorded, reads included."""

    def request(self, method: str, path: str, body: object, secret: str | None = None) -> Sent:
        sent = super().request(method, path, body, secret)
        if method == "GET":  # Load records only the writes
            with self.lock:
                self.sent.append(sent)
        return sent

    def play(self, table: str, player: str) -> None:
        while not self.stop.is_set():
            bet = {"player_id": player, "spot": "banker", "stake_pence": 100}
            self.request("POST", f"/v1/tables/{table}/bets", bet)
            self.request("POST", f"/v1/tables/{table}/deal", {"player_id": player})
            self.request("GET", f"/v1/tables/{table}/state", None)
            self.request("GET", f"/v1/wallets/{player}", None)


def open_feed(load: Load, ops: str) -> None:
    """Open the global feed, read only its status and headers (the stream never ends), close."""
    host, _, port = load.base.removeprefix("http://").partition(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=load.timeout)
    started = time.monotonic()
    status: int | str
    retry_after = None
    try:
        connection.request("GET", "/v1/feed", headers={"Authorization": f"Bearer {ops}"})
        response = connection.getresponse()
        status, retry_after = response.status, response.getheader("Retry-After")
    except (OSError, http.client.HTTPException) as error:
        status = type(error).__name__
    finally:
        connection.close()
    sent = Sent("GET", "/v1/feed", "-", status, retry_after, started, time.monotonic())
    with load.lock:
        load.sent.append(sent)


def feeds(load: Load, ops: str) -> None:
    while not load.stop.wait(FEED_EVERY_SECONDS):
        open_feed(load, ops)


def postgres_processes(postgres: PrivatePostgres) -> list[int]:
    """The postmaster and every process it started."""
    pid = postgres.pid
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return [pid, *(int(child) for child in children)]


@contextmanager
def hung(postgres: PrivatePostgres) -> Iterator[None]:
    """Every PostgreSQL process stopped (SIGSTOP) for the block, and continued after it."""
    processes = postgres_processes(postgres)
    for pid in processes:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in processes:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)


def written(sent: Sent) -> bool:
    """A write acknowledged: the service is back (a read may be answered from memory)."""
    return sent.acknowledged and sent.method != "GET"


def during(sent: list[Sent], began: float, ended: float) -> list[Sent]:
    """The requests sent while the fault lasted."""
    return [s for s in sent if began <= s.started < ended]


def describe(requests: list[Sent]) -> str:
    statuses: dict[str, int] = {}
    for s in requests:
        statuses[str(s.status)] = statuses.get(str(s.status), 0) + 1
    slowest = max((s.finished - s.started for s in requests), default=0.0)
    return f"{len(requests)} requests, statuses {statuses}, slowest {slowest:.2f} s"


def check_answered(requests: list[Sent], fault: str) -> None:
    """Every request answered in time; each failure a 503 problem with Retry-After."""
    unanswered = [s for s in requests if not isinstance(s.status, int)]
    assert not unanswered, f"{fault}: not answered within {ANSWER_BOUND_SECONDS:g} s: " + str(
        [(s.method, s.path, s.status, round(s.finished - s.started, 2)) for s in unanswered[:8]]
    )
    failed = [s for s in requests if isinstance(s.status, int) and s.status >= 500]
    wrong = [
        s
        for s in failed
        if s.status != 503
        or not int(s.retry_after or 0) > 0
        or (s.path != "/v1/feed" and not (isinstance(s.document, dict) and "type" in s.document))
    ]
    assert not wrong, f"{fault}: {[(s.path, s.status, s.retry_after, s.document) for s in wrong]}"
    slowest = max(s.finished - s.started for s in requests)
    # A correctness bound, not a speed figure: the client's own patience, which a request
    # over it already failed above, plus slack for the client thread's scheduling.
    assert slowest < ANSWER_BOUND_SECONDS + 0.5, f"{fault}: {describe(requests)}"


@pytest.mark.slow
def test_every_request_is_answered_within_3_s_while_postgres_is_stopped_or_hung(
    tmp_path: Path,
) -> None:
    with private_postgres(tmp_path / "postgres") as postgres:
        url = postgres.url
        ops, frontend = cli_key(url, "ops"), cli_key(url, "frontend")
        with serve(url, tmp_path / "serve.log", ENVIRONMENT, workers=2) as server:
            pairs = setup_tables(server.base, ops, frontend, TABLES)
            load = Mixed(frontend)
            load.base = server.base
            load.timeout = ANSWER_BOUND_SECONDS
            opener = threading.Thread(target=feeds, args=(load, ops))
            load.start(pairs)
            try:
                load.wait_for(lambda s: s.acknowledged, after=time.monotonic(), within=10)
                time.sleep(1.0)

                stopped = time.monotonic()
                # The feed is first opened now: each worker's log tail starts with no database.
                opener.start()
                postgres.stop()
                time.sleep(FAULT_SECONDS)
                postgres.start()
                back = time.monotonic()
                load.wait_for(written, after=back, within=RECOVERY_BOUND_SECONDS)
                time.sleep(1.0)

                with hung(postgres):
                    frozen = time.monotonic()
                    time.sleep(FAULT_SECONDS)
                thawed = time.monotonic()
                load.wait_for(written, after=thawed, within=RECOVERY_BOUND_SECONDS)
                time.sleep(1.0)
            finally:
                load.finish()
                opener.join(timeout=2 * ANSWER_BOUND_SECONDS)
            assert server.process.poll() is None, "shoebox serve exited"

        sent = list(load.sent)
        in_stop, in_hang = during(sent, stopped, back), during(sent, frozen, thawed)
        print(f"PostgreSQL stopped {FAULT_SECONDS:g} s: {describe(in_stop)}")
        print(f"PostgreSQL hung (SIGSTOP) {FAULT_SECONDS:g} s: {describe(in_hang)}")
        print(f"whole run: {describe(sent)}")
        check_answered(in_stop, "stopped")
        check_answered(in_hang, "hung")
        check_answered(sent, "whole run")
        for fault, requests in (("stopped", in_stop), ("hung", in_hang)):
            refused = [s for s in requests if s.status == 503]
            assert len(refused) >= 5, f"{fault}: too few refusals to prove anything"

        # The writes: a read appends nothing to find in the log.
        acknowledged = [s.request_id for s in sent if s.acknowledged and s.method != "GET"]
        _, found = check_books(url, acknowledged)
        Figures(
            "PostgreSQL stopped, then hung, under load",
            sent=sum(1 for s in sent if s.method != "GET"),
            acknowledged=len(acknowledged),
            found_in_log=found,
        ).record()
