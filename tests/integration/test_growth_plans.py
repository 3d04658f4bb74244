"""The plans of the reads that must cost the same whatever the log's age (issues 12 and 21).

A test database is tiny, so the planner's choices there are not production's. Each test first
makes the plan it guards against the cheap one (free parallel workers, no sequential scans),
then checks that the query still takes the bounded path. The tests of issue 21 change nothing
in the planner: they run the query as a live database does before autovacuum's first analyze
(no statistics at all, which is where a live server's planner guessed wrong), and count the
rows each scan actually read.
"""

import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from events.postgres import _READ_STREAM
from events.snapshots import _LATEST
from events.snapshots import _ORDERED_INDEX as _SNAPSHOT_ORDERED_INDEX
from service.application.read_models.queries import (
    _ALL_MOVEMENTS,
    _CHAT,
    _OPERATOR_MOVEMENTS,
    _ORDERED_INDEX,
    _PLAYER_ROUNDS,
    _STREAM_AFTER,
)
from service.regulator.log_index import _MONEY_BOUND, _SHOE_EVENTS, _TABLE_BOUNDS

# What would make a parallel plan look free: without events' parallel_workers = 0
# (migrations/0012) the planner takes a Gather for a stream read on a table of any size.
_PARALLEL_IS_FREE = (
    "SET parallel_setup_cost = 0",
    "SET parallel_tuple_cost = 0",
    "SET min_parallel_table_scan_size = 0",
    "SET min_parallel_index_scan_size = 0",
    "SET max_parallel_workers_per_gather = 4",
)


def _plan(conn: psycopg.Connection[Any], query: Any, params: Sequence[object]) -> str:
    """The generic plan, as psycopg's prepared statements get after five executions."""
    text = query.as_string(conn) if isinstance(query, psycopg.sql.Composable) else query
    parts = text.split("%s")
    numbered = parts[0] + "".join(f"${n}{part}" for n, part in enumerate(parts[1:], start=1))
    conn.execute("DEALLOCATE ALL")
    conn.execute(f"PREPARE q AS {numbered}")
    conn.execute("SET plan_cache_mode = force_generic_plan")
    arguments = ", ".join(psycopg.sql.Literal(p).as_string(conn) for p in params)
    explained = conn.execute(f"EXPLAIN (FORMAT JSON) EXECUTE q({arguments})").fetchone()
    assert explained is not None
    return json.dumps(explained[0])


@pytest.fixture
def conn(fresh_database: str) -> Any:
    with psycopg.connect(fresh_database, autocommit=True) as connection:
        # A long stream among others, freshly loaded: no statistics yet, as after a bulk
        # load or a restore, when the planner guesses and its guesses are the worst. Kept so
        # for the test's length.
        connection.execute("ALTER TABLE events SET (autovacuum_enabled = false)")
        connection.execute(
            """
            INSERT INTO events (position, stream_id, category, version, type, schema_version,
                                payload, metadata, recorded_at, prev_hash, hash)
            SELECT g, CASE WHEN g % 10 = 0 THEN 'wallet:p' ELSE 'table:T' END,
                   CASE WHEN g % 10 = 0 THEN 'wallet' ELSE 'table' END,
                   CASE WHEN g % 10 = 0 THEN g / 10 ELSE g - g / 10 END, 'X', 1,
                   jsonb_build_object('table_id', 'T', 'round_id', 'T-' || g / 20),
                   '{}'::jsonb, '2026-01-01'::timestamptz + g * interval '1 second',
                   repeat('0', 64), repeat('0', 64)
            FROM generate_series(1, 20000) AS g
            """
        )
        yield connection


def test_the_events_table_never_gets_a_parallel_plan(conn: psycopg.Connection[Any]) -> None:
    # With statistics: the estimate of a range of versions comes from the whole table's, and
    # the longer the log, the more rows it expects of a stream's short tail.
    conn.execute("ANALYZE events")
    for setting in _PARALLEL_IS_FREE:
        conn.execute(setting)
    conn.execute("SET enable_indexscan = off")  # the bitmap scan a 490,000-event log got

    plan = _plan(conn, _READ_STREAM, ["wallet:p", 1990, "wallet:p", 1990])

    assert '"Workers Planned"' not in plan, plan
    assert "Gather" not in plan, plan


