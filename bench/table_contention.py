"""Bets racing at one table through `shoebox serve`: is every one recorded, and at what cost?

Run as `.venv/bin/python bench/table_contention.py [--seconds 10] [--repeats 3]
[--baseline-root DIR]` with DATABASE_URL naming a PostgreSQL server (default
postgresql://postgres@127.0.0.1:5432/postgres) and REDIS_URL a Redis, if the server should
schedule its windows there (none closes during a run: the window is five minutes).

Two scenarios, each through a real `shoebox serve` with 5 gevent workers on a database of its
own:

- storm: 7 players at one table and 7 at another, each betting £1 on a connection of its own
  as fast as the server answers, for S seconds; the window outlasts the run and the players'
  funds and the table's maximum are far beyond what they can stake, so no game rule can
  refuse a bet. It reports bets a second per table, the bets' latency, every status, and
  every 409 by the rule it names or, naming none, by its problem type: a `concurrent-update`
  is a bet refused only because the others kept winning the race for the table.
- wide: 2 players at each of 16 tables, betting as in the storm (the issue's second case).
- lone: one player alone at a table of its own, betting four times a second, as a player
  at the table might: the uncontended bet's latency, which the one-call path keeps at one call
  to PostgreSQL.
- lone, back to back: the same player betting as fast as the server answers.

A worker plays a table it has just started to play in turns under the table's lock for
CONTENDED_SECONDS (service/application/game/turns.py); the lone player's runs are measured
after a warm-up of their own that outlasts that, so they show the one-call path.

With `--baseline-root DIR` (a checkout of the code to compare with, e.g. made by
`git worktree add /tmp/before <commit>`) a second server runs that code on a database of its
own, and the two are measured turn about in each repeat (the order rotated), so that the
machine's drift falls on both alike. The server processes get their code by PYTHONPATH, as
bench/load.py's do. The figures are medians over the repeats.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

_ROOT = Path(__file__).resolve().parent.parent
# Run as a script, Python puts bench/ first on the path, where bench/domain.py would shadow
# the `domain` package; the project root goes before it.
sys.path.insert(0, str(_ROOT))

from bench.common import (  # noqa: E402
    CONCURRENCY_REFUSAL,
    problem_kind,
    rotations,
    server_url,
    throwaway_database,
    uptime,
)
from bench.load import Connection, free_port, percentile  # noqa: E402
from events.migrations import apply_migrations  # noqa: E402
from events.postgres import PostgresEventStore, open_pool  # noqa: E402
from events.store import EventMetadata  # noqa: E402
from service.application.game.turns import CONTENDED_SECONDS  # noqa: E402
from service.application.keys import Role, create_key  # noqa: E402

SHOEBOX: Final = Path(sys.executable).with_name("shoebox")
WORKERS: Final = 5
"""`shoebox serve`'s default on this machine's 2 cores (2 x CPUs + 1)."""
PLAYERS: Final = 7
STAKE: Final = 100
WINDOW_MS: Final = 300_000
"""The longest window a table may have: no window closes while the players bet."""
MAXIMUM: Final = 100_000_000
DEPOSIT: Final = 1_000_000_000
START_TIMEOUT_SECONDS: Final = 60.0
REQUEST_TIMEOUT_SECONDS: Final = 30.0
OPERATOR: Final = EventMetadata(actor="bench-table-contention", role="cli")


@dataclass(slots=True)
class Storm:
    """What the players of one run saw, from their side."""

    seconds: float = 0.0
    placed: collections.Counter[str] = field(default_factory=collections.Counter)
    """201s, by table."""
    by_player: collections.Counter[str] = field(default_factory=collections.Counter)
    statuses: collections.Counter[int] = field(default_factory=collections.Counter)
    refusals: collections.Counter[str] = field(default_factory=collections.Counter)
    """409s, by the rule they name, or by their problem type when they name none."""
    retry_later: collections.Counter[str] = field(default_factory=collections.Counter)
    """503s, by their problem type: the server's ask to send the same bet again later."""
    failures: collections.Counter[str] = field(default_factory=collections.Counter)
    """Requests that got no answer, by the transport error."""
    latencies: list[float] = field(default_factory=list)
    """Seconds, of the bets answered 201."""

    @property
    def concurrency_refusals(self) -> int:
        """409s that name no rule but say the others kept changing the table."""
        return self.refusals[CONCURRENCY_REFUSAL]

    def per_table_rate(self) -> dict[str, float]:
        """Bets recorded a second, per table."""
        return {table: count / self.seconds for table, count in self.placed.items()}


