"""A server kept in a data directory and shared by every handle that enters it.

The data directory also holds a registry of the handles using the server. The first handle
starts the server, later ones (another `make run`, say) share it, and the last to leave
stops it. A server that no registry names, one started by hand for instance, is shared
but never stopped.
"""

import json
import logging
import os
import secrets
from abc import ABC, abstractmethod
from dataclasses import dataclass, replace
from pathlib import Path
from types import TracebackType
from typing import Self

from service.embedded.errors import EmbeddedServerError
from service.embedded.processes import exclusive, pid_alive

_logger = logging.getLogger(__name__)

_LOG_TAIL_LINES = 20


@dataclass(frozen=True, slots=True)
class Running:
    """A server process and the port it listens on."""

    pid: int
    port: int


@dataclass(frozen=True, slots=True)
class Registry:
    """The server process a data directory's handles share, and the handles sharing it."""

    server_pid: int
    port: int
    handles: tuple[str, ...]

    @classmethod
    def read(cls, path: Path) -> "Registry | None":
        """The registry kept at `path`, or None when there is none that can be trusted."""
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
        """Replace the registry at `path` with this one, never leaving half a file."""
        staging = path.with_name(path.name + ".tmp")
        staging.write_text(
            json.dumps({"server_pid": self.server_pid, "port": self.port, "handles": self.handles})
        )
        staging.replace(path)

    def without(self, handle: str) -> "Registry":
        """The registry less `handle` and any handle whose process has died without leaving."""
        alive = tuple(
            other
            for other in self.handles
            if other != handle and pid_alive(int(other.partition(":")[0]))
        )
        return replace(self, handles=alive)


class SharedServer(ABC):
    """A server kept in a data directory and shared by every handle that enters it."""

    _kind = "server"

    def __init__(self, data_dir: Path, *, port: int | None, start_timeout: float) -> None:
        self._data_dir = Path(data_dir).expanduser().resolve()
        self._requested_port = port
        self._start_timeout = start_timeout
        self._running: Running | None = None
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
        with exclusive(self._data_dir / ".lock"):
            registry = Registry.read(self._registry_path)
            running = self._find_running(registry)
            self._reused = running is not None
            if running is None:
                running = self._start()
                registry = Registry(running.pid, running.port, ())
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
        with exclusive(self._data_dir / ".lock"):
            registry = Registry.read(self._registry_path)
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
    def _find_running(self, registry: Registry | None) -> Running | None:
        """The server already running on this data directory, if any."""

    @abstractmethod
    def _start(self) -> Running:
        """Start the server and wait until it is ready."""

    @abstractmethod
    def _stop(self, running: Running) -> None:
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
