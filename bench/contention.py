"""Measure what the log's serial point costs when many tables write at once.

Run as `.venv/bin/python bench/contention.py [--writers 1 8 32] [--seconds S] [--repeats R]
[--mode threads|processes|both] [--floor]` against the server in DATABASE_URL (default
postgresql://postgres@127.0.0.1:5432/postgres); it creates a database of its own and drops it
at the end.

N writers (threads of this process, or with `--mode processes` each an OS process of its own,
so that the GIL caps no contender: a web tier is processes), each on its own connection,
append bet-shaped transactions (a
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

With `--floor`, two more contenders measure what the parallel design itself costs, whatever
its implementation: FLOOR_STATEMENT, the design's writes alone (the heads' upsert with its
version check, the queue's rows, the key) as one statement on a held connection, with no
function, no check and no refusal or replay, sequenced as the parallel path's appends are.
**floor** sends the store's canonical documents (what the chain needs), **floor, raw
documents** the payloads' JSON as the unlocked loop makes it. The app role is granted the
tables for them in the bench's database only.

With writers as processes it also reports where each contender's CPU went, per append: the
writer processes, their backends, the sequencer and the whole machine (from /proc, so a local
server only; else n/a). On a saturated machine throughput is the inverse of that CPU, so these
say which part of the parallel path costs more than the unlocked insert.

Figures are medians of R repeats: appends a second, and for parallel the sequencer's lag (the
oldest append of each batch's wait for its position, which bounds every append's in the batch:
p50 and p99 over the batches), its batches' sizes in events, and its CPU per 1,000 appends:
its PostgreSQL backend's (read from /proc, so the server must run on this machine; else
left out) and its thread's in this process, over the parallel runs and their drains.
"""

from __future__ import annotations

import argparse
import multiprocessing
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

from bench.common import machine_ticks, rotations, server_url, throwaway_database, uptime
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
from events.sequencer import Batch, SequencerRole, unsequenced_backlog
from events.store import (
    EventMetadata,
    Idempotency,
    JsonValue,
    NewEvent,
    StreamAppend,
    stamp_metadata,
    utc_now,
)

PARALLEL = "parallel"
GROUPED = "parallel+group"
LOCKED = "locked"
UNLOCKED = "unlocked"
FLOOR = "floor"
FLOOR_RAW = "floor, raw documents"
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
# The parallel design's writes and nothing else (the floor, with --floor): the heads' upsert
# with the version check (the row locks, in sorted order), the append's place, its rows in the
# queue, the key. No function, no check of the documents or the shape, no refusal or replay
# handled. bench/append_cpu.py times the same statement alone.
FLOOR_STATEMENT = """
WITH heads AS (
    INSERT INTO stream_heads AS h (stream_id, version)
    SELECT x.s, x.v FROM (VALUES (%(table)s::text, %(version)s::integer), (%(wallet)s, %(version)s))
         AS x (s, v)
    ORDER BY x.s
    ON CONFLICT (stream_id) DO UPDATE SET version = excluded.version
    WHERE h.version = excluded.version - 1
    RETURNING 1
), queued AS (
    INSERT INTO unsequenced_events (append_id, n, stream_id, version, prefix, suffix)
    SELECT a.id, x.n, x.s, x.v, x.p, x.sf FROM (SELECT nextval('append_order') AS id) AS a,
         (VALUES (1, %(table)s::text, %(version)s::integer, %(p1)s::text, %(s1)s::text),
                 (2, %(wallet)s, %(version)s, %(p2)s, %(s2)s)) AS x (n, s, v, p, sf)
)
INSERT INTO idempotency_keys (key, fingerprint, result, recorded_at)
SELECT %(key)s, %(fingerprint)s, %(result)s::jsonb, now() FROM (SELECT count(*) FROM heads) AS done
"""
# The floor writes the log's tables directly, as no role of the service may: granted to the
# app role in the bench's throwaway database only.
_FLOOR_GRANTS = """
GRANT SELECT, INSERT, UPDATE ON stream_heads TO shoebox_app;
GRANT INSERT ON unsequenced_events, idempotency_keys TO shoebox_app;
GRANT USAGE ON SEQUENCE append_order TO shoebox_app;
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


def unlocked_writer(pool: Pool, run: str) -> Callable[[int, float], int]:
    """A writer's loop of plain INSERTs on a connection of the pool, held for the run."""

    def write(writer: int, until: float) -> int:
        table, wallet = f"table:{run}w{writer}", f"wallet:{run}w{writer}"
        n = 0
        with pool.connection() as conn:
            conn.autocommit = True
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
            conn.autocommit = False
        return n

    return write


