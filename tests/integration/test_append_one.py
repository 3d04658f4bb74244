"""append_one() (migration 0070): one append in one statement, else append_batch()'s answer.

Every case runs twice on the real server, through append_one() and through append_batch()
alone, each on streams and keys of its own, and must give the same answer and leave the same
rows. append_one() must take each fresh, well-formed append itself and hand every other one
(a new stream, a stale version or guard, a replay, a reused key, a stream named twice) to
append_batch(). It takes its locks in append_batch()'s order, so the two never deadlock.
"""

import json
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from typing import Any, TypeVar

import psycopg
import pytest

from events.postgres import app_conninfo, append_documents
from events.store import EventMetadata, NewEvent, StreamAppend
from tests.databases import age_the_queue

DEALER = EventMetadata(actor="dealer-7", role="dealer")
AT = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)
_ONE = (
    "SELECT append_id, replayed_result, replayed_response, error_code, error_detail, taken_by"
    " FROM append_one(%s, %s, %s, %s, %s, %s, %s)"
)
_BATCH = (
    "SELECT append_id, replayed_result, replayed_response, error_code, error_detail"
    " FROM append_batch(ARRAY[%s]::text[], ARRAY[%s]::text[], ARRAY[%s]::text[],"
    " ARRAY[%s]::text[], ARRAY[%s]::text[], %s, %s)"
)
SIDES = ("one", "batch")
FAST = "one statement"
FALLBACK = "append_batch"
T = TypeVar("T")


def answered_once_released(
    call: Callable[[], T], release: Callable[[], None], waits: float, why: str
) -> T:
    """`call`'s answer, run in a thread of its own that must still be waiting after `waits`
    seconds (for a lock that `release` lets go of) and must end within 10 s of the release;
    an error it raised is raised here, in the test's thread."""
    answer: list[T] = []
    error: list[BaseException] = []

    def run() -> None:
        try:
            answer.append(call())
        except BaseException as raised:  # reported below, in the test's thread
            error.append(raised)

    waiter = threading.Thread(target=run)
    waiter.start()
    waiter.join(waits)
    assert waiter.is_alive(), why
    release()
    waiter.join(10)
    assert not waiter.is_alive(), "it still waited 10 s after the release"
    if error:
        raise error[0]
    return answer[0]


def one_row(
    conn: psycopg.Connection[Any], query: str, arguments: Sequence[object]
) -> tuple[Any, ...] | None:
    """The first row `query` answers on `conn`."""
    return conn.execute(query, arguments).fetchone()


def stake(amount: int) -> NewEvent:
    return NewEvent("StakeReserved", {"amount": amount})


@dataclass(frozen=True)
class Case:
    """One append, its streams named without their side's prefix, and the path it must take."""

    name: str
    writes: Sequence[tuple[str, int, int]]  # (stream, first new version, events)
    path: str
    guards: Sequence[tuple[str, int]] = ()
    key: str | None = None
    fingerprint: str | None = None
    response: object = None

    def arguments(self, side: str) -> list[str | None]:
        """append_one()'s first five arguments on `side`'s streams."""
        streams = [
            StreamAppend(f"{side}-{stream}", first - 1, [stake(first + n) for n in range(count)])
            for stream, first, count in self.writes
        ]
        guards = [[f"{side}-{stream}", version] for stream, version in self.guards]
        return [
            append_documents(streams, DEALER, AT),
            None if self.key is None else f"{side}-{self.key}",
            self.fingerprint,
            None if self.response is None else json.dumps(self.response),
            json.dumps(guards) if guards else None,
        ]


