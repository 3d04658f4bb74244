"""Measure the API under a real `shoebox serve`: rounds and bets a second beside GET /v1/ping.

Run as `.venv/bin/python bench/api.py [--tables N ...] [--seconds S] [--workers W]` against the
server in DATABASE_URL (default postgresql://postgres@127.0.0.1:5432/postgres); it creates a
database of its own, starts `shoebox serve` on it, and drops both at the end.

For each number of tables N, N client threads each play their own table: a round is five bets
from three seated players, then Deal for each seat (the last Deal deals and settles, and opens
the next round). The baseline is the same client, N threads, calling GET /v1/ping on the same
server. Both contenders send through http.client, one connection a thread, kept alive when the
server allows it (gunicorn's sync workers close after each response; gthread keeps them).
Every figure is the median of R repeats, the contenders taking turns within each repeat.

`--profile B` adds where a bet's time goes: B bets through the same app built in this process,
under cProfile, grouped into the stages of a request.

`--saturate` measures instead 32 clients over 16 tables at saturation: pings, bets, Deals and
reads, each with the web workers' CPU a request (bench/saturate.py).

`--seamless B` (default 100, 0: none) adds a bet's latency with a seamless operator whose
wallet (the reference wallet, answering in 5 ms more than its own work, and as is) is called on
every bet, beside the internal wallet's, through a second `shoebox serve` (bench/api_seamless.py).

`--round-trips R` (default 20) counts the round trips to PostgreSQL that a bet makes: R rounds
played by one client through a second `shoebox serve` (same workers) whose database is reached
through a counting proxy (bench/round_trips.py), counting only while a bet is in flight. The
proxy slows every query, so this server is never the one timed.
"""

from __future__ import annotations

import argparse
import cProfile
import http.client
import os
import pstats
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final

# Run as a script, Python puts bench/ first on the path, where bench/domain.py would shadow
# the `domain` package; the project root goes before it even when PYTHONPATH already has it.
_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(_ROOT))

import orjson  # noqa: E402

from bench.common import (  # noqa: E402
    Figure,
    render_table,
    rotations,
    server_url,
    throwaway_database,
    uptime,
)
from bench.round_trips import counted  # noqa: E402
from domain.round import BetPlaced  # noqa: E402
from domain.wallet import StakeReserved  # noqa: E402
from events.canonical import metadata_from_document  # noqa: E402
from events.migrations import apply_migrations  # noqa: E402
from events.postgres import PostgresEventStore, app_conninfo, open_pool  # noqa: E402
from events.store import EventMetadata, Idempotency, NewEvent, StreamAppend  # noqa: E402
from service.application.keys import Role, create_key  # noqa: E402
from service.cli.serve import DEFAULT_BLOCKING_WORKERS, DEFAULT_WORKERS  # noqa: E402

# The venv of this checkout, else the one running this script (a worktree shares a venv).
SHOEBOX: Final = next(
    (p for p in (_ROOT / ".venv" / "bin" / "shoebox",) if p.is_file()),
    Path(sys.executable).with_name("shoebox"),
)
START_TIMEOUT_SECONDS: Final = 30.0
BET: Final = "bet"
PING: Final = "ping"
GOAL: Final = 0.35
SEATS: Final = 3
# Five bets a round from three players, mixed spots, whole pounds as the table's chips are.
ROUND_BETS: Final = (
    (0, "player", 500),
    (0, "tie", 100),
    (1, "banker", 1_000),
    (2, "player", 200),
    (2, "banker", 200),
)
DEPOSIT: Final = 100_000_000
# Longer than any measurement, so no window closes under a round still being played.
WINDOW_SECONDS: Final = 300
OPERATOR: Final = EventMetadata(actor="bench", role="cli")


@dataclass(frozen=True, slots=True)
class Answer:
    """A response's status and decoded JSON body."""

    status: int
    body: Any