def test_the_tail_after_the_shoes_checkpoint_is_read_by_position_alone(
    conn: psycopg.Connection[Any],
) -> None:
    conn.execute("SET enable_seqscan = off")

    plan = _plan(conn, _STREAM_AFTER, [19_990, "table:T"])

    # Through the primary key from the checkpoint: never an index of the whole stream.
    assert '"Index Name": "events_pkey"' in plan, plan
    for whole_stream in ("events_stream_recorded_at", "events_stream_id_version_key"):
        assert whole_stream not in plan, plan
    assert "BitmapAnd" not in plan, plan


def test_the_exports_shoe_events_come_from_the_shoe_index(
    conn: psycopg.Connection[Any],
) -> None:
    conn.execute("SET enable_seqscan = off")

    plan = _plan(conn, _SHOE_EVENTS, [["T-shoe-1"], "table:T"])

    assert '"Index Name": "events_shoe"' in plan, plan
    assert "events_stream_recorded_at" not in plan, plan
    assert "BitmapAnd" not in plan, plan


def test_the_slices_bounds_come_from_the_slice_alone(conn: psycopg.Connection[Any]) -> None:
    # With statistics, which say the table's rows are many: the planner then expects to find
    # one of the period soon from either end of the log.
    conn.execute("ANALYZE events")
    period = ["table:T", "2026-01-01T05:00:00Z", "2026-01-01T05:10:00Z"]

    plan = _plan(conn, _TABLE_BOUNDS, period)

    # Through the stream's index of times; never a walk of the whole log's primary key from
    # either end until the period's first row turns up.
    assert '"Index Name": "events_stream_recorded_at"' in plan, plan
    assert "events_pkey" not in plan, plan


def test_the_money_that_closes_a_slice_is_looked_up_round_by_round(
    conn: psycopg.Connection[Any],
) -> None:
    conn.execute("ANALYZE events")

    plan = _plan(
        conn, _MONEY_BOUND, ["table:T", "2026-01-01T05:00:00Z", "2026-01-01T05:10:00Z", "T"]
    )

    # Each round's wallet events through events_wallet_round, in a loop over the slice's rounds:
    # never every wallet event of the log, hashed or scanned by category.
    assert '"Index Name": "events_wallet_round"' in plan, plan
    assert '"Node Type": "Nested Loop"' in plan, plan
    assert "events_category_position" not in plan, plan
    assert "Hash Join" not in plan, plan


def _executed(
    conn: psycopg.Connection[Any], query: str, params: Sequence[object]
) -> dict[str, Any]:
    """The plan the query was run with, and the rows each node read, as EXPLAIN ANALYZE has it."""
    arguments = [psycopg.sql.Literal(p).as_string(conn) for p in params]
    explained = conn.execute(
        "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + query.replace("%s", "{}").format(*arguments)
    ).fetchone()
    assert explained is not None
    plan: dict[str, Any] = explained[0][0]["Plan"]
    return plan


def _scans(plan: dict[str, Any]) -> list[dict[str, Any]]:
    """Every node of the plan that reads a table or an index."""
    found = [plan] if "Relation Name" in plan or "Index Name" in plan else []
    for child in plan.get("Plans", []):
        found.extend(_scans(child))
    return found


def _read(scan: dict[str, Any]) -> int:
    """The rows a scan read: those it returned and those its filter removed, in every loop."""
    loops = int(scan.get("Actual Loops", 1))
    return loops * (int(scan["Actual Rows"]) + int(scan.get("Rows Removed by Filter", 0)))


def test_the_shoes_log_tail_is_read_through_the_primary_key_without_statistics(
    conn: psycopg.Connection[Any],
) -> None:
    # Nothing analyzed, nothing disabled: a one-sided `position > checkpoint` was a third of
    # the log to this planner, which read all of it in a sequential scan.
    plan = _executed(conn, _STREAM_AFTER, [19_990, "table:T"])

    scans = _scans(plan)
    assert all(s["Node Type"] != "Seq Scan" for s in scans), json.dumps(plan)
    assert {s["Index Name"] for s in scans if "Index Name" in s} == {"events_pkey"}, json.dumps(
        plan
    )
    # The ten events after the checkpoint, and the head's one row.
    tables = [s for s in scans if "Relation Name" in s]
    assert sum(_read(s) for s in tables) <= 11, json.dumps(plan)