def floor_writer(pool: Pool, run: str, *, raw: bool) -> Callable[[int, float], int]:
    """A writer's loop of FLOOR_STATEMENT on a connection held for the run, as the unlocked
    loop's: the least any implementation of the parallel design can do for an append.

    Its documents are the store's canonical ones (what the chain hashes), or with `raw` put
    together from the payloads' JSON as the unlocked loop makes it (no canonical encoding).
    """

    def write(writer: int, until: float) -> int:
        table, wallet = f"table:{run}w{writer}", f"wallet:{run}w{writer}"
        n = 0
        with pool.connection() as conn:
            conn.autocommit = True
            while time.perf_counter() < until:
                version = n + 1
                meta, key = metadata(writer, n), key_of(run, writer, n)
                if raw:
                    prefixes, suffixes = raw_documents(writer, n, table, wallet)
                else:
                    stamped = stamp_metadata(meta, key)
                    parts = append_documents(bet_appends(run, writer, n), stamped, utc_now())
                    split = parts.split("\n")
                    prefixes, suffixes = split[0::2], split[1::2]
                result = orjson.dumps({"versions": {table: version, wallet: version}}).decode()
                # Scalars, not arrays: psycopg's adaptation of a list costs the writer more
                # than the store's whole call (measured: 688 against 342 µs an append).
                conn.execute(
                    FLOOR_STATEMENT,
                    {
                        "table": table,
                        "wallet": wallet,
                        "version": version,
                        "p1": prefixes[0],
                        "s1": suffixes[0],
                        "p2": prefixes[1],
                        "s2": suffixes[1],
                        "key": key.key,
                        "fingerprint": key.fingerprint,
                        "result": result,
                    },
                )
                n += 1
            conn.autocommit = False
        return n

    return write


def raw_documents(writer: int, n: int, table: str, wallet: str) -> tuple[list[str], list[str]]:
    """A bet's two documents split at the position, from orjson's output as it comes."""
    bet, stake = payloads(writer, n)
    meta = orjson.dumps(
        {"actor": "frontend-1", "role": "frontend", "request_id": metadata(writer, n).request_id}
    ).decode()
    at = utc_now().isoformat()
    prefixes, suffixes = [], []
    for stream, category, kind, payload in (
        (table, "table", BetPlaced.type, bet),
        (wallet, "wallet", StakeReserved.type, stake),
    ):
        body = orjson.dumps(payload).decode()
        prefixes.append(f'{{"category":"{category}","metadata":{meta},"payload":{body},"position":')
        suffixes.append(
            f',"recorded_at":"{at}","schema_version":1,"stream_id":"{stream}",'
            f'"type":"{kind}","version":{n + 1}}}'
        )
    return prefixes, suffixes


def run_writers(writers: int, seconds: float, write: Callable[[int, float], int]) -> int:
    """Appends made by `writers` threads released together for `seconds`."""
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
    start.wait()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return sum(counts)