CASES = [
    Case("a new stream", [("wallet:a", 1, 1)], FALLBACK),
    Case("fresh, on a stream that has its head", [("wallet:a", 2, 1)], FAST),
    Case("a new stream beside an old one", [("wallet:a", 3, 1), ("table:t", 1, 1)], FALLBACK),
    Case(
        "a guard on a stream never written, with a key and a response",
        [("wallet:a", 4, 1), ("table:t", 2, 1)],
        FALLBACK,
        guards=[("limit:p", 0)],
        key="k1",
        fingerprint="f1",
        response={"placed": 1},
    ),
    Case(
        "fresh, guarded, with a key and a response",
        [("table:t", 3, 1), ("wallet:a", 5, 1)],
        FAST,
        guards=[("limit:p", 0)],
        key="k2",
        fingerprint="f2",
        response={"placed": 2},
    ),
    Case("a stale version", [("wallet:a", 5, 1)], FALLBACK),
    Case(
        "a replay",
        [("table:t", 3, 1), ("wallet:a", 5, 1)],
        FALLBACK,
        guards=[("limit:p", 0)],
        key="k2",
        fingerprint="f2",
        response={"placed": 2},
    ),
    Case(
        "a key reused for another request",
        [("wallet:a", 6, 1)],
        FALLBACK,
        key="k2",
        fingerprint="another",
    ),
    Case("a stale guard", [("wallet:a", 6, 1)], FALLBACK, guards=[("limit:p", 1)]),
    Case("a stream written and guarded", [("wallet:a", 6, 1)], FALLBACK, guards=[("wallet:a", 5)]),
    Case("a stream guarded twice", [("wallet:a", 7, 1)], FALLBACK, guards=[("limit:p", 0)] * 2),
    Case("several events on several streams", [("wallet:a", 8, 2), ("table:t", 4, 3)], FAST),
    Case("a key with no response", [("wallet:a", 10, 1)], FAST, key="k3", fingerprint="f3"),
]


def _unprefixed(value: Any, side: str) -> Any:
    return value.replace(f"{side}-", "") if isinstance(value, str) else value


def _rows(conn: psycopg.Connection[Any], side: str) -> dict[str, list[tuple[Any, ...]]]:
    """Everything an append writes, on `side`'s streams and keys, with its prefix taken off."""
    like = f"{side}-%"
    queries = {
        "queued": "SELECT n, stream_id, version, prefix, suffix FROM unsequenced_events"
        " WHERE stream_id LIKE %s ORDER BY append_id, n",
        "heads": "SELECT stream_id, version FROM stream_heads WHERE stream_id LIKE %s"
        " ORDER BY version, stream_id",
        "keys": "SELECT key, fingerprint, result::text, recorded_at FROM idempotency_keys"
        " WHERE key LIKE %s ORDER BY recorded_at, key",
        "responses": "SELECT key, response::text FROM idempotency_responses WHERE key LIKE %s"
        " ORDER BY key",
        "places": "SELECT count(DISTINCT append_id) FROM unsequenced_events"
        " WHERE stream_id LIKE %s",
    }
    return {
        name: [
            tuple(_unprefixed(value, side) for value in row)
            for row in conn.execute(query, [like]).fetchall()
        ]
        for name, query in queries.items()
    }


def _answer(row: Sequence[Any], side: str) -> tuple[Any, ...]:
    """An answer as both functions give it: whether it was placed, and the rest unprefixed."""
    return (row[0] is not None, *(_unprefixed(value, side) for value in row[1:5]))


def test_each_case_gets_append_batchs_answer_and_rows_and_only_fresh_ones_take_one_statement(
    fresh_database: str,
) -> None:
    answers: dict[str, list[tuple[Any, ...]]] = {side: [] for side in SIDES}
    paths = []
    with psycopg.connect(app_conninfo(fresh_database, environ={}), autocommit=True) as conn:
        for case in CASES:
            one = conn.execute(_ONE, [*case.arguments("one"), "2000ms", "60s"]).fetchone()
            batch = conn.execute(_BATCH, [*case.arguments("batch"), "2000ms", "60s"]).fetchone()
            assert one is not None
            assert batch is not None
            answers["one"].append(_answer(one, "one"))
            answers["batch"].append(_answer(batch, "batch"))
            paths.append((case.name, one[5]))
    with psycopg.connect(fresh_database) as owner:  # the app role may not read the heads
        rows = {side: _rows(owner, side) for side in SIDES}
    assert paths == [(case.name, case.path) for case in CASES]
    assert answers["one"] == answers["batch"]
    # The cases above cover placed appends, refusals of each kind and a replay.
    codes = [answer[3] for answer in answers["one"]]
    assert codes.count(None) == 10
    assert codes.count("SB001") == 2
    assert codes.count("SB002") == 1
    assert any(answer[1] is not None for answer in answers["one"])
    assert rows["one"] == rows["batch"]
    assert rows["one"]["places"] == [(9,)]


