"""With no synchronous standby, strict synchronous mode holds every commit: writes answer 503.

The private cluster of tests/faults/test_failover.py; the standbys' hosts are lost (Patroni and
PostgreSQL SIGKILLed) while the primary stays. Patroni keeps the leader, and with
`synchronous_mode_strict` every commit waits for a standby that is not there. Shoebox answers
each write 503 with Retry-After within its answer bound: it neither hangs nor acknowledges a
write that is on one machine only.

A commit waiting for the standby is already in the primary's WAL and PostgreSQL cannot take it
back: it stays invisible while it waits, and becomes visible once a standby confirms it (or at
once if its wait is cancelled). So a write answered 503 here may still land later, as after
any timeout; none was acknowledged, and each may be retried with its Idempotency-Key
(docs/operations.md, "Failover"). The test counts the rows visible meanwhile.
"""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from service.web.api import ANSWER_BOUND_SECONDS
from tests.e2e.servers import serve
from tests.faults.load import Load, cli_key, setup_tables
from tests.faults.test_failover import _missing, ha_cluster

pytestmark = [pytest.mark.slow, pytest.mark.skipif(_missing() is not None, reason=_missing() or "")]


def rows_in_log(url: str) -> int:
    """Rows in the log, sequenced or not."""
    with psycopg.connect(url, connect_timeout=3) as conn:
        row = conn.execute(
            "SELECT (SELECT count(*) FROM events) + (SELECT count(*) FROM unsequenced_events)"
        ).fetchone()
    assert row is not None
    return int(row[0])


def test_with_no_synchronous_standby_writes_answer_503_within_the_bound(tmp_path: Path) -> None:
    with ha_cluster(tmp_path / "logs") as cluster:
        url = cluster.url
        ops, frontend = cli_key(url, "ops"), cli_key(url, "frontend")
        environment = {"SHOEBOX_RATE_LIMIT_PER_SECOND": "0", "REDIS_URL": ""}
        with serve(url, tmp_path / "serve.log", environment, workers=1) as server:
            pairs = setup_tables(server.base, ops, frontend, 1)
            ((table, player),) = pairs
            primary = cluster.primary()
            # The standbys' hosts are lost: the primary keeps its leader key, but strict
            # synchronous mode holds every commit until a standby is back.
            for name in cluster.state["ports"]["nodes"]:
                if name != primary:
                    cluster.lose_host(name)
            load = Load(frontend)
            load.base = server.base
            before = rows_in_log(url)
            bet = {"player_id": player, "spot": "banker", "stake_pence": 100}
            answers = [load.request("POST", f"/v1/tables/{table}/bets", bet) for _ in range(3)]
            # Reads do not wait for a standby: what the primary holds now, acknowledged or not.
            landed = rows_in_log(url) - before
        statuses = [a.status for a in answers]
        assert statuses == [503] * 3, [(a.status, a.document) for a in answers]
        assert all(int(a.retry_after or 0) > 0 for a in answers)
        # The answer bound, and a little for the client's own connection and scheduling.
        slowest = max(a.finished - a.started for a in answers)
        assert slowest < ANSWER_BOUND_SECONDS + 1.0, slowest
        print(
            f"\nno synchronous standby: bets answered {statuses}, slowest {slowest:.2f} s;"
            f" {landed} rows visible on the primary meanwhile"
        )
