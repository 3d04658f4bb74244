"""Size log shards by table group from this machine's measured per-append costs.

    .venv/bin/python bench/shards.py --measure --out /tmp/shard-costs.json [--appends 2000]
    .venv/bin/python bench/shards.py --simulate --costs /tmp/shard-costs.json [--cores 8]

`--measure` creates a database of its own on the server in DATABASE_URL (default
postgresql://postgres@127.0.0.1:5432/postgres), migrates it, and drops it at the end. It
measures, through the real store (PostgresEventStore's append, the parallel log, group commit
off so each append is its own call, sequencing in the background):

- an append's PostgreSQL backend CPU: a bet-shaped append (BetPlaced on a table stream,
  StakeReserved on a wallet stream, an idempotency key: bench/contention.py's), over many
  appends on one pooled connection, from /proc/<pg_backend_pid()>/stat (so the server must
  run on this machine), and the append's wall time (p50, p99: the commit's flush included);
- the commit itself: a one-row insert committed synchronously, and asynchronously, beside a
  `SELECT 1`, so the flush's share of the append is visible;
- the sequencer: `sequence_batch` over batches of 0 (an empty poll), 1, 8, 64 and 512 appends
  queued beforehand, its backend's CPU and each batch's wall time, fitted to a fixed cost a
  batch plus a cost an append;
- the web tier's CPU a bet is NOT measured here: it is taken from docs/benchmarks.md (issue
  23, "Saturated": 5.43 ms of gunicorn workers' CPU a POST bet), and the JSON says so.

`--simulate` feeds those costs to bench/shards_model.py (Erlang C; its docstring says why,
and a seeded discrete-event run of one shard checks its waits) and
prints, for 200, 1,000, 5,000 and 20,000 tables at bench/load.py's traffic (2.7 bets a second
a table, 70% of a window's turns in its last 1.5 s, every window aligned), the shards needed
and each one's figures, for seamless (operator) wallets and for internal wallets whose players
bet at tables on other shards, as a markdown table with its assumptions.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

# Run as a script, Python puts bench/ first on the path, where bench/domain.py would shadow
# the `domain` package; the project root goes before it.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psycopg

from bench.common import server_url, throwaway_database, uptime
from bench.contention import _cpu_seconds, bet_appends, key_of, metadata, percentile
from bench.shards_model import Costs, Load, Saga, check, size
from events.migrations import apply_migrations
from events.postgres import PostgresEventStore, app_conninfo, open_pool
from events.sequencer import sequence_batch

WEB_CPU_PER_BET_MS = 5.43
WEB_CPU_SOURCE = (
    "docs/benchmarks.md, issue 23 'Saturated': gunicorn workers' CPU a POST bet (not measured"
    " by this script)"
)
# Batch sizes (appends) and how many batches of each: more of the small ones, whose CPU is
# a few 10 ms clock ticks each.
SEQUENCER_BATCHES: tuple[tuple[int, int], ...] = ((0, 1000), (1, 300), (8, 100), (64, 20), (512, 6))
TABLE_COUNTS = (200, 1_000, 5_000, 20_000)


def _fit(points: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """Least squares y = a + b x over the points: (a, b)."""
    xs = [x for x, _ in points]
    ys = [y for _, y in points]
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
    spread = sum((x - mean_x) ** 2 for x in xs)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / spread
    return mean_y - slope * mean_x, slope


def _walls(count: int, run: Callable[[], object]) -> list[float]:
    """Each of `count` calls' wall time, in ms."""
    walls = []
    for _ in range(count):
        start = time.perf_counter()
        run()
        walls.append((time.perf_counter() - start) * 1000)
    return walls


