"""PostgreSQL-only rules of the event store: immutability, tamper evidence, notification."""

import dataclasses

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from events.canonical import BreakKind, ChainBreak, hash_event, verify_chain
from events.migrations import apply_migrations
from events.postgres import APP_ROLE, Pool, PostgresEventStore, app_conninfo
from events.store import NOTIFY_CHANNEL, EventMetadata, NewEvent, StreamAppend
from tests.contract.event_store import StepClock

DEALER = EventMetadata(actor="dealer-7", role="dealer")
SEED = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"

REFUSED = [
    "UPDATE events SET payload = '{}'::jsonb",
    "DELETE FROM events",
    "TRUNCATE events",
]


@pytest.fixture
def store(app_pool: Pool) -> PostgresEventStore:
    store = PostgresEventStore(app_pool, StepClock())
    for version in range(3):
        store.append(
            [StreamAppend("round:T1:000001", version, [NewEvent("BetPlaced", {"stake": 100})])],
            DEALER,
        )
    return store


@pytest.mark.parametrize("statement", REFUSED)
def test_the_app_role_may_not_change_or_remove_events(
    store: PostgresEventStore, fresh_database: str, statement: str
) -> None:
    with (
        psycopg.connect(app_conninfo(fresh_database, environ={})) as conn,
        pytest.raises(psycopg.errors.InsufficientPrivilege),
    ):
        conn.execute(statement)


@pytest.mark.parametrize("statement", [*REFUSED, "DELETE FROM events WHERE position = -1"])
def test_triggers_stop_even_the_owner_from_changing_events(
    store: PostgresEventStore, fresh_database: str, statement: str
) -> None:
    with (
        psycopg.connect(fresh_database) as conn,
        pytest.raises(psycopg.errors.RaiseException, match="append-only"),
    ):
        conn.execute(statement)
    assert store.head() == 3


def test_the_app_role_may_only_insert_and_select_on_events(fresh_database: str) -> None:
    with psycopg.connect(fresh_database) as conn:
        rows = conn.execute(
            "SELECT privilege_type FROM information_schema.role_table_grants"
            " WHERE table_name = 'events' AND grantee = %s ORDER BY 1",
            [APP_ROLE],
        ).fetchall()
    assert rows == [("INSERT",), ("SELECT",)]


def _tamper(fresh_database: str, statement: str) -> None:
    # As a superuser in replica mode ordinary triggers do not fire: the attack the chain exists for.
    with psycopg.connect(fresh_database) as conn:
        conn.execute("SET session_replication_role = replica")
        conn.execute(statement)


def test_verify_finds_a_payload_edited_behind_the_triggers_back(
    store: PostgresEventStore, fresh_database: str
) -> None:
    assert verify_chain(store.read_all(upcast=False)) is None
    _tamper(fresh_database, """UPDATE events SET payload = '{"stake": 1}' WHERE position = 2""")
    events = store.read_all(upcast=False)
    found = verify_chain(events)
    assert found == ChainBreak(2, BreakKind.HASH, hash_event(events[1]), events[1].hash)


def test_verify_finds_an_edit_whose_hash_was_recomputed_at_the_next_link(
    store: PostgresEventStore, fresh_database: str
) -> None:
    original = store.read_all(upcast=False)[1]
    forged = dataclasses.replace(original, payload={"stake": 1})
    forged_hash = hash_event(forged)
    _tamper(
        fresh_database,
        f"""UPDATE events SET payload = '{{"stake": 1}}', hash = '{forged_hash}'
            WHERE position = 2""",
    )
    found = verify_chain(store.read_all(upcast=False))
    assert found == ChainBreak(3, BreakKind.PREV_HASH, forged_hash, original.hash)


def test_verify_finds_a_deleted_event(store: PostgresEventStore, fresh_database: str) -> None:
    _tamper(fresh_database, "DELETE FROM events WHERE position = 2")
    found = verify_chain(store.read_all(upcast=False))
    assert found == ChainBreak(2, BreakKind.POSITION, "2", "3")


def test_append_notifies_listeners_of_its_last_position(
    store: PostgresEventStore, app_pool: Pool, fresh_database: str
) -> None:
    with psycopg.connect(app_conninfo(fresh_database, environ={}), autocommit=True) as listener:
        listener.execute(f"LISTEN {NOTIFY_CHANNEL}")
        store.append(
            [StreamAppend("wallet:alice", 0, [NewEvent("StakeReserved", {"amount": 5})] * 2)],
            DEALER,
        )
        notices = list(listener.notifies(timeout=5, stop_after=1))
    assert [(n.channel, n.payload) for n in notices] == [(NOTIFY_CHANNEL, "5")]


def test_the_events_table_never_holds_a_live_seed(
    store: PostgresEventStore, fresh_database: str
) -> None:
    store.store_shoe_secret("shoe:T1:1", SEED)
    store.append(
        [StreamAppend("shoe:T1:1", 0, [NewEvent("ShoeOpened", {"nonce": 1})])],
        DEALER,
    )
    with psycopg.connect(fresh_database) as conn:
        rows = conn.execute("SELECT events::text FROM events").fetchall()
        [(kept,)] = conn.execute("SELECT server_seed FROM shoe_secrets").fetchall()
    assert kept == SEED
    assert rows
    assert not [row for (row,) in rows if SEED in row]


def test_migrations_apply_once(fresh_database: str) -> None:
    assert apply_migrations(fresh_database) == []


def test_app_conninfo_swaps_the_user_and_drops_the_password() -> None:
    params = conninfo_to_dict(app_conninfo("postgresql://owner:secret@db.example:6543/shoebox"))
    assert params == {
        "user": APP_ROLE,
        "host": "db.example",
        "port": "6543",
        "dbname": "shoebox",
    }


def test_app_conninfo_yields_to_the_override_variable() -> None:
    environ = {"SHOEBOX_APP_DATABASE_URL": "postgresql://app:pw@db/shoebox"}
    assert app_conninfo("postgresql://owner@db/shoebox", environ=environ) == (
        "postgresql://app:pw@db/shoebox"
    )