async def set_up(
    port: int, ops: str, front: str, tables: Mapping[str, Sequence[str]], window_ms: int = WINDOW_MS
) -> None:
    """Create each table, fund its players beyond any stake, seat them: no rule can refuse."""
    connection = Connection(port)
    try:
        for table_id, players in tables.items():
            table = {
                "table_id": table_id,
                "seats": len(players),
                "betting_window_ms": window_ms,
                "maximum_pence": MAXIMUM,
            }
            await _must(connection, "POST", "/v1/tables", ops, table)
            for seat, player_id in enumerate(players, start=1):
                deposit = {"amount_pence": DEPOSIT, "reason": "contention float"}
                await _must(connection, "POST", f"/v1/wallets/{player_id}/deposits", ops, deposit)
                sit = {"player_id": player_id, "seat": seat}
                await _must(connection, "POST", f"/v1/tables/{table_id}/seats", front, sit)
    finally:
        connection.close()


async def _must(connection: Connection, method: str, path: str, key: str, body: object) -> None:
    status, answer = await connection.request(method, path, key, body)
    if status >= 300:
        raise RuntimeError(f"{method} {path} answered {status}: {answer}")


async def storm(
    port: int,
    key: str,
    tables: Mapping[str, Sequence[str]],
    seconds: float,
    stake: int = STAKE,
    every: float = 0.0,
    warm_up: float = 0.0,
) -> Storm:
    """Every player bets `stake` on the banker, one bet after another (at most one every
    `every` seconds), for `warm_up` seconds that are not counted, then for `seconds`."""
    found = Storm()
    counted_from = time.monotonic() + warm_up
    until = counted_from + seconds

    async def player(table_id: str, player_id: str) -> None:
        connection = Connection(port)
        body = {"player_id": player_id, "spot": "banker", "stake_pence": stake}
        path = f"/v1/tables/{table_id}/bets"
        try:
            while time.monotonic() < until:
                sent = time.perf_counter()
                next_at = time.monotonic() + every
                try:
                    status, answer = await asyncio.wait_for(
                        connection.request("POST", path, key, body), REQUEST_TIMEOUT_SECONDS
                    )
                except (OSError, asyncio.IncompleteReadError, TimeoutError) as error:
                    connection.close()
                    found.failures[type(error).__name__] += 1
                    continue
                if time.monotonic() < counted_from:
                    await asyncio.sleep(max(0.0, next_at - time.monotonic()))
                    continue
                found.statuses[status] += 1
                if status == 201:
                    found.latencies.append(time.perf_counter() - sent)
                    found.placed[table_id] += 1
                    found.by_player[player_id] += 1
                elif status == 409:
                    found.refusals[problem_kind(answer)] += 1
                elif status == 503:
                    found.retry_later[problem_kind(answer)] += 1
                await asyncio.sleep(max(0.0, next_at - time.monotonic()))
        finally:
            connection.close()

    await asyncio.gather(
        *(player(table_id, p) for table_id, players in tables.items() for p in players)
    )
    found.seconds = time.monotonic() - counted_from
    return found


def players_of(tables: Sequence[str], players: int = PLAYERS) -> dict[str, list[str]]:
    """`players` players for each table."""
    return {table_id: [f"{table_id}-p{n}" for n in range(1, players + 1)] for table_id in tables}


# -- the servers.


@dataclass(frozen=True, slots=True)
class Server:
    """A running `shoebox serve` of some checkout, with the keys made on its database."""

    name: str
    port: int
    ops: str
    front: str


