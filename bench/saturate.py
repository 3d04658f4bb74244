"""`bench/api.py --saturate`: bets against pings with the server saturated, and CPU a request.

    python bench/api.py --saturate [--seconds 8] [--repeats 3] [--workers W]

32 client threads over 16 tables (two seats a table, each client betting for its own player,
funded in the internal wallet), against `shoebox serve` with its default workers (gevent). The
phases, each run in turn within every repeat (rotated, so none always runs first):

- ping: every client calls GET /v1/ping;
- bet: every client places £1 bets for its own player (spots in turn), and no Deal: a round
  grows by a few hundred bets at most, far inside the table's £2,500 a player;
- round: every client places one bet and presses Deal, then waits for its table's other
  client (the second Deal deals the coup and settles, and the next bet opens a round);
- state: every client reads GET /v1/tables/{id}/state of its own table.

For each phase: requests a second, p50/p99 latency, and the CPU seconds the web workers (the
gunicorn workers under `shoebox serve`, from /proc/<pid>/stat) spent over the phase, per
request. A Deal's CPU is the round phase's CPU less its bets at the bet phase's CPU a bet.
The ratio bets/pings is the bet phase's rate over the ping phase's, the same clients, the
same server, the same run. Bets carry an Idempotency-Key, as a careful front end sends them.
"""

from __future__ import annotations

import secrets
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from bench.api import (
    DEPOSIT,
    Client,
    Keys,
    await_workers,
    issue_keys,
    percentile,
    served,
)
from bench.common import rotations, server_url, throwaway_database, uptime
from bench.load import cpu_seconds, descendants
from events.migrations import apply_migrations
from service.cli.serve import DEFAULT_WORKERS

CLIENTS: Final = 32
TABLES: Final = 16
SEATS: Final = CLIENTS // TABLES
PING: Final = "ping"
BET: Final = "bet"
ROUND: Final = "round"
STATE: Final = "state"
PHASES: Final = (PING, BET, ROUND, STATE)
SPOTS: Final = ("player", "banker", "tie")
REQUIRED: Final = 0.25
TARGET: Final = 0.35


@dataclass(slots=True)
class Phase:
    """Every repeat of one phase: rates, latencies, and the web workers' CPU a request."""

    rates: list[float] = field(default_factory=list)
    p50: list[float] = field(default_factory=list)
    p99: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    # The round phase only: its Deals' CPU each, once the bet phase's CPU a bet is taken out.
    deal_cpu: list[float] = field(default_factory=list)
    deals: list[float] = field(default_factory=list)


@dataclass(slots=True)
class Tally:
    """What one client did in one phase: latencies of the requests timed, and the Deals."""

    latencies: list[float] = field(default_factory=list)
    bets: int = 0
    deals: int = 0


def web_workers(master: int) -> list[int]:
    """The pids of gunicorn's workers under `shoebox serve`."""
    return [pid for pid, group in descendants(master).items() if group == "API worker"]


def workers_cpu(pids: Sequence[int]) -> float:
    """The CPU seconds the workers have used so far."""
    return sum(cpu_seconds(pid) for pid in pids)


def set_up(port: int, keys: Keys, run: str) -> list[tuple[str, list[str]]]:
    """16 tables of two funded, seated players each: (table, players)."""
    ops = Client(port, keys.ops, idempotency=False)
    front = Client(port, keys.frontend, idempotency=False)
    tables = []
    try:
        for number in range(TABLES):
            table_id = f"{run}-s{number}"
            ops.ok("POST", "/tables", {"table_id": table_id, "seats": SEATS})
            players = [f"{table_id}-p{seat}" for seat in range(1, SEATS + 1)]
            for seat, player_id in enumerate(players, start=1):
                ops.ok(
                    "POST",
                    f"/wallets/{player_id}/deposits",
                    {"amount_pence": DEPOSIT, "reason": "bench float"},
                )
                front.ok(
                    "POST", f"/tables/{table_id}/seats", {"player_id": player_id, "seat": seat}
                )
            tables.append((table_id, players))
    finally:
        ops.close()
        front.close()
    return tables


