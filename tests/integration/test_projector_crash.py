"""The projector's asynchronous commits against a PostgreSQL crash (kill -9 of the server).

A private embedded server, since the shared one must never be stopped. The projector commits
without waiting for its WAL to reach the disk (docs/architecture.md, "The projector's
commits"), so a crash may lose its last passes; each loses its read-model writes and its
checkpoint's move together, and the follower does them again from the log.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

import psycopg
import pytest

from events.migrations import apply_migrations
from events.postgres import Pool, PostgresEventStore, app_conninfo, open_pool
from service.application.actor import Actor
from service.application.read_models import projector as read_models
from service.application.wallets import WalletService
from service.embedded import EmbeddedPostgres
from tests.integration.test_projections import SteppingClock, _dumps

OPS = Actor("ops-1", "ops")


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                stat = (entry / "stat").read_text()
                if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry.name))
    return found


def _crash(postmaster: int) -> None:
    """SIGKILL the server and every backend and helper of it, the walwriter included."""
    children = _children(postmaster)
    os.kill(postmaster, signal.SIGKILL)
    for child in children:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while any(Path(f"/proc/{p}").exists() for p in [postmaster, *children]):
        assert time.monotonic() < deadline
        time.sleep(0.05)


def _checkpoints(pool: Pool) -> dict[str, int]:
    with pool.connection() as conn:
        rows = conn.execute("SELECT subscription, position FROM checkpoints").fetchall()
    return {str(name): int(position) for name, position in rows}


@pytest.mark.slow
def test_a_crash_loses_whole_passes_and_the_follower_redoes_them(tmp_path: Path) -> None:
    data_dir = tmp_path / "postgres"
    with EmbeddedPostgres(data_dir) as server:
        apply_migrations(server.url)
        with psycopg.connect(server.url, autocommit=True) as admin:
            # The longest the WAL writer may wait: the projector's last commits are then still
            # in shared memory when the server dies, as they may be in any crash.
            admin.execute("ALTER SYSTEM SET wal_writer_delay = '10s'")
            admin.execute("SELECT pg_reload_conf()")
        pool = open_pool(app_conninfo(server.url, environ={}), max_size=4)
        wallets = WalletService(PostgresEventStore(pool), SteppingClock())
        projector = read_models.Projector(
            [read_models.follower(pool, poll_interval=0.05, gather=0.0, batch_size=20)]
        )
        projector.start()
        acknowledged = 0
        for n in range(300):
            wallets.deposit(f"p{n % 17}", 100 + n, "float", OPS)
            acknowledged += 1
        # The appends stop; the projector's passes over the last of them are asynchronous
        # commits that nothing has flushed yet.
        deadline = time.monotonic() + 30
        reads = read_models.status
        while any(s.lag_events for s in reads(pool, SteppingClock()())):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        before_crash = _checkpoints(pool)
        _crash(server.pid)
        projector.stop()
        pool.close()

    with EmbeddedPostgres(data_dir) as server:
        pool = open_pool(app_conninfo(server.url, environ={}), max_size=4)
        try:
            with pool.connection() as conn:
                head = conn.execute("SELECT max(position) FROM events").fetchone()
                # Every acknowledged append survived: the appends' commits are synchronous.
                deposits = conn.execute("SELECT count(*) FROM events").fetchone()
            assert head is not None
            assert deposits is not None
            assert deposits[0] == acknowledged
            after_crash = _checkpoints(pool)
            # The crash did lose passes (else this test shows nothing), never more than made.
            assert after_crash["wallets"] < before_crash["wallets"] == head[0]
            # What survived of the wallets model is exactly its checkpoint's share of the log:
            # its writes and its checkpoint were lost together, or kept together.
            with pool.connection() as conn:
                rows = conn.execute("SELECT count(*) FROM proj_wallet_statement").fetchone()
                folded = conn.execute(
                    "SELECT count(*) FROM events WHERE category = 'wallet' AND position <= %s",
                    [after_crash["wallets"]],
                ).fetchone()
            assert rows == folded
            read_models.follower(pool, listen=False, gather=0.0).run_until_caught_up()
            assert all(p == head[0] for p in _checkpoints(pool).values())
            live = {p.name: _dumps(pool, p) for p in read_models.PROJECTIONS}
            read_models.rebuild(pool)
            assert {p.name: _dumps(pool, p) for p in read_models.PROJECTIONS} == live
        finally:
            pool.close()
