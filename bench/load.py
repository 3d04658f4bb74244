"""Load test: the whole server (`shoebox run`) under rising numbers of busy tables, to its ceiling.

Run as `.venv/bin/python bench/load.py [--quick] [--levels 1,10,50,200] [--seconds S]` with
DATABASE_URL naming a PostgreSQL server (default postgresql://postgres@127.0.0.1:5432/postgres).
It creates a database of its own and starts `shoebox run` on it (its gunicorn workers, the
window worker, the rebuild worker and the projector) with the embedded Redis, a private
redis-server, so nothing of it touches a shared Redis; it drops both at the end. Every request
goes to 127.0.0.1, and each level is bounded in time and in requests.

Each level plays N tables at once for S seconds. A table has P players and one seat that never
acts, as at a live table where someone always lets the clock run: every window therefore lasts
until its deadline, and is closed by the worker's timer, not by a request. Each player places
one to three bets and presses Deal in every window, most of them (BURST_SHARE) in the window's
last BURST_SECONDS, the rest earlier, at random. A front end learns of the next round by
reading the table's state after the deadline, as a page polling it would.

Per level it reports rounds and bets a second, the bets' p50/p99/max latency, the errors by
status, every 409 by the game rule it names or, naming none, by its problem type (a
`concurrent-update` is a request refused only for losing races to the log, counted apart and
expected to be none: issue 21), how late windows closed (from the log: the recorded_at of the
exclusion that closed a window against the window_closes_at its RoundOpened set, p50 and p99),
who closed them (the worker's timer, the projector's sweeper or a request, from the processes'
logs), and the read models' lag at the level's end. It stops by itself when bets a second
grow by less than GROWTH_TO_GO_ON from one level to the next, and names the bottleneck from the
CPU that each process used (from /proc), the PostgreSQL backends' wait events (sampled from
pg_stat_activity, since pg_stat_statements is not preloaded on the shared server) and a py-spy
profile of the busiest API worker. A live line shows each level's progress on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import os
import random
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Final

_ROOT = Path(__file__).resolve().parent.parent
# Run as a script, Python puts bench/ first on the path, where bench/domain.py would shadow
# the `domain` package; the project root goes before it.
sys.path.insert(0, str(_ROOT))

import psycopg  # noqa: E402
import psycopg.conninfo  # noqa: E402
import psycopg.sql  # noqa: E402

from bench.common import (  # noqa: E402
    CONCURRENCY_REFUSAL,
    machine_ticks,
    problem_kind,
    server_url,
    throwaway_database,
)
from domain.round import (  # noqa: E402
    ExclusionReason,
    PlayerExcluded,
    RoundOpened,
    RoundSettled,
)
from events.migrations import apply_migrations  # noqa: E402
from events.postgres import PostgresEventStore, open_pool  # noqa: E402
from events.store import EventMetadata  # noqa: E402
from service.application.keys import Role, create_key  # noqa: E402

BIN: Final = Path(sys.executable).parent
SHOEBOX: Final = BIN / "shoebox"
PY_SPY: Final = BIN / "py-spy"
START_TIMEOUT_SECONDS: Final = 60.0
REQUEST_TIMEOUT_SECONDS: Final = 30.0
OPERATOR: Final = EventMetadata(actor="bench-load", role="cli")
DEPOSIT: Final = 100_000_000
LEVELS: Final = (1, 10, 50, 200)
QUICK_LEVELS: Final = (1, 2)
GROWTH_TO_GO_ON: Final = 1.10
"""A level must bring at least 10% more bets a second than the one before, or the run stops."""
BURST_SHARE: Final = 0.7
BURST_SECONDS: Final = 1.5
"""Most players act in the window's last seconds, as at a live table."""
EARLIEST_BEFORE_DEADLINE: Final = 0.3
"""No player starts later than this before the deadline (a slow answer can still miss it)."""
POLL_SECONDS: Final = 0.1
"""How often a table's front end reads its state while waiting for the next round."""
SPOTS: Final = ("player", "banker", "tie")
STAKES: Final = (100, 200, 500, 1_000, 2_000)
# The processes of `shoebox run`, told apart by their command lines.
GROUPS: Final = (
    ("rebuild worker", "worker --rebuilds"),
    ("worker", " worker"),
    ("projector", " projector"),
    ("redis", "redis-server"),
    ("gunicorn master", " serve "),
)


# -- an HTTP/1.1 client over asyncio streams: no client library is installed in the venv.


