"""Measure what the log's one lock costs when many tables write at once.

Run as `.venv/bin/python bench/contention.py [--writers 1 2 4 8 16 32] [--seconds S]
[--repeats R]` against the server in DATABASE_URL (default
postgresql://postgres@127.0.0.1:5432/postgres); it creates a database of its own and drops it
at the end.

N writer threads, each on its own pooled connection, append bet-shaped transactions (a
BetPlaced on the writer's own table stream and a StakeReserved on its own wallet stream: two
streams, two events, as a bet is) for S seconds: nobody conflicts with anybody, so every wait
is for the log's lock. Three contenders take turns within each repeat, at each N:

- shoebox: PostgresEventStore.append: append_batch() under the log's exclusive lock
  (positions and the hash chain serialised, the lock held through the commit), the appends
  that arrive while the process's previous call is in flight sent together (group commit);
- one-a-call: the same store with group commit off, each append its own call, transaction
  and flush (what every append was before migration 0011);
- unlocked: the same two rows, as jsonb, into a plain table with no lock and no chain, one
  autocommit INSERT a transaction. PostgreSQL's own group commit shares WAL flushes between
  concurrent committers, so this is what the server's commits allow, the log's rules aside.

Figures are medians of R repeats: appends (transactions) a second and events a second.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

# Run as a script, Python puts bench/ first on the path, where bench/domain.py would shadow
# the `domain` package; the project root goes before it even when PYTHONPATH already has it.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import orjson
import psycopg

from bench.common import Figure, rotations, server_url, throwaway_database, uptime
from domain.round import BetPlaced
from domain.wallet import StakeReserved
from events.migrations import apply_migrations
from events.postgres import PostgresEventStore, app_conninfo, open_pool
from events.store import EventMetadata, JsonValue, NewEvent, StreamAppend

SHOEBOX = "shoebox"
ONE_A_CALL = "one-a-call"
UNLOCKED = "unlocked"
EVENTS_PER_APPEND = 2
_RAW_TABLE = """
CREATE TABLE IF NOT EXISTS unlocked_events (
    id bigserial PRIMARY KEY, stream_id text NOT NULL, version integer NOT NULL,
    type text NOT NULL, payload jsonb NOT NULL, metadata jsonb NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT now(), UNIQUE (stream_id, version)
)
"""
_RAW_INSERT = (
    "INSERT INTO unlocked_events (stream_id, version, type, payload, metadata)"
    " VALUES (%s, %s, %s, %s::jsonb, %s::jsonb), (%s, %s, %s, %s::jsonb, %s::jsonb)"
)


def payloads(writer: int, n: int) -> tuple[dict[str, JsonValue], dict[str, JsonValue]]:
    """A bet's two payloads, about 150 bytes of JSON each."""
    bet: dict[str, JsonValue] = {
        "round_id": f"round-{writer:04d}-{n // 5:08d}",
        "player_id": f"player-{writer:04d}-7f3a9c21",
        "seat": n % 7 + 1,
        "spot": "banker",
        "stake": 1_000,
    }
    stake: dict[str, JsonValue] = {
        "table_id": f"t{writer:04d}",
        "round_id": bet["round_id"],
        "spot": "banker",
        "stake": 1_000,
    }
    return bet, stake


def metadata(writer: int, n: int) -> EventMetadata:
    """A request's metadata."""
    request_id = f"req-{writer:04d}-{n:010d}-4b1e-9a57"
    return EventMetadata(
        actor="frontend-1", role="frontend", request_id=request_id, correlation_id=request_id
    )


def shoebox_writer(store: PostgresEventStore, run: str) -> Callable[[int, float], int]:
    """A writer's loop over the store: appends until the deadline; returns how many."""

    def write(writer: int, until: float) -> int:
        table, wallet = f"table:{run}w{writer}", f"wallet:{run}w{writer}"
        n = 0
        while time.perf_counter() < until:
            bet, stake = payloads(writer, n)
            store.append(
                [
                    StreamAppend(table, n, [NewEvent(BetPlaced.type, bet)]),
                    StreamAppend(wallet, n, [NewEvent(StakeReserved.type, stake)]),
                ],
                metadata(writer, n),
            )
            n += 1
        return n

    return write


