"""Measure the event store's appends, reads and chain verification beside two baselines.

Run as `.venv/bin/python bench/event_store.py [--events N] [--repeats R]` against the server
in DATABASE_URL (default postgresql://postgres@127.0.0.1:5432/postgres); it creates a database
of its own and drops it at the end. Every figure is the median of R repeats, and the
contenders take turns within each repeat so that noise on the machine hits them alike:

- shoebox: events.postgres.PostgresEventStore, connected as the application role; its reads
  and its verification go through iter_all / iter_rows, which read batches ahead;
- raw: plain psycopg INSERTs into a table of the same shape with no lock and no chain,
  autocommit, one row a statement: the physical limit of this server for this row;
- eventsourcing: the library's PostgresApplicationRecorder, the peer with the same lock.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from importlib.metadata import version
from pathlib import Path
from typing import Any

# Run as a script, Python puts bench/ first on the path; the project root holds `events`
# and `bench` as packages.
_ROOT = str(Path(__file__).resolve().parent.parent)
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

import orjson  # noqa: E402
import psycopg  # noqa: E402
from eventsourcing.persistence import StoredEvent  # noqa: E402
from eventsourcing.postgres import PostgresApplicationRecorder, PostgresDatastore  # noqa: E402
from psycopg import Connection  # noqa: E402
from psycopg.conninfo import conninfo_to_dict  # noqa: E402
from psycopg.rows import TupleRow  # noqa: E402
from psycopg.types.string import TextLoader  # noqa: E402
from psycopg_pool import ConnectionPool  # noqa: E402

from bench.common import (  # noqa: E402
    Figure,
    render_table,
    rotations,
    server_url,
    throwaway_database,
    timed,
    timed_clients,
)
from domain.round import BetPlaced, RoundSettled  # noqa: E402
from domain.wallet import PayoutCredited, StakeReserved  # noqa: E402
from events.canonical import metadata_document, verify_chain, verify_rows  # noqa: E402
from events.migrations import apply_migrations  # noqa: E402
from events.postgres import PostgresEventStore, app_conninfo, open_pool  # noqa: E402
from events.store import (  # noqa: E402
    GENESIS_HASH,
    EventMetadata,
    JsonValue,
    NewEvent,
    RecordedEvent,
    StreamAppend,
    category_of,
)

SHOEBOX = "shoebox"
RAW = "raw psycopg"
PEER = "eventsourcing"
CONTENDERS = (SHOEBOX, RAW, PEER)
SHORT_NAMES = {RAW: "raw", PEER: "es"}

CLIENTS = 4
# Real event names where the shape is real; "BetsClosed" and "CoupDealt" stand in for the
# several events of a close and a deal, so that a round is eight events in two streams.
ROUND_EVENTS = (BetPlaced.type,) * 3 + ("BetsClosed", "CoupDealt", RoundSettled.type)
WALLET_EVENTS = (StakeReserved.type, PayoutCredited.type)
EVENTS_PER_ROUND = len(ROUND_EVENTS) + len(WALLET_EVENTS)
SEED_ROUNDS_PER_APPEND = 64
SPOTS = ("player", "banker", "tie")
# The raw table and the peer carry no chain, but the same number of bytes in these columns.
FILLER_HASH = "f" * 64


def bet_payload(round_id: str, serial: int) -> dict[str, JsonValue]:
    """A BetPlaced-like payload of about 150 bytes of JSON."""
    return {
        "bet_id": f"bet-{serial:012d}-9c1d",
        "round_id": round_id,
        "player_id": f"player-{serial % 9973:04d}-7f3a9c21",
        "seat": serial % 7 + 1,
        "spot": SPOTS[serial % 3],
        "stake": 500 * (serial % 20 + 1),
        "currency": "GBP",
    }


def request_metadata(serial: int) -> EventMetadata:
    """Metadata as a player's request would carry it: actor, role, request and correlation."""
    request_id = f"req-{serial:08d}-4b1e-9a57-{serial * 7919 % 10**12:012d}"
    return EventMetadata(
        actor=f"player:p{serial % 9973:04d}",
        role="player",
        request_id=request_id,
        correlation_id=request_id,
    )


