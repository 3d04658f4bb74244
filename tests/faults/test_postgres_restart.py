"""PostgreSQL restarted under load: 503 with Retry-After meanwhile, then recovery by itself.

A private PostgreSQL (never the shared one) serves a real `shoebox serve`; threads play rounds
at tables of their own. PostgreSQL is stopped with pg_ctl's fast shutdown (every session
terminated), kept down for a few seconds, and started again on the same port and data. Then:

- every request sent while it was down was answered 503 with Retry-After, none 500, none cut
  off or timed out by the client (every wait is bounded: the pool's checkout at 5 s);
- the service recovered without being restarted (the same gunicorn workers) within 30 s of
  PostgreSQL's return: the pools dropped the dead sessions and reconnected with backoff;
- every 2xx is in the log, the chain verifies, every stake settles once, money is conserved.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from service.web.problems import PROBLEM_TYPE_BASE
from tests.e2e.servers import serve
from tests.faults.figures import Figures
from tests.faults.load import REQUEST_TIMEOUT_SECONDS, Load, check_books, cli_key, setup_tables
from tests.faults.private_servers import private_postgres

TABLES = 3
# Longer than the pool's checkout wait (5 s), so that requests also meet the bounded wait.
OUTAGE_SECONDS = 6.0
RECOVERY_BOUND_SECONDS = 30.0
AFTER_RECOVERY_SECONDS = 2.0
ENVIRONMENT = {"SHOEBOX_RATE_LIMIT_PER_SECOND": "0", "REDIS_URL": ""}


def children(pid: int) -> set[int]:
    return {int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()}


@pytest.mark.slow
def test_postgres_restarted_under_load_is_503_then_recovers_losing_nothing(
    tmp_path: Path,
) -> None:
    with private_postgres(tmp_path / "postgres") as postgres:
        url = postgres.url
        ops, frontend = cli_key(url, "ops"), cli_key(url, "frontend")
        # Redis is left out: scheduling is another test's fault, and a shared queue is not ours.
        with serve(url, tmp_path / "serve.log", ENVIRONMENT, workers=2) as server:
            pairs = setup_tables(server.base, ops, frontend, TABLES)
            workers = children(server.process.pid)
            load = Load(frontend)
            load.base = server.base
            load.start(pairs)
            try:
                load.wait_for(lambda s: s.acknowledged, after=time.monotonic(), within=10)
                time.sleep(1.0)
                postgres.stop()
                down = time.monotonic()
                time.sleep(OUTAGE_SECONDS)
                restarting = time.monotonic()
                postgres.start()
                back = time.monotonic()
                first = load.wait_for(
                    lambda s: s.acknowledged, after=back, within=RECOVERY_BOUND_SECONDS
                )
                time.sleep(AFTER_RECOVERY_SECONDS)
            finally:
                load.finish()
            assert server.process.poll() is None, "shoebox serve exited"
            assert children(server.process.pid) == workers, "a worker was restarted"

        sent = list(load.sent)
        # Answered after PostgreSQL had stopped, and sent before it was started again: each is
        # a 503 with Retry-After, or else it waited (boundedly) for the pool and was answered
        # once PostgreSQL was back. Back means from `restarting` on: pg_ctl returns only after
        # polling the started server, which may already have answered a waiting request.
        during = [s for s in sent if s.finished > down and s.started < restarting]
        refused = [s for s in during if s.status == 503 and int(s.retry_after or 0) > 0]
        answered_later = [
            s
            for s in during
            if isinstance(s.status, int) and s.status < 500 and s.finished >= restarting
        ]
        # Sent before the stop and answered after it: its statement ran, or failed, before the
        # server went; the stop is only timed once pg_ctl returns, so its answer may come after.
        in_flight = [
            s
            for s in during
            if s.started < down
            and isinstance(s.status, int)
            and s.status < 500
            and s not in answered_later
        ]
        # Or a refusal by the game's rules, decided from the table as this process holds it
        # (a Deal after the player's bet was refused with a 503: there is no bet to deal), which
        # needs no database and writes nothing (the books below are checked all the same).
        by_the_rules = [
            s
            for s in during
            if isinstance(s.status, int)
            and 400 <= s.status < 500
            and s not in answered_later
            and s not in in_flight
            and isinstance(s.document, dict)
            and str(s.document.get("type", "")).startswith(PROBLEM_TYPE_BASE)
        ]
        accounted = (*refused, *answered_later, *in_flight, *by_the_rules)
        assert len(accounted) == len(during), [s for s in during if s not in accounted][:5]
        assert refused, "no request was refused while PostgreSQL was down"
        statuses = load.statuses
        assert 500 not in statuses, statuses
        # Answered, every one of them: nothing refused, reset or left hanging to the timeout.
        assert all(isinstance(s.status, int) for s in sent), statuses
        assert max(s.finished - s.started for s in sent) < REQUEST_TIMEOUT_SECONDS
        # Recovered for good: no pooled session left over from before the restart fails a
        # request once the service has answered again.
        after = [s for s in sent if s.started >= first.finished]
        assert any(s.acknowledged for s in after), statuses
        assert not [s for s in after if s.status == 503], [s for s in after if s.status == 503]

        acknowledged = load.acknowledged
        _, found = check_books(url, acknowledged)
        print(
            f"PostgreSQL restart: {len(during)} requests sent during the outage,"
            f" {len(refused)} refused with 503, {len(answered_later)} answered after its return;"
            f" first 2xx {first.finished - back:.2f} s after its return; statuses {statuses}"
        )
        Figures(
            "PostgreSQL restarted under load",
            sent=len(sent),
            acknowledged=len(acknowledged),
            found_in_log=found,
        ).record()
