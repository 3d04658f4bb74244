"""What a table's age costs a cold load, a cold first bet and a recovery sweep: before and after
snapshots and the index of open rounds.

History is built fast: a table's shoes are dealt through the domain (bench/verify.py's
Simulation, the same decisions the service makes) and appended through the real event store,
one append a coup, into a throwaway database. Then, at each size, with fresh caches each time
(as after a restart):
- cold GET /state: `GameService.live_state` on a service that has never seen the table;
- cold first bet: `GameService.place_bet` likewise, by a seated player;
- a recovery sweep over the tables, with 1 and with 1,000 idle tables beside the busy one.

"before" is the code as it was: no snapshots (every cold load replays the stream), and
recovery listing every table and replaying each. "after" starts from the newest snapshot
(taken as the service takes them, every 100 events) and sweeps the index of open rounds.

Run: .venv/bin/python -m bench.cold_load [--coups 200 20000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime

from bench.common import server_url, throwaway_database
from bench.verify import Simulation
from domain.outcome import Spot
from domain.table import Table, TableCreated, TableSettings, evolve
from events.migrations import apply_migrations
from events.postgres import Pool, PostgresEventStore, app_conninfo, open_pool
from events.snapshots import PostgresSnapshotStore
from events.store import EventMetadata, EventStore
from service.application.actor import Actor
from service.application.game.open_rounds import PostgresOpenRounds
from service.application.game.recovery import is_interrupted, recover
from service.application.game.tables import GameService
from service.application.streams import TABLE, TableCache, from_recorded, id_of, table_stream
from service.application.upcasters import upcasters
from service.application.wallets import WalletCache

METADATA = EventMetadata(actor="bench", role="ops")
OPS = Actor("bench", "ops")
PLAYER = Actor("bench-frontend", "frontend")
# After every coup dealt: the sweeps and loads below run at the table's own late hour.
NOW = datetime(2030, 1, 1, tzinfo=UTC)


def build(store: EventStore, table_id: str, coups: int, players: int = 3) -> int:
    """Deal `coups` coups at a new table through the domain, one append a coup; the coups."""
    simulation = Simulation(table_id, players=players, seed=7)
    dealt = 0
    # An eight-deck shoe deals 70 to 75 coups; stop mid-shoe once there are enough.
    for append in simulation.appends(coups // 60 + 1):
        store.append(append.streams, METADATA)
        if len(append.streams) == 1 + players:  # the table and every wallet: a coup
            dealt += 1
            if dealt == coups:
                break
    return dealt


def take_snapshots(store: EventStore, pool: Pool, table_id: str, players: list[str]) -> None:
    """Snapshot the table and wallets as the service does once an append is recorded."""
    snapshots = PostgresSnapshotStore(pool)
    tables, wallets = TableCache(snapshots=snapshots), WalletCache(snapshots=snapshots)
    version, table = TableCache().table(store, table_id)
    tables.put(table_stream(table_id), version, table)
    for player in players:
        version, wallet = WalletCache().wallet(store, player)
        wallets.put(f"wallet:{player}", version, wallet)


def old_recovery(store: EventStore) -> int:
    """Recovery as it was: every table listed from the log and replayed from its first event."""
    found = 0
    after = 0
    while page := store.read_all(after, 1000, categories=[TABLE], types=[TableCreated.type]):
        for event in page:
            table: Table | None = None
            for stored in store.read_stream(table_stream(id_of(event.stream_id))):
                table = evolve(table, from_recorded(stored))  # type: ignore[arg-type]
            if table is not None and is_interrupted(table.round, NOW):
                found += 1
        after = page[-1].position
    return found


def median_ms(run: Callable[[], object], repeats: int) -> float:
    """The median wall-clock milliseconds of `repeats` calls, after one to warm the pool."""
    run()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def measure(
    pool: Pool, table_id: str, players: list[str], repeats: int, *, before: bool = True
) -> dict[str, float]:
    """Each operation's median, before (unless told not to) and after, on the table as it is."""
    store = PostgresEventStore(pool, lambda: NOW, upcasters())
    snapshots = PostgresSnapshotStore(pool)

    def games(with_snapshots: bool) -> GameService:
        return GameService(store, lambda: NOW, snapshots=snapshots if with_snapshots else None)

    results: dict[str, float] = {}
    modes = (("before", False), ("after", True)) if before else (("after", True),)
    for label, with_snapshots in modes:

        def state(with_snapshots: bool = with_snapshots) -> None:
            games(with_snapshots).live_state(table_id)

        results[f"cold GET /state {label}"] = median_ms(state, repeats)

        def bet(with_snapshots: bool = with_snapshots) -> None:
            service = games(with_snapshots)
            service.place_bet(table_id, players[0], Spot.BANKER, 100, PLAYER)
            # Take it back, so that every repeat is a first bet in a round of its own.
            service.remove_bets(table_id, players[0], PLAYER)

        results[f"cold first bet {label}"] = median_ms(bet, repeats)
    if before:
        results["recovery sweep before"] = median_ms(lambda: old_recovery(store), repeats)
    # Kept current by the projector in production; a sweep then only catches up the last moment.
    index = PostgresOpenRounds(pool, upcasters())
    index.due(NOW)
    results["recovery sweep after"] = median_ms(
        lambda: recover(store, games(True), lambda: NOW, index), repeats
    )
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--coups", type=int, nargs="+", default=[200, 20_000])
    parser.add_argument("--idle", type=int, nargs="+", default=[1, 1000])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--after-only",
        action="store_true",
        help="Skip the code paths as they were (a 20,000-coup replay takes seconds a run).",
    )
    args = parser.parse_args()
    rows: dict[tuple[int, int], dict[str, float]] = {}
    for coups in args.coups:
        with throwaway_database(server_url(), "bench_cold") as admin_url:
            apply_migrations(admin_url)
            with open_pool(app_conninfo(admin_url, environ={}), max_size=4) as pool:
                store = PostgresEventStore(pool, lambda: NOW, upcasters())
                started = time.perf_counter()
                dealt = build(store, "busy", coups)
                players = [f"busy-p{n}" for n in (1, 2, 3)]
                take_snapshots(store, pool, "busy", players)
                built = time.perf_counter() - started
                print(f"{dealt} coups, {store.head()} events built in {built:.1f} s", flush=True)
                made = 0
                setup = GameService(store, lambda: NOW)
                for idle in sorted(args.idle):
                    while made < idle:
                        setup.create_table(f"idle-{made}", TableSettings(), OPS)
                        made += 1
                    rows[coups, idle] = measure(
                        pool, "busy", players, args.repeats, before=not args.after_only
                    )
                    print(f"  {idle} idle: {rows[coups, idle]}", flush=True)
    print_table(rows, args.coups, args.idle)


def print_table(
    rows: dict[tuple[int, int], dict[str, float]], sizes: list[int], idles: list[int]
) -> None:
    """Medians at each size and idle count, and the growth from the smallest to the largest."""
    small, large = min(sizes), max(sizes)
    few, many = min(idles), max(idles)
    print(f"\n| operation | {small} coups | {large} coups | growth |")
    print("|---|---|---|---|")
    for name in rows[small, few]:
        if name.startswith("recovery") or name not in rows[large, few]:
            continue
        a, b = rows[small, few][name], rows[large, few][name]
        print(f"| {name} | {a:.1f} ms | {b:.1f} ms | ×{b / a:.2f} |")
    print(f"\n| recovery sweep at {large} coups | {few} idle | {many} idle | growth |")
    print("|---|---|---|---|")
    for label in ("before", "after"):
        name = f"recovery sweep {label}"
        if name not in rows[large, few]:
            continue
        a, b = rows[large, few][name], rows[large, many][name]
        print(f"| {name} | {a:.1f} ms | {b:.1f} ms | ×{b / a:.2f} |")


if __name__ == "__main__":
    main()