class Connection:
    """One keep-alive HTTP/1.1 connection to the server on the loopback address."""

    def __init__(self, port: int) -> None:
        self._port = port
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def request(
        self, method: str, path: str, key: str, body: object = None
    ) -> tuple[int, Any]:
        """Send one request, read its answer: (status, decoded JSON body or None)."""
        payload = b"" if body is None else json.dumps(body).encode()
        head = [
            f"{method} {path} HTTP/1.1",
            "Host: 127.0.0.1",
            f"Authorization: Bearer {key}",
            f"Content-Length: {len(payload)}",
        ]
        if body is not None:
            head.append("Content-Type: application/json")
            # What a careful front end sends; it also makes the one retry below safe.
            head.append(f"Idempotency-Key: {secrets.token_hex(12)}")
        message = ("\r\n".join(head) + "\r\n\r\n").encode() + payload
        reused = self._writer is not None
        try:
            return await self._exchange(message)
        except (ConnectionError, asyncio.IncompleteReadError):
            self.close()
            if not reused:
                raise
            # The server closed an idle kept-alive connection: send once more on a new one.
            return await self._exchange(message)

    async def _exchange(self, message: bytes) -> tuple[int, Any]:
        if self._writer is None:
            self._reader, self._writer = await asyncio.open_connection("127.0.0.1", self._port)
        assert self._reader is not None
        self._writer.write(message)
        await self._writer.drain()
        status_line = await self._reader.readline()
        if not status_line:
            raise ConnectionResetError("the server closed the connection")
        status = int(status_line.split()[1])
        length = 0
        chunked = False
        close = False
        while (line := await self._reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            name = name.strip().lower()
            if name == "content-length":
                length = int(value)
            elif name == "transfer-encoding" and "chunked" in value.lower():
                chunked = True
            elif name == "connection" and value.strip().lower() == "close":
                close = True
        if chunked:
            data = b""
            while (size := int((await self._reader.readline()).strip(), 16)) > 0:
                data += await self._reader.readexactly(size + 2)
            await self._reader.readline()
        else:
            data = await self._reader.readexactly(length)
        if close:
            self.close()
        return status, json.loads(data) if data.strip() else None

    def close(self) -> None:
        """Drop the connection; the next request opens another."""
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None


# -- what a level measured.


@dataclass(slots=True)
class Tally:
    """What the simulated players of one level did, from their side."""

    bets: int = 0
    requests: int = 0
    bet_latencies: list[float] = field(default_factory=list)
    errors: collections.Counter[str] = field(default_factory=collections.Counter)
    # Every 409, by the rule it names, or by its problem type when it names none.
    refusals: collections.Counter[str] = field(default_factory=collections.Counter)
    stop: bool = False


@dataclass(frozen=True, slots=True)
class Level:
    """One level's figures."""

    tables: int
    seconds: float
    rounds: int
    rounds_per_second: float
    bets: int
    bets_per_second: float
    requests: int
    ping_per_second: float
    commits_per_second: float
    requests_per_second: float
    appends_per_second: float
    bet_p50_ms: float
    bet_p99_ms: float
    bet_max_ms: float
    errors: dict[str, int]
    refusals: dict[str, int]
    concurrency_refusals: int
    windows: int
    late_p50_ms: float
    late_p99_ms: float
    late_max_ms: float
    # Of the windows after each table's first of the level (see `measure_level`).
    late_p99_later_ms: float
    later_windows: int
    closed_by: dict[str, int]
    lag_events: int
    lag_seconds: float
    cpu: dict[str, float]
    machine_busy: float
    waits: dict[str, float]
    lock_holder: dict[str, float]
    append_call_ms: float
    statements: dict[str, float]
    active_backends: float
    profile: list[tuple[str, float]]
    # The age of the oldest append waiting for the sequencer, sampled every 0.1 s (issue 22):
    # p50 / p99 / max in ms; empty on a log of before migration 0030.
    unsequenced_ms: tuple[float, float, float] | None = None


def percentile(values: Sequence[float], fraction: float) -> float:
    """The nearest-rank percentile; 0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, round(fraction * len(ordered) + 0.5))
    return ordered[min(rank, len(ordered)) - 1]


# -- the simulated players.


@dataclass(frozen=True, slots=True)
class Settings:
    """The shape of the simulated play."""

    players: int
    window_seconds: float
    seconds: float
    max_requests: int


def player_ids(table_id: str, players: int) -> list[str]:
    """The acting players of a table; its last seat is the one who never acts."""
    return [f"{table_id}-p{n}" for n in range(1, players + 1)]


def lurker_id(table_id: str) -> str:
    """The seated player who never acts, so that every window runs to its deadline."""
    return f"{table_id}-idle"


async def call(
    connection: Connection, tally: Tally, method: str, path: str, key: str, body: object = None
) -> tuple[int, Any]:
    """One request, counted; a transport failure counts as an error named after it."""
    tally.requests += 1
    try:
        status, answer = await asyncio.wait_for(
            connection.request(method, path, key, body), REQUEST_TIMEOUT_SECONDS
        )
    except (OSError, asyncio.IncompleteReadError, TimeoutError) as error:
        connection.close()
        tally.errors[type(error).__name__] += 1
        return 0, None
    if status >= 400:
        rule = answer.get("rule") if isinstance(answer, dict) else None
        tally.errors[f"{status} {rule}" if rule else str(status)] += 1
    if status == 409:
        tally.refusals[problem_kind(answer)] += 1
    return status, answer


async def act(
    port: int,
    key: str,
    table_id: str,
    player_id: str,
    round_id: str,
    at: float,
    tally: Tally,
    rng: random.Random,
) -> None:
    """One player's turn in a window: sleep until `at`, bet one to three times, press Deal.

    Each action names its round, as a careful front end does: one that arrives after the
    window closed is refused as late (round.betting_window_closed), not placed into the next
    round, where it would leave the player's next turn refused too.
    """
    await asyncio.sleep(max(0.0, at - time.monotonic()))
    connection = Connection(port)
    try:
        for _ in range(rng.randint(1, 3)):
            if tally.stop:
                return
            body = {
                "player_id": player_id,
                "spot": rng.choice(SPOTS),
                "stake_pence": rng.choice(STAKES),
                "round_id": round_id,
            }
            started = time.perf_counter()
            status, _ = await call(
                connection, tally, "POST", f"/v1/tables/{table_id}/bets", key, body
            )
            if status not in (200, 201):
                return  # the window closed under it, or the server refused: the turn is over
            tally.bet_latencies.append(time.perf_counter() - started)
            tally.bets += 1
        deal = {"player_id": player_id, "round_id": round_id}
        await call(connection, tally, "POST", f"/v1/tables/{table_id}/deal", key, deal)
    finally:
        connection.close()


def seconds_until(moment: str) -> float:
    """Seconds from now to an ISO timestamp (negative once it has passed)."""
    return datetime.fromisoformat(moment).timestamp() - time.time()


async def play_table(
    port: int, key: str, table_id: str, settings: Settings, until: float, tally: Tally
) -> None:
    """Play every window of one table until `until` (monotonic), then let it go idle."""
    rng = random.Random(table_id)
    players = player_ids(table_id, settings.players)
    front = Connection(port)
    state_path = f"/v1/tables/{table_id}/state"
    try:
        while time.monotonic() < until and not tally.stop:
            status, state = await call(front, tally, "GET", state_path, key)
            if status != 200:
                await asyncio.sleep(POLL_SECONDS)
                continue
            turns: list[asyncio.Task[None]] = []
            if state["phase"] == "betting" and state["window_closes_at"]:
                round_id, closes_at = state["round_id"], state["window_closes_at"]
                starters = players
            elif state["phase"] in ("idle", "settled", "ended_without_play"):
                # An idle table: the first player's bet opens the round and says when it closes.
                opener = players[0]
                body = {"player_id": opener, "spot": "banker", "stake_pence": 100}
                started = time.perf_counter()
                status, opened = await call(
                    front, tally, "POST", f"/v1/tables/{table_id}/bets", key, body
                )
                if status not in (200, 201) or not opened.get("window_closes_at"):
                    await asyncio.sleep(POLL_SECONDS)
                    continue
                tally.bet_latencies.append(time.perf_counter() - started)
                tally.bets += 1
                round_id, closes_at = opened["round_id"], opened["window_closes_at"]
                starters = players[1:]
                turns.append(
                    asyncio.create_task(
                        deal_soon(port, key, table_id, opener, round_id, closes_at, tally, rng)
                    )
                )
            else:
                await asyncio.sleep(POLL_SECONDS)  # closing or dealing: the next round is near
                continue
            left = seconds_until(closes_at)
            now = time.monotonic()
            for player_id in starters:
                if left <= EARLIEST_BEFORE_DEADLINE:
                    break
                burst = min(BURST_SECONDS, left / 2)
                if rng.random() < BURST_SHARE:
                    before = rng.uniform(
                        EARLIEST_BEFORE_DEADLINE, max(burst, EARLIEST_BEFORE_DEADLINE)
                    )
                else:
                    before = rng.uniform(burst, left)
                turns.append(
                    asyncio.create_task(
                        act(
                            port,
                            key,
                            table_id,
                            player_id,
                            round_id,
                            now + left - before,
                            tally,
                            rng,
                        )
                    )
                )
            await asyncio.gather(*turns)
            # The window runs to its deadline (one seat never acts); then a page polls for the
            # next round, which the deal opens at once.
            await asyncio.sleep(max(0.0, seconds_until(closes_at)))
            while time.monotonic() < until + settings.window_seconds * 2:
                status, state = await call(front, tally, "GET", state_path, key)
                if status == 200 and (state["round_id"] != round_id or state["phase"] == "idle"):
                    break
                await asyncio.sleep(POLL_SECONDS)
    finally:
        front.close()


async def deal_soon(
    port: int,
    key: str,
    table_id: str,
    player_id: str,
    round_id: str,
    closes_at: str,
    tally: Tally,
    rng: random.Random,
) -> None:
    """The opening player's Deal, some time in the window."""
    left = seconds_until(closes_at)
    at = time.monotonic() + rng.uniform(0.0, max(0.0, left - EARLIEST_BEFORE_DEADLINE))
    await asyncio.sleep(max(0.0, at - time.monotonic()))
    connection = Connection(port)
    try:
        deal = {"player_id": player_id, "round_id": round_id}
        await call(connection, tally, "POST", f"/v1/tables/{table_id}/deal", key, deal)
    finally:
        connection.close()


async def progress(label: str, tally: Tally, started: float, seconds: float) -> None:
    """A live line on stderr: elapsed time, bets and their rate, errors, p99 so far."""
    tty = sys.stderr.isatty()
    last_line = 0.0
    while True:
        elapsed = time.monotonic() - started
        rate = tally.bets / elapsed if elapsed > 0 else 0.0
        p99 = percentile(tally.bet_latencies[-2000:], 0.99) * 1000
        line = (
            f"[{label}] {min(elapsed, seconds):5.1f}/{seconds:.0f} s  bets {tally.bets}"
            f" ({rate:.0f}/s)  requests {tally.requests}  errors {sum(tally.errors.values())}"
            f"  p99 {p99:.0f} ms"
        )
        if tty:
            print(f"\r{line}\x1b[K", end="", file=sys.stderr, flush=True)
        elif elapsed - last_line >= 5:
            print(line, file=sys.stderr, flush=True)
            last_line = elapsed
        await asyncio.sleep(0.5)


async def run_level(
    port: int, key: str, table_ids: Sequence[str], settings: Settings, tally: Tally
) -> float:
    """Play the tables for the level's seconds; the seconds it took, drain included."""
    started = time.monotonic()
    until = started + settings.seconds
    label = f"{len(table_ids)} table{'s' if len(table_ids) != 1 else ''}"
    ticker = asyncio.create_task(progress(label, tally, started, settings.seconds))

    async def guard() -> None:
        while not tally.stop:
            if tally.requests >= settings.max_requests:
                tally.stop = True  # the level's request budget is spent
            await asyncio.sleep(0.2)

    guarding = asyncio.create_task(guard())
    try:
        await asyncio.gather(*(play_table(port, key, t, settings, until, tally) for t in table_ids))
    finally:
        tally.stop = True
        ticker.cancel()
        guarding.cancel()
        if sys.stderr.isatty():
            print(file=sys.stderr)
    return time.monotonic() - started


async def set_up_tables(
    port: int, ops: str, front: str, table_ids: Sequence[str], settings: Settings
) -> None:
    """Create each table, fund and seat its players and its idle seat; a few at a time."""
    tally = Tally()
    limit = asyncio.Semaphore(8)

    async def one(table_id: str) -> None:
        async with limit:
            connection = Connection(port)
            try:
                everyone = [*player_ids(table_id, settings.players), lurker_id(table_id)]
                table = {
                    "table_id": table_id,
                    "seats": len(everyone),
                    "betting_window_ms": round(settings.window_seconds * 1000),
                }
                status, answer = await call(connection, tally, "POST", "/v1/tables", ops, table)
                if status not in (200, 201):
                    raise RuntimeError(f"creating {table_id} answered {status}: {answer}")
                for seat, player_id in enumerate(everyone, start=1):
                    deposit = {"amount_pence": DEPOSIT, "reason": "load float"}
                    path = f"/v1/wallets/{player_id}/deposits"
                    status, answer = await call(connection, tally, "POST", path, ops, deposit)
                    if status not in (200, 201):
                        raise RuntimeError(f"funding {player_id} answered {status}: {answer}")
                    sit = {"player_id": player_id, "seat": seat}
                    path = f"/v1/tables/{table_id}/seats"
                    status, answer = await call(connection, tally, "POST", path, front, sit)
                    if status not in (200, 201):
                        raise RuntimeError(f"seating {player_id} answered {status}: {answer}")
            finally:
                connection.close()

    await asyncio.gather(*(one(t) for t in table_ids))


# -- the server, and what it used.


def free_port() -> int:
    """A TCP port of the loopback address that nobody listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextlib.contextmanager
def shoebox_run(
    database_url: str, workers: int | None, log_path: Path
) -> Iterator[tuple[int, int]]:
    """`shoebox run` on the database with a private embedded Redis; yields (port, its pid)."""
    port = free_port()
    data_dir = Path(tempfile.mkdtemp(prefix="shoebox-load-"))
    environment = {
        **os.environ,
        "DATABASE_URL": database_url,
        "SHOEBOX_DATA_DIR": str(data_dir),
        "SHOEBOX_API_HOST": "127.0.0.1",
        "SHOEBOX_API_PORT": str(port),
        # Every simulated player shares one key: the per-key limit would measure itself.
        "SHOEBOX_RATE_LIMIT_PER_SECOND": "0",
        "SHOEBOX_DEMO": "0",
        # This checkout's code, even where the venv's editable install points at another.
        "PYTHONPATH": os.pathsep.join(filter(None, [str(_ROOT), os.environ.get("PYTHONPATH")])),
    }
    # No REDIS_URL: `shoebox run` starts the embedded redis-server of its own, so no window
    # deadline reaches a shared Redis, and it goes away with the run.
    for name in ("REDIS_URL", "SHOEBOX_APP_DATABASE_URL", "PROMETHEUS_MULTIPROC_DIR"):
        environment.pop(name, None)
    log = log_path.open("wb")
    command = [str(SHOEBOX), "run", "--no-demo-keys"]
    if workers is not None:
        command += ["--workers", str(workers)]
    process = subprocess.Popen(command, env=environment, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while not _answers_ping(port):
            if process.poll() is not None:
                raise RuntimeError(f"shoebox run exited: {log_path.read_text()[-3000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"shoebox run did not answer: {log_path.read_text()[-3000:]}")
            time.sleep(0.2)
        yield port, process.pid
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=40)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
            log.close()
            shutil.rmtree(data_dir, ignore_errors=True)


def _answers_ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
            sock.sendall(b"GET /v1/ping HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            # Any answer will do (ping wants a key): the app is up and serving.
            return sock.recv(64).startswith(b"HTTP/1.1 ")
    except OSError:
        return False


def descendants(root: int) -> dict[int, str]:
    """Every process under `root`, by pid, named by the part of Shoebox it is."""
    parents: dict[int, int] = {}
    commands: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        commands[int(entry.name)] = command.decode(errors="replace")
        parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found: dict[int, str] = {}
    frontier = [root]
    while frontier:
        pid = frontier.pop()
        for child, parent in parents.items():
            if parent == pid and child not in found:
                found[child] = group_of(commands.get(child, ""), commands.get(parent, ""))
                frontier.append(child)
    return found


def group_of(command: str, parent: str) -> str:
    """Which part of Shoebox a process is, from its command line and its parent's."""
    for name, marker in GROUPS:
        if marker in command:
            # gunicorn's workers are forks of its master, with the same command line.
            return "API worker" if name == "gunicorn master" and marker in parent else name
    return "other"


def port_owners(processes: dict[int, str]) -> dict[int, str]:
    """The local TCP ports of the processes' sockets, each with its process's group."""
    inodes: dict[str, str] = {}
    for pid, group in processes.items():
        try:
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                with contextlib.suppress(OSError):
                    target = os.readlink(fd)
                    if target.startswith("socket:["):
                        inodes[target[8:-1]] = group
        except OSError:
            continue
    owners: dict[int, str] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                if fields[9] in inodes:
                    owners[int(fields[1].rsplit(":", 1)[1], 16)] = inodes[fields[9]]
    return owners


def cpu_seconds(pid: int) -> float:
    """A process's user and system CPU seconds so far; 0 once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Watch:
    """CPU by process group, and PostgreSQL's wait events, sampled while a level runs."""

    def __init__(self, run_pid: int, database_url: str) -> None:
        self._run_pid = run_pid
        self._database_url = database_url
        self._stop = threading.Event()
        self.waits: collections.Counter[str] = collections.Counter()
        # What the backend holding the log's lock was doing, each sample it was held.
        self.holder: collections.Counter[str] = collections.Counter()
        # The statements active backends were running: a sampled statement profile.
        self.statements: collections.Counter[str] = collections.Counter()
        self.samples = 0
        self.active = 0
        # The oldest unsequenced append's age at each sample, in seconds (0 when none waits).
        self.unsequenced: list[float] = []
        self._backends: dict[int, float] = {}
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> Watch:
        self._processes = descendants(self._run_pid)
        self._before = {pid: cpu_seconds(pid) for pid in self._processes}
        self._ticks = machine_ticks()
        self._own = sum(os.times()[:2])
        self._started = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        elapsed = time.monotonic() - self._started
        usage: dict[str, float] = collections.defaultdict(float)
        for pid, group in self._processes.items():
            usage[group] += cpu_seconds(pid) - self._before[pid]
        for pid, first in self._backends.items():
            usage["postgres (this database)"] += cpu_seconds(pid) - first
        usage["load generator"] += sum(os.times()[:2]) - self._own
        # As a share of one core: 200% is the whole of a two-core machine.
        self.cpu = {
            name: 100 * used / elapsed
            for name, used in sorted(usage.items(), key=lambda item: -item[1])
        }
        busy, total = machine_ticks()
        # As a share of the whole machine, so 100% is every core busy, ours or anyone's.
        self.machine_busy = 100 * (busy - self._ticks[0]) / max(1, total - self._ticks[1])

    def _sample(self) -> None:
        query = (
            "SELECT pid, state, wait_event_type, wait_event, query, client_port"
            " FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        holder = (
            "SELECT a.state, a.wait_event_type, a.wait_event FROM pg_locks l"
            " JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.granted"
            " AND l.relation = 'events'::regclass AND l.mode = 'ExclusiveLock'"
        )
        # As the /metrics gauge reads it: the primary key's first row, never a scan.
        oldest = (
            "SELECT coalesce(extract(epoch FROM clock_timestamp() - min(u.queued_at)), 0) FROM"
            " (SELECT queued_at FROM unsequenced_events ORDER BY append_id, n LIMIT 1) AS u"
        )
        owners = port_owners(self._processes)
        with psycopg.connect(self._database_url, autocommit=True) as conn:
            row = conn.execute("SELECT to_regclass('unsequenced_events') IS NOT NULL").fetchone()
            parallel_log = row is not None and bool(row[0])
            while not self._stop.wait(0.1):
                self.samples += 1
                if parallel_log:
                    age = conn.execute(oldest).fetchone()
                    self.unsequenced.append(float(age[0]) if age is not None else 0.0)
                held = conn.execute(holder).fetchall()
                for state, kind, event in held:
                    doing = f"{kind}:{event}" if kind else "on CPU"
                    self.holder[doing if state == "active" else f"{state}, {doing}"] += 1
                if not held:
                    self.holder["not held"] += 1
                for pid, state, kind, event, text, port in conn.execute(query).fetchall():
                    if pid not in self._backends:
                        self._backends[pid] = cpu_seconds(pid)
                    if state != "active":
                        continue
                    self.active += 1
                    self.waits[f"{kind}:{event}" if kind else "on CPU"] += 1
                    if port is not None and port not in owners:
                        owners = port_owners(self._processes)  # a new pooled connection
                    who = owners.get(port, "?") if port is not None else "?"
                    self.statements[f"{who}: {' '.join(str(text).split())[:60]}"] += 1


def profile_worker(pid: int, seconds: float, out: Path) -> list[tuple[str, float]]:
    """py-spy samples of one process for `seconds`: the leaf functions by share of samples."""
    if not PY_SPY.is_file():
        return [("py-spy is not installed (pip install -e '.[bench]')", 0.0)]
    result = subprocess.run(
        [
            str(PY_SPY),
            "record",
            "--pid",
            str(pid),
            "--duration",
            str(max(1, round(seconds))),
            "--rate",
            "100",
            "--format",
            "raw",
            "--nonblocking",
            "--output",
            str(out),
        ],
        capture_output=True,
        check=False,
    )
    if result.returncode != 0 or not out.is_file():
        return [(f"py-spy failed: {result.stderr.decode()[-300:]}", 0.0)]
    leaves: collections.Counter[str] = collections.Counter()
    own: collections.Counter[str] = collections.Counter()
    total = 0
    idle = 0
    for line in out.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = stack.split(";")
        total += int(count)
        if frames[-1].startswith("Hub.run "):
            idle += int(count)  # gevent's loop waiting for sockets: no request to work on
            continue
        leaves[frames[-1]] += int(count)
        # The innermost frame of Shoebox's own code: where in the project the time goes.
        for frame in reversed(frames):
            if any(f"{part}/" in frame for part in ("(service", "(events", "(domain")):
                # By function, not by line: file and function name.
                name, _, where = frame.partition(" (")
                own[f"in Shoebox: {name} ({where.split(':')[0]})"] += int(count)
                break
    if not total:
        return []
    top = [("waiting in gevent's hub (idle)", 100 * idle / total)]
    top += [(name, 100 * n / total) for name, n in leaves.most_common(8)]
    top += [(name, 100 * n / total) for name, n in own.most_common(6)]
    return top


def window_lateness(database_url: str, after: int, upto: int) -> list[tuple[float, bool]]:
    """Seconds past its window_closes_at at which each timed-out window was closed, and
    whether it was its table's first of the level (every table's first falls due at once)."""
    query = """
        WITH opened AS (
            SELECT payload->>'round_id' AS round_id,
                   (payload->>'deadline')::timestamptz AS closes_at,
                   row_number() OVER (PARTITION BY stream_id ORDER BY position) = 1 AS first
            FROM events WHERE type = %(opened)s AND position > %(after)s
                AND position <= %(upto)s
        ), closed AS (
            SELECT payload->>'round_id' AS round_id, min(recorded_at) AS at FROM events
            WHERE type = %(excluded)s AND payload->>'reason' = %(timed_out)s
                AND position > %(after)s
            GROUP BY 1
        )
        SELECT extract(epoch FROM closed.at - opened.closes_at)::float8, opened.first
        FROM opened JOIN closed USING (round_id)
    """
    with psycopg.connect(database_url) as conn:
        names = {
            "opened": RoundOpened.type,
            "excluded": PlayerExcluded.type,
            "timed_out": str(ExclusionReason.TIMED_OUT),
        }
        found = conn.execute(query, {"after": after, "upto": upto, **names})
        return [(row[0], row[1]) for row in found]


def head_and_rounds(database_url: str, after: int) -> tuple[int, int, int]:
    """The log's head; the rounds settled and the appends made after position `after`."""
    with psycopg.connect(database_url) as conn:
        # One append is one transaction, so its rows share their xmin.
        row = conn.execute(
            "SELECT coalesce(max(position), 0),"
            " count(*) FILTER (WHERE type = %s AND position > %s),"
            " count(DISTINCT xmin::text) FILTER (WHERE position > %s) FROM events",
            [RoundSettled.type, after, after],
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1]), int(row[2])