@dataclass(frozen=True, slots=True)
class Transaction:
    """One append's worth of work, identical for every contender."""

    streams: tuple[StreamAppend, ...]
    metadata: EventMetadata

    @property
    def size(self) -> int:
        """The number of events in the transaction."""
        return sum(len(stream.events) for stream in self.streams)


def singles(run: str, client: int, count: int) -> list[Transaction]:
    """`count` one-event transactions, each the next version of the client's own stream."""
    stream_id = f"table:{run}c{client}"
    return [
        Transaction(
            (StreamAppend(stream_id, n, (NewEvent(BetPlaced.type, bet_payload(stream_id, n)),)),),
            request_metadata(n),
        )
        for n in range(count)
    ]


def round_streams(run: str, client: int, number: int, wallet_version: int) -> list[StreamAppend]:
    """One round: six events on a new round stream and two on the player's wallet stream."""
    round_id = f"round:{run}c{client}:{number:06d}"
    serial = number * EVENTS_PER_ROUND
    return [
        StreamAppend(
            round_id,
            0,
            tuple(
                NewEvent(event_type, bet_payload(round_id, serial + i))
                for i, event_type in enumerate(ROUND_EVENTS)
            ),
        ),
        StreamAppend(
            f"wallet:{run}c{client}",
            wallet_version,
            tuple(
                NewEvent(event_type, bet_payload(round_id, serial + len(ROUND_EVENTS) + i))
                for i, event_type in enumerate(WALLET_EVENTS)
            ),
        ),
    ]


def rounds(run: str, client: int, count: int) -> list[Transaction]:
    """`count` rounds, one multi-stream transaction of eight events each."""
    return [
        Transaction(
            tuple(round_streams(run, client, n, n * len(WALLET_EVENTS))), request_metadata(n)
        )
        for n in range(count)
    ]