@contextlib.contextmanager
def serve(name: str, root: Path, log: Path) -> Iterator[Server]:
    """`shoebox serve` with 5 workers running the code at `root`, on a database of its own."""
    with throwaway_database(server_url(), prefix="bench_contention") as database_url:
        apply_migrations(database_url)
        with open_pool(database_url, max_size=1) as pool:
            store = PostgresEventStore(pool)
            ops = create_key(store, "contention-ops", Role.OPS, OPERATOR).secret
            front = create_key(store, "contention-front", Role.FRONTEND, OPERATOR).secret
        port = free_port()
        environment = {
            **os.environ,
            "DATABASE_URL": database_url,
            # Every player shares one key: the per-key limit would measure itself.
            "SHOEBOX_RATE_LIMIT_PER_SECOND": "0",
            "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])),
        }
        environment.pop("SHOEBOX_APP_DATABASE_URL", None)
        command = [str(SHOEBOX), "serve", "--bind", f"127.0.0.1:{port}"]
        command += ["--workers", str(WORKERS)]
        with log.open("ab") as sink:
            process = subprocess.Popen(
                command, env=environment, stdout=sink, stderr=subprocess.STDOUT, cwd=root
            )
        try:
            deadline = time.monotonic() + START_TIMEOUT_SECONDS
            while not _healthy(port):
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"shoebox serve did not start: {log.read_text()[-3000:]}")
                time.sleep(0.2)
            yield Server(name, port, ops, front)
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=40)
            finally:
                if process.poll() is None:
                    process.kill()
                    process.wait()


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


# -- a run, and the report.


@dataclass(slots=True)
class Figures:
    """One contender's runs."""

    storms: list[Storm] = field(default_factory=list)
    lone: list[Storm] = field(default_factory=list)
    back_to_back: list[Storm] = field(default_factory=list)
    wide: list[Storm] = field(default_factory=list)


LONE_EVERY: Final = 0.25
"""Seconds between the lone player's bets: four a second, below a hot table's ten."""


def run_once(server: Server, tag: str, seconds: float) -> tuple[Storm, Storm, Storm, Storm]:
    """The lone player's runs, paced then back to back, then the storm's and the wide one's,
    each at tables of its own."""
    lone_tables = players_of([f"{tag}-lone"], players=1)
    fast_tables = players_of([f"{tag}-fast"], players=1)
    storm_tables = players_of([f"{tag}-a", f"{tag}-b"])
    wide_tables = players_of([f"{tag}-w{n}" for n in range(16)], players=2)
    everything = {**lone_tables, **fast_tables, **storm_tables, **wide_tables}
    asyncio.run(set_up(server.port, server.ops, server.front, everything))
    # The first bet of a table opens its round and its shoe: not what is measured.
    warm = players_of(list(everything), 1)
    asyncio.run(storm(server.port, server.front, warm, 0.5, every=LONE_EVERY))
    # The lone player's worker plays the table in turns for its first CONTENDED_SECONDS
    # (turns.py): a warm-up of its own connection, not counted, is past them.
    lone = asyncio.run(
        storm(
            server.port,
            server.front,
            lone_tables,
            seconds,
            every=LONE_EVERY,
            warm_up=CONTENDED_SECONDS + 1,
        )
    )
    fast = asyncio.run(
        storm(server.port, server.front, fast_tables, seconds, warm_up=CONTENDED_SECONDS + 1)
    )
    stormed = asyncio.run(storm(server.port, server.front, storm_tables, seconds))
    wide = asyncio.run(storm(server.port, server.front, wide_tables, seconds))
    return lone, fast, stormed, wide


def _ms(seconds: float) -> str:
    return f"{1000 * seconds:.1f}"