class Client:
    """One HTTP/1.1 connection and one API key: the client of one benchmark thread."""

    def __init__(self, port: int, secret: str, idempotency: bool) -> None:
        self._connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        self._authorization = f"Bearer {secret}"
        self._idempotency = idempotency

    def call(self, method: str, path: str, body: object = None) -> Answer:
        """Send one request and read its answer; http.client reconnects after a close."""
        headers = {"Authorization": self._authorization}
        payload = None
        if body is not None:
            payload = orjson.dumps(body)
            headers["Content-Type"] = "application/json"
            if self._idempotency:
                # What a careful front end sends, so that its retries are safe.
                headers["Idempotency-Key"] = secrets.token_hex(12)
        self._connection.request(method, f"/v1{path}", payload, headers)
        response = self._connection.getresponse()
        data = response.read()
        return Answer(response.status, orjson.loads(data) if data else None)

    def ok(self, method: str, path: str, body: object = None) -> Any:
        """The body of a 2xx answer; anything else stops the benchmark."""
        answer = self.call(method, path, body)
        if not 200 <= answer.status < 300:
            raise RuntimeError(f"{method} {path} answered {answer.status}: {answer.body}")
        return answer.body

    def timed_ok(self, method: str, path: str, body: object = None) -> float:
        """`ok`, and the seconds it took."""
        started = time.perf_counter()
        self.ok(method, path, body)
        return time.perf_counter() - started

    def close(self) -> None:
        """Close the connection."""
        self._connection.close()


@dataclass(slots=True)
class Sample:
    """What one client thread did in one measurement."""

    requests: int = 0
    rounds: int = 0
    # Seconds spent waiting on each bet, and on all requests.
    bet_latencies: list[float] = field(default_factory=list)
    ping_latencies: list[float] = field(default_factory=list)
    busy: float = 0.0


@dataclass(frozen=True, slots=True)
class Keys:
    """The API keys the benchmark plays with."""

    ops: str
    frontend: str


