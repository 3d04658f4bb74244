"""Migration 0030 in place: a log written by the locked append verifies before and after, its
idempotency keys still replay, and new appends continue its chain."""

import shutil
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from events.canonical import verify_chain
from events.migrations import MIGRATIONS_DIR, apply_migrations
from events.postgres import PostgresEventStore, app_conninfo, append_documents, open_pool
from events.store import EventMetadata, Idempotency, NewEvent, StreamAppend, utc_now

DEALER = EventMetadata(actor="dealer-7", role="dealer")
_OLD_APPEND = (
    "SELECT first_position, last_position, error_code FROM append_batch("
    "%s::text[], %s::text[], %s::text[], %s::text[], %s::text[], NULL)"
)

_BATCH_OF_ONE = (
    "SELECT * FROM append_batch(ARRAY[%s]::text[], ARRAY[NULL]::text[], ARRAY[NULL]::text[],"
    " ARRAY[NULL]::text[], NULL, NULL, NULL)"
)


def _stake(amount: int) -> NewEvent:
    return NewEvent("StakeReserved", {"amount": amount})


# A database of its own, migrated up to 0014 (the append as issue 14 left it), or with every
# migration before 0060 but 0030: main's, which took 0017-0040 while issue 22 was built, so
# that 0030 is applied after 0040 (which touches no append function). 0060 builds on 0030.
@pytest.mark.parametrize(
    "applied_before",
    [lambda name: name < "0015", lambda name: not name.startswith("0030_") and name < "0060"],
    ids=["up-to-0014", "all-but-0030"],
)
def test_a_log_of_the_locked_append_migrates_in_place_and_verifies_before_and_after(
    fresh_database: str,
    postgres_server_url: str,
    tmp_path: Path,
    applied_before: Callable[[str], bool],
) -> None:
    name = f"{conninfo_to_dict(fresh_database)['dbname']}_old"
    params = conninfo_to_dict(postgres_server_url)
    params["dbname"] = name
    old_url = make_conninfo(**params)  # type: ignore[arg-type]
    with psycopg.connect(postgres_server_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        before = tmp_path / "before"
        before.mkdir()
        for migration in sorted(MIGRATIONS_DIR.glob("*.sql")):
            if applied_before(migration.name):
                shutil.copy(migration, before / migration.name)
        apply_migrations(old_url, before)
        with psycopg.connect(app_conninfo(old_url, environ={}), autocommit=True) as conn:
            for n in range(3):
                appended = [
                    StreamAppend("wallet:alice", n, [_stake(n)]),
                    StreamAppend(f"table:T{n}", 0, [_stake(n), _stake(n)]),
                ]
                row = conn.execute(
                    _OLD_APPEND,
                    [
                        [append_documents(appended, DEALER, utc_now())],
                        [f"bet-{n}"],
                        ["fp"],
                        [None],
                        [None],
                    ],
                ).fetchone()
                assert row is not None
                assert row[2] is None
        with open_pool(app_conninfo(old_url, environ={}), max_size=2) as pool:
            old_log = PostgresEventStore(pool)._read(
                "SELECT position, stream_id, category, version, type, schema_version,"
                " payload::text, metadata::text, recorded_at, prev_hash, hash FROM events"
                " ORDER BY position",
                [],
            )
        assert len(old_log) == 9
        assert verify_chain(old_log) is None

        apply_migrations(old_url)

        with open_pool(app_conninfo(old_url, environ={}), max_size=2) as pool:
            store = PostgresEventStore(pool)
            assert store.read_all(upcast=False) == old_log
            # An old key replays by version now, with its original events.
            replay = store.append(
                [StreamAppend("wallet:alice", 1, [_stake(1)])], DEALER, Idempotency("bet-1", "fp")
            )
            assert replay.replayed
            assert replay.appended == (("wallet:alice", 2, 2), ("table:T1", 1, 2))
            # The streams' heads came over: a stale version is still a conflict, a current one
            # continues the chain.
            store.append([StreamAppend("wallet:alice", 3, [_stake(9)])], DEALER)
            after = store.read_all(upcast=False)
            assert [e.position for e in after] == list(range(1, 11))
            assert after[:9] == old_log
            assert verify_chain(after) is None
    finally:
        with psycopg.connect(postgres_server_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_appends_queued_before_the_sequencers_floor_are_placed_after_it_migrates_in(
    fresh_database: str, postgres_server_url: str, tmp_path: Path
) -> None:
    """Migration 0060 on a live log: appends queued and not yet placed when it runs (the floor
    starts at 0) are placed after it, in order, and the chain verifies across it."""
    name = f"{conninfo_to_dict(fresh_database)['dbname']}_floor"
    params = conninfo_to_dict(postgres_server_url)
    params["dbname"] = name
    old_url = make_conninfo(**params)  # type: ignore[arg-type]
    with psycopg.connect(postgres_server_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        before = tmp_path / "before"
        before.mkdir()
        for migration in sorted(MIGRATIONS_DIR.glob("*.sql")):
            if migration.name < "0060":
                shutil.copy(migration, before / migration.name)
        apply_migrations(old_url, before)
        with open_pool(app_conninfo(old_url, environ={}), max_size=2) as pool:
            store = PostgresEventStore(pool, sequencing="background", backlog_bound=None)
            for n in range(4):
                # Through append_batch(), as the store sent every append before 0070 gave it
                # append_one().
                documents = append_documents(
                    [StreamAppend(f"wallet:p{n}", 0, [_stake(n)])], DEALER, utc_now()
                )
                with pool.connection() as conn:
                    conn.execute(_BATCH_OF_ONE, [documents])
                if n == 1:
                    store.sequence()
            assert store.head() == 2
        apply_migrations(old_url)
        with open_pool(app_conninfo(old_url, environ={}), max_size=2) as pool:
            store = PostgresEventStore(pool)
            store.append([StreamAppend("wallet:p4", 0, [_stake(4)])], DEALER)
            placed = store.read_all(upcast=False)
            assert [e.stream_id for e in placed] == [f"wallet:p{n}" for n in range(5)]
            assert verify_chain(placed) is None
    finally:
        with psycopg.connect(postgres_server_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