@pytest.mark.parametrize(
    ("document", "key", "response", "sqlstate"),
    [
        ("not an event", None, None, "22023"),
        ('{"a":1,"position":\n,"recorded_at":"x"', None, None, "22P02"),
        ("{}\n{}", None, None, "22023"),
        (None, None, '{"r":1}', "22023"),  # a response with no key
    ],
    ids=["one-part", "unparsable", "no-recorded-at", "response-without-key"],
)
def test_malformed_input_is_refused_as_append_batch_refuses_it_and_nothing_is_written(
    fresh_database: str, document: str | None, key: str | None, response: str | None, sqlstate: str
) -> None:
    if document is None:
        document = Case("", [("wallet:m", 1, 1)], "").arguments("x")[0]
    with psycopg.connect(app_conninfo(fresh_database, environ={}), autocommit=True) as conn:
        for query in (_ONE, _BATCH):
            with pytest.raises(psycopg.Error) as raised:
                conn.execute(query, [document, key, None, response, None, None, None])
            assert raised.value.sqlstate == sqlstate
    with psycopg.connect(fresh_database) as owner:
        written = owner.execute(
            "SELECT (SELECT count(*) FROM unsequenced_events), (SELECT count(*) FROM stream_heads)"
        ).fetchone()
    assert written == (0, 0)


def refuses_a_busy_log_first(database_url: str, query: str) -> tuple[Any, ...]:
    """`query` (append_one() or append_fast()) refuses an append with SB003 while the log is
    busy, before any lock, write or transaction id; unbounded, it places the same append.
    Returns that call's row."""
    case = Case("", [("wallet:b", 2, 1)], FAST, key="kb", fingerprint="f")
    with (
        psycopg.connect(app_conninfo(database_url, environ={}), autocommit=True) as conn,
        psycopg.connect(database_url, autocommit=True) as owner,
    ):
        conn.execute(query, [*Case("", [("wallet:b", 1, 1)], "").arguments("x"), None, None])
        age_the_queue(database_url, 10)
        with pytest.raises(psycopg.Error) as raised:
            conn.execute(query, [*case.arguments("x"), "2000ms", "2s"])
        assert raised.value.sqlstate == "SB003"
        assert float(raised.value.diag.message_detail or 0) >= 10
        assert owner.execute("SELECT version FROM stream_heads").fetchall() == [(1,)]
        assert owner.execute("SELECT count(*) FROM idempotency_keys").fetchone() == (0,)
        # Refused in a savepoint, it left the transaction without an id: it locked nothing
        # and drew no place (a refusal under load costs no id and no abort record).
        conn.execute("BEGIN")
        conn.execute("SAVEPOINT refused")
        with pytest.raises(psycopg.Error):
            conn.execute(query, [*case.arguments("x"), "2000ms", "2s"])
        conn.execute("ROLLBACK TO SAVEPOINT refused")
        assigned = conn.execute("SELECT pg_current_xact_id_if_assigned()").fetchone()
        conn.execute("ROLLBACK")
        assert assigned == (None,)
        # Unbounded, the same append goes in.
        placed = conn.execute(query, [*case.arguments("x"), "2000ms", None]).fetchone()
    assert placed is not None
    assert placed[0] is not None
    return tuple(placed)


def test_a_busy_log_refuses_before_any_lock_write_or_transaction_id(fresh_database: str) -> None:
    placed = refuses_a_busy_log_first(fresh_database, _ONE)
    assert placed[5] == FAST  # by the one statement


def test_a_busy_log_refuses_malformed_input_as_busy_first_as_append_batch_does(
    fresh_database: str,
) -> None:
    with psycopg.connect(app_conninfo(fresh_database, environ={}), autocommit=True) as conn:
        conn.execute(_ONE, [*Case("", [("wallet:c", 1, 1)], "").arguments("x"), None, None])
        age_the_queue(fresh_database, 10)
        unparsable = '{"a":1,"position":\n,"recorded_at":"x'
        for query in (_ONE, _BATCH):
            for guards in (None, "not json"):
                with pytest.raises(psycopg.Error) as raised:
                    conn.execute(query, [unparsable, None, None, None, guards, None, "2s"])
                assert raised.value.sqlstate == "SB003"