def append_function_ms(database_url: str) -> tuple[int, float]:
    """Calls of append_events() so far, and the milliseconds spent in them (lock waits too)."""
    with psycopg.connect(database_url) as conn:
        row = conn.execute(
            "SELECT coalesce(sum(calls), 0), coalesce(sum(total_time), 0)"
            " FROM pg_stat_user_functions WHERE funcname = 'append_events'"
        ).fetchone()
    assert row is not None
    return int(row[0]), float(row[1])


def closers(log_path: Path, since: int) -> tuple[collections.Counter[str], int]:
    """Who closed windows in the processes' log from byte `since` on; and where it ends now."""
    found: collections.Counter[str] = collections.Counter()
    with log_path.open("rb") as log:
        log.seek(since)
        text = log.read().decode(errors="replace")
        end = log.tell()
    found["worker timer"] = text.count("closed the window of round")
    found["projector sweeper"] = text.count("swept the lapsed window")
    return found, end


# -- the run.


def measure_level(
    port: int,
    run_pid: int,
    database_url: str,
    keys: dict[str, str],
    table_ids: Sequence[str],
    settings: Settings,
    log_path: Path,
    profile_dir: Path,
    quick: bool,
) -> Level:
    """Measure the yardsticks, then play one level and gather its figures."""
    # Just before the level: the machine is shared, and its spare capacity drifts.
    baseline = measure_baseline(port, keys["frontend"], database_url, 1.0 if quick else 2.0)
    head_before, _, _ = head_and_rounds(database_url, 0)
    calls_before, spent_before = append_function_ms(database_url)
    log_offset = log_path.stat().st_size
    tally = Tally()
    profile: list[tuple[str, float]] = []
    with Watch(run_pid, database_url) as watch:
        profiler: threading.Thread | None = None

        def sample_profile() -> None:
            # The middle of the level, once its tables are all in their stride; the API worker
            # that used the most CPU in its first quarter.
            workers = [p for p, group in descendants(run_pid).items() if group == "API worker"]
            before = {p: cpu_seconds(p) for p in workers}
            time.sleep(settings.seconds / 4)
            busiest = max(workers, key=lambda p: cpu_seconds(p) - before[p], default=None)
            if busiest is not None:
                profile.extend(
                    profile_worker(
                        busiest, settings.seconds / 2, profile_dir / f"{len(table_ids)}.txt"
                    )
                )

        profiler = threading.Thread(target=sample_profile, daemon=True)
        profiler.start()
        seconds = asyncio.run(run_level(port, keys["frontend"], table_ids, settings, tally))
        profiler.join()
        lag = asyncio.run(projection_lag(port, keys["ops"]))
    # The last windows close after the level; their lateness counts, their rounds do not.
    time.sleep(settings.window_seconds + 1)
    head_after, rounds, appends = head_and_rounds(database_url, head_before)
    calls_after, spent_after = append_function_ms(database_url)
    calls = calls_after - calls_before
    windows = window_lateness(database_url, head_before, head_after)
    late = [seconds for seconds, _ in windows]
    # The load starts every table at once, so every table's first window falls due within
    # the same moment, a burst a casino's tables, opened over the day, do not make: the later
    # rounds' lateness is reported apart too.
    later = [seconds for seconds, first in windows if not first]
    closed, _ = closers(log_path, log_offset)
    closed["a request or recovery"] = max(0, len(late) - sum(closed.values()))
    latencies = tally.bet_latencies
    return Level(
        tables=len(table_ids),
        seconds=round(seconds, 2),
        rounds=rounds,
        rounds_per_second=rounds / seconds,
        bets=tally.bets,
        bets_per_second=tally.bets / seconds,
        requests=tally.requests,
        ping_per_second=baseline.ping_per_second,
        commits_per_second=baseline.commits_per_second,
        requests_per_second=tally.requests / seconds,
        # The drain after the level adds a window's closes: a slight overcount, said so.
        appends_per_second=appends / seconds,
        bet_p50_ms=1000 * percentile(latencies, 0.5),
        bet_p99_ms=1000 * percentile(latencies, 0.99),
        bet_max_ms=1000 * max(latencies, default=0.0),
        errors=dict(tally.errors.most_common()),
        refusals=dict(tally.refusals.most_common()),
        concurrency_refusals=tally.refusals[CONCURRENCY_REFUSAL],
        windows=len(late),
        late_p50_ms=1000 * percentile(late, 0.5),
        late_p99_ms=1000 * percentile(late, 0.99),
        late_max_ms=1000 * max(late, default=0.0),
        late_p99_later_ms=1000 * percentile(later, 0.99),
        later_windows=len(later),
        closed_by=dict(closed),
        lag_events=lag[0],
        lag_seconds=lag[1],
        cpu=watch.cpu,
        machine_busy=watch.machine_busy,
        waits={name: 100 * n / max(1, watch.active) for name, n in watch.waits.most_common(6)},
        lock_holder={
            name: 100 * n / max(1, watch.samples) for name, n in watch.holder.most_common(5)
        },
        active_backends=watch.active / max(1, watch.samples),
        append_call_ms=(spent_after - spent_before) / calls if calls else 0.0,
        statements={
            name: 100 * n / max(1, watch.active) for name, n in watch.statements.most_common(8)
        },
        profile=profile,
        unsequenced_ms=(
            (
                1000 * percentile(watch.unsequenced, 0.5),
                1000 * percentile(watch.unsequenced, 0.99),
                1000 * max(watch.unsequenced),
            )
            if watch.unsequenced
            else None
        ),
    )


