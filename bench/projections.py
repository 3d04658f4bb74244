"""Measure a rebuild of every read model over a log of 1,000,000 events beside a bare read.

Run as `.venv/bin/python bench/projections.py [--events N] [--repeats R]` against the server in
DATABASE_URL (default postgresql://postgres@127.0.0.1:5432/postgres); it creates a database of
its own and drops it at the end.

The log is generated without the table service, which would take an hour for a million
events: each append plays one round at each of TABLES tables through the domain itself
(domain.round's open, bets, Deal presses and `deal` over a shuffled shoe, so cards, outcomes
and settlements are real), with the wallet side (StakeReserved, PayoutCredited) in the same
append, and deposits and shoe changes as the table service makes them. One append therefore
carries a few thousand events over a few hundred streams, through PostgresEventStore.append.

Contenders, each over the whole log, in turns within each repeat (median of R):
- read: iter_all's batches decoded into RecordedEvents (JSON payloads parsed), nothing more;
- read+codec: the same, and every event turned into its domain dataclass
  (service.application.streams);
- rebuild: events.projections.projector.rebuild of all five read models, shadow tables, swap.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

_ROOT = str(Path(__file__).resolve().parent.parent)
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from bench.common import Figure, render_table, rotations, server_url, throwaway_database  # noqa: E402
from domain.cards import unshuffled_shoe  # noqa: E402
from domain.outcome import Spot  # noqa: E402
from domain.round import (  # noqa: E402
    BetPlaced,
    BetSettled,
    CardDrawn,
    DealPressed,
    RoundEvent,
    RoundOpened,
    deal,
    replay_round,
)
from domain.table import ShoeOpened, ShoeRetired, ShoeRevealed, TableCreated  # noqa: E402
from domain.wallet import Deposited, PayoutCredited, StakeReserved  # noqa: E402
from events.migrations import apply_migrations  # noqa: E402
from events.postgres import Pool, PostgresEventStore, app_conninfo, open_pool  # noqa: E402
from events.projections import runner  # noqa: E402
from events.store import EventMetadata, StreamAppend  # noqa: E402
from service.application.read_models import projector  # noqa: E402
from service.application.streams import DomainEvent, from_recorded, to_new_event  # noqa: E402

TABLES = 100
SEATS = 7
DECKS = 8
COUPS_PER_SHOE = 70
METADATA = EventMetadata(actor="bench", role="ops")
BATCH = runner.REBUILD_BATCH


class LogWriter:
    """Plays rounds through the domain at many tables and appends them in large transactions."""

    def __init__(self, store: PostgresEventStore, seed: int) -> None:
        self.store = store
        self.rng = random.Random(seed)
        self.versions: dict[str, int] = {}
        self.rounds = [0] * TABLES
        self.coups = [0] * TABLES
        self.shoes: list[tuple[str, list[int]] | None] = [None] * TABLES
        self.positions = [0] * TABLES
        self.now = datetime(2026, 1, 1, tzinfo=UTC)
        self.written = 0

    def _append(self, pending: dict[str, list[DomainEvent]]) -> None:
        appends = []
        for stream, events in pending.items():
            if events:
                version = self.versions.get(stream, 0)
                appends.append(StreamAppend(stream, version, [to_new_event(e) for e in events]))
                self.versions[stream] = version + len(events)
        self.store.append(appends, METADATA)
        self.written += sum(len(a.events) for a in appends)

    def setup(self) -> None:
        """Create the tables and fund every player."""
        pending: dict[str, list[DomainEvent]] = {}
        for table in range(TABLES):
            pending[f"table:T{table}"] = [
                TableCreated(f"T{table}", SEATS, DECKS, 100, 500_000, (100, 500), 15_000, "GBP")
            ]
            for seat in range(1, SEATS + 1):
                pending[f"wallet:P{table}-{seat}"] = [Deposited(10_000_000, "bench float", None)]
        self._append(pending)

    def play(self) -> None:
        """One round at every table, in one append."""
        pending: dict[str, list[DomainEvent]] = {}
        self.now += timedelta(seconds=40)
        for table in range(TABLES):
            pending.update(self._round(table))
        self._append(pending)

    def _round(self, table: int) -> dict[str, list[DomainEvent]]:
        table_id = f"T{table}"
        events: list[DomainEvent] = []
        shoe = self.shoes[table]
        if shoe is None or self.coups[table] >= COUPS_PER_SHOE:
            if shoe is not None:
                events += [ShoeRetired(shoe[0]), ShoeRevealed(shoe[0], "00" * 32)]
            shoe_id = f"{table_id}-S{self.rounds[table]}"
            cards = unshuffled_shoe(DECKS)
            self.rng.shuffle(cards)
            shoe = self.shoes[table] = (shoe_id, cards)
            self.coups[table], self.positions[table] = 0, 0
            events.append(ShoeOpened(shoe_id, "ab" * 32, "cd" * 16, 1, DECKS, COUPS_PER_SHOE))
        self.rounds[table] += 1
        number = self.rounds[table]
        round_id = f"{table_id}-{number}"
        players = [(seat, f"P{table}-{seat}") for seat in range(1, SEATS + 1)]
        opened = self.now.isoformat()
        deadline = (self.now + timedelta(seconds=15)).isoformat()
        round_events: list[RoundEvent] = [
            RoundOpened(round_id, number, opened, deadline, tuple(players))
        ]
        wallets: dict[str, list[DomainEvent]] = {}
        for seat, player in players:
            spot = self.rng.choice((Spot.BANKER, Spot.BANKER, Spot.PLAYER, Spot.TIE))
            stake = self.rng.choice((100, 500, 1_000, 2_500))
            round_events.append(BetPlaced(round_id, seat, player, spot, stake))
            wallets[f"wallet:{player}"] = [StakeReserved(table_id, round_id, spot, stake)]
        round_events += [DealPressed(round_id, seat, player) for seat, player in players]
        dealt = deal(replay_round(round_events), shoe[0], shoe[1], self.positions[table])
        for event in dealt:
            if isinstance(event, BetSettled):
                wallets[f"wallet:{event.player_id}"].append(
                    PayoutCredited(
                        table_id, round_id, event.spot, event.stake, event.payout, event.commission
                    )
                )
        self.positions[table] += sum(1 for e in dealt if isinstance(e, CardDrawn))
        self.coups[table] += 1
        events += round_events
        events += dealt
        return {f"table:{table_id}": events, **wallets}


def generate(pool: Pool, events: int) -> tuple[int, float]:
    """Write a log of at least `events` events; how many, and the seconds it took."""
    writer = LogWriter(PostgresEventStore(pool), seed=5)
    start = time.perf_counter()
    writer.setup()
    while writer.written < events:
        writer.play()
    return writer.written, time.perf_counter() - start


def read_only(pool: Pool) -> int:
    """Read and decode every event, doing nothing with it."""
    count = 0
    for batch in PostgresEventStore(pool).iter_all(0, BATCH):
        count += len(batch)
    return count


def read_and_decode(pool: Pool) -> int:
    """Read every event and turn it into its domain dataclass."""
    count = 0
    for batch in PostgresEventStore(pool).iter_all(0, BATCH):
        for event in batch:
            from_recorded(event)
        count += len(batch)
    return count


def rebuild_all(pool: Pool) -> int:
    """Rebuild every read model from position 0 and swap it in."""
    result = projector.rebuild(pool)
    return result.position


def main() -> None:
    """Generate the log, then time the contenders over it."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=2)
    options = parser.parse_args()
    contenders = {"read": read_only, "read+codec": read_and_decode, "rebuild": rebuild_all}
    with throwaway_database(server_url(), "bench_projections") as admin_url:
        apply_migrations(admin_url)
        pool = open_pool(app_conninfo(admin_url, environ={}), max_size=8)
        try:
            written, seconds = generate(pool, options.events)
            print(
                f"generated {written:,} events in {seconds:.1f} s "
                f"({written / seconds:,.0f} events/s through PostgresEventStore.append)",
                file=sys.stderr,
            )
            figure = Figure(f"all read models over {written:,} events")
            for order in rotations(options.repeats, list(contenders)):
                for name in order:
                    start = time.perf_counter()
                    contenders[name](pool)
                    elapsed = time.perf_counter() - start
                    figure.add(name, written, elapsed)
                    print(f"{name}: {written / elapsed:,.0f} events/s", file=sys.stderr)
            print(render_table([figure], "rebuild", ["read", "read+codec"]))
        finally:
            pool.close()


if __name__ == "__main__":
    main()