@pytest.fixture
def rounds_of_one_player(conn: psycopg.Connection[Any]) -> psycopg.Connection[Any]:
    """5,000 rounds of player `p` in the round history, loaded live: no statistics."""
    for table in ("proj_rounds", "proj_round_players"):
        conn.execute(f"ALTER TABLE {table} SET (autovacuum_enabled = false)")
    conn.execute(
        """
        INSERT INTO proj_rounds (round_id, table_id, number, position, opened_at, status, cards,
                                 bets, wagered, paid_out, commission, voided)
        SELECT 'T-' || g, 'T', g, g * 20, '2026-01-01'::timestamptz + g * interval '1 minute',
               'settled', '[]'::jsonb, '[]'::jsonb, 100, 0, 0, false
        FROM generate_series(1, 5000) AS g
        """
    )
    conn.execute(
        """
        INSERT INTO proj_round_players (player_id, round_id, position)
        SELECT 'p', 'T-' || g, g * 20 FROM generate_series(1, 5000) AS g
        """
    )
    return conn


@pytest.mark.parametrize("before", [2**62, 50_000], ids=["first page", "a later page"])
def test_a_players_rounds_page_reads_only_the_page_without_statistics(
    rounds_of_one_player: psycopg.Connection[Any], before: int
) -> None:
    conn = rounds_of_one_player
    with conn.transaction():
        # As ProjectionService.player_round_records runs it.
        conn.execute(_ORDERED_INDEX)
        plan = _executed(conn, _PLAYER_ROUNDS, ["p", before, 20])

    scans = _scans(plan)
    by_index = {s.get("Index Name"): s for s in scans}
    assert set(by_index) == {"proj_round_players_player_position", "proj_rounds_pkey"}, json.dumps(
        plan
    )
    # The player's index walked backwards from the keyset and left after a page: never all
    # 5,000 of the player's rounds read and sorted, and only the page's rounds joined.
    walk = by_index["proj_round_players_player_position"]
    assert walk["Node Type"] == "Index Scan"
    assert walk["Scan Direction"] == "Backward"
    assert _read(walk) == 20, json.dumps(plan)
    assert _read(by_index["proj_rounds_pkey"]) == 20, json.dumps(plan)


@pytest.fixture
def movements(conn: psycopg.Connection[Any]) -> psycopg.Connection[Any]:
    """20,000 wallet movements, a minute apart, of two operators' players: no statistics."""
    conn.execute("ALTER TABLE proj_wallet_statement SET (autovacuum_enabled = false)")
    conn.execute(
        """
        INSERT INTO proj_wallet_statement (player_id, operator, version, position, recorded_at,
                                           type, amount, reserved_change, available_after,
                                           reserved_after)
        SELECT CASE WHEN g % 2 = 0 THEN 'casino-a/p' || g % 10 ELSE 'p' || g % 10 END,
               CASE WHEN g % 2 = 0 THEN 'casino-a' ELSE 'default' END, g / 10 + 1, g,
               '2026-01-01'::timestamptz + g * interval '1 minute', 'Deposited', 100, 0,
               100 * (g / 10 + 1), 0
        FROM generate_series(1, 20000) AS g
        """
    )
    return conn


_RANGE_START = datetime(2026, 1, 8, tzinfo=UTC)  # about half way through the movements
_RANGE_END = datetime(2026, 1, 20, tzinfo=UTC)


