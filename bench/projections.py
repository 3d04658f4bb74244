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

`--live` measures the projector at steady state instead: the same rounds, appended as a
table service would (the opening, each bet with its stake, each Deal press, then the deal
with its payouts: 16 appends a round) at `--rate` appends a second for `--seconds`, while a
projector in this process follows them into every read model and the index of open rounds.
Contenders, in turns (median of R), each starting caught up and stopping caught up:
- no projector: the appends and this bench's sampling alone, the baseline of the commits;
- before: a CatchUpSubscription per model, each on its own thread, every merge through a
  TEMPORARY staging table (STAGE_FROM_ROWS = 1): the projector as it was;
- after: the ProjectionFollower `shoebox projector` runs (one transaction a pass for every
  model, merges through unnest arrays, passes 50 ms apart under load, asynchronous commits);
- after, sync commit: the same with synchronous commits;
- after, no gather: the same without the 50 ms between passes.
Per 1,000 events: the projector's Python CPU (this process's CPU less the appending thread's),
its PostgreSQL backends' CPU (from /proc, found by application_name), the commits of the
database less the appends, and the WAL written (pg_current_wal_lsn: the whole server's, so
other sessions' work on a shared server is in it); and the projector's mean lag in events,
sampled every 100 ms.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator
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
from events.projections import base, runner  # noqa: E402
from events.store import EventMetadata, StreamAppend  # noqa: E402
from service.application.game.open_rounds import OpenRoundsProjection  # noqa: E402
from service.application.read_models import projector  # noqa: E402
from service.application.streams import DomainEvent, from_recorded, to_new_event  # noqa: E402
from service.application.upcasters import upcasters  # noqa: E402

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


def pieces(writer: LogWriter) -> Iterator[dict[str, list[DomainEvent]]]:
    """Rounds at each table in turn, cut into the appends a table service would make."""
    table = 0
    while True:
        whole = writer._round(table)
        stream = f"table:T{table}"
        table = (table + 1) % TABLES
        opening: list[DomainEvent] = []
        bets: list[dict[str, list[DomainEvent]]] = []
        presses: list[dict[str, list[DomainEvent]]] = []
        deal: dict[str, list[DomainEvent]] = {stream: []}
        for event in whole[stream]:
            if isinstance(event, BetPlaced):
                stake = whole[f"wallet:{event.player_id}"][0]
                bets.append({stream: [event], f"wallet:{event.player_id}": [stake]})
            elif isinstance(event, DealPressed):
                presses.append({stream: [event]})
            elif bets:
                deal[stream].append(event)
            else:
                opening.append(event)
        for wallet, moves in whole.items():
            if wallet != stream and len(moves) > 1:
                deal[wallet] = moves[1:]
        yield {stream: opening}
        yield from bets
        yield from presses
        yield deal


APP_NAME = "bench_projector"


def backend_pids(pool: Pool) -> list[int]:
    """The PostgreSQL backends serving the projector."""
    with pool.connection() as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s", [APP_NAME]
        ).fetchall()
    return [int(r[0]) for r in rows]


