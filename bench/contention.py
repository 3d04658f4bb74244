"""Measure what the log's serial point costs when many tables write at once.

Run as `.venv/bin/python bench/contention.py [--writers 1 8 32] [--seconds S] [--repeats R]`
against the server in DATABASE_URL (default postgresql://postgres@127.0.0.1:5432/postgres);
it creates a database of its own and drops it at the end.

N writer threads, each on its own pooled connection, append bet-shaped transactions (a
BetPlaced on the writer's own table stream and a StakeReserved on its own wallet stream: two
streams, two events, as a bet is, each with an idempotency key) for S seconds: nobody
conflicts with anybody. Three contenders take turns within each repeat, at each N:

- parallel: PostgresEventStore.append as it is now (migration 0030), group commit off: row
  locks on the two streams' heads, the events into unsequenced_events, the key beside them,
  one commit, every writer's transaction in flight at once. The
  sequencer's role runs in this same process on a connection of its own, so its CPU and its
  writes (the events moved into the log with positions and hashes) count against it. A run
  ends only when the sequencer has placed every append it took.
- parallel+group: the same with group commit on (the store's default), which allows one
  call in flight per process.
- locked: the append before 0030, kept here only as the baseline: 0014's append_batch(),
  which takes LOCK TABLE events IN EXCLUSIVE MODE, chains and inserts under it and holds it
  through the commit's flush, with the same group commit, into a copy of the tables in a
  schema of its own.
- unlocked: the same rows into a copy of the events table (same columns, same indexes) and
  the same idempotency rows, one autocommit statement an append, with no lock and no chain
  (positions from a sequence, hashes left blank). What the server's commits allow.

Figures are medians of R repeats: appends a second, and for parallel the sequencer's lag (the
oldest append of each batch's wait for its position, which bounds every append's in the batch:
p50 and p99 over the batches) and its batches' sizes in events.
"""

from __future__ import annotations

import argparse
import os
import re
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
from events.migrations import MIGRATIONS_DIR, apply_migrations
from events.postgres import (
    Pool,
    PostgresEventStore,
    _GroupCommit,
    _guards,
    _PendingAppend,
    app_conninfo,
    append_documents,
    open_pool,
)
from events.sequencer import Batch, SequencerRole
from events.store import EventMetadata, Idempotency, JsonValue, NewEvent, StreamAppend, utc_now

PARALLEL = "parallel"
GROUPED = "parallel+group"
LOCKED = "locked"
UNLOCKED = "unlocked"
EVENTS_PER_APPEND = 2
# The baseline's tables: copies of the log's, with every index, in schemas of their own.
_COPIES = """
CREATE SCHEMA {schema};
CREATE TABLE {schema}.events (LIKE public.events INCLUDING ALL);
CREATE TABLE {schema}.idempotency_keys (LIKE public.idempotency_keys INCLUDING ALL);
CREATE TABLE {schema}.idempotency_responses (LIKE public.idempotency_responses INCLUDING ALL);
GRANT USAGE ON SCHEMA {schema} TO shoebox_app;
GRANT SELECT, INSERT ON ALL TABLES IN SCHEMA {schema} TO shoebox_app;
"""
_UNLOCKED_SEQUENCE = """
CREATE SEQUENCE unlocked.positions;
GRANT USAGE ON SEQUENCE unlocked.positions TO shoebox_app;
"""
# Two events and a key, in one statement: what the parallel path writes, with no lock.
_UNLOCKED_INSERT = """
WITH bet AS (
    INSERT INTO unlocked.events
    SELECT nextval('unlocked.positions'), e.stream_id, e.category, e.version, e.type, 1,
           e.payload::jsonb, e.metadata::jsonb, now(), '', ''
    FROM (VALUES (%s, 'table', %s::integer, %s, %s, %s), (%s, 'wallet', %s::integer, %s, %s, %s))
         AS e (stream_id, category, version, type, payload, metadata)
    RETURNING 1
)
INSERT INTO unlocked.idempotency_keys (key, fingerprint, result, recorded_at)
SELECT %s, %s, %s::jsonb, now() FROM (SELECT count(*) FROM bet) AS done
"""
_LOCKED_CALL = (
    "SELECT first_position, last_position, replayed_result, replayed_response, error_code,"
    " error_detail FROM locked.append_batch(%b::text[], %b::text[], %b::text[], %b::text[],"
    " %b::text[], %s)"
)


