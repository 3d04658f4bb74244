"""A long read on a standby survives the primary's vacuum only with hot_standby_feedback.

What docs/operations.md asks of a replica that serves exports: `hot_standby_feedback = on`.
A regulator's export holds one snapshot for its whole run; meanwhile the primary deletes and
vacuums rows that snapshot still sees. Replaying that vacuum on the standby conflicts with the
snapshot, and after `max_standby_streaming_delay` the standby cancels the read. With feedback,
the standby tells the primary the oldest transaction its queries still see, the primary's
vacuum keeps those rows, and there is no conflict to replay.

Shown on a private primary and standby, both ways: the standby's setting is switched for the
control (the delay is made short, 100 ms, so the control fails at once rather than in 30 s).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from tests.faults.private_servers import (
    PrivatePostgres,
    private_postgres,
    private_replica,
)

pytestmark = pytest.mark.slow

ROWS = 1000
BOUND_SECONDS = 30.0
"""A hang guard for the polls below: never a speed bound."""


@pytest.fixture(scope="module")
def pair(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[PrivatePostgres, PrivatePostgres]]:
    logs: Path = tmp_path_factory.mktemp("long-reads")
    with private_postgres(logs) as primary, private_replica(primary, logs) as replica:
        with psycopg.connect(replica.server_url, autocommit=True) as conn:
            conn.execute("ALTER SYSTEM SET max_standby_streaming_delay = '100ms'")
            conn.execute("ALTER SYSTEM SET wal_receiver_status_interval = '1s'")
            conn.execute("SELECT pg_reload_conf()")
        yield primary, replica


def _feedback(replica: PrivatePostgres, on: bool) -> None:
    with psycopg.connect(replica.server_url, autocommit=True) as conn:
        conn.execute(f"ALTER SYSTEM SET hot_standby_feedback = {'on' if on else 'off'}")
        conn.execute("SELECT pg_reload_conf()")
        while conn.execute("SHOW hot_standby_feedback").fetchone() != ("on" if on else "off",):
            conn.execute("SELECT pg_sleep(0.05)")


def _replayed(primary: PrivatePostgres, replica: PrivatePostgres) -> None:
    """Wait until the standby has replayed everything the primary has written so far."""
    with psycopg.connect(primary.url, autocommit=True) as conn:
        row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
    assert row is not None
    with psycopg.connect(replica.url, autocommit=True) as conn:
        for _ in range(int(BOUND_SECONDS / 0.05)):
            done = conn.execute("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", [row[0]])
            if done.fetchone() == (True,):
                return
            conn.execute("SELECT pg_sleep(0.05)")
    raise AssertionError("the standby did not replay in time")


def _long_read_then_vacuum(primary: PrivatePostgres, replica: PrivatePostgres, name: str) -> int:
    """A snapshot held on the standby across the primary's delete and vacuum; its count after."""
    table = sql.Identifier(name)
    with psycopg.connect(primary.url, autocommit=True) as conn:
        conn.execute(
            sql.SQL("CREATE TABLE {} (n int) WITH (autovacuum_enabled = off)").format(table)
        )
        conn.execute(sql.SQL("INSERT INTO {} SELECT generate_series(1, %s)").format(table), [ROWS])
    _replayed(primary, replica)
    with psycopg.connect(replica.url) as export:
        export.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        first = export.execute(sql.SQL("SELECT count(*) FROM {}").format(table)).fetchone()
        assert first == (ROWS,)
        with psycopg.connect(primary.url, autocommit=True) as conn:
            # With feedback on, until the standby has said which snapshot it holds.
            for _ in range(int(BOUND_SECONDS / 0.05)):
                held = conn.execute(
                    "SELECT bool_and(backend_xmin IS NOT NULL) FROM pg_stat_replication"
                ).fetchone()
                if held == (True,) or replica_feedback(replica) == "off":
                    break
                conn.execute("SELECT pg_sleep(0.05)")
            conn.execute(sql.SQL("DELETE FROM {}").format(table))
            conn.execute(sql.SQL("VACUUM {}").format(table))
        _replayed(primary, replica)
        later = export.execute(sql.SQL("SELECT count(*) FROM {}").format(table)).fetchone()
        assert later is not None
        return int(later[0])


def replica_feedback(replica: PrivatePostgres) -> str:
    with psycopg.connect(replica.server_url, autocommit=True) as conn:
        row = conn.execute("SHOW hot_standby_feedback").fetchone()
    assert row is not None
    return str(row[0])


def test_with_feedback_a_long_read_on_the_standby_outlives_the_primarys_vacuum(
    pair: tuple[PrivatePostgres, PrivatePostgres],
) -> None:
    primary, replica = pair
    _feedback(replica, on=True)
    # Its snapshot still sees every row: the primary's vacuum kept them for it.
    assert _long_read_then_vacuum(primary, replica, "kept_for_the_export") == ROWS


def test_without_feedback_the_same_read_is_cancelled_by_replay(
    pair: tuple[PrivatePostgres, PrivatePostgres],
) -> None:
    primary, replica = pair
    _feedback(replica, on=False)
    # Until the primary has dropped what the standby said before (it then holds no xmin).
    with psycopg.connect(primary.url, autocommit=True) as conn:
        for _ in range(int(BOUND_SECONDS / 0.05)):
            held = conn.execute(
                "SELECT bool_or(backend_xmin IS NOT NULL) FROM pg_stat_replication"
            ).fetchone()
            if held == (False,):
                break
            conn.execute("SELECT pg_sleep(0.05)")
    try:
        with pytest.raises(psycopg.Error, match="conflict with recovery"):
            _long_read_then_vacuum(primary, replica, "vacuumed_under_the_export")
    finally:
        _feedback(replica, on=True)