def render(figures: Mapping[str, Figures], seconds: float) -> str:
    """A Markdown table: per contender, the lone bet's latency and the storm's figures."""
    lines = [
        "| code | lone bet p50 / p99 ms | back-to-back bet p50 ms (bets/s)"
        " | storm bets/s per table"
        " | storm bet p50 / p99 / max ms | fewest / most bets of a player"
        " | 201s | 409s by rule or type | concurrency 409s"
        " | wide: bets/s (all 16 tables), 201s, concurrency 409s |",
        "|---|--:|--:|--:|--:|--:|--:|---|--:|--:|",
    ]
    for name, found in figures.items():
        lone_p50 = statistics.median(percentile(r.latencies, 0.5) for r in found.lone)
        lone_p99 = statistics.median(percentile(r.latencies, 0.99) for r in found.lone)
        fast_p50 = statistics.median(percentile(r.latencies, 0.5) for r in found.back_to_back)
        fast_rate = statistics.median(
            sum(r.placed.values()) / r.seconds for r in found.back_to_back
        )
        rates = [rate for s in found.storms for rate in s.per_table_rate().values()]
        p50 = statistics.median(percentile(s.latencies, 0.5) for s in found.storms)
        p99 = statistics.median(percentile(s.latencies, 0.99) for s in found.storms)
        worst = max(max(s.latencies, default=0.0) for s in found.storms)
        fewest = min(min(s.by_player.values(), default=0) for s in found.storms)
        most = max(max(s.by_player.values(), default=0) for s in found.storms)
        placed = sum(s.statuses[201] for s in found.storms)
        refusals: collections.Counter[str] = collections.Counter()
        for s in found.storms:
            refusals.update(s.refusals)
        wide_rate = statistics.median(sum(w.placed.values()) / w.seconds for w in found.wide)
        wide_placed = sum(w.statuses[201] for w in found.wide)
        wide_refused = sum(w.concurrency_refusals for w in found.wide)
        by_kind = ", ".join(f"{kind}: {n}" for kind, n in refusals.most_common()) or "none"
        lines.append(
            f"| {name} | {_ms(lone_p50)} / {_ms(lone_p99)} | {_ms(fast_p50)} ({fast_rate:.0f})"
            f" | {statistics.median(rates):.0f}"
            f" (runs: {', '.join(f'{r:.0f}' for r in rates)})"
            f" | {_ms(p50)} / {_ms(p99)} / {_ms(worst)} | {fewest} / {most} | {placed}"
            f" | {by_kind} | {refusals[CONCURRENCY_REFUSAL]}"
            f" | {wide_rate:.0f}, {wide_placed}, {wide_refused} |"
        )
    runs = len(next(iter(figures.values())).storms)
    lines.append("")
    lines.append(
        f"{runs} run(s) of {seconds:g} s per code, turn about; per-table rates are listed per run"
        " and table, latencies are the runs' medians (max: the worst of all)."
    )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Measure this checkout (and the baseline's, if given) turn about; print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="seconds a run (default 10)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per code (default 3)")
    parser.add_argument("--baseline-root", type=Path, help="a checkout to compare with")
    args = parser.parse_args(argv)
    roots = {"this checkout": _ROOT}
    if args.baseline_root is not None:
        roots["baseline"] = args.baseline_root.resolve()
    print(f"start: {uptime()}", file=sys.stderr)
    figures = {name: Figures() for name in roots}
    with contextlib.ExitStack() as stack, tempfile.TemporaryDirectory() as scratch:
        servers = {
            name: stack.enter_context(serve(name, root, Path(scratch) / f"{n}.log"))
            for n, (name, root) in enumerate(roots.items())
        }
        for repeat, order in enumerate(rotations(args.repeats, list(roots))):
            for name in order:
                lone, fast, stormed, wide = run_once(servers[name], f"r{repeat}", args.seconds)
                figures[name].wide.append(wide)
                figures[name].lone.append(lone)
                figures[name].back_to_back.append(fast)
                figures[name].storms.append(stormed)
                rates = ", ".join(f"{r:.0f}" for r in stormed.per_table_rate().values())
                print(
                    f"repeat {repeat + 1}, {name}: lone p50"
                    f" {_ms(percentile(lone.latencies, 0.5))} ms, back to back p50"
                    f" {_ms(percentile(fast.latencies, 0.5))} ms; storm {rates} bets/s a table,"
                    f" statuses {dict(stormed.statuses)}, 409s {dict(stormed.refusals)};"
                    f" wide {sum(wide.placed.values()) / wide.seconds:.0f} bets/s,"
                    f" statuses {dict(wide.statuses)}, 409s {dict(wide.refusals)}",
                    file=sys.stderr,
                )
    print(f"end: {uptime()}", file=sys.stderr)
    print(render(figures, args.seconds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