class Stores:
    """The contenders' stores over one pool: what a writer (thread or process) appends with."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self.parallel = PostgresEventStore(pool, sequencing="background", group_commit=False)
        self.grouped = PostgresEventStore(pool, sequencing="background")
        self.locked = LockedStore(pool)

    def writer(self, contender: str, run: str) -> Callable[[int, float], int]:
        """The write loop of `contender`, its streams named after `run`."""
        if contender == PARALLEL:
            return parallel_writer(self.parallel, run)
        if contender == GROUPED:
            return parallel_writer(self.grouped, run)
        if contender == LOCKED:
            return locked_writer(self.locked, run)
        if contender in (FLOOR, FLOOR_RAW):
            return floor_writer(self.pool, run, raw=contender == FLOOR_RAW)
        return unlocked_writer(self.pool, run)


Command = tuple[str, str, float, float]  # contender, run, start (time.time()), seconds


def _writer_process(
    conninfo: str,
    writer: int,
    commands: multiprocessing.Queue[Command | None],
    results: multiprocessing.Queue[tuple[int, int, str | None]],
) -> None:
    """One writer as an OS process of its own: runs each command it is sent, until None."""
    # One connection: a writer appends one call at a time, and the server's connections are
    # shared (32 processes and the sequencer stay well within max_connections = 100).
    with open_pool(conninfo, min_size=1, max_size=1) as pool:
        stores = Stores(pool)
        with pool.connection() as conn:
            # Whose CPU the parent reads: this process's and its one backend's.
            results.put((writer, conn.info.backend_pid, "pids"))
        while (command := commands.get()) is not None:
            contender, run, start_at, seconds = command
            write = stores.writer(contender, run)
            time.sleep(max(0.0, start_at - time.time()))
            try:
                results.put((writer, write(writer, time.perf_counter() + seconds), None))
            except Exception as error:  # reported to the parent, which raises
                results.put((writer, 0, repr(error)))


class WriterProcesses:
    """N writer processes, started once and sent each run's command together."""

    def __init__(self, conninfo: str, writers: int) -> None:
        context = multiprocessing.get_context("spawn")
        self._results: multiprocessing.Queue[tuple[int, int, str | None]] = context.Queue()
        self._commands: list[multiprocessing.Queue[Command | None]] = []
        self._processes = []
        for writer in range(writers):
            commands: multiprocessing.Queue[Command | None] = context.Queue()
            process = context.Process(
                target=_writer_process,
                args=(conninfo, writer, commands, self._results),
                daemon=True,
            )
            process.start()
            self._commands.append(commands)
            self._processes.append(process)
        self.backends: list[int] = []
        for _ in range(writers):
            _, backend, tag = self._results.get(timeout=120)
            if tag != "pids":
                raise RuntimeError(f"a writer process did not start: {tag}")
            self.backends.append(backend)

    def cpu(self) -> tuple[float | None, float | None]:
        """CPU seconds so far of the writer processes, and of their PostgreSQL backends (None
        where /proc cannot tell: a server on another machine)."""
        writers = [_cpu_seconds(f"/proc/{p.pid}/stat") for p in self._processes]
        backends = [_cpu_seconds(f"/proc/{pid}/stat") for pid in self.backends]
        return (
            None if None in writers else sum(w or 0.0 for w in writers),
            None if None in backends else sum(b or 0.0 for b in backends),
        )

    def run(self, contender: str, run: str, seconds: float) -> int:
        """Appends made by every process, released together (after a moment to get ready)."""
        start_at = time.time() + 0.3
        for commands in self._commands:
            commands.put((contender, run, start_at, seconds))
        total, failed = 0, []
        for _ in self._commands:
            _, count, error = self._results.get(timeout=seconds + 120)
            total += count
            if error is not None:
                failed.append(error)
        if failed:
            raise RuntimeError(f"{len(failed)} writer processes failed: {failed[0]}")
        return total

    def close(self) -> None:
        """Stop every process."""
        for commands in self._commands:
            commands.put(None)
        for process in self._processes:
            process.join(30)
            if process.is_alive():
                process.kill()


