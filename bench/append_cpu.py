"""The server CPU of one append, by writer: where the parallel path's CPU goes (issue 22).

Run as `.venv/bin/python bench/append_cpu.py [--appends N] [--repeats R]` against the server
in DATABASE_URL (default postgresql://postgres@127.0.0.1:5432/postgres), which must run on
this machine (its backends' CPU is read from /proc); it creates a database of its own and
drops it at the end.

One client, autocommit, N appends a run, each a bet's two events on two streams of its own
with an idempotency key (bench/contention.py's), by each writer in turn (the order reversed
every other repeat), R repeats; the figure is the writer's PostgreSQL backend CPU per append:

- `append_batch()` as migration 0030 made it, called unprepared (the store before 0060);
- `append_batch()` as migration 0060 makes it, called prepared (the store before 0070);
- `append_one()` of migration 0070, called prepared (the store, for one append in a longer
  transaction: a table's turn, an outbox append);
- `append_fast()` of migration 0080, called prepared (the store now, for one append sent as
  its own transaction);
- the same writes as one prepared SQL statement, no function (bench/contention.py's
  FLOOR_STATEMENT, its values as scalars): the heads' upsert with the version check, the
  queue's rows, the key. What this design's writes cost without PL/pgSQL (it parses nothing,
  checks no JSON and handles no refusal or replay);
- the unlocked insert of bench/contention.py, its baseline.

And the sequencer's backend CPU per append, in batches of 16 appends, after each parallel run.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path

# Run as a script, Python puts bench/ first on the path, where bench/domain.py would shadow
# the `domain` package; the project root goes before it.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import orjson
import psycopg

from bench.common import server_url, throwaway_database, uptime
from bench.contention import (
    _COPIES,
    _UNLOCKED_INSERT,
    _UNLOCKED_SEQUENCE,
    FLOOR_STATEMENT,
    bet_appends,
    key_of,
    metadata,
    payloads,
)
from domain.round import BetPlaced
from domain.wallet import StakeReserved
from events.migrations import MIGRATIONS_DIR, apply_migrations
from events.postgres import (
    _APPEND_BATCH,
    _APPEND_FAST,
    _APPEND_ONE,
    PostgresEventStore,
    open_pool,
)

OLD = "append_batch() of 0030, sent unprepared (before)"
NEW = "append_batch() of 0060, sent prepared (before 0070)"
APPEND_ONE = "append_one() of 0070, sent prepared (in a transaction)"
APPEND_FAST = "append_fast() of 0080, sent prepared (alone: now)"
ONE = "the same writes as one SQL statement (no function)"
UNLOCKED = "the unlocked insert (the bench's baseline)"
WRITERS = (OLD, NEW, APPEND_ONE, APPEND_FAST, ONE, UNLOCKED)
WARM = 5
_TICKS = 100


def _cpu(pid: int) -> float:
    """A process's user + system CPU seconds, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def _function(migration: str) -> str:
    """The CREATE OR REPLACE of append_batch() as `migration` defines it."""
    text = (MIGRATIONS_DIR / migration).read_text()
    found = re.search(r"CREATE (OR REPLACE )?FUNCTION append_batch\(.*?\n\$\$;\n", text, re.DOTALL)
    if found is None:
        raise RuntimeError(f"no append_batch() in {migration}")
    return found.group(0).replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION")


def _arguments(
    store: PostgresEventStore, writer: str, run: str, n: int
) -> list[object] | dict[str, object]:
    """The parameters of append number `n` of `run` for `writer`."""
    if writer in (OLD, NEW):
        pending = store._pending(bet_appends(run, 1, n), metadata(1, n), key_of(run, 1, n))
        return [[value] for value in pending.arguments()] + ["2000ms", "3600s"]
    if writer in (APPEND_ONE, APPEND_FAST):
        pending = store._pending(bet_appends(run, 1, n), metadata(1, n), key_of(run, 1, n))
        return [*pending.arguments(), "2000ms", "3600s"]
    if writer == ONE:
        pending = store._pending(bet_appends(run, 1, n), metadata(1, n), key_of(run, 1, n))
        parts = pending.documents.split("\n")
        table, wallet = f"table:{run}w1", f"wallet:{run}w1"
        result = {
            "versions": {table: n + 1, wallet: n + 1},
            "appended": [[table, n + 1, n + 1], [wallet, n + 1, n + 1]],
        }
        return {
            **{"table": table, "wallet": wallet, "version": n + 1},
            **{"p1": parts[0], "s1": parts[1], "p2": parts[2], "s2": parts[3]},
            **{"key": pending.key, "fingerprint": pending.fingerprint},
            "result": orjson.dumps(result).decode(),
        }
    bet, stake = payloads(1, n)
    meta = orjson.dumps(
        {"actor": "frontend-1", "role": "frontend", "request_id": metadata(1, n).request_id}
    ).decode()
    table, wallet = f"table:{run}", f"wallet:{run}"
    result = {"versions": {table: n + 1, wallet: n + 1}}
    return [
        *(table, n + 1, BetPlaced.type, orjson.dumps(bet).decode(), meta),
        *(wallet, n + 1, StakeReserved.type, orjson.dumps(stake).decode(), meta),
        *(key_of(run, 1, n).key, "fp", orjson.dumps(result).decode()),
    ]