@dataclass(frozen=True, slots=True)
class Baseline:
    """What the machine allows, measured in the same run: the yardsticks of the levels."""

    ping_per_second: float
    commits_per_second: float


def measure_baseline(port: int, key: str, database_url: str, seconds: float) -> Baseline:
    """Ping's rate and the locked commits' rate, now."""
    return Baseline(
        ping_per_second=asyncio.run(ping_rate(port, key, seconds, 16)),
        commits_per_second=commit_rate(database_url, seconds),
    )


async def ping_rate(port: int, key: str, seconds: float, clients: int) -> float:
    """GET /v1/ping a second from `clients` connections at once: the HTTP stack's own rate."""
    stop_at = time.monotonic() + seconds
    done = [0]

    async def client() -> None:
        connection = Connection(port)
        try:
            while time.monotonic() < stop_at:
                status, _ = await connection.request("GET", "/v1/ping", key)
                if status == 200:
                    done[0] += 1
        finally:
            connection.close()

    started = time.monotonic()
    await asyncio.gather(*(client() for _ in range(clients)))
    return done[0] / (time.monotonic() - started)


def commit_rate(database_url: str, seconds: float) -> float:
    """One connection's commits a second, each a lock, an insert and a WAL flush: the most
    appends a second that a log whose lock is held through each commit could take."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS bench_commit_probe (n bigint)")
        done = 0
        stop_at = time.monotonic() + seconds
        started = time.monotonic()
        while time.monotonic() < stop_at:
            with conn.transaction():
                conn.execute("LOCK TABLE bench_commit_probe IN EXCLUSIVE MODE")
                conn.execute("INSERT INTO bench_commit_probe VALUES (%s)", [done])
            done += 1
        elapsed = time.monotonic() - started
        conn.execute("DROP TABLE bench_commit_probe")
    return done / elapsed


async def projection_lag(port: int, ops: str) -> tuple[int, float]:
    """The read models' largest lag, in events and in seconds, as ops would read it."""
    connection = Connection(port)
    try:
        status, answer = await connection.request("GET", "/v1/ops/projections", ops)
    finally:
        connection.close()
    if status != 200:
        return -1, -1.0
    found = answer["projections"]
    return (
        max((p["lag_events"] for p in found), default=0),
        max((p["lag_seconds"] for p in found), default=0.0),
    )


