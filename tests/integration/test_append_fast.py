"""append_fast() (migration 0080): the usual append in the fewest executor nodes; anything
else refused with SB004, nothing of it kept, and answered by append_one() (the store's call for
one append alone, events/postgres.py).

Every case of test_append_one.py, and a few of its own, runs on its own streams through
append_fast() with that fallback and through append_batch() alone: the answers and the rows
left must be the same, and append_fast() must take exactly the cases it is meant to take.
"""

import json
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from events.postgres import PostgresEventStore, app_conninfo, append_documents, open_pool
from events.store import EventMetadata, Idempotency, NewEvent, StreamAppend
from tests.integration.test_append_one import (
    _BATCH,
    _ONE,
    AT,
    CASES,
    Case,
    _answer,
    _rows,
    answered_once_released,
    refuses_a_busy_log_first,
)

_FAST = "SELECT append_fast(%s, %s, %s, %s, %s, %s, %s)"
TAKEN = "append_fast"
NOT_TAKEN = "append_one"
SIDES = ("fast", "batch")

# Which of test_append_one.py's cases append_fast() takes itself. Unlike append_one() it takes
# a stream's first append (its upsert inserts the head), and a guarded one whose guards sort
# before its written streams.
TAKES = {
    "a new stream",
    "fresh, on a stream that has its head",
    "a new stream beside an old one",
    "fresh, guarded, with a key and a response",
    "several events on several streams",
    "a key with no response",
}
# Its own cases, after those (wallet:a stands at 10, table:t at 6, limit:p at 0).
MORE = [
    # table:t's head moves first (sorted order), then wallet:a is found stale: both roll back.
    Case("a fresh stream beside a stale one", [("table:t", 7, 1), ("wallet:a", 5, 1)], NOT_TAKEN),
    Case("a new stream past its first version", [("wallet:n", 3, 1)], NOT_TAKEN),
    Case(
        "a guard that sorts after a written stream",
        [("table:t", 7, 1)],
        NOT_TAKEN,
        guards=[("wallet:a", 10)],
    ),
    Case("a fresh append after all that", [("table:t", 8, 2), ("wallet:a", 11, 1)], TAKEN),
]
ALL = [*CASES, *MORE]


def expected_path(case: Case) -> str:
    if case in MORE:
        return case.path
    return TAKEN if case.name in TAKES else NOT_TAKEN


def fast_then_one(conn: psycopg.Connection[Any], arguments: list[Any]) -> tuple[Any, str]:
    """What the store sends for one append alone: append_fast(), else append_one() (with no
    backlog check, made before any wait of the first call). The row, and which answered."""
    try:
        row = conn.execute(_FAST, arguments).fetchone()
    except psycopg.Error as error:
        if error.sqlstate != "SB004":
            raise
    else:
        assert row is not None
        return (row[0], None, None, None, None), TAKEN
    again = conn.execute(_ONE, [*arguments[:-1], None]).fetchone()
    assert again is not None
    return again[:5], NOT_TAKEN


def test_each_case_gets_append_batchs_answer_and_rows_and_only_usual_ones_are_taken(
    fresh_database: str,
) -> None:
    answers: dict[str, list[tuple[Any, ...]]] = {side: [] for side in SIDES}
    paths = []
    with psycopg.connect(app_conninfo(fresh_database, environ={}), autocommit=True) as conn:
        for case in ALL:
            fast, path = fast_then_one(conn, [*case.arguments("fast"), "2000ms", "60s"])
            batch = conn.execute(_BATCH, [*case.arguments("batch"), "2000ms", "60s"]).fetchone()
            assert batch is not None
            answers["fast"].append(_answer(fast, "fast"))
            answers["batch"].append(_answer(batch, "batch"))
            paths.append((case.name, path))
    with psycopg.connect(fresh_database) as owner:  # the app role may not read the heads
        rows = {side: _rows(owner, side) for side in SIDES}
    assert paths == [(case.name, expected_path(case)) for case in ALL]
    assert answers["fast"] == answers["batch"]
    codes = [answer[3] for answer in answers["fast"]]
    assert codes.count("SB001") == 4  # two of test_append_one.py's, two of MORE's
    assert rows["fast"] == rows["batch"]
    # The keys' stored results (each stream's version after the append, and its runs) are
    # compared as text above: append_fast() builds them as append_batch() does.
    assert any(key[0] == "k2" for key in rows["fast"]["keys"])


@pytest.mark.parametrize(
    ("document", "key", "response", "guards", "sqlstate"),
    [
        ("not an event", None, None, None, "22023"),
        ('{"a":1,"position":\n,"recorded_at":"x"', None, None, None, "22P02"),
        ("{}\n{}", None, None, None, "22023"),
        (None, None, '{"r":1}', None, "22023"),  # a response with no key
        (None, None, None, "not json", "22P02"),
        (None, None, None, '{"not": "an array"}', "22023"),
    ],
    ids=[
        "one-part",
        "unparsable",
        "no-recorded-at",
        "response-without-key",
        "guards-unparsable",
        "guards-not-an-array",
    ],
)
def test_malformed_input_gets_append_ones_refusal_and_nothing_is_written(
    fresh_database: str,
    document: str | None,
    key: str | None,
    response: str | None,
    guards: str | None,
    sqlstate: str,
) -> None:
    if document is None:
        document = Case("", [("wallet:m", 1, 1)], "").arguments("x")[0]
    url = app_conninfo(fresh_database, environ={})
    with psycopg.connect(url, autocommit=True) as conn:
        with pytest.raises(psycopg.Error) as raised:
            fast_then_one(conn, [document, key, None, response, guards, None, None])
        assert raised.value.sqlstate == sqlstate
        with pytest.raises(psycopg.Error) as alone:
            conn.execute(_ONE, [document, key, None, response, guards, None, None])
        assert alone.value.sqlstate == sqlstate
    with psycopg.connect(fresh_database) as owner:
        written = owner.execute(
            "SELECT (SELECT count(*) FROM unsequenced_events), (SELECT count(*) FROM stream_heads),"
            " (SELECT count(*) FROM idempotency_keys)"
        ).fetchone()
    assert written == (0, 0, 0)