@pytest.mark.parametrize(
    ("query", "params"),
    [
        (_OPERATOR_MOVEMENTS, ["casino-a", _RANGE_START, -1, _RANGE_END, 51]),
        (
            _OPERATOR_MOVEMENTS,
            ["casino-a", _RANGE_START + timedelta(hours=5), 10_380, _RANGE_END, 51],
        ),
        (_ALL_MOVEMENTS, [_RANGE_START, -1, _RANGE_END, 51]),
        (_ALL_MOVEMENTS, [_RANGE_START + timedelta(hours=5), 10_380, _RANGE_END, 51]),
    ],
    ids=["an operator's first page", "an operator's next page", "everyone's", "everyone's next"],
)
def test_a_page_of_wallet_movements_reads_only_the_page_without_statistics(
    movements: psycopg.Connection[Any], query: str, params: list[object]
) -> None:
    with movements.transaction():
        # As ProjectionService.wallet_movements runs it.
        movements.execute(_ORDERED_INDEX)
        plan = _executed(movements, query, params)

    (scan,) = _scans(plan)
    # The range's index walked in its order from the keyset and left after a page: never every
    # movement of the range (or of the operator) read and sorted.
    assert scan["Node Type"] == "Index Scan", json.dumps(plan)
    assert scan["Index Name"].startswith("proj_wallet_statement_"), json.dumps(plan)
    assert scan["Scan Direction"] == "Forward"
    assert _read(scan) == 51, json.dumps(plan)


def test_a_page_of_chat_reads_only_the_page_without_statistics(
    conn: psycopg.Connection[Any],
) -> None:
    conn.execute("ALTER TABLE proj_chat SET (autovacuum_enabled = false)")
    conn.execute(
        """
        INSERT INTO proj_chat (table_id, version, position, player_id, text, posted_at)
        SELECT 'T', g, g * 10, 'p', 'coup ' || g, '2026-01-01'::timestamptz + g * interval '1 s'
        FROM generate_series(1, 5000) AS g
        """
    )
    with conn.transaction():
        # As ProjectionService.chat runs it.
        conn.execute(_ORDERED_INDEX)
        plan = _executed(conn, _CHAT, ["T", 5001, 51])

    (scan,) = _scans(plan)
    assert scan["Index Name"] == "proj_chat_pkey", json.dumps(plan)
    assert scan["Scan Direction"] == "Backward", json.dumps(plan)
    assert _read(scan) == 51, json.dumps(plan)


def test_a_page_of_significant_events_reads_only_the_page_without_statistics(
    conn: psycopg.Connection[Any],
) -> None:
    conn.execute("ALTER TABLE proj_significant SET (autovacuum_enabled = false)")
    conn.execute(
        """
        INSERT INTO proj_significant (position, kind, type, actor, table_id, recorded_at)
        SELECT g, 'operator', 'X', 'ops', 'T', '2026-01-01'::timestamptz + g * interval '1 s'
        FROM generate_series(1, 5000) AS g
        """
    )
    page = (
        "SELECT position, kind FROM proj_significant WHERE position > %s AND position <= %s"
        " ORDER BY position LIMIT %s"
    )
    with conn.transaction():
        # As ProjectionService.significant runs its unfiltered page.
        conn.execute(_ORDERED_INDEX)
        plan = _executed(conn, page, [0, 5000, 51])

    (scan,) = _scans(plan)
    assert scan["Index Name"] == "proj_significant_pkey", json.dumps(plan)
    assert _read(scan) == 51, json.dumps(plan)


def test_a_wallets_latest_snapshot_is_one_row_read_without_statistics(
    conn: psycopg.Connection[Any],
) -> None:
    # A long-played wallet keeps one snapshot in every block of versions (WALLET_KEEP_EVERY).
    conn.execute("ALTER TABLE snapshots SET (autovacuum_enabled = false)")
    conn.execute(
        """
        INSERT INTO snapshots (stream_id, version, schema, state, taken_at)
        SELECT 'wallet:p', g * 200, 's', '{}'::jsonb, '2026-01-01'::timestamptz
        FROM generate_series(1, 300) AS g
        """
    )
    with conn.transaction():
        # As PostgresSnapshotStore.latest runs it.
        conn.execute(_SNAPSHOT_ORDERED_INDEX)
        plan = _executed(conn, _LATEST, ["wallet:p", "s"])

    (scan,) = _scans(plan)
    assert scan["Index Name"] == "snapshots_pkey", json.dumps(plan)
    assert scan["Scan Direction"] == "Backward", json.dumps(plan)
    assert _read(scan) == 1, json.dumps(plan)