def install_locked_baseline(conn: psycopg.Connection[tuple[object, ...]]) -> None:
    """0014's append_batch(), over the locked schema's copies of the tables."""
    text = (MIGRATIONS_DIR / "0014_append_checks_guards.sql").read_text()
    found = re.search(r"CREATE FUNCTION append_batch\(.*?\n\$\$;\n", text, re.DOTALL)
    if found is None:
        raise RuntimeError("0014's append_batch() was not found")
    function = found.group(0).replace("public.", "locked.")
    function = function.replace("FUNCTION append_batch(", "FUNCTION locked.append_batch(")
    conn.execute(function)
    conn.execute(
        "GRANT EXECUTE ON FUNCTION locked.append_batch(text[], text[], text[], text[], text[],"
        " text) TO shoebox_app"
    )


class LockedStore:
    """The append before migration 0030: group commit over 0014's append_batch()."""

    def __init__(self, pool: Pool) -> None:
        self._pool = pool
        self._group = _GroupCommit(self._send)

    def append(
        self, streams: Sequence[StreamAppend], meta: EventMetadata, key: Idempotency
    ) -> None:
        """Append as the store did before 0030; raise if refused."""
        documents = append_documents(streams, meta, utc_now())
        pending = _PendingAppend(documents, key.key, key.fingerprint, None, _guards(streams))
        self._group.submit(pending)
        if pending.error is not None:
            raise pending.error
        assert pending.row is not None
        if pending.row[4] is not None:
            raise RuntimeError(f"refused: {pending.row}")

    def _send(self, batch: Sequence[_PendingAppend]) -> None:
        columns: list[list[str | None]] = [[], [], [], [], []]
        for pending in batch:
            for column, value in zip(columns, pending.arguments(), strict=True):
                column.append(value)
        try:
            with self._pool.connection() as conn:
                conn.autocommit = True
                rows = conn.execute(_LOCKED_CALL, [*columns, "2000ms"], prepare=False).fetchall()
                conn.autocommit = False
        except BaseException as error:
            for pending in batch:
                pending.error = error
            return
        for pending, row in zip(batch, rows, strict=True):
            pending.row = row


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


def bet_appends(run: str, writer: int, n: int) -> list[StreamAppend]:
    """A bet's two streams of the writer's own, at version n."""
    bet, stake = payloads(writer, n)
    return [
        StreamAppend(f"table:{run}w{writer}", n, [NewEvent(BetPlaced.type, bet)]),
        StreamAppend(f"wallet:{run}w{writer}", n, [NewEvent(StakeReserved.type, stake)]),
    ]


def key_of(run: str, writer: int, n: int) -> Idempotency:
    """A bet's idempotency key, as the API sends one with every bet."""
    return Idempotency(f"{run}-{writer}-{n}", "sha256:" + "0" * 64)


def parallel_writer(store: PostgresEventStore, run: str) -> Callable[[int, float], int]:
    """A writer's loop over the store: appends until the deadline; returns how many."""

    def write(writer: int, until: float) -> int:
        n = 0
        while time.perf_counter() < until:
            store.append(bet_appends(run, writer, n), metadata(writer, n), key_of(run, writer, n))
            n += 1
        return n

    return write