def _bet(client: Client, table_id: str, player_id: str, number: int) -> None:
    body = {"player_id": player_id, "spot": SPOTS[number % len(SPOTS)], "stake_pence": 100}
    client.ok("POST", f"/tables/{table_id}/bets", body)


def _deal(client: Client, table_id: str, player_id: str) -> None:
    client.ok("POST", f"/tables/{table_id}/deal", {"player_id": player_id})


def play_phase(
    phase: str,
    client: Client,
    table_id: str,
    player_id: str,
    both: threading.Barrier,
    stop_at: float,
    going_on: list[bool],
    table: int,
) -> Tally:
    """One client's part in one phase, until `stop_at` (a round is played to its end)."""
    tally = Tally()
    number = 0
    while phase == ROUND or time.perf_counter() < stop_at:
        started = time.perf_counter()
        if phase == PING:
            client.ok("GET", "/ping")
        elif phase == STATE:
            client.ok("GET", f"/tables/{table_id}/state")
        elif phase == BET:
            _bet(client, table_id, player_id, number)
            tally.bets += 1
        else:
            _bet(client, table_id, player_id, number)
            tally.bets += 1
            tally.latencies.append(time.perf_counter() - started)
            _deal(client, table_id, player_id)
            tally.deals += 1
            # The other seat's Deal deals the coup; the next bet must wait for it. Both
            # clients of a table go on, or stop, together: the barrier's action decides once
            # for both (a client that stopped alone would leave the other waiting forever).
            both.wait()
            number += 1
            if not going_on[table]:
                break
            continue
        tally.latencies.append(time.perf_counter() - started)
        number += 1
    return tally


def close_rounds(port: int, keys: Keys, tables: Sequence[tuple[str, list[str]]]) -> None:
    """Deal every round the bet phase left open, so the next phase starts at idle tables."""
    client = Client(port, keys.frontend, idempotency=False)
    try:
        for table_id, players in tables:
            for player_id in players:
                answer = client.call("POST", f"/tables/{table_id}/deal", {"player_id": player_id})
                if answer.status >= 500:
                    raise RuntimeError(f"Deal answered {answer.status}: {answer.body}")
    finally:
        client.close()


def run_phase(
    phase: str,
    port: int,
    keys: Keys,
    tables: Sequence[tuple[str, list[str]]],
    seconds: float,
    workers: Sequence[int],
) -> tuple[list[Tally], float, float]:
    """Every client in its own thread, released together: tallies, wall seconds, CPU seconds."""
    seats = [
        (table_id, player_id, n)
        for n, (table_id, players) in enumerate(tables)
        for player_id in players
    ]
    going_on = [True] * len(tables)

    def decide(table: int) -> Callable[[], None]:
        def action() -> None:
            going_on[table] = time.perf_counter() < stop_at[0]

        return action

    barriers = [threading.Barrier(SEATS, action=decide(n)) for n in range(len(tables))]
    clients = [Client(port, keys.frontend, idempotency=True) for _ in seats]
    tallies: list[Tally | None] = [None] * len(seats)
    errors: list[BaseException] = []
    start_line = threading.Barrier(len(seats) + 1)
    # Each table's clients stop together: the stop time is fixed before anyone starts.
    stop_at: list[float] = [0.0]

    def body(number: int) -> None:
        table_id, player_id, table = seats[number]
        start_line.wait()
        try:
            tallies[number] = play_phase(
                phase,
                clients[number],
                table_id,
                player_id,
                barriers[table],
                stop_at[0],
                going_on,
                table,
            )
        except BaseException as error:  # re-raised in the caller's thread below
            errors.append(error)
            barriers[table].abort()

    threads = [threading.Thread(target=body, args=(n,)) for n in range(len(seats))]
    for thread in threads:
        thread.start()
    cpu_before = workers_cpu(workers)
    stop_at[0] = time.perf_counter() + seconds
    started = time.perf_counter()
    start_line.wait()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    cpu = workers_cpu(workers) - cpu_before
    for client in clients:
        client.close()
    if errors:
        raise errors[0]
    return [t for t in tallies if t is not None], elapsed, cpu