def bottleneck(level: Level, cores: int) -> str:
    """Name what held the level back, from the log's lock, PostgreSQL's waits and CPU."""
    lock = sum(share for name, share in level.waits.items() if name.startswith("Lock:"))
    held = 100 - level.lock_holder.get("not held", 0.0)
    doing = ", ".join(
        f"{name} {share:.0f}%" for name, share in level.lock_holder.items() if name != "not held"
    )
    ours = sum(level.cpu.values())
    top, used = max(level.cpu.items(), key=lambda item: item[1])
    cpu = (
        f"the machine's {cores} cores were {level.machine_busy:.0f}% busy (this run's processes"
        f" {ours:.0f}% of one core, other work about"
        f" {max(0.0, level.machine_busy * cores - ours):.0f}%; most: the {top}, {used:.0f}%)"
    )
    if held >= 60:
        return (
            f"the log's lock: held {held:.0f}% of the time for {level.appends_per_second:.0f}"
            f" appends/s, {100 * level.appends_per_second / level.commits_per_second:.0f}% of"
            f" the {level.commits_per_second:.0f} locked commits/s one connection makes here;"
            f" its holder was {doing} (share of all samples); {lock:.0f}% of active backends"
            f" queued for it; {cpu}."
        )
    if ours >= 0.8 * 100 * cores or level.machine_busy >= 90:
        return f"CPU: {cpu}; the log's lock held {held:.0f}% of the time ({doing})."
    return f"nothing saturated ({cpu}; the log's lock held {held:.0f}%): the players' pace."