def locked_writer(store: LockedStore, run: str) -> Callable[[int, float], int]:
    """A writer's loop over the locked baseline."""

    def write(writer: int, until: float) -> int:
        n = 0
        while time.perf_counter() < until:
            store.append(bet_appends(run, writer, n), metadata(writer, n), key_of(run, writer, n))
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
                key = key_of(run, writer, n)
                result = orjson.dumps({"versions": {table: n + 1, wallet: n + 1}}).decode()
                conn.execute(
                    _UNLOCKED_INSERT,
                    [
                        *(table, n + 1, BetPlaced.type, orjson.dumps(bet).decode(), meta),
                        *(wallet, n + 1, StakeReserved.type, orjson.dumps(stake).decode(), meta),
                        key.key,
                        key.fingerprint,
                        result,
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


def percentile(values: Sequence[float], fraction: float) -> float:
    """The value at `fraction` of the sorted values (nearest rank)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(fraction * len(ordered)) - 1))]


def main(argv: Sequence[str] | None = None) -> None:
    """Run the benchmark and print its table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--writers", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    before = uptime()
    figures = [Figure(f"{n} writers") for n in args.writers]
    lags: dict[int, list[float]] = {n: [] for n in args.writers}
    sizes: dict[int, list[int]] = {n: [] for n in args.writers}
    with throwaway_database(server_url(), prefix="bench_contention") as database_url:
        apply_migrations(database_url)
        with psycopg.connect(database_url, autocommit=True) as conn:
            for schema in (LOCKED, UNLOCKED):
                conn.execute(_COPIES.format(schema=schema))
            conn.execute(_UNLOCKED_SEQUENCE)
            install_locked_baseline(conn)
        conninfo = app_conninfo(database_url, environ={})
        batches: list[Batch] = []
        role = SequencerRole(
            lambda: psycopg.connect(conninfo, autocommit=True), on_batch=batches.append
        )
        role.start()
        with open_pool(conninfo, max_size=max(args.writers)) as pool:
            parallel = PostgresEventStore(pool, sequencing="background", group_commit=False)
            grouped = PostgresEventStore(pool, sequencing="background")
            locked = LockedStore(pool)
            contenders = (PARALLEL, GROUPED, LOCKED, UNLOCKED)
            for repeat, order in enumerate(rotations(args.repeats, contenders)):
                for figure, writers in zip(figures, args.writers, strict=True):
                    for contender in order:
                        run = f"r{repeat}{contenders.index(contender)}{writers}x"
                        if contender in (PARALLEL, GROUPED):
                            store = parallel if contender == PARALLEL else grouped
                            write = parallel_writer(store, run)
                        elif contender == LOCKED:
                            write = locked_writer(locked, run)
                        else:
                            write = unlocked_writer(conninfo, run)
                        del batches[:]
                        rate = run_writers(writers, args.seconds, write)
                        if contender in (PARALLEL, GROUPED):
                            # The sequencer's share: the run is not over until it has placed
                            # every append, and its batches are this run's.
                            drained = time.perf_counter()
                            parallel.sequence()
                            settle = time.perf_counter() - drained
                            lags[writers] += [b.oldest_wait or 0.0 for b in batches]
                            sizes[writers] += [b.events for b in batches]
                            rate = rate * args.seconds / (args.seconds + settle)
                        figure.samples.setdefault(contender, []).append(rate)
                        print(f"  {figure.scenario}, {contender}: {rate:,.0f}/s", file=sys.stderr)
        role.stop()
    after = uptime()
    command = "python bench/contention.py " + " ".join(sys.argv[1:] if argv is None else argv)
    lines = [
        f"Command: `{command.strip()}`  ",
        f"Machine: {os.cpu_count()} CPUs; before: `{before}`; after: `{after}`  ",
        f"Medians of {args.repeats} repeats of {args.seconds:g} s; an append is a bet's two"
        " events on two streams of the writer's own, with an idempotency key.",
        "",
        "| writers | parallel appends/s | parallel+group appends/s | locked appends/s"
        " | unlocked appends/s | parallel / unlocked | parallel+group / unlocked"
        " | locked / unlocked | sequencer lag p50 / p99 ms | batch events p50 / max |",
        "|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for figure, writers in zip(figures, args.writers, strict=True):
        ours = statistics.median(figure.samples[PARALLEL])
        batched = statistics.median(figure.samples[GROUPED])
        old = statistics.median(figure.samples[LOCKED])
        theirs = statistics.median(figure.samples[UNLOCKED])
        lag = lags[writers] or [0.0]
        size = sizes[writers] or [0]
        lines.append(
            f"| {writers} | {ours:,.0f} | {batched:,.0f} | {old:,.0f} | {theirs:,.0f}"
            f" | {ours / theirs:.2f} | {batched / theirs:.2f} | {old / theirs:.2f}"
            f" | {percentile(lag, 0.5) * 1000:.1f} /"
            f" {percentile(lag, 0.99) * 1000:.1f} | {statistics.median(size):.0f} / {max(size)} |"
        )
    print("\n".join(lines))


if __name__ == "__main__":
    main()
