"""Group commit: several appends in one call of append_batch(), each as if it ran alone."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import orjson
import psycopg
import pytest

from events.canonical import verify_chain
from events.postgres import (
    Pool,
    PostgresEventStore,
    _PendingAppend,
    append_documents,
    open_pool,
)
from events.store import (
    ConcurrencyConflict,
    EventMetadata,
    NewEvent,
    StreamAppend,
    utc_now,
)

META = EventMetadata(actor="test", role="ops")
_BATCH = (
    "SELECT append_id, replayed_result, replayed_response, error_code, error_detail"
    " FROM append_batch(%s::text[], %s::text[], %s::text[], %s::text[], NULL, NULL, NULL)"
)


def counted(n: int) -> NewEvent:
    return NewEvent("Counted", {"n": n})


def documents(stream_id: str, expected: int, *numbers: int) -> str:
    appended = [StreamAppend(stream_id, expected, [counted(n) for n in numbers])]
    return append_documents(appended, META, utc_now())


class BatchCountingStore(PostgresEventStore):
    """The store, keeping the size of every batch it sends."""

    def __init__(self, pool: Pool) -> None:
        super().__init__(pool)
        self.batches: list[int] = []

    def _append_batch(self, batch: Sequence[_PendingAppend]) -> None:
        self.batches.append(len(batch))
        super()._append_batch(batch)


def test_concurrent_appends_share_calls_and_leave_a_gapless_valid_chain(app_pool: Pool) -> None:
    store = BatchCountingStore(app_pool)
    writers, appends = 12, 15

    def write(writer: int) -> None:
        for version in range(appends):
            store.append(
                [
                    StreamAppend(f"table:w{writer}", version, [counted(version)]),
                    StreamAppend(f"wallet:w{writer}", version, [counted(version)]),
                ],
                META,
            )

    threads = [threading.Thread(target=write, args=(n,)) for n in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    events = store.read_all(limit=10_000, upcast=False)
    assert [e.position for e in events] == list(range(1, writers * appends * 2 + 1))
    assert verify_chain(events) is None
    assert sum(store.batches) == writers * appends
    assert max(store.batches) > 1, "no two appends ever shared a call"


def test_a_refused_append_in_a_batch_leaves_the_others_recorded_and_chained(
    app_pool: Pool, fresh_database: str
) -> None:
    store = PostgresEventStore(app_pool)
    batch = [
        documents("counter:x", 0, 1),
        documents("counter:x", 0, 2),  # x is at version 1 by now: refused
        documents("counter:y", 0, 3, 4),
    ]
    with psycopg.connect(fresh_database, autocommit=True) as conn:
        conn.execute("SET ROLE shoebox_app")
        rows = conn.execute(_BATCH, [batch, [None] * 3, [None] * 3, [None] * 3]).fetchall()
    assert [(append_id is None, code) for append_id, _, _, code, _ in rows] == [
        (False, None),
        (True, "SB001"),
        (False, None),
    ]
    assert orjson.loads(rows[1][4]) == {"stream_id": "counter:x", "expected": 0, "actual": 1}
    store.sequence()
    events = store.read_all(upcast=False)
    assert [(e.stream_id, e.payload["n"]) for e in events] == [
        ("counter:x", 1),
        ("counter:y", 3),
        ("counter:y", 4),
    ]
    assert verify_chain(events) is None


def test_one_key_twice_in_a_batch_appends_once_and_replays_the_first_answer(
    fresh_database: str, app_pool: Pool
) -> None:
    store = PostgresEventStore(app_pool)
    batch = [documents("counter:k", 0, 1), documents("counter:k", 0, 1)]
    answers = ['{"body": "first"}', '{"body": "second"}']
    with psycopg.connect(fresh_database, autocommit=True) as conn:
        conn.execute("SET ROLE shoebox_app")
        rows = conn.execute(_BATCH, [batch, ["k", "k"], ["f", "f"], answers]).fetchall()
    (append_id, replayed, _, code, _), (_, again, answer, again_code, _) = rows
    assert (append_id is not None, replayed, code) == (True, None, None)
    assert again_code is None
    assert again is not None
    assert orjson.loads(again)["appended"] == [["counter:k", 1, 1]]
    assert answer == '{"body": "first"}'
    store.sequence()
    assert len(store.read_all()) == 1


def test_a_malformed_append_fails_alone_and_its_batch_mates_are_recorded(
    app_pool: Pool,
) -> None:
    store = PostgresEventStore(app_pool)
    good = _PendingAppend(documents("counter:g", 0, 1), None, None, None)
    bad = _PendingAppend('{"not":"pairs"}', None, None, None)
    also_good = _PendingAppend(documents("counter:h", 0, 2), None, None, None)
    store._append_batch([good, bad, also_good])
    assert good.error is None
    assert good.row is not None
    assert also_good.error is None
    assert also_good.row is not None
    assert isinstance(bad.error, psycopg.errors.InvalidParameterValue)
    store.sequence()
    assert [e.stream_id for e in store.read_all()] == ["counter:g", "counter:h"]


def test_a_stale_append_is_still_a_concurrency_conflict_for_its_caller(app_pool: Pool) -> None:
    store = PostgresEventStore(app_pool)
    store.append([StreamAppend("counter:s", 0, [counted(1)])], META)
    with pytest.raises(ConcurrencyConflict) as conflict:
        store.append([StreamAppend("counter:s", 0, [counted(2)])], META)
    assert (conflict.value.expected, conflict.value.actual) == (0, 1)


def test_an_unreachable_database_fails_the_whole_batch_at_once() -> None:
    conninfo = "host=127.0.0.1 port=9 user=nobody dbname=none connect_timeout=1"
    with open_pool(conninfo, timeout=0.5) as pool:
        store = BatchCountingStore(pool)
        batch = [
            _PendingAppend(documents(f"counter:{n}", 0, n), None, None, None) for n in (1, 2, 3)
        ]
        store._append_batch(batch)
    # One attempt for the three: a lost server is not one append's fault, to be found alone.
    assert store.batches == [3]
    assert all(isinstance(p.error, psycopg.OperationalError) for p in batch)


def test_a_stale_guard_refuses_only_its_own_append_in_a_batch(app_pool: Pool) -> None:
    store = PostgresEventStore(app_pool)
    store.append([StreamAppend("limits:p", 0, [counted(0)])], META)
    # The first append of the batch moves the guarded stream on; the second guards the
    # version before it, and must see the first's insert; the third guards the new one.
    mover = _PendingAppend(documents("limits:p", 1, 1), None, None, None)
    stale = _PendingAppend(documents("counter:a", 0, 2), None, None, None, '[["limits:p", 1]]')
    fresh = _PendingAppend(documents("counter:b", 0, 3), None, None, None, '[["limits:p", 2]]')
    store._append_batch([mover, stale, fresh])
    assert stale.row is not None
    assert stale.row[3] == "SB001"
    assert orjson.loads(stale.row[4]) == {"stream_id": "limits:p", "expected": 1, "actual": 2}
    assert fresh.row is not None
    assert fresh.row[3] is None
    store.sequence()
    assert [e.stream_id for e in store.read_all()] == ["limits:p", "limits:p", "counter:b"]
