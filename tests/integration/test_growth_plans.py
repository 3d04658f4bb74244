"""The plans of the reads that must cost the same whatever the log's age (issue 12).

A test database is tiny, so the planner's choices there are not production's. Each test first
makes the plan it guards against the cheap one (free parallel workers, no sequential scans),
then checks that the query still takes the bounded path.
"""

import json
from collections.abc import Sequence
from typing import Any

import psycopg
import pytest

from events.postgres import _READ_STREAM
from service.application.read_models.queries import _STREAM_AFTER
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
