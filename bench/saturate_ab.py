"""Old and new servers up at once, saturated in turns phase by phase: CPU a request, A/B.

    python bench/saturate_ab.py --baseline DIR [--seconds 3] [--rounds 6] [--workers W]

`bench/api.py --saturate --baseline` runs one whole server after another (about 25 s each), so
on a machine shared with other work the two codes meet different loads. Here both `shoebox
serve` run side by side, each on its own throwaway database, with bench/saturate.py's 16
tables and 32 clients; each round runs the phases ping, bet and state on one server and then
the other (which goes first alternates), so old and new are seconds apart throughout. The web
workers' CPU a request comes from /proc, as in bench/saturate.py. Medians over rounds, and the
median of the per-round ratios old/new. A phase with a 503 is run again (see `_phase`).
"""

from __future__ import annotations

import argparse
import secrets
import statistics
import sys
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(_ROOT))

from bench.api import await_workers, issue_keys, served  # noqa: E402
from bench.common import server_url, throwaway_database, uptime  # noqa: E402
from bench.saturate import (  # noqa: E402
    BET,
    PING,
    STATE,
    close_rounds,
    run_phase,
    set_up,
    web_workers,
)
from events.migrations import apply_migrations  # noqa: E402
from service.cli.serve import DEFAULT_WORKERS  # noqa: E402

# No round phase: a round refused midway (503) cannot be run again as it was.
PHASES = (PING, BET, STATE)


def _phase(
    phase: str, port: int, keys: Any, tables: Any, seconds: float, pids: list[int]
) -> tuple[Any, float, float]:
    """run_phase, run again (up to twice) when a request was answered 503: on a loaded
    machine a bet whose turn came too late is refused `log-busy` (docs/benchmarks.md, 7
    December), and bench/saturate.py stops on any refusal. Each retry is reported."""
    for attempt in range(3):
        try:
            return run_phase(phase, port, keys, tables, seconds, pids)
        except RuntimeError as error:
            if "answered 503" not in str(error) or attempt == 2:
                raise
            print(f"  {phase} on port {port}: a 503, phase run again", file=sys.stderr)
            close_rounds(port, keys, tables)
    raise AssertionError("unreachable")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--baseline", type=Path, required=True, help="the old code's directory")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--workers", type=int, default=DEFAULT_WORKERS)
    args = parser.parse_args(argv)
    load_before = uptime()
    names = ("old", "new")
    rates: dict[str, dict[str, list[float]]] = {n: {p: [] for p in PHASES} for n in names}
    cpus: dict[str, dict[str, list[float]]] = {n: {p: [] for p in PHASES} for n in names}
    with ExitStack() as stack:
        servers = {}
        for name in names:
            database_url = stack.enter_context(
                throwaway_database(server_url(), prefix=f"bench_ab_{name}")
            )
            apply_migrations(database_url)
            keys = issue_keys(database_url)
            code = args.baseline if name == "old" else None
            port, master = stack.enter_context(served(database_url, args.workers, 1, code=code))
            await_workers(port, keys, args.workers)
            pids = web_workers(master)
            tables = set_up(port, keys, secrets.token_hex(3))
            for warm in PHASES:
                _phase(warm, port, keys, tables, 1.0, pids)
                close_rounds(port, keys, tables)
            servers[name] = (port, keys, tables, pids)
        for number in range(args.rounds):
            for phase in PHASES:
                order = names if (number + PHASES.index(phase)) % 2 == 0 else names[::-1]
                for name in order:
                    port, keys, tables, pids = servers[name]
                    tallies, elapsed, cpu = _phase(phase, port, keys, tables, args.seconds, pids)
                    if phase == BET:
                        close_rounds(port, keys, tables)
                    requests = sum(len(t.latencies) for t in tallies)
                    rates[name][phase].append(requests / elapsed)
                    cpus[name][phase].append(cpu / requests)
            print(f"  round {number + 1} of {args.rounds} done", file=sys.stderr)
    labels = {PING: "GET /ping", BET: "POST bet", STATE: "GET table state"}
    print(f"Command: `python bench/saturate_ab.py {' '.join(sys.argv[1:])}`")
    print(f"Load average before: {load_before}; after: {uptime()}\n")
    print(
        "| request | old requests/s | new requests/s | old CPU ms a request"
        " | new CPU ms a request | old/new (median of rounds) |"
    )
    print("|---|--:|--:|--:|--:|--:|")
    for phase in PHASES:
        ratios = [o / n for o, n in zip(cpus["old"][phase], cpus["new"][phase], strict=True)]
        print(
            f"| {labels[phase]} | {statistics.median(rates['old'][phase]):.0f}"
            f" | {statistics.median(rates['new'][phase]):.0f}"
            f" | {statistics.median(cpus['old'][phase]) * 1000:.3f}"
            f" | {statistics.median(cpus['new'][phase]) * 1000:.3f}"
            f" | {statistics.median(ratios):.2f}x |"
        )
    for name in names:
        ratios = [b / p for b, p in zip(rates[name][BET], rates[name][PING], strict=True)]
        print(
            f"\n{name}: bets/pings {statistics.median(ratios):.3f} (rounds:"
            f" {', '.join(f'{r:.3f}' for r in ratios)})"
        )


if __name__ == "__main__":
    main()
