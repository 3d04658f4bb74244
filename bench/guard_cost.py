"""What checking a guard adds to an append: a bet's append with its limit guard, and without.

    python bench/guard_cost.py [--appends 3000]

A throwaway database and the server's store over one pooled connection. A bet's two events
(table and wallet) with a fresh Idempotency-Key and a 1 kB answer are appended to streams of
their own, alternately with the player's limit stream as a guard (migration 0014) and without
one, so both contenders see the same machine. Prints the two medians and their ratio.
"""

from __future__ import annotations

import argparse
import secrets
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(_ROOT))

from bench.common import server_url, throwaway_database  # noqa: E402
from domain.round import BetPlaced  # noqa: E402
from domain.wallet import StakeReserved  # noqa: E402
from events.migrations import apply_migrations  # noqa: E402
from events.postgres import PostgresEventStore, app_conninfo, open_pool  # noqa: E402
from events.store import (  # noqa: E402
    EventMetadata,
    Idempotency,
    JsonObject,
    NewEvent,
    StreamAppend,
)

METADATA = EventMetadata(actor="bench", role="frontend", request_id="bench-guard")
ROUND = "t-guard-1"
BET: JsonObject = {
    "round_id": ROUND,
    "seat": 1,
    "player_id": "operator:player",
    "spot": "banker",
    "stake": 500,
}
STAKE: JsonObject = {"table_id": "t-guard", "round_id": ROUND, "spot": "banker", "amount": 500}
ANSWER: JsonObject = {
    "status": 201,
    "content_type": "application/json",
    "location": None,
    "body": "x" * 1000,
}
WARM_UP = 50


def main(argv: Sequence[str] | None = None) -> None:
    """Append alternately with and without a guard; print the medians."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--appends", type=int, default=3000, help="of each contender")
    args = parser.parse_args(argv)
    with throwaway_database(server_url(), prefix="bench_guard") as database_url:
        apply_migrations(database_url)
        with open_pool(app_conninfo(database_url, environ={}), max_size=1) as pool:
            store = PostgresEventStore(pool)
            versions = {True: 0, False: 0}
            took: dict[bool, list[float]] = {True: [], False: []}

            def append(guarded: bool) -> float:
                name = "guarded" if guarded else "bare"
                version = versions[guarded]
                streams = [
                    StreamAppend(f"table:{name}", version, [NewEvent(BetPlaced.type, BET)]),
                    StreamAppend(f"wallet:{name}", version, [NewEvent(StakeReserved.type, STAKE)]),
                ]
                if guarded:
                    streams.append(StreamAppend("player:limits", 0, []))
                key = Idempotency(secrets.token_hex(8), "f" * 64, ANSWER)
                started = time.perf_counter()
                store.append(streams, METADATA, key)
                versions[guarded] += 1
                return time.perf_counter() - started

            for number in range(WARM_UP + args.appends):
                for guarded in (True, False):
                    seconds = append(guarded)
                    if number >= WARM_UP:
                        took[guarded].append(seconds)
    with_guard = statistics.median(took[True]) * 1000
    without = statistics.median(took[False]) * 1000
    print(
        f"a bet's append with its limit guard: p50 {with_guard:.3f} ms; without: p50"
        f" {without:.3f} ms; ratio {with_guard / without:.3f} ({args.appends} of each,"
        " alternated)"
    )


if __name__ == "__main__":
    main()