@dataclass(slots=True)
class Saturation:
    """The run's figures, phase by phase."""

    phases: dict[str, Phase]
    workers: int
    seconds: float
    repeats: int
    load_before: str
    load_after: str

    def median(self, phase: str, what: Callable[[Phase], list[float]]) -> float:
        values = what(self.phases[phase])
        return statistics.median(values) if values else float("nan")

    def render(self, command: str) -> str:
        ratio = self.median(BET, lambda p: p.rates) / self.median(PING, lambda p: p.rates)
        verdict = (
            "target met" if ratio >= TARGET else "required met" if ratio >= REQUIRED else "missed"
        )
        lines = [
            f"Command: `{command}`  ",
            f"Server: `shoebox serve`, {self.workers} gevent workers"
            f"{' (the default)' if self.workers == DEFAULT_WORKERS else ''}; {CLIENTS}"
            f" clients over {TABLES} tables, one player each, internal wallet; medians of"
            f" {self.repeats} repeats of {self.seconds:g} s, phases rotated.  ",
            f"Load before: `{self.load_before}`; after: `{self.load_after}`",
            "",
            "| phase | requests/s | p50 ms | p99 ms | web workers' CPU ms a request |",
            "|---|---:|---:|---:|---:|",
        ]
        names = {PING: "GET /ping", BET: "POST bet", STATE: "GET table state"}
        for phase in (PING, BET, STATE):
            lines.append(
                f"| {names[phase]} | {self.median(phase, lambda p: p.rates):.0f}"
                f" | {self.median(phase, lambda p: p.p50) * 1000:.2f}"
                f" | {self.median(phase, lambda p: p.p99) * 1000:.2f}"
                f" | {self.median(phase, lambda p: p.cpu) * 1000:.3f} |"
            )
        lines.append(
            "| POST deal (round phase: a bet, then Deal)"
            f" | {self.median(ROUND, lambda p: p.deals):.0f}"
            f" | {self.median(ROUND, lambda p: p.p50) * 1000:.2f} (its bets)"
            f" | {self.median(ROUND, lambda p: p.p99) * 1000:.2f} (its bets)"
            f" | {self.median(ROUND, lambda p: p.deal_cpu) * 1000:.3f} |"
        )
        lines += [
            "",
            f"bets/pings at saturation: **{ratio:.3f}** (required {REQUIRED}, target {TARGET}:"
            f" {verdict}); CPU a bet / CPU a ping:"
            f" {self.median(BET, lambda p: p.cpu) / self.median(PING, lambda p: p.cpu):.1f}",
        ]
        return "\n".join(lines)