def measure(appends: int) -> dict[str, object]:
    """This machine's per-append costs, on a database of its own."""
    before = uptime()
    with throwaway_database(server_url(), prefix="bench_shards") as database_url:
        apply_migrations(database_url)
        conninfo = app_conninfo(database_url, environ={})
        figures: dict[str, object] = {}
        # The commit alone: a superuser's table in the throwaway database.
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute("CREATE TABLE flush_probe (n integer)")
            ping = _walls(500, lambda: conn.execute("SELECT 1").fetchone())
            sync = _walls(500, lambda: conn.execute("INSERT INTO flush_probe VALUES (1)"))
            conn.execute("SET synchronous_commit = off")
            lazy = _walls(500, lambda: conn.execute("INSERT INTO flush_probe VALUES (1)"))
        figures["round_trip_ms"] = {"p50": statistics.median(ping), "p99": percentile(ping, 0.99)}
        figures["commit_sync_ms"] = {"p50": statistics.median(sync), "p99": percentile(sync, 0.99)}
        figures["commit_async_ms"] = {"p50": statistics.median(lazy), "p99": percentile(lazy, 0.99)}
        figures["flush_ms_p50"] = statistics.median(sync) - statistics.median(lazy)

        with open_pool(conninfo, min_size=1, max_size=1) as pool:
            # Group commit off: one call an append, as one client's appends are anyway. No
            # backlog bound: the appends queue here while no sequencer runs.
            store = PostgresEventStore(
                pool, sequencing="background", group_commit=False, backlog_bound=None
            )
            with pool.connection() as conn:
                row = conn.execute("SELECT pg_backend_pid()").fetchone()
            assert row is not None
            backend = f"/proc/{row[0]}/stat"
            if _cpu_seconds(backend) is None:
                raise SystemExit("the server's backends are not in this machine's /proc")
            run = f"s{os.getpid()}"
            counter = [0]

            def append() -> None:
                n = counter[0]
                store.append(bet_appends(run, 0, n), metadata(0, n), key_of(run, 0, n))
                counter[0] = n + 1

            _walls(100, append)  # warm: plans, caches, the pool's connection
            cpu_before, thread_before = _cpu_seconds(backend), time.thread_time()
            walls = _walls(appends, append)
            cpu_after, thread_after = _cpu_seconds(backend), time.thread_time()
            assert cpu_before is not None
            assert cpu_after is not None
            figures["appends"] = appends
            figures["append_backend_cpu_ms"] = (cpu_after - cpu_before) * 1000 / appends
            figures["append_client_cpu_ms"] = (thread_after - thread_before) * 1000 / appends
            figures["append_wall_ms"] = {
                "p50": statistics.median(walls),
                "p99": percentile(walls, 0.99),
            }

            with psycopg.connect(conninfo, autocommit=True) as sequencer:
                while (batch := sequence_batch(sequencer)) is not None and batch.events:
                    pass  # drain what the appends above queued
                seq_pid = sequencer.info.backend_pid
                seq_stat = f"/proc/{seq_pid}/stat"
                cpu_points: list[tuple[float, float]] = []
                wall_points: list[tuple[float, float]] = []
                table = []
                for batch_size, repeats in SEQUENCER_BATCHES:
                    cpu_ms = 0.0
                    batch_walls = []
                    for _ in range(repeats):
                        for _ in range(batch_size):
                            append()
                        start = _cpu_seconds(seq_stat)
                        began = time.perf_counter()
                        done = sequence_batch(sequencer, max_appends=max(batch_size, 1))
                        batch_walls.append((time.perf_counter() - began) * 1000)
                        end = _cpu_seconds(seq_stat)
                        assert start is not None
                        assert end is not None
                        assert done is not None
                        assert done.events == 2 * batch_size, done
                        cpu_ms += (end - start) * 1000
                    cpu_a_batch = cpu_ms / repeats
                    wall = statistics.median(batch_walls)
                    cpu_points.append((batch_size, cpu_a_batch))
                    wall_points.append((batch_size, wall))
                    table.append(
                        {"appends": batch_size, "cpu_ms": cpu_a_batch, "wall_ms_p50": wall}
                    )
                    print(
                        f"  sequencer, {batch_size} appends a batch: {cpu_a_batch:.3f} ms CPU,"
                        f" {wall:.3f} ms wall",
                        file=sys.stderr,
                    )
            cpu_fixed, cpu_each = _fit(cpu_points)
            wall_fixed, wall_each = _fit(wall_points)
            figures["sequencer_batches"] = table
            figures["sequencer_batch_cpu_ms"] = max(cpu_fixed, 0.0)
            figures["sequencer_append_cpu_ms"] = cpu_each
            figures["sequencer_batch_wall_ms"] = max(wall_fixed, 0.0)
            figures["sequencer_append_wall_ms"] = wall_each
    figures["web_cpu_per_bet_ms"] = WEB_CPU_PER_BET_MS
    figures["web_cpu_source"] = WEB_CPU_SOURCE
    figures["machine"] = {"cpus": os.cpu_count(), "before": before, "after": uptime()}
    figures["measured_at"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    return figures


def costs_of(figures: dict[str, object]) -> Costs:
    """The model's costs from a --measure file."""
    wall = figures["append_wall_ms"]
    assert isinstance(wall, dict)

    def number(name: str) -> float:
        value = figures[name]
        assert isinstance(value, int | float)
        return float(value)

    return Costs(
        append_backend_cpu_ms=number("append_backend_cpu_ms"),
        append_p50_ms=float(wall["p50"]),
        append_p99_ms=float(wall["p99"]),
        sequencer_batch_cpu_ms=number("sequencer_batch_cpu_ms"),
        sequencer_append_cpu_ms=number("sequencer_append_cpu_ms"),
        sequencer_batch_wall_ms=number("sequencer_batch_wall_ms"),
        sequencer_append_wall_ms=number("sequencer_append_wall_ms"),
        web_cpu_per_bet_ms=number("web_cpu_per_bet_ms"),
    )


def simulate(costs: Costs, cores: int, load: Load, saga: Saga) -> str:
    """The sizing table, in markdown, with its assumptions."""
    lines = [
        f"Shards of {cores} cores each (PostgreSQL primary + synchronous standby, its own"
        f" sequencer); a table: {load.bets_per_second:.2f} bets/s, {load.appends_per_second:.2f}"
        f" appends/s, x{load.peak_factor:.2f} in the windows' bursts (all aligned). Targets at"
        " the peak: CPU <= 60% of the cores, sequencer busy <= 50%.",
        "",
        "| tables | wallets | shards | tables/shard | appends/s a shard (peak) | CPU | sequencer"
        " busy | sequencer lag p99 ms | bet p99 ms (append) | cross-shard bets | extra appends"
        " a bet | cross-shard bet p99 ms | shard size set by | web cores (all) |",
        "|--:|:--|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for tables in TABLE_COUNTS:
        for internal in (False, True):
            f = size(tables, cores, costs, load, internal_wallets=internal, saga=saga)
            web = tables * load.bets_per_second * load.peak_factor * costs.web_cpu_per_bet_ms / 1000
            lines.append(
                f"| {tables:,} | {'internal' if internal else 'seamless'} | {f.shards}"
                f" | {f.tables_per_shard:,.0f} | {f.appends_per_second:,.0f}"
                f" | {f.cpu_utilisation:.0%} | {f.sequencer_busy:.0%}"
                f" | {f.sequencer_lag_p99_ms:.1f} | {f.bet_p99_ms:.1f}"
                f" | {f.cross_share:.0%} | {f.extra_appends_per_bet:.2f}"
                f" | {f.saga_bet_p99_ms if internal and f.shards > 1 else f.bet_p99_ms:.1f}"
                f" | {f.limit} | {web:,.0f} |"
            )
    per_shard = round(size(20_000, cores, costs, load, internal_wallets=False).tables_per_shard)
    c = check(per_shard, cores, costs, load)
    checked = (
        f"| {cores} | {per_shard:,} | {c.erlang_p99_ms:.2f} | {c.simulated_p99_ms:.2f}"
        f" | {c.simulated_fixed_p99_ms:.2f} | {c.closes_at_once_p99_ms:.1f} |"
    )
    per_append = costs.append_backend_cpu_ms + costs.sequencer_append_cpu_ms
    by_cores = 0.6 * cores * 1000 / per_append
    by_sequencer = 0.5 * 1000 / costs.sequencer_append_wall_ms
    bets_per_round = load.bets_per_player
    saga_p99 = costs.append_p99_ms + costs.append_p50_ms + 2 * load.standby_ms + load.network_ms
    lines += [
        "",
        f"One shard's ceiling at the targets: {by_cores:,.0f} appends/s by its {cores} cores"
        f" ({per_append:.3f} ms of PostgreSQL CPU an append, the sequencer's share included),"
        f" {by_sequencer:,.0f} by its sequencer ({costs.sequencer_append_wall_ms:.3f} ms of a"
        " batch's wall time an append).",
        "",
        "| an internal-wallet bet | appends | round trips before the answer | p99 ms |",
        "|:--|--:|--:|--:|",
        f"| wallet on the table's shard | 1 | 1 | {costs.append_p99_ms + load.standby_ms:.1f} |",
        f"| wallet on another shard (saga) | {saga.appends_per_bet(bets_per_round):.2f}"
        f" | {Saga.round_trips_on_path()}"
        f" | {saga_p99:.1f} |",
        f"| seamless (operator's wallet) | 1 | 1 (+ the operator's call) |"
        f" {costs.append_p99_ms + load.standby_ms:.1f} + the call |",
        "",
        "The Erlang C wait for a core beside a seeded discrete-event run of one shard of the"
        " 20,000-table seamless row (10 aligned windows; the timer closes four windows at once):",
        "",
        "| cores | tables a shard | p99 wait ms, Erlang C at the burst's rate | simulated,"
        " exponential service | simulated, fixed service | simulated, every close at the"
        " window's end |",
        "|--:|--:|--:|--:|--:|--:|",
        checked,
        "",
        "Assumptions: every append (bet, Deal, close) costs one measured bet-shaped append;"
        " reads go to replicas; a synchronous standby adds"
        f" {load.standby_ms:g} ms to every commit and a second shard's round trip"
        f" {load.network_ms:g} ms (both assumed, not measured here); internal wallets homed by"
        " a hash of the player, players at any table; "
        f"{saga.failure_share:.0%} of reserved stakes released; one settlement append a"
        " player and round on the wallet's shard; the global root: one append a minute;"
        " web cores: the web tier's CPU at the peak, bets only, at"
        f" {costs.web_cpu_per_bet_ms:g} ms a bet (docs/benchmarks.md).",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    """Measure, or simulate from a measurement."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--measure", action="store_true")
    parser.add_argument("--simulate", action="store_true")
    parser.add_argument("--out", type=Path, default=Path("shard-costs.json"))
    parser.add_argument("--costs", type=Path, default=None)
    parser.add_argument("--appends", type=int, default=2000)
    parser.add_argument("--cores", type=int, default=8)
    parser.add_argument("--standby-ms", type=float, default=1.0)
    args = parser.parse_args(argv)
    if not args.measure and not args.simulate:
        parser.error("--measure, --simulate or both")
    if args.measure:
        figures = measure(args.appends)
        args.out.write_text(json.dumps(figures, indent=2) + "\n")
        print(json.dumps(figures, indent=2))
    if args.simulate:
        source = args.costs or args.out
        costs = costs_of(json.loads(source.read_text()))
        print(simulate(costs, args.cores, Load(standby_ms=args.standby_ms), Saga()))


if __name__ == "__main__":
    main()