def drain(stores: Stores) -> None:
    """Return once the sequencer has placed every append committed so far: a batch run here
    if the role's lock is free, else a wait for the role's."""
    stores.parallel.sequence()
    while unsequenced_backlog(stores.pool)[0] > 0:
        time.sleep(0.001)


def percentile(values: Sequence[float], fraction: float) -> float:
    """The value at `fraction` of the sorted values (nearest rank)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(fraction * len(ordered)) - 1))]


_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _cpu_seconds(stat_path: str) -> float | None:
    """A process's or thread's user + system CPU from its /proc stat file, None if unreadable."""
    try:
        fields = Path(stat_path).read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / _TICKS


class SequencerCpu:
    """The sequencer's CPU: its PostgreSQL backend's (a local server only) and its thread's."""

    def __init__(self, role: SequencerRole) -> None:
        deadline = time.monotonic() + 10
        while not role.active:
            if time.monotonic() > deadline:
                raise RuntimeError("the bench's sequencer never took the role")
            time.sleep(0.01)
        conn = role._conn  # the bench measures the role's own backend
        self._backend = None if conn is None else f"/proc/{conn.info.backend_pid}/stat"
        thread = role._thread
        native = None if thread is None else thread.native_id
        self._thread = None if native is None else f"/proc/self/task/{native}/stat"

    def now(self) -> tuple[float | None, float | None]:
        """Backend and thread CPU seconds so far."""
        return (
            None if self._backend is None else _cpu_seconds(self._backend),
            None if self._thread is None else _cpu_seconds(self._thread),
        )


def _spent(before: float | None, after: float | None) -> float | None:
    return None if before is None or after is None else after - before


def _machine_busy() -> float | None:
    """CPU seconds the whole machine has spent busy so far; None where /proc cannot tell."""
    try:
        return machine_ticks()[0] / _TICKS
    except (OSError, ValueError, IndexError):
        return None


# Where a run's CPU went, per append: the writer processes (the store's or the loop's Python),
# their PostgreSQL backends, the sequencer (its backend and its thread in this process), and the
# whole machine (everything above, and the rest: the WAL writer, the kernel, this process).
PARTS = ("writers", "backends", "sequencer", "machine")


class Tally:
    """One mode's figures at one writer count, over its repeats."""

    def __init__(self) -> None:
        self.rates: dict[str, list[float]] = {}
        self.lags: list[float] = []
        self.sizes: list[int] = []
        self.appends = 0  # the parallel contenders', for the sequencer's CPU per append
        self.backend_cpu: float | None = 0.0
        self.thread_cpu: float | None = 0.0
        # Writers as processes: each contender's CPU µs per append, by PARTS, one a repeat.
        self.parts: dict[str, dict[str, list[float]]] = {}

    def part(self, contender: str, part: str) -> str:
        """The median µs per append of `part` for `contender`, or n/a."""
        values = self.parts.get(contender, {}).get(part, [])
        return f"{statistics.median(values):.0f}" if values else "n/a"

    def median(self, contender: str) -> float:
        """The median rate of `contender`."""
        return statistics.median(self.rates[contender])

    def cpu_per_thousand(self) -> str:
        """The sequencer's CPU ms per 1,000 appends, backend + its thread."""
        if not self.appends or self.backend_cpu is None or self.thread_cpu is None:
            return "n/a"
        scale = 1000 * 1000 / self.appends
        return f"{self.backend_cpu * scale:.0f} + {self.thread_cpu * scale:.0f}"