def against(baseline: Path, workers: int, seconds: float, turns: int) -> str:
    """Old code (from `baseline`) and this checkout's, `turns` servers each, taking turns."""
    runs: dict[str, list[Saturation]] = {"old": [], "new": []}
    for turn in range(turns):
        for name in ("old", "new") if turn % 2 == 0 else ("new", "old"):
            code = baseline if name == "old" else None
            runs[name].append(saturate(workers, seconds, 1, code))
            print(f"  turn {turn + 1}: {name} done", file=sys.stderr)
    lines = [
        f"Old code from `{baseline}`, new from this checkout; {turns} servers each, taking turns;"
        f" each server one repeat of every phase, {seconds:g} s; medians over servers.",
        "",
        "| phase | old requests/s | new requests/s | old CPU ms a request | new CPU ms a request"
        " | CPU old/new |",
        "|---|---:|---:|---:|---:|---:|",
    ]

    def median(name: str, phase: str, what: Callable[[Phase], list[float]]) -> float:
        return statistics.median(s.median(phase, what) for s in runs[name])

    for phase, label in ((PING, "GET /ping"), (BET, "POST bet"), (STATE, "GET table state")):
        old_cpu, new_cpu = (median(n, phase, lambda p: p.cpu) for n in ("old", "new"))
        lines.append(
            f"| {label} | {median('old', phase, lambda p: p.rates):.0f}"
            f" | {median('new', phase, lambda p: p.rates):.0f}"
            f" | {old_cpu * 1000:.3f} | {new_cpu * 1000:.3f} | {old_cpu / new_cpu:.2f}x |"
        )
    old_deal, new_deal = (median(n, ROUND, lambda p: p.deal_cpu) for n in ("old", "new"))
    lines.append(
        f"| POST deal | {median('old', ROUND, lambda p: p.deals):.0f}"
        f" | {median('new', ROUND, lambda p: p.deals):.0f}"
        f" | {old_deal * 1000:.3f} | {new_deal * 1000:.3f} | {old_deal / new_deal:.2f}x |"
    )
    for name in ("old", "new"):
        ratios = [
            s.median(BET, lambda p: p.rates) / s.median(PING, lambda p: p.rates) for s in runs[name]
        ]
        p50 = [s.median(BET, lambda p: p.p50) * 1000 for s in runs[name]]
        p99 = [s.median(BET, lambda p: p.p99) * 1000 for s in runs[name]]
        lines.append(
            f"\n{name}: bets/pings {statistics.median(ratios):.3f} (each server:"
            f" {', '.join(f'{r:.3f}' for r in ratios)}); bet p50 ms"
            f" {', '.join(f'{v:.0f}' for v in p50)}; bet p99 ms"
            f" {', '.join(f'{v:.0f}' for v in p99)}"
        )
    return "\n".join(lines)


def saturate(workers: int, seconds: float, repeats: int, code: Path | None = None) -> Saturation:
    """Run every phase `repeats` times against one `shoebox serve`."""
    phases = {name: Phase() for name in PHASES}
    load_before = uptime()
    with throwaway_database(server_url(), prefix="bench_sat") as database_url:
        apply_migrations(database_url)
        keys = issue_keys(database_url)
        with served(database_url, workers, 1, code=code) as (port, master):
            await_workers(port, keys, workers)
            pids = web_workers(master)
            if len(pids) != workers:
                raise RuntimeError(f"found {len(pids)} web workers, not {workers}")
            tables = set_up(port, keys, secrets.token_hex(3))
            # Untimed warm-up: every phase once, so shoes are open and caches warm.
            for warm in PHASES:
                run_phase(warm, port, keys, tables, 1.0, pids)
                close_rounds(port, keys, tables)
            bet_cpu: list[float] = []
            counts: list[tuple[int, int]] = []
            for order in rotations(repeats, PHASES):
                for name in order:
                    tallies, elapsed, cpu = run_phase(name, port, keys, tables, seconds, pids)
                    if name == BET:
                        close_rounds(port, keys, tables)
                    phase = phases[name]
                    latencies = [took for t in tallies for took in t.latencies]
                    requests = len(latencies)
                    phase.rates.append(requests / elapsed)
                    phase.p50.append(percentile(latencies, 0.50))
                    phase.p99.append(percentile(latencies, 0.99))
                    if name == ROUND:
                        deals = sum(t.deals for t in tallies)
                        bets = sum(t.bets for t in tallies)
                        phase.deals.append(deals / elapsed)
                        # A Deal's share is worked out below, once the bet phase's is known.
                        phase.deal_cpu.append(cpu)
                        counts.append((bets, deals))
                    else:
                        phase.cpu.append(cpu / requests)
                        if name == BET:
                            bet_cpu.append(cpu / requests)
                    print(f"  saturate {name}: {requests / elapsed:.0f}/s", file=sys.stderr)
            # A Deal's CPU: the round phase's CPU less its bets at the bet phase's median.
            per_bet = statistics.median(bet_cpu)
            round_phase = phases[ROUND]
            round_phase.deal_cpu = [
                (cpu - bets * per_bet) / deals
                for cpu, (bets, deals) in zip(round_phase.deal_cpu, counts, strict=True)
            ]
    return Saturation(phases, workers, seconds, repeats, load_before, uptime())