def seed_transactions(run: str, events: int) -> list[Transaction]:
    """Big transactions of whole rounds, each round with a wallet of its own, to fill the log."""
    transactions = []
    per_append = SEED_ROUNDS_PER_APPEND * EVENTS_PER_ROUND
    for batch in range(-(-events // per_append)):
        streams: list[StreamAppend] = []
        for n in range(batch * SEED_ROUNDS_PER_APPEND, (batch + 1) * SEED_ROUNDS_PER_APPEND):
            # A wallet per round keeps every stream unique within the append.
            streams.extend(round_streams(run, n, n, 0))
        transactions.append(Transaction(tuple(streams), request_metadata(batch)))
    return transactions


class Contender(ABC):
    """One event log implementation, driven through the same transactions as the others."""

    name: str

    @abstractmethod
    def append(self, transaction: Transaction) -> None:
        """Write one transaction's events atomically."""

    @abstractmethod
    def head(self) -> int:
        """The number of events in the log."""

    @abstractmethod
    def read(self, count: int, batch_size: int) -> int:
        """Read the first `count` events in log order, `batch_size` at a time."""

    def seed(self, transactions: Sequence[Transaction]) -> None:
        """Fill the log for the read figures; fast paths may override this."""
        for transaction in transactions:
            self.append(transaction)

    def close(self) -> None:  # noqa: B027 -- an optional hook, not an abstract one
        """Release connections."""

    def run_clients(self, work: Sequence[Sequence[Transaction]]) -> float:
        """Seconds for one thread per list of transactions to append them all."""
        return timed_clients(len(work), lambda client: [self.append(t) for t in work[client]])


def _json(value: object) -> str:
    return orjson.dumps(value).decode()


class Shoebox(Contender):
    """The project's store, over a pool of application-role connections."""

    name = SHOEBOX

    def __init__(self, database_url: str) -> None:
        apply_migrations(database_url)
        self.pool = open_pool(app_conninfo(database_url), min_size=CLIENTS, max_size=CLIENTS)
        self.store = PostgresEventStore(self.pool)

    def append(self, transaction: Transaction) -> None:
        """Append through the public API, as a command handler would."""
        self.store.append(transaction.streams, transaction.metadata)

    def head(self) -> int:
        """The position of the last event."""
        return self.store.head()

    def read(self, count: int, batch_size: int) -> int:
        """Events decoded into RecordedEvent objects by iter_all, which reads a batch ahead."""
        seen = 0
        for events in self.store.iter_all(0, batch_size, to_position=count):
            seen += len(events)
        if seen != count:
            raise RuntimeError(f"the log ran out after {seen} events")
        return seen

    def verify(self, count: int, batch_size: int) -> int:
        """Walk the chain from genesis as `shoebox audit verify` does: rows read ahead, rehashed."""
        seen, prev_hash = 0, GENESIS_HASH
        for rows in self.store.iter_rows(0, batch_size, to_position=count):
            broken = verify_rows(rows, prev_hash, seen + 1)
            if broken is not None:
                raise RuntimeError(f"the benchmark's own chain is broken: {broken}")
            seen += len(rows)
            prev_hash = rows[-1][10]
        if seen != count:
            raise RuntimeError(f"the log ran out after {seen} events")
        return seen

    def fetch(self, count: int, batch_size: int) -> list[RecordedEvent]:
        """The first `count` events as recorded, for verification with no I/O in the way."""
        events: list[RecordedEvent] = []
        while len(events) < count:
            position = events[-1].position if events else 0
            limit = min(batch_size, count - len(events))
            events.extend(self.store.read_all(position, limit, upcast=False))
        return events

    def close(self) -> None:
        """Close the pool."""
        self.pool.close()


_RAW_TABLE = """
CREATE TABLE raw_events (LIKE events INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING INDEXES);
ALTER TABLE raw_events ALTER COLUMN position ADD GENERATED BY DEFAULT AS IDENTITY;
"""
_RAW_INSERT = """
INSERT INTO raw_events (stream_id, category, version, type, schema_version,
                        payload, metadata, recorded_at, prev_hash, hash)
VALUES (%s, %s, %s, %s, %s, %s::jsonb, %s::jsonb, %s, %s, %s)
"""
_RAW_COPY = """
COPY raw_events (stream_id, category, version, type, schema_version,
                 payload, metadata, recorded_at, prev_hash, hash) FROM STDIN
"""
_RAW_READ = """
SELECT position, stream_id, category, version, type, schema_version,
       payload, metadata, recorded_at, prev_hash, hash
FROM raw_events WHERE position > %s ORDER BY position LIMIT %s
"""


def _raw_rows(transaction: Transaction) -> list[tuple[Any, ...]]:
    metadata = _json(metadata_document(transaction.metadata))
    recorded_at = datetime.now(UTC)
    return [
        (
            stream.stream_id,
            category_of(stream.stream_id),
            stream.expected_version + offset + 1,
            event.type,
            event.schema_version,
            _json(event.payload),
            metadata,
            recorded_at,
            FILLER_HASH,
            FILLER_HASH,
        )
        for stream in transaction.streams
        for offset, event in enumerate(stream.events)
    ]


def _text_jsonb(conn: Connection[TupleRow]) -> None:
    # Raw rows stay raw: jsonb arrives as its text, with no JSON decoding at all.
    conn.adapters.register_loader("jsonb", TextLoader)


class Raw(Contender):
    """Plain INSERTs into a table shaped like `events`, same indexes, no trigger, lock or chain."""

    name = RAW

    def __init__(self, database_url: str) -> None:
        # Copying `events` after the migrations keeps the two tables the same shape for good.
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute(_RAW_TABLE)
        self.pool: ConnectionPool[Connection[TupleRow]] = ConnectionPool(
            database_url,
            min_size=CLIENTS,
            max_size=CLIENTS,
            kwargs={"autocommit": True},
            configure=_text_jsonb,
            open=True,
        )

    def append(self, transaction: Transaction) -> None:
        """One autocommit INSERT for one row; a transaction of pipelined INSERTs for more."""
        rows = _raw_rows(transaction)
        with self.pool.connection() as conn:
            if len(rows) == 1:
                conn.execute(_RAW_INSERT, rows[0])
            else:
                with conn.transaction(), conn.cursor() as cursor:
                    cursor.executemany(_RAW_INSERT, rows)

    def seed(self, transactions: Sequence[Transaction]) -> None:
        """COPY, the fastest way in."""
        with (
            self.pool.connection() as conn,
            conn.transaction(),
            conn.cursor() as cursor,
            cursor.copy(_RAW_COPY) as copy,
        ):
            for transaction in transactions:
                for row in _raw_rows(transaction):
                    copy.write_row(row)

    def head(self) -> int:
        """The number of rows."""
        with self.pool.connection() as conn:
            row = conn.execute("SELECT count(*) FROM raw_events").fetchone()
        assert row is not None
        return int(row[0])

    def fetch_batch(self, position: int, limit: int) -> list[tuple[Any, ...]]:
        """Tuple rows after `position`, JSON left as text."""
        with self.pool.connection() as conn:
            return conn.execute(_RAW_READ, [position, limit]).fetchall()

    def read(self, count: int, batch_size: int) -> int:
        """Raw tuples, nothing decoded into objects: what the driver alone costs."""
        seen, position = 0, 0
        while seen < count:
            rows = self.fetch_batch(position, min(batch_size, count - seen))
            if not rows:
                raise RuntimeError(f"the table ran out after {seen} rows")
            seen += len(rows)
            position = rows[-1][0]
        return seen

    def verify(self, count: int, batch_size: int) -> int:
        """Read raw rows and chain SHA-256 over their JSON text: the floor of any verifier."""
        seen, position, prev_hash = 0, 0, GENESIS_HASH
        while seen < count:
            rows = self.fetch_batch(position, min(batch_size, count - seen))
            if not rows:
                raise RuntimeError(f"the table ran out after {seen} rows")
            prev_hash = hash_rows(rows, prev_hash)
            seen += len(rows)
            position = rows[-1][0]
        return seen

    def close(self) -> None:
        """Close the pool."""
        self.pool.close()


def hash_rows(rows: Sequence[tuple[Any, ...]], prev_hash: str) -> str:
    """Chain SHA-256 over each row's stream id and JSON text, with no canonical encoding."""
    for row in rows:
        prev_hash = hashlib.sha256(f"{prev_hash}{row[1]}{row[6]}{row[7]}".encode()).hexdigest()
    return prev_hash


class Eventsourcing(Contender):
    """The eventsourcing library's recorder: text stream ids, JSON state bytes, same lock."""

    name = PEER

    def __init__(self, database_url: str) -> None:
        params = conninfo_to_dict(database_url)
        self.datastore = PostgresDatastore(
            dbname=str(params.get("dbname", "postgres")),
            host=str(params.get("host", "127.0.0.1")),
            port=str(params.get("port", "5432")),
            user=str(params.get("user", "postgres")),
            password=str(params.get("password", "")),
            pool_size=CLIENTS,
            originator_id_type="text",
        )
        self.recorder = PostgresApplicationRecorder(self.datastore)
        self.recorder.create_table()

    def append(self, transaction: Transaction) -> None:
        """insert_events with one StoredEvent an event, state holding payload and metadata."""
        metadata = metadata_document(transaction.metadata)
        recorded_at = datetime.now(UTC).isoformat()
        self.recorder.insert_events(
            [
                StoredEvent(
                    originator_id=stream.stream_id,
                    originator_version=stream.expected_version + offset + 1,
                    topic=f"shoebox.events:{event.type}",
                    state=orjson.dumps(
                        {"payload": event.payload, "metadata": metadata, "at": recorded_at}
                    ),
                )
                for stream in transaction.streams
                for offset, event in enumerate(stream.events)
            ]
        )

    def head(self) -> int:
        """The last notification id."""
        return self.recorder.max_notification_id() or 0

    def read(self, count: int, batch_size: int) -> int:
        """Notification objects from select_notifications; the library leaves state as bytes."""
        seen, start = 0, 1
        while seen < count:
            notifications = self.recorder.select_notifications(start, min(batch_size, count - seen))
            if not notifications:
                raise RuntimeError(f"the log ran out after {seen} notifications")
            seen += len(notifications)
            start = notifications[-1].id + 1
        return seen

    def close(self) -> None:
        """Close the datastore's pool."""
        self.datastore.close()


@dataclass(frozen=True, slots=True)
class Settings:
    """What one run measures and how often."""

    events: int
    repeats: int
    read_events: int
    batch_size: int


def measure_appends(
    figure: Figure,
    contenders: Sequence[Contender],
    settings: Settings,
    clients: int,
    build: Callable[[str, int, int], list[Transaction]],
    per_transaction: int,
    label: str,
) -> None:
    """Time each contender appending the same transactions, in rotated order each repeat."""
    by_name = {contender.name: contender for contender in contenders}
    per_client = settings.events // clients // per_transaction
    for repeat, order in enumerate(rotations(settings.repeats, CONTENDERS)):
        for name in order:
            run = f"{label}r{repeat}"
            work = [build(run, client, per_client) for client in range(clients)]
            seconds = by_name[name].run_clients(work)
            figure.add(name, per_client * per_transaction * clients, seconds)


def warm_up(contenders: Sequence[Contender]) -> None:
    """Fill every pooled connection's prepared statements before anything is timed."""
    for contender in contenders:
        contender.run_clients([singles("warm", c, 20) for c in range(CLIENTS)])
        contender.run_clients([rounds("warm", c, 10) for c in range(CLIENTS)])


def server_settings(database_url: str) -> dict[str, str]:
    """The server settings that decide what a commit costs."""
    names = ("server_version", "synchronous_commit", "fsync", "wal_sync_method", "shared_buffers")
    settings = {}
    with psycopg.connect(database_url) as conn:
        for name in names:
            row = conn.execute("SELECT current_setting(%s)", [name]).fetchone()
            assert row is not None
            settings[name] = str(row[0])
    return settings


def run(settings: Settings) -> None:
    """Create a database, measure everything in it, print the table, drop the database."""
    with throwaway_database(server_url(), "shoebox_bench") as database_url:
        server = server_settings(database_url)
        print(
            f"PostgreSQL {server['server_version']}"
            f" (synchronous_commit={server['synchronous_commit']},"
            f" fsync={server['fsync']}, wal_sync_method={server['wal_sync_method']},"
            f" shared_buffers={server['shared_buffers']}); {os.cpu_count()} CPUs;"
            f" python {sys.version.split()[0]}, psycopg {version('psycopg')},"
            f" eventsourcing {version('eventsourcing')}, orjson {version('orjson')}"
        )
        print(
            f"medians of {settings.repeats} interleaved repeats; {settings.events:,} events a"
            f" repeat for appends; reads over {settings.read_events:,} events in batches of"
            f" {settings.batch_size:,}",
            flush=True,
        )
        shoebox, raw, peer = Shoebox(database_url), Raw(database_url), Eventsourcing(database_url)
        try:
            figures = measure(shoebox, raw, peer, settings)
        finally:
            for contender in (shoebox, raw, peer):
                contender.close()
    print()
    print(render_table(figures, SHOEBOX, [RAW, PEER], SHORT_NAMES))
    print()
    report_goals(figures)


def measure(shoebox: Shoebox, raw: Raw, peer: Eventsourcing, settings: Settings) -> list[Figure]:
    """Every figure, each contender measured within the same repeats."""
    contenders: list[Contender] = [shoebox, raw, peer]
    by_name = {contender.name: contender for contender in contenders}
    started = time.perf_counter()
    warm_up(contenders)

    single = Figure("append, 1 event/tx, 1 client")
    measure_appends(single, contenders, settings, 1, singles, 1, "s")
    concurrent = Figure(f"append, 1 event/tx, {CLIENTS} clients")
    measure_appends(concurrent, contenders, settings, CLIENTS, singles, 1, "c")
    round_figure = Figure("append, 8 events/tx (round + wallet)")
    measure_appends(round_figure, contenders, settings, 1, rounds, EVENTS_PER_ROUND, "m")
    print(f"appends took {time.perf_counter() - started:.0f} s; filling the logs", flush=True)

    for contender in contenders:
        missing = settings.read_events - contender.head()
        if missing > 0:
            contender.seed(seed_transactions("seed", missing))

    read = Figure(f"read_all, batches of {settings.batch_size:,}")
    verify = Figure("verify chain: read + rehash")
    rehash = Figure("verify chain: rehash only, events in memory")
    count, batch = settings.read_events, settings.batch_size
    events = shoebox.fetch(count, batch)
    rows = [row for start in range(0, count, batch) for row in raw.fetch_batch(start, batch)]
    for order in rotations(settings.repeats, CONTENDERS):
        for name in order:
            contender = by_name[name]
            read.add(name, count, timed(partial(contender.read, count, batch)))
            if name == SHOEBOX:
                verify.add(name, count, timed(lambda: shoebox.verify(count, batch)))
                rehash.add(name, count, timed(lambda: verify_chain(events)))
            elif name == RAW:
                verify.add(name, count, timed(lambda: raw.verify(count, batch)))
                rehash.add(name, count, timed(lambda: hash_rows(rows, GENESIS_HASH)))
    print(f"everything measured in {time.perf_counter() - started:.0f} s", flush=True)
    return [single, concurrent, round_figure, read, verify, rehash]


def report_goals(figures: Sequence[Figure]) -> None:
    """Print each goal of issue 3 as met or missed, from the medians."""
    single, concurrent, round_figure, read, verify, _ = figures

    def median(figure: Figure, name: str) -> float:
        value = figure.median(name)
        assert value is not None
        return value

    ratio = median(single, SHOEBOX) / median(single, RAW)
    goals = [
        (f"append at >= 60% of raw single-row rate ({ratio:.0%})", ratio >= 0.60),
        *(
            (
                f"{figure.scenario} ahead of eventsourcing"
                f" ({median(figure, SHOEBOX) / median(figure, PEER):.2f}x)",
                median(figure, SHOEBOX) > median(figure, PEER),
            )
            for figure in (single, concurrent, round_figure)
        ),
        (f"read >= 100,000 events/s ({median(read, SHOEBOX):,.0f})", median(read, SHOEBOX) >= 1e5),
        (
            f"verify >= 100,000 events/s ({median(verify, SHOEBOX):,.0f})",
            median(verify, SHOEBOX) >= 1e5,
        ),
    ]
    for text, met in goals:
        print(f"{'met   ' if met else 'MISSED'}  {text}")


def main(argv: Sequence[str] | None = None) -> None:
    """Parse the command line and run the benchmark."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--events", type=int, default=2_000, help="events a repeat for appends")
    parser.add_argument("--repeats", type=int, default=5, help="repeats; the median is shown")
    parser.add_argument("--read-events", type=int, default=100_000, help="events read a repeat")
    parser.add_argument("--batch", type=int, default=1_000, help="read_all batch size")
    args = parser.parse_args(argv)
    if args.events < CLIENTS * EVENTS_PER_ROUND or args.repeats < 1 or args.read_events < 1:
        parser.error(f"need --events >= {CLIENTS * EVENTS_PER_ROUND} and positive counts")
    run(Settings(args.events, args.repeats, args.read_events, args.batch))


if __name__ == "__main__":
    main()