def test_its_reads_of_the_heads_stay_index_probes_when_planned_while_they_were_few(
    fresh_database: str,
) -> None:
    """The function's plans are made once a session (generic): the first made while the heads
    were few and freshly analysed must still probe the primary key, not read it whole."""
    plans: list[str] = []
    with psycopg.connect(fresh_database, autocommit=True) as owner:
        owner.execute(_BATCH, [*Case("", [("wallet:d", 1, 1)], "").arguments("x"), None, None])
        owner.execute("ANALYZE stream_heads")
        owner.execute("LOAD 'auto_explain'")
        for setting in (
            "auto_explain.log_min_duration = 0",
            "auto_explain.log_nested_statements = on",
            "client_min_messages = log",
        ):
            owner.execute(f"SET {setting}")
        owner.add_notice_handler(lambda notice: plans.append(notice.message_primary or ""))
        case = Case("", [("wallet:d", 2, 1)], FAST, guards=[("wallet:e", 1)])
        owner.execute(_BATCH, [*Case("", [("wallet:e", 1, 1)], "").arguments("x"), None, None])
        answer = owner.execute(_ONE, [*case.arguments("x"), "2000ms", None]).fetchone()
    assert answer is not None
    assert answer[5] == FAST
    statement = next(plan for plan in plans if "WITH bounds AS MATERIALIZED" in plan)
    lines = statement.splitlines()
    for n, line in enumerate(lines):
        if "on stream_heads" in line and "Scan" in line:
            # Every scan of the heads is bounded by a stream id.
            assert any("Index Cond: (stream_id =" in later for later in lines[n + 1 : n + 3]), (
                "\n".join(lines[max(0, n - 3) : n + 4])
            )
    assert "Materialize" not in statement


def test_crossed_guards_on_both_paths_wait_in_one_order_and_never_deadlock(
    fresh_database: str,
) -> None:
    """A writes x and guards y; B writes y and guards x. Both lock x first (sorted), so B
    waits for A, then finds its guard on x stale: a refusal, never a deadlock."""
    url = app_conninfo(fresh_database, environ={})
    with psycopg.connect(url, autocommit=True) as setup:
        for stream in ("x", "y"):
            setup.execute(_BATCH, [*Case("", [(stream, 1, 1)], "").arguments("s"), None, None])
    x_at = 1
    for a_query, b_query in ((_ONE, _BATCH), (_BATCH, _ONE), (_ONE, _ONE)):
        a_writes = Case("", [("x", x_at + 1, 1)], FAST, guards=[("y", 1)])
        b_writes = Case("", [("y", 2, 1)], FALLBACK, guards=[("x", x_at)])
        with psycopg.connect(url) as a, psycopg.connect(url, autocommit=True) as b:
            a.execute(a_query, [*a_writes.arguments("s"), "5000ms", None])
            arguments = [*b_writes.arguments("s"), "5000ms", None]
            row = answered_once_released(
                partial(one_row, b, b_query, arguments),
                a.commit,
                0.5,
                "B did not wait for A's lock on x",
            )
            assert row is not None
            assert row[3] == "SB001"
            stale = {"stream_id": "s-x", "expected": x_at, "actual": x_at + 1}
            assert json.loads(row[4]) == stale
        x_at += 1


def test_a_replay_that_waited_for_its_rows_is_answered_though_the_log_grew_busy_meanwhile(
    fresh_database: str,
) -> None:
    """The backlog is checked once, before any wait, as append_batch() alone checks it: the
    fallback after a wait does not check it again."""
    url = app_conninfo(fresh_database, environ={})
    first = Case("", [("wallet:r", 1, 1)], FALLBACK, key="kr", fingerprint="f")
    with psycopg.connect(url, autocommit=True) as conn:
        # Queued, and no sequencer runs: from now on the oldest append ages.
        conn.execute(_ONE, [*first.arguments("x"), "5000ms", None])
    with psycopg.connect(url) as holder, psycopg.connect(url, autocommit=True) as replayer:
        holder.execute(_ONE, [*Case("", [("wallet:r", 2, 1)], FAST).arguments("x"), None, None])
        arguments = [*first.arguments("x"), "5000ms", "2s"]
        answer = answered_once_released(
            partial(one_row, replayer, _ONE, arguments),
            holder.commit,
            2.5,  # past the bound: the log is busy now
            "the replay did not wait for the holder's row",
        )
    assert answer is not None
    assert answer[1] is not None  # replayed
    assert answer[5] == FALLBACK