def free_port() -> int:
    """A TCP port nobody listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def issue_keys(database_url: str) -> Keys:
    """An ops key for the setting up and a frontend key for the play."""
    with open_pool(database_url, max_size=1) as pool:
        store = PostgresEventStore(pool)
        ops = create_key(store, "bench-ops", Role.OPS, OPERATOR).secret
        frontend = create_key(store, "bench-frontend", Role.FRONTEND, OPERATOR).secret
    return Keys(ops, frontend)


@contextmanager
def serving(
    database_url: str,
    workers: int,
    threads: int,
    app_database_url: str | None = None,
    extra_environment: Mapping[str, str] | None = None,
) -> Iterator[int]:
    """`shoebox serve` on a free port of this machine, stopped on the way out; yields the port."""
    with served(
        database_url, workers, threads, app_database_url, extra_environment=extra_environment
    ) as (port, _):
        yield port


@contextmanager
def served(
    database_url: str,
    workers: int,
    threads: int,
    app_database_url: str | None = None,
    code: Path | None = None,
    extra_environment: Mapping[str, str] | None = None,
) -> Iterator[tuple[int, int]]:
    """`serving`, yielding the port and the pid of `shoebox serve` (gunicorn's master).

    With `code`, the server imports Shoebox from that directory (an export of another commit,
    put first on its PYTHONPATH), so that old and new code can be measured in the same run.
    """
    port = free_port()
    environment = {**os.environ, "DATABASE_URL": database_url}
    # Without `code`, this checkout's: a worktree shares its venv's editable install, whose
    # finder would otherwise import the main checkout's code, not the code under test.
    code = code if code is not None else _ROOT
    environment["PYTHONPATH"] = str(code)
    # No REDIS_URL: window jobs left in a shared Redis would fire at a dropped database, and
    # no window closes during a measurement anyway. Windows close lazily, as without a worker.
    for name in ("REDIS_URL", "SHOEBOX_APP_DATABASE_URL"):
        environment.pop(name, None)
    if app_database_url is not None:
        environment["SHOEBOX_APP_DATABASE_URL"] = app_database_url
    # One key drives every client thread: the per-key rate limit would measure itself.
    environment["SHOEBOX_RATE_LIMIT_PER_SECOND"] = "0"
    environment.update(extra_environment or {})
    command = [str(SHOEBOX), "serve", "--bind", f"127.0.0.1:{port}"]
    command += ["--workers", str(workers)]
    if threads > 1:
        command += ["--worker-class", "gthread", "--threads", str(threads)]
    # A file, not a pipe: the server logs a line a request, and a pipe nobody reads while the
    # benchmark runs would fill and stall it.
    log = tempfile.TemporaryFile()  # noqa: SIM115 - closed in the finally below
    # From the code's own directory: gunicorn puts its working directory first on the path.
    process = subprocess.Popen(
        command,
        env=environment,
        stdout=subprocess.DEVNULL,
        stderr=log,
        cwd=code,
    )
    try:
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while True:
            if process.poll() is not None:
                log.seek(0)
                errors = log.read().decode()[-4000:]
                raise RuntimeError(f"shoebox serve exited: {errors}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("shoebox serve did not start listening") from None
                time.sleep(0.1)
        yield port, process.pid
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
            log.close()


def await_workers(port: int, keys: Keys, workers: int) -> None:
    """Ping until every worker has built its app, so no measurement pays for a cold start."""
    client = Client(port, keys.frontend, idempotency=False)
    try:
        for _ in range(workers * 20):
            client.ok("GET", "/ping")
    finally:
        client.close()


def player_ids(table_id: str) -> list[str]:
    """The players seated at a benchmark table."""
    return [f"{table_id}-p{seat}" for seat in range(1, SEATS + 1)]


def set_up_tables(port: int, keys: Keys, count: int, run: str) -> list[str]:
    """`count` tables of three funded, seated players each."""
    ops = Client(port, keys.ops, idempotency=False)
    front = Client(port, keys.frontend, idempotency=False)
    table_ids = [f"{run}-t{n}" for n in range(count)]
    try:
        for table_id in table_ids:
            ops.ok(
                "POST",
                "/tables",
                {"table_id": table_id, "seats": SEATS, "betting_window_ms": WINDOW_SECONDS * 1000},
            )
            for seat, player_id in enumerate(player_ids(table_id), start=1):
                ops.ok(
                    "POST",
                    f"/wallets/{player_id}/deposits",
                    {"amount_pence": DEPOSIT, "reason": "bench float"},
                )
                front.ok(
                    "POST", f"/tables/{table_id}/seats", {"player_id": player_id, "seat": seat}
                )
    finally:
        ops.close()
        front.close()
    return table_ids


def play(client: Client, table_id: str, seconds: float) -> Sample:
    """Play whole rounds at one table until `seconds` have passed; a round is never cut short."""
    sample = Sample()
    players = player_ids(table_id)
    bets_path, deal_path = f"/tables/{table_id}/bets", f"/tables/{table_id}/deal"
    stop_at = time.perf_counter() + seconds
    while time.perf_counter() < stop_at:
        for seat, spot, stake in ROUND_BETS:
            body = {"player_id": players[seat], "spot": spot, "stake_pence": stake}
            started = time.perf_counter()
            client.ok("POST", bets_path, body)
            took = time.perf_counter() - started
            sample.bet_latencies.append(took)
            sample.busy += took
        for player_id in players:
            started = time.perf_counter()
            client.ok("POST", deal_path, {"player_id": player_id})
            sample.busy += time.perf_counter() - started
        sample.requests += len(ROUND_BETS) + len(players)
        sample.rounds += 1
    return sample


def ping(client: Client, seconds: float) -> Sample:
    """GET /v1/ping until `seconds` have passed."""
    sample = Sample()
    stop_at = time.perf_counter() + seconds
    while time.perf_counter() < stop_at:
        started = time.perf_counter()
        client.ok("GET", "/ping")
        took = time.perf_counter() - started
        sample.busy += took
        sample.requests += 1
        sample.ping_latencies.append(took)
    return sample


def run_clients(
    port: int, secret: str, idempotency: bool, work: Sequence[Callable[[Client], Sample]]
) -> tuple[list[Sample], float]:
    """Each callable in its own thread with its own client, released together; and the wall time."""
    clients = [Client(port, secret, idempotency) for _ in work]
    samples: list[Sample | None] = [None] * len(work)
    errors: list[BaseException] = []
    start_line = threading.Barrier(len(work) + 1)

    def thread_body(number: int) -> None:
        start_line.wait()
        try:
            samples[number] = work[number](clients[number])
        except BaseException as error:  # re-raised in the caller's thread below
            errors.append(error)

    threads = [threading.Thread(target=thread_body, args=(n,)) for n in range(len(work))]
    for thread in threads:
        thread.start()
    start_line.wait()
    started = time.perf_counter()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    for client in clients:
        client.close()
    if errors:
        raise errors[0]
    return [sample for sample in samples if sample is not None], elapsed


def percentile(values: Sequence[float], fraction: float) -> float:
    """The value below which `fraction` of `values` lie (nearest rank)."""
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(fraction * len(ordered)) - 1))
    return ordered[rank]


@dataclass(slots=True)
class Scenario:
    """One number of tables: every repeat's rates and latencies, for both contenders."""

    tables: int
    rates: Figure
    rounds: list[float] = field(default_factory=list)
    bet_p50: list[float] = field(default_factory=list)
    bet_p99: list[float] = field(default_factory=list)
    ping_p50: list[float] = field(default_factory=list)
    ping_p99: list[float] = field(default_factory=list)


def measure(
    port: int, keys: Keys, table_ids: Sequence[str], seconds: float, idempotency: bool
) -> tuple[Sample, float, list[Sample]]:
    """One play measurement over these tables: the merged sample, wall time, and per thread."""
    work = [lambda client, t=table_id: play(client, t, seconds) for table_id in table_ids]
    samples, elapsed = run_clients(port, keys.frontend, idempotency, work)
    merged = Sample()
    for sample in samples:
        merged.requests += sample.requests
        merged.rounds += sample.rounds
        merged.bet_latencies.extend(sample.bet_latencies)
        merged.busy += sample.busy
    return merged, elapsed, samples


def run_scenario(
    scenario: Scenario,
    port: int,
    keys: Keys,
    table_ids: Sequence[str],
    repeats: int,
    seconds: float,
    idempotency: bool,
) -> None:
    """Interleaved repeats of play and ping at `scenario.tables` concurrent clients."""
    for order in rotations(repeats, (BET, PING)):
        for contender in order:
            if contender == BET:
                merged, elapsed, samples = measure(port, keys, table_ids, seconds, idempotency)
                scenario.rounds.append(merged.rounds / elapsed)
                # Each closed-loop client bets at 1 / (its mean bet latency); their sum is the
                # rate the server takes bets at while rounds are also being dealt around them.
                bet_rate = sum(len(s.bet_latencies) / sum(s.bet_latencies) for s in samples)
                scenario.rates.add(BET, round(bet_rate * 1000), 1000.0)
                scenario.bet_p50.append(percentile(merged.bet_latencies, 0.50))
                scenario.bet_p99.append(percentile(merged.bet_latencies, 0.99))
            else:
                work = [lambda client: ping(client, seconds) for _ in table_ids]
                pings, elapsed = run_clients(port, keys.frontend, False, work)
                scenario.rates.add(PING, sum(s.requests for s in pings), elapsed)
                latencies = [took for s in pings for took in s.ping_latencies]
                scenario.ping_p50.append(percentile(latencies, 0.50))
                scenario.ping_p99.append(percentile(latencies, 0.99))
            print(f"  {scenario.tables} table(s), {contender}: done", file=sys.stderr)


def milliseconds(values: Sequence[float]) -> str:
    """The median of latencies in seconds, in milliseconds."""
    return f"{statistics.median(values) * 1000:.2f}"


def render_rounds(scenarios: Sequence[Scenario]) -> str:
    """A Markdown table of rounds a second and bet latencies, one row per number of tables."""
    headers = [
        "tables",
        "rounds/s",
        "bets/s",
        "bet p50 ms",
        "bet p99 ms",
        "ping/s",
        "ping p50 ms",
        "ping p99 ms",
        "bet/ping",
        "goal",
    ]
    rows = []
    for scenario in scenarios:
        bets = scenario.rates.median(BET) or 0.0
        pings = scenario.rates.median(PING) or 0.0
        ratio = bets / pings if pings else 0.0
        rows.append(
            [
                str(scenario.tables),
                f"{statistics.median(scenario.rounds):,.1f}",
                f"{bets:,.0f}",
                milliseconds(scenario.bet_p50),
                milliseconds(scenario.bet_p99),
                f"{pings:,.0f}",
                milliseconds(scenario.ping_p50),
                milliseconds(scenario.ping_p99),
                f"{ratio:.2f}",
                "met" if ratio >= GOAL else "missed",
            ]
        )
    widths = [max(len(line[i]) for line in [headers, *rows]) for i in range(len(headers))]

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(c.rjust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    rule = "|" + "|".join("-" * (w + 1) + ":" for w in widths) + "|"
    return "\n".join([line(headers), rule, *(line(row) for row in rows)])


# Where a bet's time goes: the functions that mark each stage of a request, by
# (file suffix, function name). Cumulative times overlap (the view contains the service),
# so each stage is listed as what it contains, not as a share of a whole.
STAGES: Final = (
    ("whole request (Flask WSGI app)", "flask/app.py", "wsgi_app"),
    ("authentication (key ring)", "service/web/auth.py", "authenticate_request"),
    ("idempotency before the view", "service/web/idempotency.py", "begin_request"),
    ("idempotency after the view", "service/web/idempotency.py", "finish_request"),
    ("request parsing (webargs/marshmallow)", "webargs/core.py", "parse"),
    ("the command (GameService.place_bet)", "service/application/game/tables.py", "place_bet"),
    ("  loads: read_stream (table, wallet, limit)", "events/postgres.py", "read_stream"),
    ("  idempotency lookups (idempotency_record)", "events/postgres.py", "idempotency_record"),
    ("  decide + evolve (domain/table.py decide)", "domain/table.py", "decide"),
    ("  the answer, built before the append", "service/web/idempotency.py", "respond"),
    ("  append and commit (PostgresEventStore.append)", "events/postgres.py", "append"),
    ("response (marshmallow dump)", "marshmallow/schema.py", "dump"),
    ("storing the response apart (record_response)", "events/postgres.py", "record_response"),
    ("transactions committed by the client (psycopg commit)", "psycopg/connection.py", "commit"),
)


@dataclass(frozen=True, slots=True)
class InProcess:
    """A bet and a ping through the app built in this process (no HTTP), and the profile."""

    bet_ms: float
    ping_ms: float
    report: str


def profile_bets(database_url: str, keys: Keys, table_id: str, bets: int) -> InProcess:
    """cProfile of `bets` bets through the app built in this process, as a Markdown table."""
    # Imported here: the measurement itself never loads the app into the client's process.
    from service.runtime.settings import Settings
    from service.web.app import create_app

    # The per-key rate limit off, as for the served app: an in-process bet on a quiet machine
    # is fast enough for one key's bets to pass 200 a second.
    app = create_app(Settings(database_url=database_url, rate_limit_per_second=0), pool_size=2)
    client = app.test_client()
    players = player_ids(table_id)
    headers = {"Authorization": f"Bearer {keys.frontend}"}

    def one_round(profiler: cProfile.Profile | None, timings: list[float] | None = None) -> int:
        placed = 0
        for seat, spot, stake in ROUND_BETS:
            body = {"player_id": players[seat], "spot": spot, "stake_pence": stake}
            keyed = {**headers, "Idempotency-Key": secrets.token_hex(12)}
            if profiler is not None:
                profiler.enable()
            started = time.perf_counter()
            answer = client.post(f"/v1/tables/{table_id}/bets", json=body, headers=keyed)
            if timings is not None:
                timings.append(time.perf_counter() - started)
            if profiler is not None:
                profiler.disable()
            if answer.status_code != 201:
                raise RuntimeError(f"bet answered {answer.status_code}: {answer.get_json()}")
            placed += 1
        for player_id in players:
            answer = client.post(
                f"/v1/tables/{table_id}/deal", json={"player_id": player_id}, headers=headers
            )
            if answer.status_code != 200:
                raise RuntimeError(f"deal answered {answer.status_code}: {answer.get_json()}")
        return placed

    one_round(None)  # warm the caches and the imports
    # Unprofiled first: a bet and a ping through the same app, no HTTP server and no client
    # in between, so what the ratio leaves out is the network stack's share of both.
    bet_times: list[float] = []
    while len(bet_times) < bets:
        one_round(None, bet_times)
    ping_times: list[float] = []
    for _ in range(bets):
        started = time.perf_counter()
        client.get("/v1/ping", headers=headers)
        ping_times.append(time.perf_counter() - started)
    bet_ms = statistics.median(bet_times) * 1000
    ping_ms = statistics.median(ping_times) * 1000
    profiler = cProfile.Profile()
    placed = 0
    started = time.perf_counter()
    while placed < bets:
        placed += one_round(profiler)
    wall = time.perf_counter() - started
    stats = pstats.Stats(profiler)
    entries: dict[tuple[str, int, str], Any] = stats.stats  # type: ignore[attr-defined]
    lines = [
        f"In-process, unprofiled, {len(bet_times)} bets and {bets} pings through the same app:"
        f" bet p50 {bet_ms:.2f} ms, ping p50 {ping_ms:.2f} ms, ping/bet"
        f" {ping_ms / bet_ms:.2f} (the share of a bet's time a ping would take).",
        "",
        f"{placed} bets in-process (Flask test client, no HTTP server), with Idempotency-Key;",
        f"cProfile on during the bets only; {wall:.2f} s wall for these rounds, deals included.",
        "",
        "| stage | calls a bet | ms a bet (cumulative, profiled) |",
        "|:--|--:|--:|",
    ]
    for label, file_suffix, function in STAGES:
        calls = 0
        cumulative = 0.0
        for (file_name, _, name), (_, ncalls, _, cum, _) in entries.items():
            if name == function and file_name.replace(os.sep, "/").endswith(file_suffix):
                calls += ncalls
                cumulative += cum
        lines.append(f"| {label} | {calls / placed:.1f} | {cumulative / placed * 1000:.2f} |")
    return InProcess(bet_ms, ping_ms, "\n".join(lines))


@dataclass(frozen=True, slots=True)
class RoundTrips:
    """Round trips to PostgreSQL per bet, counted through the proxy."""

    bets: int
    per_bet: list[int]

    def render(self, workers: int) -> str:
        """A line for the report."""
        spread = Counter(self.per_bet)
        shares = ", ".join(
            f"{trips}: {count / self.bets:.0%}" for trips, count in sorted(spread.items())
        )
        mean = sum(self.per_bet) / self.bets
        return (
            f"Round trips to PostgreSQL per bet, through `shoebox serve` ({workers} workers), "
            f"{self.bets} bets of one client: mean {mean:.2f}, median "
            f"{statistics.median(self.per_bet):g}; share of bets by round trips: {shares}."
        )


def count_round_trips(database_url: str, keys: Keys, workers: int, rounds: int) -> RoundTrips:
    """Play `rounds` rounds at one table through a counting proxy; count each bet's trips."""
    per_bet: list[int] = []
    with counted(database_url) as (proxied_admin, counter):
        proxied_app = app_conninfo(proxied_admin, environ={})
        with serving(database_url, workers, 1, app_database_url=proxied_app) as port:
            await_workers(port, keys, workers)
            table_id = set_up_tables(port, keys, 1, f"rt{secrets.token_hex(3)}")[0]
            client = Client(port, keys.frontend, idempotency=True)
            players = player_ids(table_id)
            try:
                for number in range(rounds + 1):
                    for seat, spot, stake in ROUND_BETS:
                        body = {"player_id": players[seat], "spot": spot, "stake_pence": stake}
                        counter.reset()
                        with counter.counting():
                            client.ok("POST", f"/tables/{table_id}/bets", body)
                        if number:  # the first round warms every worker it reaches
                            per_bet.append(counter.round_trips)
                    for player_id in players:
                        client.ok("POST", f"/tables/{table_id}/deal", {"player_id": player_id})
            finally:
                client.close()
    return RoundTrips(len(per_bet), per_bet)


@dataclass(frozen=True, slots=True)
class Floor:
    """A bet's durable append alone, timed from this process in the same run as the bets."""

    appends: int
    p50_ms: float
    mean_ms: float


def append_floor(database_url: str, appends: int = 300) -> Floor:
    """A bet's append alone, `appends` times in a row: no HTTP, no Flask, no decision.

    The last bet the benchmark placed is appended again to streams of its own: its two events
    as recorded, the player's limit as its guard, and a fresh Idempotency-Key with the answer
    that bet stored, through the store the server uses. Each call is the server's own
    statement, lock, hash chain, commit and flush: what no bet can go without.
    """
    import psycopg

    with psycopg.connect(database_url) as conn:
        newest = conn.execute(
            "SELECT max(position) FROM events WHERE type = %s", [BetPlaced.type]
        ).fetchone()
        if newest is None or newest[0] is None:
            raise RuntimeError("no bet in the log to measure the append of")
        # A bet's append is the table's events, then the wallet's (Plan.appends): the bet's
        # BetPlaced is followed by its StakeReserved.
        rows = conn.execute(
            "SELECT type, schema_version, payload::text, metadata::text FROM events"
            " WHERE position BETWEEN %s AND %s ORDER BY position",
            [newest[0], newest[0] + 1],
        ).fetchall()
        if [row[0] for row in rows] != [BetPlaced.type, StakeReserved.type]:
            raise RuntimeError(f"the last bet's append is not a bet and its stake: {rows}")
        recorded = metadata_from_document(orjson.loads(rows[1][3]))
        # That bet's own answer, by the key its events record.
        stored = conn.execute(
            "SELECT response::text FROM idempotency_responses WHERE key = %s",
            [recorded.idempotency_key],
        ).fetchone()
    if stored is None:
        raise RuntimeError("the last bet was placed without an Idempotency-Key")
    answer = orjson.loads(stored[0])
    # Stamped again by the store from each append's own key.
    metadata = replace(recorded, idempotency_key=None)
    run = secrets.token_hex(4)
    table, wallet, limit = f"table:floor-{run}", f"wallet:floor-{run}", f"player:floor-{run}"
    warm_up = 10
    took: list[float] = []
    with open_pool(app_conninfo(database_url, environ={}), max_size=1) as pool:
        store = PostgresEventStore(pool)
        for version in range(appends + warm_up):
            streams = [
                StreamAppend(
                    stream_id, version, [NewEvent(event_type, orjson.loads(payload), schema)]
                )
                for stream_id, (event_type, schema, payload, _) in zip(
                    (table, wallet), rows, strict=True
                )
            ]
            streams.append(StreamAppend(limit, 0, []))
            key = Idempotency(f"floor-{run}-{version}", "f" * 64, answer)
            started = time.perf_counter()
            store.append(streams, metadata, key)
            if version >= warm_up:
                took.append(time.perf_counter() - started)
    return Floor(len(took), statistics.median(took) * 1000, statistics.mean(took) * 1000)


def render_floor(
    scenarios: Sequence[Scenario], floor: Floor, commits: Commits, in_process: InProcess | None
) -> str:
    """What the goal leaves a bet's own work, once the ping and the append are paid for."""
    lines = [
        f"The floor, same run: a bet's append alone from this process ({floor.appends} in a row,"
        " the last bet's events, guard and answer, through the server's store): p50"
        f" {floor.p50_ms:.2f} ms, mean {floor.mean_ms:.2f} ms; a one-row INSERT and its commit,"
        f" p50 {commits.p50_ms:.2f} ms. A bet pays at least a ping (the HTTP stack,"
        " authentication, the request machinery) and its durable append; at the goal a bet may"
        " take ping / 0.35. Medians, in ms:",
        "",
        "| tables | ping | budget: ping / 0.35 | left after ping + the append | left after ping"
        " + a one-row commit |",
        "|--:|--:|--:|--:|--:|",
    ]
    for scenario in scenarios:
        ping_ms = statistics.median(scenario.ping_p50) * 1000
        budget = ping_ms / GOAL
        lines.append(
            f"| {scenario.tables} | {ping_ms:.2f} | {budget:.2f} |"
            f" {budget - ping_ms - floor.p50_ms:.2f} | {budget - ping_ms - commits.p50_ms:.2f} |"
        )
    if in_process is not None:
        own = in_process.bet_ms - in_process.ping_ms - floor.p50_ms
        lines += [
            "",
            "What the bet's own work (its parsing, decision, answer and documents) takes,"
            f" in-process without HTTP: bet {in_process.bet_ms:.2f} - ping"
            f" {in_process.ping_ms:.2f} - the append {floor.p50_ms:.2f} = {own:.2f} ms.",
        ]
    return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class Commits:
    """An autocommit one-row INSERT, timed many times in a row: the server's disk flush."""

    times: list[float]

    @property
    def p50_ms(self) -> float:
        """The median, in milliseconds."""
        return percentile(self.times, 0.5) * 1000

    def render(self) -> str:
        """A phrase for the report."""
        return (
            f"a one-row INSERT and its commit, {len(self.times)} in a row: p50"
            f" {self.p50_ms:.2f} ms, p99 {percentile(self.times, 0.99) * 1000:.2f} ms"
        )


def commit_latency(database_url: str, commits: int = 300) -> Commits:
    """An autocommit one-row INSERT on this server now, `commits` times: its disk flush."""
    import psycopg

    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS bench_flush (id serial PRIMARY KEY, note text)")
        took: list[float] = []
        for _ in range(commits):
            started = time.perf_counter()
            conn.execute("INSERT INTO bench_flush (note) VALUES ('x')")
            took.append(time.perf_counter() - started)
    return Commits(took)


def main(argv: Sequence[str] | None = None) -> None:
    """Run the benchmark and print (and, with --markdown, write) its figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--tables", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--seconds", type=float, default=5.0, help="per measurement")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--workers", type=int, help="gunicorn workers (default: shoebox serve's, by class)"
    )
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--no-idempotency-keys",
        action="store_true",
        help="play without Idempotency-Key headers (by default every POST sends one)",
    )
    parser.add_argument("--profile", type=int, default=500, metavar="BETS", help="0: none")
    parser.add_argument(
        "--round-trips", type=int, default=20, metavar="ROUNDS", help="0: do not count them"
    )
    parser.add_argument(
        "--seamless",
        type=int,
        default=100,
        metavar="BETS",
        help="bets a contender a repeat through a seamless operator and the internal wallet;"
        " 0: none",
    )
    parser.add_argument("--markdown", type=Path, help="also write the report here")
    parser.add_argument(
        "--saturate",
        action="store_true",
        help="32 clients over 16 tables: pings, bets, Deals and reads at saturation, with the"
        " web workers' CPU a request (bench/saturate.py); --seconds and --repeats apply",
    )
    parser.add_argument(
        "--baseline",
        type=Path,
        help="with --saturate: also a server importing Shoebox from this directory (e.g. `git"
        " archive <commit> | tar -x -C DIR`), old and new servers taking turns",
    )
    args = parser.parse_args(argv)
    if args.workers is None:
        # As `shoebox serve` chooses: gthread (threads > 1) waits, so it runs more workers.
        args.workers = DEFAULT_BLOCKING_WORKERS if args.threads > 1 else DEFAULT_WORKERS
    if args.saturate:
        from bench.saturate import saturate

        command = "python bench/api.py " + " ".join(sys.argv[1:] if argv is None else argv)
        if args.baseline is None:
            report = saturate(args.workers, args.seconds, args.repeats).render(command.strip())
        else:
            from bench.saturate import against

            report = against(args.baseline, args.workers, args.seconds, args.repeats)
            report = f"Command: `{command.strip()}`\n\n{report}"
        print(report)
        if args.markdown is not None:
            args.markdown.write_text(report + "\n")
        return
    idempotency = not args.no_idempotency_keys

    load_before = uptime()
    scenarios = [Scenario(n, Figure(f"{n} table(s)")) for n in args.tables]
    with throwaway_database(server_url(), prefix="bench_api") as database_url:
        apply_migrations(database_url)
        flush_before = commit_latency(database_url)
        keys = issue_keys(database_url)
        run = secrets.token_hex(3)
        with serving(database_url, args.workers, args.threads) as port:
            await_workers(port, keys, args.workers)
            profile_table = set_up_tables(port, keys, 1, f"{run}prof")[0]
            for scenario in scenarios:
                table_ids = set_up_tables(port, keys, scenario.tables, f"{run}n{scenario.tables}")
                # One untimed round a table: shoes opened, caches warm, as in steady play.
                measure(port, keys, table_ids, 0.0, idempotency)
                run_scenario(
                    scenario, port, keys, table_ids, args.repeats, args.seconds, idempotency
                )
        in_process = None
        if args.profile:
            in_process = profile_bets(database_url, keys, profile_table, args.profile)
        floor = append_floor(database_url)
        flush_after = commit_latency(database_url)
        seamless = ""
        if args.seamless:
            from bench.api_seamless import seamless_latency

            def serve_with(environment: Mapping[str, str]) -> Any:
                return serving(
                    database_url, args.workers, args.threads, extra_environment=environment
                )

            def client_of(port: int, secret: str) -> Client:
                return Client(port, secret, idempotency)

            seamless = seamless_latency(
                database_url, serve_with, client_of, args.seamless, args.repeats
            ).render()
        trips = ""
        if args.round_trips:
            counted_trips = count_round_trips(database_url, keys, args.workers, args.round_trips)
            trips = counted_trips.render(args.workers)
    load_after = uptime()

    command = "python bench/api.py " + " ".join(sys.argv[1:] if argv is None else argv)
    # `shoebox serve` runs gevent workers unless told otherwise; --threads is gthread's.
    worker_class = "gevent, serve's default" if args.threads == 1 else "gthread"
    report = "\n".join(
        [
            f"Command: `{command.strip()}`  ",
            f"Machine: {os.cpu_count()} CPUs; before: `{load_before}`; after: `{load_after}`  ",
            f"Server: `shoebox serve`, gunicorn {args.workers} workers x {args.threads} thread(s)"
            f" ({worker_class}); PostgreSQL on the same machine; no Redis (windows close lazily)  ",
            f"Clients: N threads, http.client, one connection each; bets"
            f" {'with' if idempotency else 'without'} an Idempotency-Key; medians of"
            f" {args.repeats} repeats of {args.seconds:g} s, contenders interleaved.  ",
            f"Commit latency before: {flush_before.render()}; after: {flush_after.render()}.",
            "",
            render_rounds(scenarios),
            "",
            render_table([s.rates for s in scenarios], BET, [PING]),
            "",
            render_floor(scenarios, floor, flush_after, in_process),
            "",
            seamless,
            "",
            trips,
            "",
            in_process.report if in_process is not None else "",
        ]
    )
    print(report)
    if args.markdown is not None:
        args.markdown.write_text(report + "\n")


if __name__ == "__main__":
    main()
