"""An append's outbox rows: written in the append's own transaction, or not at all.

events/store.py's OutboxRow: the rows an append owes beside its events (the calls owed to a
seamless wallet, service/application/seamless_owed.py), on real PostgreSQL and in memory.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from events.memory import InMemoryEventStore
from events.postgres import Pool, PostgresEventStore
from events.store import (
    ConcurrencyConflict,
    EventMetadata,
    Idempotency,
    NewEvent,
    OutboxRow,
    StreamAppend,
)

META = EventMetadata(actor="t", role="system")


@pytest.fixture
def probe(fresh_database: str) -> str:
    """A table of the test's own, which the application role may write."""
    with psycopg.connect(fresh_database, autocommit=True) as conn:
        conn.execute("CREATE TABLE outbox_probe (key text PRIMARY KEY, value text, refs text[])")
        conn.execute("GRANT SELECT, INSERT, UPDATE ON outbox_probe TO shoebox_app")
    return "outbox_probe"


def row(key: str, value: str, *, update: bool = False) -> OutboxRow:
    return OutboxRow(
        "outbox_probe",
        {"key": key, "value": value, "refs": ("a", "b")},
        ("key",),
        update=("value",) if update else (),
    )


def one(stream: str, version: int) -> list[StreamAppend]:
    return [StreamAppend(stream, version, [NewEvent("Happened", {"n": version})])]


def rows(pool: Pool) -> list[tuple[Any, ...]]:
    with pool.connection() as conn:
        return conn.execute("SELECT key, value, refs FROM outbox_probe ORDER BY key").fetchall()


def test_the_rows_commit_with_the_append(app_pool: Pool, probe: str) -> None:
    store = PostgresEventStore(app_pool)
    result = store.append(one("s:1", 0), META, outbox=[row("k1", "first"), row("k2", "x")])
    assert result.versions == {"s:1": 1}
    assert rows(app_pool) == [("k1", "first", ["a", "b"]), ("k2", "x", ["a", "b"])]
    assert [e.type for e in store.read_stream("s:1")] == ["Happened"]
    assert store.head() == 1  # sequenced as any other append


def test_a_refused_append_writes_no_row(app_pool: Pool, probe: str) -> None:
    store = PostgresEventStore(app_pool)
    store.append(one("s:1", 0), META)
    with pytest.raises(ConcurrencyConflict):
        store.append(one("s:1", 0), META, outbox=[row("k1", "lost")])
    assert rows(app_pool) == []
    assert len(store.read_stream("s:1")) == 1


def test_a_replayed_append_writes_no_row_again(app_pool: Pool, probe: str) -> None:
    store = PostgresEventStore(app_pool)
    key = Idempotency("req-1", "fp")
    store.append(one("s:1", 0), META, key, outbox=[row("k1", "first")])
    replayed = store.append(one("s:1", 0), META, key, outbox=[row("k2", "again")])
    assert replayed.replayed
    assert rows(app_pool) == [("k1", "first", ["a", "b"])]


def test_a_key_already_held_is_left_unless_updated(app_pool: Pool, probe: str) -> None:
    store = PostgresEventStore(app_pool)
    store.append(one("s:1", 0), META, outbox=[row("k1", "first")])
    store.append(one("s:1", 1), META, outbox=[row("k1", "ignored")])
    assert rows(app_pool) == [("k1", "first", ["a", "b"])]
    store.append(one("s:1", 2), META, outbox=[row("k1", "updated", update=True)])
    assert rows(app_pool) == [("k1", "updated", ["a", "b"])]


def test_a_failing_row_fails_the_append(app_pool: Pool, probe: str) -> None:
    store = PostgresEventStore(app_pool)
    bad = OutboxRow("outbox_probe", {"key": "k1", "no_such_column": "x"}, ("key",))
    with pytest.raises(psycopg.errors.UndefinedColumn):
        store.append(one("s:1", 0), META, outbox=[row("k0", "first"), bad])
    assert rows(app_pool) == []
    assert store.read_stream("s:1") == []


def test_the_memory_store_keeps_the_rows_of_appends_it_records() -> None:
    store = InMemoryEventStore()
    store.append(one("s:1", 0), META, outbox=[row("k1", "first")])
    with pytest.raises(ConcurrencyConflict):
        store.append(one("s:1", 0), META, outbox=[row("k2", "lost")])
    assert store.outbox() == [row("k1", "first")]


def test_a_row_must_hold_its_key() -> None:
    with pytest.raises(ValueError, match="key"):
        OutboxRow("t", {"value": 1}, ("key",))
    with pytest.raises(ValueError, match="updates"):
        OutboxRow("t", {"key": 1}, ("key",), update=("value",))


def test_an_append_in_its_streams_turn_writes_its_rows_in_the_turns_transaction(
    app_pool: Pool, probe: str
) -> None:
    # A hot table's command appends in its turn's transaction (events/stream_locks.py); a
    # seamless settlement there owes its wins as rows of that same transaction.
    from events.stream_locks import PostgresStreamLocks

    store = PostgresEventStore(app_pool)
    locks = PostgresStreamLocks(app_pool, store=store)
    with locks.hold("s:1", 5.0) as turn:
        turn.append(one("s:1", 0), META, outbox=[row("k1", "in turn")])
    assert rows(app_pool) == [("k1", "in turn", ["a", "b"])]
    # Refused in its turn (stale): the turn's transaction ends with no row and no event.
    with locks.hold("s:1", 5.0) as turn, pytest.raises(ConcurrencyConflict):
        turn.append(one("s:1", 0), META, outbox=[row("k2", "lost")])
    assert rows(app_pool) == [("k1", "in turn", ["a", "b"])]
    # Replayed in its turn: no row again.
    key = Idempotency("req-t", "fp")
    with locks.hold("s:1", 5.0) as turn:
        turn.append(one("s:1", 1), META, key, outbox=[row("k3", "first")])
    with locks.hold("s:1", 5.0) as turn:
        assert turn.append(one("s:1", 1), META, key, outbox=[row("k4", "again")]).replayed
    assert [r[0] for r in rows(app_pool)] == ["k1", "k3"]
    assert len(store.read_stream("s:1")) == 2
