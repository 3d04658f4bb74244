"""PostgreSQL-only rules of the event store: immutability, tamper evidence, notification, reads."""

import dataclasses
import os
import secrets
from collections.abc import Iterator

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.types.json import Jsonb

from events.canonical import (
    BreakKind,
    ChainBreak,
    chain_events,
    hash_event,
    metadata_document,
    verify_chain,
    verify_rows,
)
from events.migrations import apply_migrations
from events.postgres import APP_ROLE, Pool, PostgresEventStore, app_conninfo, open_pool
from events.store import (
    GENESIS_HASH,
    NOTIFY_CHANNEL,
    ConcurrencyConflict,
    EventMetadata,
    NewEvent,
    RecordedEvent,
    StreamAppend,
)
from events.upcasting import Upcasters
from tests.contract.event_store import START, StepClock

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


def test_the_app_role_may_only_select_on_events(fresh_database: str) -> None:
    with psycopg.connect(fresh_database) as conn:
        rows = conn.execute(
            "SELECT privilege_type FROM information_schema.role_table_grants"
            " WHERE table_name = 'events' AND grantee = %s ORDER BY 1",
            [APP_ROLE],
        ).fetchall()
    assert rows == [("SELECT",)]


def test_the_app_role_cannot_insert_an_event_past_the_append_function(
    store: PostgresEventStore, fresh_database: str
) -> None:
    head = store.read_all(upcast=False)[-1]
    [forged] = chain_events(
        [StreamAppend("wallet:mallory", 0, [NewEvent("Deposited", {"amount": 10**9})])],
        DEALER,
        head.recorded_at,
        head.position,
        head.hash,
    )

    with (
        psycopg.connect(app_conninfo(fresh_database, environ={})) as conn,
        pytest.raises(psycopg.errors.InsufficientPrivilege),
    ):
        conn.execute(
            "INSERT INTO events VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
            [
                forged.position,
                forged.stream_id,
                forged.category,
                forged.version,
                forged.type,
                forged.schema_version,
                Jsonb(forged.payload),
                Jsonb(metadata_document(DEALER)),
                forged.recorded_at,
                forged.prev_hash,
                forged.hash,
            ],
        )
    assert store.head() == 3


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
    store.claim_shoe_secret("T1", 1, "shoe:T1:1", SEED)
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


def test_only_the_app_role_may_execute_the_append_and_sequencer_functions(
    fresh_database: str,
) -> None:
    with psycopg.connect(fresh_database) as conn:
        grantees = conn.execute(
            "SELECT DISTINCT routine_name, grantee FROM information_schema.role_routine_grants"
            " WHERE routine_name IN ('append_batch', 'append_one', 'append_fast',"
            " 'sequence_appends')"
            " AND privilege_type = 'EXECUTE'"
            " AND grantee <> routine_schema AND grantee <> current_user ORDER BY 1"
        ).fetchall()
        public = conn.execute(
            "SELECT has_function_privilege('public',"
            " 'append_batch(text[], text[], text[], text[], text[], text, text)', 'EXECUTE'),"
            " has_function_privilege('public',"
            " 'append_one(text, text, text, text, text, text, text)', 'EXECUTE'),"
            " has_function_privilege('public',"
            " 'append_fast(text, text, text, text, text, text, text)', 'EXECUTE'),"
            " has_function_privilege('public', 'sequence_appends(integer, boolean)', 'EXECUTE')"
        ).fetchone()
        # Every older path that wrote events directly is gone (migration 0030).
        writers = conn.execute(
            "SELECT proname FROM pg_proc WHERE proname IN"
            " ('append_events', 'lock_events_for_append') OR (proname = 'append_batch'"
            " AND pronargs <> 7) ORDER BY 1"
        ).fetchall()
    assert grantees == [
        ("append_batch", APP_ROLE),
        ("append_fast", APP_ROLE),
        ("append_one", APP_ROLE),
        ("sequence_appends", APP_ROLE),
    ]
    assert public == (False, False, False, False)
    assert writers == []