def unlocked_writer(conninfo: str, run: str) -> Callable[[int, float], int]:
    """A writer's loop of plain INSERTs on a connection of its own."""

    def write(writer: int, until: float) -> int:
        table, wallet = f"table:{run}w{writer}", f"wallet:{run}w{writer}"
        n = 0
        with psycopg.connect(conninfo, autocommit=True) as conn:
            while time.perf_counter() < until:
                bet, stake = payloads(writer, n)
                request_id = metadata(writer, n).request_id
                meta = orjson.dumps(
                    {"actor": "frontend-1", "role": "frontend", "request_id": request_id}
                ).decode()
                conn.execute(
                    _RAW_INSERT,
                    [
                        *(table, n, BetPlaced.type, orjson.dumps(bet).decode(), meta),
                        *(wallet, n, StakeReserved.type, orjson.dumps(stake).decode(), meta),
                    ],
                )
                n += 1
        return n

    return write


def run_writers(writers: int, seconds: float, write: Callable[[int, float], int]) -> float:
    """Appends a second of `writers` threads released together."""
    counts = [0] * writers
    errors: list[BaseException] = []
    start = threading.Barrier(writers + 1)
    until = [0.0]

    def body(number: int) -> None:
        start.wait()
        try:
            counts[number] = write(number, until[0])
        except BaseException as error:  # re-raised below
            errors.append(error)

    threads = [threading.Thread(target=body, args=(n,)) for n in range(writers)]
    for thread in threads:
        thread.start()
    until[0] = time.perf_counter() + seconds
    started = time.perf_counter()
    start.wait()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    if errors:
        raise errors[0]
    return sum(counts) / elapsed


def main(argv: Sequence[str] | None = None) -> None:
    """Run the benchmark and print its table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--writers", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    before = uptime()
    figures = [Figure(f"{n} writers") for n in args.writers]
    with throwaway_database(server_url(), prefix="bench_contention") as database_url:
        apply_migrations(database_url)
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute(_RAW_TABLE)
        with open_pool(app_conninfo(database_url, environ={}), max_size=max(args.writers)) as pool:
            stores = {
                SHOEBOX: PostgresEventStore(pool),
                ONE_A_CALL: PostgresEventStore(pool, group_commit=False),
            }
            contenders = (SHOEBOX, ONE_A_CALL, UNLOCKED)
            for repeat, order in enumerate(rotations(args.repeats, contenders)):
                for figure, writers in zip(figures, args.writers, strict=True):
                    for contender in order:
                        run = f"r{repeat}{contender[0]}{writers}x"
                        store = stores.get(contender)
                        write = (
                            shoebox_writer(store, run)
                            if store is not None
                            else unlocked_writer(database_url, run)
                        )
                        rate = run_writers(writers, args.seconds, write)
                        figure.samples.setdefault(contender, []).append(rate)
                        print(f"  {figure.scenario}, {contender}: {rate:,.0f}/s", file=sys.stderr)
    after = uptime()
    command = "python bench/contention.py " + " ".join(sys.argv[1:] if argv is None else argv)
    lines = [
        f"Command: `{command.strip()}`  ",
        f"Machine: {os.cpu_count()} CPUs; before: `{before}`; after: `{after}`  ",
        f"Medians of {args.repeats} repeats of {args.seconds:g} s; an append is a bet's two"
        " events on two streams of the writer's own.",
        "",
        "| writers | shoebox appends/s | events/s | one-a-call appends/s | unlocked appends/s"
        " | shoebox / one-a-call | shoebox / unlocked |",
        "|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for figure, writers in zip(figures, args.writers, strict=True):
        ours = statistics.median(figure.samples[SHOEBOX])
        single = statistics.median(figure.samples[ONE_A_CALL])
        theirs = statistics.median(figure.samples[UNLOCKED])
        lines.append(
            f"| {writers} | {ours:,.0f} | {ours * EVENTS_PER_APPEND:,.0f} | {single:,.0f}"
            f" | {theirs:,.0f} | {ours / single:.2f} | {ours / theirs:.2f} |"
        )
    print("\n".join(lines))


if __name__ == "__main__":
    main()