def main(argv: Sequence[str] | None = None) -> None:
    """Run the measurement and print its table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--appends", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    before = uptime()
    spent: dict[str, list[float]] = {writer: [] for writer in WRITERS}
    sequencer: list[float] = []
    old, new = (
        _function("0030_parallel_appends_and_a_sequencer.sql"),
        _function("0060_sequencer_floor.sql"),
    )
    with throwaway_database(server_url(), prefix="bench_append_cpu") as url:
        apply_migrations(url)
        with (
            psycopg.connect(url, autocommit=True) as conn,
            psycopg.connect(url, autocommit=True) as sequencing,
            open_pool(url, min_size=1, max_size=1) as pool,
        ):
            conn.execute(_COPIES.format(schema="unlocked"))
            conn.execute(_UNLOCKED_SEQUENCE)
            store = PostgresEventStore(pool, sequencing="background", group_commit=False)
            pid, sequencer_pid = conn.info.backend_pid, sequencing.info.backend_pid
            for repeat in range(args.repeats):
                for writer in WRITERS if repeat % 2 == 0 else WRITERS[::-1]:
                    run = f"w{WRITERS.index(writer)}r{repeat}"
                    calls = [_arguments(store, writer, run, n) for n in range(args.appends)]
                    query, prepare = {
                        OLD: (_APPEND_BATCH, False),
                        NEW: (_APPEND_BATCH, True),
                        APPEND_ONE: (_APPEND_ONE, True),
                        APPEND_FAST: (_APPEND_FAST, True),
                        ONE: (FLOOR_STATEMENT, True),
                        UNLOCKED: (_UNLOCKED_INSERT, True),
                    }[writer]
                    if writer in (OLD, NEW, APPEND_ONE):
                        conn.execute(old if writer == OLD else new)
                    for call in calls[:WARM]:
                        conn.execute(query, call, prepare=prepare)
                    start = _cpu(pid)
                    for call in calls[WARM:]:
                        conn.execute(query, call, prepare=prepare)
                    spent[writer].append((_cpu(pid) - start) * 1000 / (args.appends - WARM))
                    if writer != UNLOCKED:
                        start = _cpu(sequencer_pid)
                        while True:
                            row = sequencing.execute(
                                "SELECT sequenced FROM sequence_appends(16, true)"
                            ).fetchone()
                            if row is None or not row[0]:
                                break
                        sequencer.append((_cpu(sequencer_pid) - start) * 1000 / args.appends)
    baseline = statistics.median(spent[UNLOCKED])
    lines = [
        "Command: `python bench/append_cpu.py "
        + " ".join(sys.argv[1:] if argv is None else argv)
        + "`  ",
        f"Before: `{before}`; after: `{uptime()}`",
        "",
        "| writer (server CPU of one append) | ms, median | min-max | / unlocked |",
        "|---|--:|--:|--:|",
    ]
    for writer in WRITERS:
        values = spent[writer]
        lines.append(
            f"| {writer} | {statistics.median(values):.3f} | {min(values):.3f}-{max(values):.3f}"
            f" | {statistics.median(values) / baseline:.2f} |"
        )
    lines.append(
        f"| the sequencer, per append, batches of 16 | {statistics.median(sequencer):.3f}"
        f" | {min(sequencer):.3f}-{max(sequencer):.3f} | |"
    )
    print("\n".join(lines))


if __name__ == "__main__":
    main()
