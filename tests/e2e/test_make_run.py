"""`shoebox run` (what `make run` starts) on a machine with nothing configured.

With DATABASE_URL and REDIS_URL unset it starts the embedded PostgreSQL and Redis, prints demo
keys and a curl that works, and a Ctrl+C (SIGINT to its process group, as a terminal sends it)
stops every process it started, the embedded servers included.
"""

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.ports import free_port

# Each test starts both embedded servers and every Shoebox process, for seconds each.
pytestmark = pytest.mark.slow

SHOEBOX = Path(sys.executable).with_name("shoebox")
START_TIMEOUT_SECONDS = 120.0
STOP_TIMEOUT_SECONDS = 60.0
# `shoebox run` must be given a port number, which another process can take between our
# choosing it and gunicorn binding it: then a new port is tried, this many times in all.
PORT_ATTEMPTS = 3
KEY_LINE = re.compile(r"^  (frontend|ops|regulator) +(sbx_[A-Za-z0-9_-]{43})$", re.MULTILINE)
WALLET_LINE = re.compile(r"^  wallet +(http://127\.0\.0\.1:\d+) ", re.MULTILINE)
ADMIN_LINE = re.compile(r"^  admin +(\S+)$", re.MULTILINE)
CASINO_LINE = re.compile(r"^  casino frontend (sbx_[A-Za-z0-9_-]{43})$", re.MULTILINE)