def test_a_busy_log_refuses_before_any_lock_write_or_transaction_id(fresh_database: str) -> None:
    refuses_a_busy_log_first(fresh_database, _FAST)


def test_a_refusal_after_the_upsert_keeps_no_row_and_no_lock(fresh_database: str) -> None:
    """The upsert moves table:t's head, then finds wallet:a stale: SB004 rolls back both, and
    another session can take table:t at once."""
    url = app_conninfo(fresh_database, environ={})
    with psycopg.connect(url, autocommit=True) as conn, psycopg.connect(url) as other:
        conn.execute(_FAST, [*Case("", [("table:t", 1, 1)], "").arguments("x"), None, None])
        conn.execute(_FAST, [*Case("", [("wallet:a", 1, 2)], "").arguments("x"), None, None])
        stale = Case("", [("table:t", 2, 1), ("wallet:a", 2, 1)], "")
        with pytest.raises(psycopg.Error) as raised:
            conn.execute(_FAST, [*stale.arguments("x"), "2000ms", None])
        assert raised.value.sqlstate == "SB004"
        other.execute("SET lock_timeout = '100ms'")
        locked = other.execute(
            "SELECT version FROM append_fast(%s, %s, %s, %s, %s, %s, %s) AS version",
            [*Case("", [("table:t", 2, 1)], "").arguments("x"), None, None],
        ).fetchone()
        other.commit()
        assert locked is not None
    with psycopg.connect(fresh_database) as owner:
        heads = owner.execute("SELECT stream_id, version FROM stream_heads ORDER BY 1").fetchall()
        queued = owner.execute("SELECT count(DISTINCT append_id) FROM unsequenced_events")
        assert heads == [("x-table:t", 2), ("x-wallet:a", 2)]
        assert queued.fetchone() == (3,)


@pytest.mark.parametrize("holder", [_FAST, _ONE], ids=["fast-holds", "one-holds"])
def test_crossed_guards_wait_in_one_order_and_never_deadlock(
    fresh_database: str, holder: str
) -> None:
    """A writes y and guards x (x sorts first: append_fast() takes it); B writes x and guards
    y (append_fast() does not: append_one() does). Both lock x first, so B waits for A and
    then finds its guard on y stale: a refusal, never a deadlock. And the other way round."""
    url = app_conninfo(fresh_database, environ={})
    with psycopg.connect(url, autocommit=True) as setup:
        for stream in ("x", "y"):
            setup.execute(_FAST, [*Case("", [(stream, 1, 1)], "").arguments("s"), None, None])
    a_case = Case("", [("y", 2, 1)], "", guards=[("x", 1)])
    b_case = Case("", [("x", 2, 1)], "", guards=[("y", 1)])
    if holder == _ONE:
        a_case, b_case = b_case, a_case
    with psycopg.connect(url) as a, psycopg.connect(url, autocommit=True) as b:
        a.execute(holder, [*a_case.arguments("s"), "5000ms", None])
        row, path = answered_once_released(
            lambda: fast_then_one(b, [*b_case.arguments("s"), "5000ms", None]),
            a.commit,
            0.5,
            "B did not wait for A's lock on x",
        )
    assert path == NOT_TAKEN
    assert row[3] == "SB001"
    guarded = "s-y" if holder == _FAST else "s-x"
    assert json.loads(row[4]) == {"stream_id": guarded, "expected": 1, "actual": 2}


def test_the_store_answers_a_replay_that_waited_while_the_log_grew_busy(
    fresh_database: str,
) -> None:
    """append_fast() checks the backlog before its wait; the store's append_one() after it
    does not check it again, so a replay that waited for its row is answered, as append_one()
    alone answers it (test_append_one.py)."""
    url = app_conninfo(fresh_database, environ={})
    meta = EventMetadata(actor="dealer-7", role="dealer")
    first = [StreamAppend("wallet:r", 0, [NewEvent("StakeReserved", {"amount": 1})])]
    key = Idempotency("kr", "f")
    with open_pool(url, max_size=2) as pool:
        # No sequencer runs: from the first append on, the oldest append ages.
        store = PostgresEventStore(
            pool,
            sequencing="background",
            group_commit=False,
            lock_timeout=timedelta(seconds=5),
            statement_timeout=timedelta(seconds=10),
        )
        store.append(first, meta, key)
        second = [StreamAppend("wallet:r", 1, [NewEvent("StakeReserved", {"amount": 2})])]
        with psycopg.connect(url) as holder:
            document = append_documents(second, meta, AT)
            holder.execute(_ONE, [document, None, None, None, None, None, None])
            answer = answered_once_released(
                lambda: store.append(first, meta, key),
                holder.commit,
                2.5,  # past the bound: the log is busy now
                "the replay did not wait for the holder's row",
            )
    assert answer.replayed