def render(levels: Sequence[Level]) -> str:
    """The levels as a Markdown table, then each level's bottleneck evidence."""
    lines = [
        "| tables | ping/s | locked commits/s | rounds/s | bets/s | requests/s (of ping)"
        " | appends/s | bet p50 ms"
        " | bet p99 ms | bet max ms | errors | windows | late p50 ms | late p99 ms"
        " | late max ms | late p99 ms, after the first | closed by | lag at end |",
        "|" + "---|" * 18,
    ]
    for level in levels:
        errors = ", ".join(f"{k}: {v}" for k, v in level.errors.items()) or "none"
        closed = ", ".join(f"{k} {v}" for k, v in level.closed_by.items() if v)
        lines.append(
            f"| {level.tables} | {level.ping_per_second:.0f} | {level.commits_per_second:.0f}"
            f" | {level.rounds_per_second:.1f} | {level.bets_per_second:.0f}"
            f" | {level.requests_per_second:.0f}"
            f" ({level.requests_per_second / level.ping_per_second:.2f})"
            f" | {level.appends_per_second:.0f} | {level.bet_p50_ms:.0f}"
            f" | {level.bet_p99_ms:.0f} | {level.bet_max_ms:.0f}"
            f" | {errors} | {level.windows} | {level.late_p50_ms:.1f} | {level.late_p99_ms:.1f}"
            f" | {level.late_max_ms:.1f} | {level.late_p99_later_ms:.1f} | {closed}"
            f" | {level.lag_events} events, {level.lag_seconds:.2f} s |"
        )
    for level in levels:
        lines.append("")
        verdict = bottleneck(level, os.cpu_count() or 1)
        lines.append(f"{level.tables} tables: {verdict}")
        refused = ", ".join(f"{k}: {v}" for k, v in level.refusals.items()) or "none"
        lines.append(
            f"  409s by rule or type: {refused}; concurrency refusals"
            f" ({CONCURRENCY_REFUSAL}): {level.concurrency_refusals}"
        )
        cpu = ", ".join(f"{name} {share:.0f}%" for name, share in level.cpu.items())
        lines.append(f"  CPU (100% = one core): {cpu}")
        waits = ", ".join(f"{name} {share:.0f}%" for name, share in level.waits.items())
        lines.append(
            f"  PostgreSQL: {level.active_backends:.1f} active backends on average; {waits}"
        )
        holder = ", ".join(f"{name} {share:.0f}%" for name, share in level.lock_holder.items())
        lines.append(f"  The log's lock (share of samples): {holder}")
        if level.unsequenced_ms is not None:
            p50, p99, most = level.unsequenced_ms
            lines.append(
                f"  Oldest unsequenced append's age (sampled every 0.1 s): p50 {p50:.1f} ms,"
                f" p99 {p99:.1f} ms, max {most:.1f} ms"
            )
        lines.append(
            f"  append_events(): {level.append_call_ms:.1f} ms a call on average, its wait"
            " for the lock included"
        )
        lines.append(
            "  Statements of the active backends, by the process that sent them"
            " (share of active samples):"
        )
        lines.extend(f"    {share:5.1f}%  {name}" for name, share in level.statements.items())
        if level.profile:
            lines.append("  py-spy, busiest API worker (share of samples):")
            lines.extend(f"    {share:5.1f}%  {name}" for name, share in level.profile)
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the levels until throughput stops growing; print the report."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="1 and 2 tables, a few seconds")
    parser.add_argument("--levels", help="comma-separated numbers of tables (default 1,10,50,200)")
    parser.add_argument("--seconds", type=float, help="seconds a level plays (default 30)")
    parser.add_argument("--window", type=float, help="the betting window in seconds (default 3)")
    parser.add_argument("--players", type=int, help="acting players a table (default 4)")
    parser.add_argument(
        "--workers", type=int, help="gunicorn workers (default: the server's, shoebox serve's)"
    )
    parser.add_argument("--max-requests", type=int, default=300_000, help="a level's budget")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument(
        "--pause-projector",
        action="store_true",
        help="a diagnosis: stop the projector (SIGSTOP) while the levels play, to see its cost",
    )
    args = parser.parse_args(argv)
    levels = (
        tuple(int(n) for n in args.levels.split(","))
        if args.levels
        else (QUICK_LEVELS if args.quick else LEVELS)
    )
    settings = Settings(
        players=args.players or (2 if args.quick else 4),
        window_seconds=args.window or (1.5 if args.quick else 3.0),
        seconds=args.seconds or (4.0 if args.quick else 30.0),
        max_requests=args.max_requests,
    )
    run = f"l{secrets.token_hex(3)}"
    done: list[Level] = []
    with (
        throwaway_database(server_url(), prefix="bench_load") as database_url,
        tempfile.TemporaryDirectory(prefix="shoebox-load-") as scratch,
    ):
        apply_migrations(database_url)
        with psycopg.connect(database_url, autocommit=True) as conn:
            # The time spent in append_events(), per call (pg_stat_statements is not
            # preloaded on the shared server; this needs only the database's owner).
            name = psycopg.conninfo.conninfo_to_dict(database_url)["dbname"]
            conn.execute(
                psycopg.sql.SQL("ALTER DATABASE {} SET track_functions = 'pl'").format(
                    psycopg.sql.Identifier(str(name))
                )
            )
        with open_pool(database_url, max_size=1) as pool:
            store = PostgresEventStore(pool)
            keys = {
                "ops": create_key(store, "load-ops", Role.OPS, OPERATOR).secret,
                "frontend": create_key(store, "load-frontend", Role.FRONTEND, OPERATOR).secret,
            }
        log_path = Path(scratch) / "shoebox-run.log"
        with shoebox_run(database_url, args.workers, log_path) as (port, run_pid):
            projector = [p for p, g in descendants(run_pid).items() if g == "projector"]
            if args.pause_projector:
                for pid in projector:
                    os.kill(pid, signal.SIGSTOP)
            print(
                f"shoebox run: {args.workers or 'the default'} API workers on 127.0.0.1:{port};"
                f" {settings.players} players and an idle seat a table, a"
                f" {settings.window_seconds:g} s window, {settings.seconds:g} s a level",
                file=sys.stderr,
            )
            try:
                table_ids: list[str] = []
                for count in levels:
                    new = [f"{run}-t{n}" for n in range(len(table_ids), count)]
                    asyncio.run(set_up_tables(port, keys["ops"], keys["frontend"], new, settings))
                    table_ids += new
                    level = measure_level(
                        port,
                        run_pid,
                        database_url,
                        keys,
                        table_ids[:count],
                        settings,
                        log_path,
                        Path(scratch),
                        args.quick,
                    )
                    done.append(level)
                    print(
                        f"{count} tables: ping {level.ping_per_second:.0f}/s, locked commits"
                        f" {level.commits_per_second:.0f}/s;"
                        f" {level.rounds_per_second:.1f} rounds/s,"
                        f" {level.bets_per_second:.0f} bets/s, bet p99 {level.bet_p99_ms:.0f} ms,"
                        f" windows late p99 {level.late_p99_ms:.1f} ms;"
                        f" 409s {level.refusals or 'none'}, of them concurrency refusals"
                        f" {level.concurrency_refusals}",
                        file=sys.stderr,
                    )
                    if len(done) >= 2 and (
                        level.bets_per_second < done[-2].bets_per_second * GROWTH_TO_GO_ON
                    ):
                        print(
                            f"throughput stopped growing at {count} tables"
                            f" ({level.bets_per_second:.0f} bets/s against"
                            f" {done[-2].bets_per_second:.0f}): the ceiling",
                            file=sys.stderr,
                        )
                        break
            finally:
                if args.pause_projector:
                    for pid in projector:
                        os.kill(pid, signal.SIGCONT)  # so that it can stop with the rest
    print(render(done))
    if args.json is not None:
        args.json.write_text(json.dumps([asdict(level) for level in done], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