def test_the_app_role_may_only_read_the_unsequenced_appends(fresh_database: str) -> None:
    with psycopg.connect(fresh_database) as conn:
        rows = conn.execute(
            "SELECT table_name, privilege_type FROM information_schema.role_table_grants"
            " WHERE table_name IN ('unsequenced_events', 'stream_heads') AND grantee = %s"
            " ORDER BY 1, 2",
            [APP_ROLE],
        ).fetchall()
    assert rows == [("unsequenced_events", "SELECT")]
    with (
        psycopg.connect(app_conninfo(fresh_database, environ={})) as conn,
        pytest.raises(psycopg.errors.InsufficientPrivilege),
    ):
        conn.execute(
            "INSERT INTO unsequenced_events (append_id, n, stream_id, version, prefix, suffix)"
            " VALUES (1, 1, 'wallet:mallory', 1, '{', '}')"
        )


def test_the_unsequenced_appends_are_never_updated_even_by_the_owner(
    store: PostgresEventStore, fresh_database: str
) -> None:
    with (
        psycopg.connect(fresh_database) as conn,
        pytest.raises(psycopg.errors.RaiseException, match="append-only"),
    ):
        conn.execute("UPDATE unsequenced_events SET version = version + 1")


def test_the_append_function_refuses_documents_that_are_not_pairs(
    app_pool: Pool, fresh_database: str
) -> None:
    with (
        psycopg.connect(app_conninfo(fresh_database, environ={})) as conn,
        pytest.raises(psycopg.errors.InvalidParameterValue, match="prefix/suffix pairs"),
    ):
        conn.execute(
            "SELECT * FROM append_batch(%s, %s, %s, %s, NULL, NULL, NULL)",
            [['{"a":'], [None], [None], [None]],
        )


def test_a_conflict_names_the_first_stale_stream_with_its_versions(app_pool: Pool) -> None:
    store = PostgresEventStore(app_pool, StepClock())
    store.append(
        [StreamAppend("wallet:alice", 0, [NewEvent("StakeReserved", {"n": 1})] * 3)], DEALER
    )
    with pytest.raises(ConcurrencyConflict) as caught:
        store.append(
            [
                StreamAppend("round:T1:000001", 0, [NewEvent("BetPlaced", {"n": 1})]),
                StreamAppend("wallet:alice", 1, [NewEvent("StakeReserved", {"n": 2})]),
                StreamAppend("wallet:bob", 7, [NewEvent("StakeReserved", {"n": 3})]),
            ],
            DEALER,
        )
    assert (caught.value.stream_id, caught.value.expected, caught.value.actual) == (
        "wallet:alice",
        1,
        3,
    )


def test_events_read_back_are_plain_recorded_events(store: PostgresEventStore) -> None:
    for event in store.read_all(upcast=False):
        rebuilt = dataclasses.replace(event)
        assert type(event) is RecordedEvent
        assert event == rebuilt
        assert hash(event.position) == hash(rebuilt.position)
        assert repr(event) == repr(rebuilt)
        with pytest.raises(dataclasses.FrozenInstanceError):
            event.position = 9  # type: ignore[misc]


@pytest.fixture
def log_of_twenty(app_pool: Pool) -> PostgresEventStore:
    store = PostgresEventStore(app_pool, StepClock())
    for n in range(10):
        store.append(
            [
                StreamAppend(f"wallet:p{n}", 0, [NewEvent("StakeReserved", {"n": n})]),
                StreamAppend(f"round:T1:{n:06d}", 0, [NewEvent("BetPlaced", {"n": n})]),
            ],
            DEALER,
        )
    return store


def test_iter_all_yields_the_whole_log_in_batches_as_read_all_does(
    log_of_twenty: PostgresEventStore,
) -> None:
    batches = list(log_of_twenty.iter_all(0, 3))
    assert [len(batch) for batch in batches] == [3] * 6 + [2]
    assert [e for batch in batches for e in batch] == log_of_twenty.read_all(limit=100)
    after = [e for batch in log_of_twenty.iter_all(5, 4, to_position=13) for e in batch]
    assert [e.position for e in after] == list(range(6, 14))


