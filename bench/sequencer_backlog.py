"""What the sequencer's PostgreSQL backend spends when its queue is full of dead rows.

Run as `.venv/bin/python bench/sequencer_backlog.py [--dead 5000 20000] [--baseline REV]`
against the server in DATABASE_URL (default postgresql://postgres@127.0.0.1:5432/postgres),
which must run on this machine (the backend's CPU is read from /proc). It creates databases of
its own and drops them.

`unsequenced_events` is a queue: the sequencer deletes every row it places, and until a vacuum
the dead rows stay where its reads begin. Per database: D appends (two events each) queued
and placed with autovacuum off for the queue, so that 2 x D dead rows wait as between two
vacuums; then 500 appends each placed by a batch of its own, and 2,000 empty polls. Figures:
the backend's CPU per batch of one append and per empty poll, for this checkout's migration
0030 and, with --baseline, for 0030 as it was at REV (the same other migrations).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

# Run as a script, Python puts bench/ first on the path, where bench/domain.py would shadow
# the `domain` package; the project root goes before it.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psycopg

from bench.common import server_url, throwaway_database, uptime
from domain.wallet import StakeReserved
from events.migrations import MIGRATIONS_DIR, apply_migrations
from events.postgres import PostgresEventStore, app_conninfo, open_pool
from events.sequencer import sequence_batch
from events.store import EventMetadata, NewEvent, StreamAppend

MIGRATION = "0030_parallel_appends_and_a_sequencer.sql"
PLACED = 500
POLLS = 2_000
META = EventMetadata(actor="bench", role="frontend")


def backend_cpu(pid: int) -> float:
    """A local backend's user + system CPU seconds, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100  # USER_HZ is 100 on Linux


def two_events(stream: str) -> list[StreamAppend]:
    """An append of two events to a new stream."""
    events = [NewEvent(StakeReserved.type, {"amount": n}) for n in (1, 2)]
    return [StreamAppend(stream, 0, events)]


def measure(migrations: Path, dead: int) -> tuple[float, float]:
    """Backend CPU ms per one-append batch and per empty poll, with 2 x `dead` dead rows."""
    with throwaway_database(server_url(), prefix="bench_sequencer") as url:
        apply_migrations(url, migrations)
        with psycopg.connect(url, autocommit=True) as owner:
            owner.execute("ALTER TABLE unsequenced_events SET (autovacuum_enabled = false)")
        conninfo = app_conninfo(url, environ={})
        with (
            open_pool(conninfo, max_size=2) as pool,
            psycopg.connect(conninfo, autocommit=True) as sequencer,
        ):
            store = PostgresEventStore(pool, sequencing="background", backlog_bound=None)
            for n in range(dead):
                store.append(two_events(f"dead:{n}"), META)
            while (batch := sequence_batch(sequencer)) is not None and batch.events:
                pass
            pid = sequencer.info.backend_pid
            busy = 0.0
            for n in range(PLACED):
                store.append(two_events(f"placed:{n}"), META)
                before = backend_cpu(pid)
                sequence_batch(sequencer)
                busy += backend_cpu(pid) - before
            before = backend_cpu(pid)
            for _ in range(POLLS):
                sequence_batch(sequencer)
            idle = backend_cpu(pid) - before
    return 1000 * busy / PLACED, 1000 * idle / POLLS


def main(argv: Sequence[str] | None = None) -> None:
    """Run and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--dead", type=int, nargs="+", default=[5_000, 20_000])
    parser.add_argument("--baseline", help="a git revision whose migration 0030 to compare")
    args = parser.parse_args(argv)
    before = uptime()
    with tempfile.TemporaryDirectory(prefix="bench-sequencer-") as scratch:
        contenders = {"this checkout": MIGRATIONS_DIR}
        if args.baseline:
            old = Path(scratch)
            for migration in MIGRATIONS_DIR.glob("*.sql"):
                (old / migration.name).write_text(migration.read_text())
            (old / MIGRATION).write_text(
                subprocess.run(
                    ["git", "show", f"{args.baseline}:migrations/{MIGRATION}"],
                    check=True,
                    capture_output=True,
                    text=True,
                ).stdout
            )
            contenders = {args.baseline: old, **contenders}
        rows = []
        for dead in args.dead:
            for name, directory in contenders.items():
                batch, poll = measure(directory, dead)
                rows.append(f"| {name} | {2 * dead:,} | {batch:.2f} | {poll:.3f} |")
                print(rows[-1], file=sys.stderr)
    command = "python bench/sequencer_backlog.py " + " ".join(
        sys.argv[1:] if argv is None else argv
    )
    print(f"Command: `{command.strip()}`  ")
    print(f"Before: `{before}`; after: `{uptime()}`")
    print()
    print(
        "| migration 0030 | dead rows in the queue | ms CPU a one-append batch"
        " | ms CPU an empty poll |"
    )
    print("|---|--:|--:|--:|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