def cpu_seconds(pid: int) -> float:
    """A process's user and system CPU seconds so far; 0 once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def counters(pool: Pool) -> tuple[int, int]:
    """The database's commits so far and the server's WAL position."""
    with pool.connection() as conn:
        row = conn.execute(
            "SELECT xact_commit, pg_current_wal_lsn() - '0/0'::pg_lsn"
            " FROM pg_stat_database WHERE datname = current_database()"
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def lag(pool: Pool) -> int:
    """The most events any followed model is behind the head."""
    names = [*projector.NAMES, OpenRoundsProjection.name]
    return max(s.lag_events for s in runner.status(pool, datetime.now(UTC), names))


def before(pool: Pool) -> runner.Projector:
    """The projector as it was: a subscription and a thread per model."""
    following = projector.subscriptions(pool, poll_interval=5.0)
    following += runner.subscriptions(pool, [OpenRoundsProjection], upcasters=upcasters())
    return runner.Projector(following)


def after(**options: object) -> Callable[[Pool], runner.Projector]:
    """What `shoebox projector` runs, with `options` for the follower."""

    def build(pool: Pool) -> runner.Projector:
        follower = projector.follower(pool, also=[OpenRoundsProjection], **options)  # type: ignore[arg-type]
        return runner.Projector([follower])

    return build


def live_run(
    writer_pool: Pool,
    conninfo: str,
    source: Iterator[dict[str, list[DomainEvent]]],
    writer: LogWriter,
    build: Callable[[Pool], runner.Projector],
    *,
    stage_always: bool,
    following: bool,
    seconds: float,
    rate: float,
) -> dict[str, float]:
    """One contender: follow `seconds` of appends at `rate`; its costs per 1,000 events."""
    setattr(base, "STAGE_FROM_ROWS", 1 if stage_always else 2000)  # noqa: B010 - a Final, patched for the old path
    pool = open_pool(conninfo, max_size=14)
    running = build(pool)
    running.start()
    try:
        deadline = time.monotonic() + 60
        while following and lag(writer_pool) and time.monotonic() < deadline:
            time.sleep(0.05)
        pids = backend_pids(writer_pool)
        pg_before = {pid: cpu_seconds(pid) for pid in pids}
        commits_before, wal_before = counters(writer_pool)
        cpu_before = time.process_time()
        written_before = writer.written
        appends = 0
        lags: list[int] = []
        writer_cpu = 0.0

        def append() -> None:
            nonlocal appends, writer_cpu
            start = time.monotonic()
            thread_start = time.thread_time()
            while time.monotonic() - start < seconds:
                writer._append(next(source))
                appends += 1
                due = start + appends / rate
                pause = due - time.monotonic()
                if pause > 0:
                    time.sleep(pause)
            writer_cpu = time.thread_time() - thread_start

        thread = threading.Thread(target=append)
        main_before = time.thread_time()
        thread.start()
        while thread.is_alive():
            lags.append(lag(writer_pool))
            time.sleep(0.1)
        thread.join()
        deadline = time.monotonic() + 60
        while following and lag(writer_pool) and time.monotonic() < deadline:
            time.sleep(0.05)
        # Catching up is part of the cost: what is measured is every event of the run folded.
        # This thread's sampling and the appending thread are not the projector's.
        main_cpu = time.thread_time() - main_before
        python_cpu = time.process_time() - cpu_before - writer_cpu - main_cpu
        now_serving = backend_pids(writer_pool)
        pg_cpu = sum(
            cpu_seconds(pid) - pg_before.get(pid, 0.0)
            for pid in sorted(set(pids) | set(now_serving))
            if pid in now_serving
        )
        commits_after, wal_after = counters(writer_pool)
    finally:
        running.stop()
        pool.close()
    # The closed connections' backends exit before the next contender counts its own.
    deadline = time.monotonic() + 10
    while backend_pids(writer_pool) and time.monotonic() < deadline:
        time.sleep(0.05)
    events = writer.written - written_before
    per = 1000 / events
    # The sampling queries above commit too (read-only ones count): a few a second, the same
    # for every contender.
    return {
        "events": events,
        "appends/s": appends / seconds,
        "projector CPU ms": python_cpu * per * 1000,
        "projector PG CPU ms": pg_cpu * per * 1000,
        "other commits": (commits_after - commits_before - appends) * per,
        "WAL kB (server)": (wal_after - wal_before) / 1024 * per,
        "mean lag (events)": statistics.fmean(lags) if lags else 0.0,
    }


def live(admin_url: str, seconds: float, rate: float, repeats: int) -> None:
    """The projector at steady state, before and after, in turns."""
    conninfo = app_conninfo(admin_url, environ={})
    projector_conninfo = f"{conninfo} application_name={APP_NAME}"
    writer_pool = open_pool(conninfo, max_size=2)
    try:
        writer = LogWriter(PostgresEventStore(writer_pool), seed=5)
        writer.setup()
        source = pieces(writer)
        contenders: dict[str, tuple[Callable[[Pool], runner.Projector], bool]] = {
            "no projector": (lambda pool: runner.Projector([]), False),
            "before": (before, True),
            "after": (after(), False),
            "after, sync commit": (after(asynchronous_commit=False), False),
            "after, no gather": (after(gather=0.0), False),
        }
        results: dict[str, list[dict[str, float]]] = {name: [] for name in contenders}
        for order in rotations(repeats, list(contenders)):
            for name in order:
                build, stage_always = contenders[name]
                found = live_run(
                    writer_pool,
                    projector_conninfo,
                    source,
                    writer,
                    build,
                    stage_always=stage_always,
                    following=name != "no projector",
                    seconds=seconds,
                    rate=rate,
                )
                results[name].append(found)
                print(f"{name}: {found}", file=sys.stderr)
        columns = list(next(iter(results.values()))[0])
        print("| contender | " + " | ".join(columns) + " |")
        print("|---|" + "---:|" * len(columns))
        for name, runs in results.items():
            cells = [statistics.median(r[c] for r in runs) for c in columns]
            print(f"| {name} | " + " | ".join(f"{v:,.1f}" for v in cells) + " |")
    finally:
        writer_pool.close()


def main() -> None:
    """Generate the log, then time the contenders over it."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--live", action="store_true", help="the projector at steady state")
    parser.add_argument("--seconds", type=float, default=20.0, help="--live: a contender's run")
    parser.add_argument("--rate", type=float, default=100.0, help="--live: appends a second")
    options = parser.parse_args()
    if options.live:
        with throwaway_database(server_url(), "bench_projections") as admin_url:
            apply_migrations(admin_url)
            live(admin_url, options.seconds, options.rate, options.repeats)
        return
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