def call(method: str, url: str, token: str, body: dict[str, Any] | None = None) -> Any:
    """One JSON request; the answer's document (an HTTP error fails the test with its body)."""
    request = urllib.request.Request(
        url,
        data=None if body is None else json.dumps(body).encode(),
        method=method,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return json.loads(answer.read())
    except urllib.error.HTTPError as error:
        raise AssertionError(f"{method} {url}: {error.code} {error.read()!r}") from None


def seamless_bet(banner: str, keys: dict[str, str]) -> None:
    """README's 'A seamless bet with curl', over HTTP: the demo's seamless operator bets."""
    (wallet,) = WALLET_LINE.findall(banner)
    (admin,) = ADMIN_LINE.findall(banner)
    (casino,) = CASINO_LINE.findall(banner)
    (api,) = re.findall(r"^Shoebox is running: (\S+)$", banner, re.MULTILINE)
    call(
        "POST",
        f"{wallet}/admin/players",
        admin,
        {"player_id": "carol", "currency": "GBP", "deposit": 5000},
    )
    token = call("POST", f"{wallet}/admin/sessions", admin, {"player_id": "carol"})
    session = call(
        "POST", f"{api}/sessions", casino, {"player_id": "carol", "token": token["session_token"]}
    )
    assert session["balance_pence"] == 5000
    call("POST", f"{api}/tables", keys["ops"], {"table_id": "casino-1"})
    call("POST", f"{api}/tables/casino-1/seats", casino, {"player_id": "carol", "seat": 1})
    bet = call(
        "POST",
        f"{api}/tables/casino-1/bets",
        casino,
        {"player_id": "carol", "spot": "banker", "stake_pence": 500},
    )
    assert bet["balance_after"]["available_pence"] == 4500
    assert call("GET", f"{wallet}/admin/players/carol", admin)["balance"] == 4500


def processes_mentioning(text: str) -> list[str]:
    """The command lines of live processes that mention `text` (our data dir, say)."""
    found: list[str] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdecimal():
            continue
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            status = (entry / "stat").read_text().rpartition(")")[2].split()[0]
        except OSError:
            continue
        if text in command and status not in ("Z", "X"):
            found.append(f"{entry.name}: {command}")
    return found


def descendants(pid: int) -> set[int]:
    """Every live process below `pid`, whatever session it has moved to."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdecimal():
            try:
                fields = (entry / "stat").read_text().rpartition(")")[2].split()
            except OSError:
                continue
            parents[int(entry.name)] = int(fields[1])
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier}
        found |= frontier
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def server_pids(data_dir: Path) -> set[int]:
    """The embedded servers' pids, from the files they write (both daemonise away from us)."""
    redis_pid = int((data_dir / "redis" / "redis.pid").read_text().strip())
    postmaster = (data_dir / "postgres" / "pgdata" / "postmaster.pid").read_text()
    return {redis_pid, int(postmaster.splitlines()[0])}


class PortTakenError(Exception):
    """The API's port was taken before gunicorn could bind it."""


class Run:
    """A `shoebox run` process in a session of its own, its output collected from a file."""

    def __init__(self, data_dir: Path, port: int) -> None:
        environment = {
            name: value
            for name, value in os.environ.items()
            if name not in ("DATABASE_URL", "REDIS_URL", "SHOEBOX_APP_DATABASE_URL")
        }
        environment |= {"SHOEBOX_DATA_DIR": str(data_dir), "SHOEBOX_API_PORT": str(port)}
        self.log = data_dir.parent / "run.log"
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                [str(SHOEBOX), "run", "--workers", "2"],
                env=environment,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def await_banner(self) -> str:
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while "Press Ctrl+C to stop." not in self.output():
            if self.process.poll() is not None and "Connection in use" in self.output():
                raise PortTakenError(self.output())
            assert self.process.poll() is None, self.output()
            assert time.monotonic() < deadline, self.output()
            time.sleep(0.2)
        return self.output()

    def interrupt(self) -> int:
        """Ctrl+C: SIGINT to the whole foreground process group, as a terminal sends it."""
        os.killpg(self.process.pid, signal.SIGINT)
        return self.process.wait(timeout=STOP_TIMEOUT_SECONDS)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def start_run(data_dir: Path) -> tuple[Run, str]:
    """A `shoebox run` that has printed its banner, and the banner."""
    for attempt in range(1, PORT_ATTEMPTS + 1):
        run = Run(data_dir, free_port())
        try:
            return run, run.await_banner()
        except PortTakenError:
            if attempt == PORT_ATTEMPTS:
                raise
        except BaseException:
            run.kill()
            raise
    raise AssertionError("unreachable: the last attempt returns or raises")


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    directory = tmp_path / "data"
    yield directory
    # Whatever a failed test left running in this data dir goes with it.
    for line in processes_mentioning(str(directory)):
        pid = int(line.split(":")[0])
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.skipif(shutil.which("curl") is None, reason="the printed command needs curl")
def test_make_run_starts_embedded_servers_prints_a_working_curl_and_stops_on_ctrl_c(
    data_dir: Path,
) -> None:
    run, banner = start_run(data_dir)
    try:
        assert "PostgreSQL embedded" in banner
        assert "Redis      embedded" in banner
        started = descendants(run.process.pid) | server_pids(data_dir)
        # serve's master and its 2 workers, the worker and rq's scheduler, the two servers.
        assert len(started) >= 7, started
        assert all(alive(pid) for pid in started)

        keys = dict(KEY_LINE.findall(banner))
        assert set(keys) == {"frontend", "ops", "regulator"}
        key_file = data_dir / "demo-keys.json"
        assert key_file.stat().st_mode & 0o777 == 0o600
        assert {
            entry["role"]: entry["secret"] for entry in json.loads(key_file.read_text())
        } == keys

        (curl,) = [line.strip() for line in banner.splitlines() if line.strip().startswith("curl ")]
        answered = subprocess.run(
            [*shlex.split(curl), "--write-out", "\n%{http_code}"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        body, _, status = answered.stdout.rpartition("\n")
        assert status == "200", answered.stdout + answered.stderr
        assert json.loads(body) == {"tables": []}
        # The demo's seamless operator, against the reference wallet `shoebox run` started.
        assert (data_dir / "demo-wallet.json").stat().st_mode & 0o777 == 0o600
        seamless_bet(banner, keys)
    finally:
        code = run.interrupt() if run.process.poll() is None else run.process.returncode
        run.kill()
    assert code == 0, run.output()
    assert "SIGINT: Shoebox stopped" in run.output()
    assert [pid for pid in started if alive(pid)] == [], run.output()
    assert processes_mentioning(str(data_dir)) == [], run.output()


def test_make_run_reuses_its_demo_keys_on_the_next_start(data_dir: Path) -> None:
    first, first_banner = start_run(data_dir)
    try:
        keys = dict(KEY_LINE.findall(first_banner))
    finally:
        assert first.interrupt() == 0, first.output()
    second, second_banner = start_run(data_dir)
    try:
        assert dict(KEY_LINE.findall(second_banner)) == keys
        # The demo wallet's admin token and the casino's key too, so commands copied from the
        # first run still work (the wallet's port may differ).
        for line in (ADMIN_LINE, CASINO_LINE):
            assert line.findall(second_banner) == line.findall(first_banner) != []
    finally:
        assert second.interrupt() == 0, second.output()
    assert set(keys) == {"frontend", "ops", "regulator"}