def test_iter_all_filters_by_category_and_type(log_of_twenty: PostgresEventStore) -> None:
    wallets = [e for batch in log_of_twenty.iter_all(0, 4, categories=["wallet"]) for e in batch]
    assert wallets == log_of_twenty.read_all(categories=["wallet"])
    assert len(wallets) == 10
    bets = [e for batch in log_of_twenty.iter_all(0, 7, types=["BetPlaced"]) for e in batch]
    assert bets == log_of_twenty.read_all(types=["BetPlaced"])
    assert list(log_of_twenty.iter_all(0, 5, categories=["table"])) == []


def test_iter_all_goes_on_to_events_appended_while_it_reads(
    log_of_twenty: PostgresEventStore,
) -> None:
    seen: list[int] = []
    for batch in log_of_twenty.iter_all(0, 10):
        seen.extend(e.position for e in batch)
        if len(seen) == 10:
            log_of_twenty.append(
                [StreamAppend("wallet:late", 0, [NewEvent("StakeReserved", {"n": 1})])], DEALER
            )
    assert seen == list(range(1, 22))


def test_iter_all_upcasts_unless_told_not_to(app_pool: Pool) -> None:
    upcasters = Upcasters()
    upcasters.register("BetPlaced", 1, lambda p: {**p, "currency": "GBP"})
    store = PostgresEventStore(app_pool, StepClock(), upcasters)
    store.append([StreamAppend("round:T1:1", 0, [NewEvent("BetPlaced", {"stake": 5})])], DEALER)
    [[upcast]] = list(store.iter_all())
    [[recorded]] = list(store.iter_all(upcast=False))
    assert (upcast.schema_version, upcast.payload) == (2, {"stake": 5, "currency": "GBP"})
    assert (recorded.schema_version, recorded.payload) == (1, {"stake": 5})


def test_rows_verify_as_their_events_do_and_catch_the_same_edit(
    log_of_twenty: PostgresEventStore, fresh_database: str
) -> None:
    rows = [row for batch in log_of_twenty.iter_rows(0, 6) for row in batch]
    assert len(rows) == 20
    assert verify_rows(rows) is None
    _tamper(fresh_database, """UPDATE events SET payload = '{"n": 99}' WHERE position = 7""")
    rows = [row for batch in log_of_twenty.iter_rows(0, 6) for row in batch]
    events = log_of_twenty.read_all(upcast=False)
    assert verify_rows(rows) == verify_chain(events)
    assert verify_rows(rows) == ChainBreak(7, BreakKind.HASH, hash_event(events[6]), events[6].hash)


@pytest.fixture
def latin1_database(postgres_server_url: str) -> Iterator[str]:
    """A migrated database whose server encoding is LATIN1, not UTF-8."""
    name = f"shoebox_latin1_{os.getpid()}_{secrets.token_hex(4)}"
    with psycopg.connect(postgres_server_url, autocommit=True) as conn:
        conn.execute(
            sql.SQL(
                "CREATE DATABASE {} ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C'"
                " TEMPLATE template0"
            ).format(sql.Identifier(name))
        )
    params = conninfo_to_dict(postgres_server_url)
    params["dbname"] = name
    url = make_conninfo(**params)  # type: ignore[arg-type]
    try:
        apply_migrations(url)
        yield url
    finally:
        with psycopg.connect(postgres_server_url, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


def test_a_latin1_database_hashes_the_utf8_bytes_as_the_reference_does(
    latin1_database: str,
) -> None:
    metadata = EventMetadata(actor="zoë", role="player")
    streams = [StreamAppend("wallet:zoë", 0, [NewEvent("StakeReserved", {"note": "café £5"})])]
    with open_pool(app_conninfo(latin1_database, environ={}), max_size=2) as pool:
        store = PostgresEventStore(pool, StepClock())
        store.append(streams, metadata)
        events = store.read_all(upcast=False)
    assert events == chain_events(streams, metadata, START, 0, GENESIS_HASH)
    assert verify_chain(events) is None
