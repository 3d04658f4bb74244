"""Running, watching and stopping the servers' processes, with only the standard library."""

import fcntl
import os
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from service.embedded.errors import ServerStartTimeoutError

HOST = "127.0.0.1"
POLL_SECONDS = 0.02


@dataclass(frozen=True, slots=True)
class Account:
    """A user and group to run a server as."""

    uid: int
    gid: int


def run_as(
    account: Account | None,
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
def exclusive(lock_path: Path) -> Iterator[None]:
    """Hold an exclusive lock on `lock_path`, across processes and within one."""
    with lock_path.open("a") as lock:
        # flock belongs to this open file, so two handles in one process exclude each other too.
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def process_start_time(pid: int) -> float | None:
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


def read_pid_file(path: Path) -> int | None:
    """The process id a pid file holds, or None when it is missing or not a number."""
    try:
        return int(path.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None


def pid_alive(pid: int) -> bool:
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


def terminate(pid: int, *, grace: float) -> bool:
    """Send SIGTERM, then SIGKILL after `grace` seconds; whether the process has gone."""
    for signal_number, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 2.0)):
        try:
            os.kill(pid, signal_number)
        except ProcessLookupError:
            return True
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if not pid_alive(pid):
                return True
            time.sleep(POLL_SECONDS)
    return not pid_alive(pid)


def free_port() -> int:
    """A port nothing listens on at HOST now; a server started on it may still lose a race."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((HOST, 0))
        port: int = probe.getsockname()[1]
        return port
