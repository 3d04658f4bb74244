"""Round trips and pool checkouts of one bet at a hot table: two processes' worth of caches.

Run as `.venv/bin/python bench/hot_bet_round_trips.py [--bets N]` against the server in
DATABASE_URL; old code with `cd DIR && PYTHONPATH=DIR python bench/hot_bet_round_trips.py`
(DIR from `git archive <commit> | tar -x -C DIR`). Two GameServices with caches and stream
locks of their own, as two API workers have, take turns betting at one table, so the table is
hot in both (service/application/game/turns.py) and every bet takes the table's turn. Only
the first service's bets are counted, through a proxy that counts round trips
(bench/round_trips.py), and the checkouts of its pool. Appends are left to a sequencer (none
runs here: nothing waits for positions), as in `shoebox serve`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from datetime import UTC, datetime
from pathlib import Path

_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(_ROOT))

from bench.common import throwaway_database  # noqa: E402
from bench.round_trips import counted  # noqa: E402
from domain.outcome import Spot  # noqa: E402
from domain.table import TableSettings  # noqa: E402
from events.migrations import apply_migrations  # noqa: E402
from events.postgres import Pool, PostgresEventStore, open_pool  # noqa: E402
from events.stream_locks import PostgresStreamLocks  # noqa: E402
from service.application.actor import Actor  # noqa: E402
from service.application.game.tables import GameService  # noqa: E402
from service.application.wallets import WalletService  # noqa: E402

NOW = datetime(2026, 12, 7, 7, 0, tzinfo=UTC)
OPS = Actor("ops-1", "ops")
FRONTEND = Actor("frontend-1", "frontend")


def clock() -> datetime:
    """A fixed clock: the window never closes while the bets are counted."""
    return NOW


def process(pool: Pool) -> GameService:
    """A game service with caches and turns of its own, as a worker of `shoebox serve` has."""
    store = PostgresEventStore(pool, clock, sequencing="background", backlog_bound=None)
    try:
        locks = PostgresStreamLocks(pool, store=store)  # type: ignore[call-arg,unused-ignore]
    except TypeError:  # old code: the turn's append went through the store
        locks = PostgresStreamLocks(pool)
    return GameService(store, clock, stream_locks=locks)


def main() -> None:
    """Count, and print the medians."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--bets", type=int, default=50)
    args = parser.parse_args()
    admin = os.environ.get("DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
    with throwaway_database(admin, "bench_hot") as url:
        apply_migrations(url)
        with counted(url) as (proxied, counter):
            pool = open_pool(proxied, max_size=8)
            checkouts = [0]
            getconn = pool.getconn

            def counting_getconn(timeout: float | None = None) -> object:
                checkouts[0] += 1
                return getconn(timeout)

            pool.getconn = counting_getconn  # type: ignore[method-assign,assignment]
            try:
                setup_store = PostgresEventStore(pool, clock)
                setup = GameService(setup_store, clock)
                setup.create_table("T1", TableSettings(), OPS)
                wallets = WalletService(setup_store, clock)
                for seat, player in enumerate(["alice", "bob"], start=1):
                    wallets.deposit(player, 10_000_000, "float", OPS)
                    setup.sit("T1", player, seat, FRONTEND)
                mine, other = process(pool), process(pool)
                for _ in range(5):  # both have played and lost a race: hot in both
                    mine.place_bet("T1", "alice", Spot.BANKER, 100, FRONTEND)
                    other.place_bet("T1", "bob", Spot.PLAYER, 100, FRONTEND)
                trips: list[int] = []
                taken: list[int] = []
                for _ in range(args.bets):
                    counter.reset()
                    checkouts[0] = 0
                    with counter.counting():
                        mine.place_bet("T1", "alice", Spot.BANKER, 100, FRONTEND)
                    trips.append(counter.round_trips)
                    taken.append(checkouts[0])
                    other.place_bet("T1", "bob", Spot.PLAYER, 100, FRONTEND)
            finally:
                pool.close()
    print(
        f"{args.bets} bets at a hot table (another process's bet between each):"
        f" round trips a bet median {statistics.median(trips):g} (min {min(trips)},"
        f" max {max(trips)}); pool checkouts a bet median {statistics.median(taken):g}"
    )


if __name__ == "__main__":
    main()
