"""Concurrency rules of the PostgreSQL store, shown with real threads against the real server."""

import threading
from collections import Counter

import psycopg
import pytest

from events.canonical import verify_chain
from events.postgres import Pool, PostgresEventStore, app_conninfo, append_documents
from events.store import (
    AppendResult,
    ConcurrencyConflict,
    EventMetadata,
    Idempotency,
    NewEvent,
    StreamAppend,
    utc_now,
)

DEALER = EventMetadata(actor="dealer-7", role="dealer")


def stake(amount: int) -> NewEvent:
    return NewEvent("StakeReserved", {"amount": amount})


def test_racing_threads_get_exactly_one_winner_per_stream_version(app_pool: Pool) -> None:
    store = PostgresEventStore(app_pool)
    wins: Counter[int] = Counter()
    conflicts = Counter[str]()
    start = threading.Barrier(8)

    def race(seat: int) -> None:
        start.wait()
        for _ in range(15):
            version = len(store.read_stream("round:T1:000001"))
            try:
                store.append([StreamAppend("round:T1:000001", version, [stake(seat)])], DEALER)
            except ConcurrencyConflict:
                conflicts["lost"] += 1
            else:
                wins[version + 1] += 1

    threads = [threading.Thread(target=race, args=(seat,)) for seat in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    events = store.read_all(limit=10_000, upcast=False)
    assert conflicts["lost"] > 0, "the threads never actually raced"
    assert set(wins.values()) == {1}
    assert sorted(wins) == [e.version for e in events] == list(range(1, len(events) + 1))
    assert [e.position for e in events] == list(range(1, len(events) + 1))
    assert verify_chain(events) is None


def test_concurrent_appends_to_many_streams_leave_a_gapless_valid_chain(app_pool: Pool) -> None:
    store = PostgresEventStore(app_pool)

    def play(seat: int) -> None:
        for version in range(20):
            store.append(
                [
                    StreamAppend(f"wallet:{seat}", version, [stake(version)]),
                    StreamAppend(f"round:{seat}", 2 * version, [stake(version), stake(version)]),
                ],
                DEALER,
            )

    threads = [threading.Thread(target=play, args=(seat,)) for seat in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    events = store.read_all(limit=10_000, upcast=False)
    assert [e.position for e in events] == list(range(1, 8 * 20 * 3 + 1))
    assert verify_chain(events) is None


def _append_by_hand_and_hold(conn: psycopg.Connection[tuple[object, ...]]) -> None:
    """Call the store's append function inside a transaction that is left open."""
    documents = append_documents([StreamAppend("wallet:slow", 0, [stake(1)])], DEALER, utc_now())
    row = conn.execute(
        "SELECT append_id FROM append_batch(%s, %s, %s, %s, NULL, NULL, NULL)",
        [[documents], [None], [None], [None]],
    ).fetchone()
    assert row is not None
    assert isinstance(row[0], int)


def test_a_late_commit_holds_nobody_back_and_no_reader_skips_it(
    app_pool: Pool, fresh_database: str
) -> None:
    store = PostgresEventStore(app_pool)
    store.append([StreamAppend("wallet:alice", 0, [stake(1)])], DEALER)
    checkpoint = store.head()

    with psycopg.connect(app_conninfo(fresh_database, environ={})) as slow:
        _append_by_hand_and_hold(slow)
        fast = threading.Thread(
            target=store.append, args=([StreamAppend("wallet:fast", 0, [stake(2)])], DEALER)
        )
        fast.start()
        # Since migration 0030 the fast append shares no row with the slow one: it commits
        # and is sequenced while the slow one is still open (before, it waited for it).
        fast.join(timeout=10)
        assert not fast.is_alive()
        seen = store.read_all(from_position=checkpoint)
        assert [(e.position, e.stream_id) for e in seen] == [(2, "wallet:fast")]
        slow.commit()
    store.sequence()
    # The late commit comes after the reader's new checkpoint, never before it.
    seen = store.read_all(from_position=checkpoint + 1)
    assert [(e.position, e.stream_id) for e in seen] == [(3, "wallet:slow")]
    assert verify_chain(store.read_all(upcast=False)) is None


@pytest.mark.parametrize("writers", [4])
def test_a_polling_reader_never_sees_a_gap_after_its_checkpoint(
    app_pool: Pool, writers: int
) -> None:
    store = PostgresEventStore(app_pool)
    done = threading.Event()
    gaps: list[tuple[int, int]] = []
    seen: list[int] = []

    def read() -> None:
        checkpoint = 0
        while True:
            finished = done.is_set()
            for event in store.read_all(from_position=checkpoint, limit=50):
                if event.position != checkpoint + 1:
                    gaps.append((checkpoint, event.position))
                checkpoint = event.position
                seen.append(checkpoint)
            if finished:
                return

    def write(seat: int) -> None:
        for version in range(40):
            store.append(
                [StreamAppend(f"wallet:{seat}", 2 * version, [stake(1), stake(2)])], DEALER
            )

    reader = threading.Thread(target=read)
    reader.start()
    threads = [threading.Thread(target=write, args=(seat,)) for seat in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    done.set()
    reader.join()
    assert gaps == []
    assert seen == list(range(1, writers * 40 * 2 + 1))


def test_racing_appends_with_one_idempotency_key_append_once_and_replay_the_rest(
    app_pool: Pool,
) -> None:
    store = PostgresEventStore(app_pool)
    start = threading.Barrier(8)
    results: list[AppendResult] = []

    def bet() -> None:
        start.wait()
        results.append(
            store.append(
                [StreamAppend("wallet:alice", 0, [stake(5)])], DEALER, Idempotency("bet-1", "fp")
            )
        )

    threads = [threading.Thread(target=bet) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 8
    assert all(r == AppendResult({"wallet:alice": 1}, (("wallet:alice", 1, 1),)) for r in results)
    assert sorted(r.replayed for r in results) == [False] + [True] * 7
    assert store.head() == 1