def main(argv: Sequence[str] | None = None) -> None:
    """Run the benchmark and print its tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--writers", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--mode", choices=("threads", "processes", "both"), default="both")
    parser.add_argument(
        "--floor",
        action="store_true",
        help="add the parallel design's writes alone (FLOOR_STATEMENT) as two more contenders",
    )
    args = parser.parse_args(argv)
    modes = ["threads", "processes"] if args.mode == "both" else [args.mode]
    before = uptime()
    tallies = {(mode, n): Tally() for mode in modes for n in args.writers}
    contenders: tuple[str, ...] = (PARALLEL, GROUPED, LOCKED, UNLOCKED)
    if args.floor:
        contenders += (FLOOR, FLOOR_RAW)
    with throwaway_database(server_url(), prefix="bench_contention") as database_url:
        apply_migrations(database_url)
        with psycopg.connect(database_url, autocommit=True) as conn:
            for schema in (LOCKED, UNLOCKED):
                conn.execute(_COPIES.format(schema=schema))
            conn.execute(_UNLOCKED_SEQUENCE)
            install_locked_baseline(conn)
            if args.floor:
                conn.execute(_FLOOR_GRANTS)
        conninfo = app_conninfo(database_url, environ={})
        batches: list[Batch] = []
        role = SequencerRole(
            lambda: psycopg.connect(conninfo, autocommit=True), on_batch=batches.append
        )
        role.start()
        cpu = SequencerCpu(role)
        for mode in modes:
            # Threads share this process's pool, a connection each; processes have their own,
            # and this one only drains the sequencer's backlog after each run.
            size = max(args.writers) if mode == "threads" else 1
            with open_pool(conninfo, max_size=size) as pool:
                stores = Stores(pool)
                for writers in args.writers:
                    processes = WriterProcesses(conninfo, writers) if mode == "processes" else None
                    tally = tallies[(mode, writers)]
                    try:
                        for repeat, order in enumerate(rotations(args.repeats, contenders)):
                            for contender in order:
                                run = f"{mode[0]}{repeat}{contenders.index(contender)}{writers}x"
                                del batches[:]
                                cpu_before = cpu.now()
                                machine_before = _machine_busy()
                                writers_before: tuple[float | None, float | None] = (None, None)
                                if processes is not None:
                                    writers_before = processes.cpu()
                                    count = processes.run(contender, run, args.seconds)
                                    writers_after = processes.cpu()
                                else:
                                    write = stores.writer(contender, run)
                                    count = run_writers(writers, args.seconds, write)
                                elapsed = args.seconds
                                if contender in (PARALLEL, GROUPED, FLOOR, FLOOR_RAW):
                                    # The sequencer's share: the run is not over until it has
                                    # placed every append, and its batches are this run's.
                                    drained = time.perf_counter()
                                    drain(stores)
                                    elapsed += time.perf_counter() - drained
                                if contender in (PARALLEL, GROUPED):
                                    cpu_after = cpu.now()
                                    tally.lags += [b.oldest_wait or 0.0 for b in batches]
                                    tally.sizes += [b.events for b in batches]
                                    tally.appends += count
                                    spent = _spent(cpu_before[0], cpu_after[0])
                                    tally.backend_cpu = (
                                        None
                                        if spent is None or tally.backend_cpu is None
                                        else tally.backend_cpu + spent
                                    )
                                    spent = _spent(cpu_before[1], cpu_after[1])
                                    tally.thread_cpu = (
                                        None
                                        if spent is None or tally.thread_cpu is None
                                        else tally.thread_cpu + spent
                                    )
                                if processes is not None and count:
                                    sequencer_after = cpu.now()
                                    spent_parts = {
                                        "writers": _spent(writers_before[0], writers_after[0]),
                                        "backends": _spent(writers_before[1], writers_after[1]),
                                        "sequencer": _spent(
                                            sum(v or 0.0 for v in cpu_before),
                                            sum(v or 0.0 for v in sequencer_after),
                                        )
                                        if None not in (*cpu_before, *sequencer_after)
                                        else None,
                                        "machine": _spent(machine_before, _machine_busy()),
                                    }
                                    parts = tally.parts.setdefault(contender, {})
                                    for part, seconds in spent_parts.items():
                                        if seconds is not None:
                                            parts.setdefault(part, []).append(seconds * 1e6 / count)
                                rate = count / elapsed
                                tally.rates.setdefault(contender, []).append(rate)
                                print(
                                    f"  {mode}, {writers} writers, {contender}: {rate:,.0f}/s",
                                    file=sys.stderr,
                                )
                    finally:
                        if processes is not None:
                            processes.close()
        role.stop()
    after = uptime()
    command = "python bench/contention.py " + " ".join(sys.argv[1:] if argv is None else argv)
    lines = [
        f"Command: `{command.strip()}`  ",
        f"Machine: {os.cpu_count()} CPUs; before: `{before}`; after: `{after}`  ",
        f"Medians of {args.repeats} repeats of {args.seconds:g} s; an append is a bet's two"
        " events on two streams of the writer's own, with an idempotency key. Sequencer CPU:"
        " its PostgreSQL backend's + its Python thread's, ms per 1,000 parallel appends.",
    ]
    for mode in modes:
        lines += [
            "",
            f"Writers as {mode}:",
            "",
            "| writers | parallel /s | parallel+group /s | locked /s | unlocked /s"
            " | parallel / locked | parallel+group / locked | parallel / unlocked"
            " | parallel+group / unlocked | locked / unlocked | sequencer lag p50 / p99 ms"
            " | batch events p50 / max | sequencer CPU ms / 1,000 appends |",
            "|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
        ]
        for writers in args.writers:
            tally = tallies[(mode, writers)]
            ours, batched = tally.median(PARALLEL), tally.median(GROUPED)
            old, theirs = tally.median(LOCKED), tally.median(UNLOCKED)
            lag = tally.lags or [0.0]
            size = tally.sizes or [0]
            lines.append(
                f"| {writers} | {ours:,.0f} | {batched:,.0f} | {old:,.0f} | {theirs:,.0f}"
                f" | {ours / old:.2f} | {batched / old:.2f} | {ours / theirs:.2f}"
                f" | {batched / theirs:.2f} | {old / theirs:.2f}"
                f" | {percentile(lag, 0.5) * 1000:.1f} / {percentile(lag, 0.99) * 1000:.1f}"
                f" | {statistics.median(size):.0f} / {max(size)} | {tally.cpu_per_thousand()} |"
            )
        if args.floor:
            lines += [
                "",
                f"The design's floor, writers as {mode}: FLOOR_STATEMENT's writes alone, each"
                " append one statement on a held connection, sequenced as the parallel path's"
                " are; its documents the store's canonical ones, or raw (orjson's, as the"
                " unlocked loop's).",
                "",
                "| writers | parallel /s | floor /s | floor, raw /s | unlocked /s"
                " | parallel / unlocked | floor / unlocked | floor, raw / unlocked |",
                "|--:|--:|--:|--:|--:|--:|--:|--:|",
            ]
            for writers in args.writers:
                tally = tallies[(mode, writers)]
                ours, theirs = tally.median(PARALLEL), tally.median(UNLOCKED)
                floor, raw = tally.median(FLOOR), tally.median(FLOOR_RAW)
                lines.append(
                    f"| {writers} | {ours:,.0f} | {floor:,.0f} | {raw:,.0f} | {theirs:,.0f}"
                    f" | {ours / theirs:.2f} | {floor / theirs:.2f} | {raw / theirs:.2f} |"
                )
        if mode == "processes":
            lines += [
                "",
                "Where the CPU went, writers as processes: µs per append (medians of the"
                " repeats) of the writer processes, their PostgreSQL backends, the sequencer"
                " (backend + thread; the parallel contenders' drains included) and the whole"
                " machine (busy time from /proc/stat: all of these, the WAL writer, the kernel"
                " and the rest).",
                "",
                "| writers | contender | writers µs | backends µs | sequencer µs | machine µs |",
                "|--:|:--|--:|--:|--:|--:|",
            ]
            for writers in args.writers:
                tally = tallies[(mode, writers)]
                for contender in contenders:
                    figures = " | ".join(tally.part(contender, part) for part in PARTS)
                    lines.append(f"| {writers} | {contender} | {figures} |")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
