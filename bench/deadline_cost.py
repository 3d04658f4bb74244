"""What a request's deadline costs a round trip: `SELECT 1` on a pooled connection, with and
without the deadline that every request of the API now sets (events/deadlines.py).

    python bench/deadline_cost.py [--queries 5000] [--rounds 5]

A pool from `open_pool` (DeadlinePool, DeadlineConnection) over one connection, in autocommit
as the store's reads are. Each round times `--queries` queries with no deadline (the wait goes
straight to psycopg's), then as many under a deadline far off (each wait also reads it, and
passes psycopg the time left), interleaved so that both see the same machine. Prints the
medians of the rounds, per query, and their ratio.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(_ROOT))

from bench.common import server_url, uptime  # noqa: E402
from events import deadlines  # noqa: E402
from events.postgres import Pool, open_pool  # noqa: E402


def per_query(pool: Pool, queries: int, deadline: float | None) -> float:
    """Microseconds a query, over `queries` queries, under `deadline` seconds if given."""
    token = None if deadline is None else deadlines.start(deadline)
    try:
        with pool.connection() as conn:
            conn.autocommit = True
            started = time.perf_counter()
            for _ in range(queries):
                conn.execute("SELECT 1").fetchone()
            took = time.perf_counter() - started
            conn.autocommit = False
    finally:
        if token is not None:
            deadlines.stop(token)
    return took / queries * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--queries", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=5)
    arguments = parser.parse_args()
    print(uptime())
    without: list[float] = []
    under: list[float] = []
    with open_pool(server_url(), max_size=1) as pool:
        per_query(pool, arguments.queries // 5, None)  # warm
        for _ in range(arguments.rounds):
            without.append(per_query(pool, arguments.queries, None))
            under.append(per_query(pool, arguments.queries, 3600.0))
    base, bounded = statistics.median(without), statistics.median(under)
    print(f"SELECT 1, no deadline:    median {base:.1f} us a query  {without}")
    print(f"SELECT 1, under deadline: median {bounded:.1f} us a query  {under}")
    print(f"ratio {bounded / base:.3f}")


if __name__ == "__main__":
    main()
