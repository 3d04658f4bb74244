"""Stream locks in real PostgreSQL: writers of one stream take turns, bounded, and leave none."""

import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import timedelta

import pytest

from domain.outcome import Spot
from domain.table import TableSettings
from events.postgres import Pool, PostgresEventStore, open_pool
from events.store import (
    AppendResult,
    EventMetadata,
    Idempotency,
    OutboxRow,
    RecordedEvent,
    StreamAppend,
    utc_now,
)
from events.stream_locks import PostgresStreamLocks, StreamBusy, StreamTurn
from service.application.actor import Actor
from service.application.game.tables import GameService
from service.application.wallets import WalletService

OPS = Actor("ops-1", "ops")
FRONTEND = Actor("frontend-1", "frontend")

# This database's two-key advisory locks in the stream locks' space (0x5342534C).
STREAM_LOCKS = """
SELECT count(*) FROM pg_locks
WHERE locktype = 'advisory' AND objsubid = 2 AND classid = 1396855628::oid
  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
"""


def held_by_another(
    locks: PostgresStreamLocks, stream_id: str
) -> tuple[threading.Event, threading.Event]:
    """A thread holding the stream's lock until told to let go: (held, let_go)."""
    held, let_go = threading.Event(), threading.Event()

    def hold() -> None:
        with locks.hold(stream_id, timeout=5):
            held.set()
            let_go.wait(10)

    threading.Thread(target=hold, daemon=True).start()
    assert held.wait(5)
    return held, let_go


def test_a_second_writer_of_a_stream_waits_for_the_first_to_let_go(app_pool: Pool) -> None:
    locks = PostgresStreamLocks(app_pool)
    _, let_go = held_by_another(locks, "table:T1")
    threading.Timer(0.3, let_go.set).start()
    started = time.monotonic()

    with locks.hold("table:T1", timeout=5):
        waited = time.monotonic() - started

    assert waited >= 0.25


def test_a_writer_whose_turn_does_not_come_in_time_is_told_so_promptly(app_pool: Pool) -> None:
    locks = PostgresStreamLocks(app_pool)
    _, let_go = held_by_another(locks, "table:T1")
    started = time.monotonic()
    try:
        with pytest.raises(StreamBusy), locks.hold("table:T1", timeout=0.2):
            pass
    finally:
        let_go.set()
    assert time.monotonic() - started < 1.5


def test_writers_of_different_streams_do_not_wait_for_each_other(app_pool: Pool) -> None:
    locks = PostgresStreamLocks(app_pool)
    _, let_go = held_by_another(locks, "table:T1")
    try:
        with locks.hold("table:T2", timeout=0.5):
            pass
    finally:
        let_go.set()


def test_no_lock_outlives_its_turn_and_the_connection_goes_back_as_it_came(
    app_pool: Pool,
) -> None:
    locks = PostgresStreamLocks(app_pool)
    with locks.hold("table:T1", timeout=1), app_pool.connection() as conn:
        assert conn.execute(STREAM_LOCKS).fetchone() == (1,)
    with pytest.raises(RuntimeError), locks.hold("table:T1", timeout=1):
        raise RuntimeError("the command failed")
    with app_pool.connection() as conn:
        assert conn.execute(STREAM_LOCKS).fetchone() == (0,)
        assert conn.autocommit is False


def test_stream_locks_leave_connections_free_for_the_holders_appends(app_pool: Pool) -> None:
    """Waiters hold pool connections; were they all taken, a holder could not append."""
    pool = open_pool(str(app_pool.conninfo), max_size=3)
    try:
        locks = PostgresStreamLocks(pool)  # 3 connections, 2 spare: one lock at a time
        _, let_go = held_by_another(locks, "table:T1")
        try:
            with pytest.raises(StreamBusy), locks.hold("table:T2", timeout=0.2):
                pass
            with pool.connection(timeout=1) as conn:  # a holder's append finds one
                conn.execute("SELECT 1")
        finally:
            let_go.set()
    finally:
        pool.close()


class CountingLocks(PostgresStreamLocks):
    """Stream locks that count the turns taken."""

    def __init__(self, pool: Pool) -> None:
        super().__init__(pool)
        self.turns = 0

    @contextmanager
    def hold(
        self, stream_id: str, timeout: float, *, read_from: int | None = None
    ) -> Iterator[StreamTurn]:
        self.turns += 1
        with super().hold(stream_id, timeout, read_from=read_from) as turn:
            yield turn


class CountingStore(PostgresEventStore):
    """The store, counting the calls a command makes."""

    def __init__(self, pool: Pool) -> None:
        super().__init__(pool)
        self.calls: Counter[str] = Counter()

    def append(
        self,
        streams: Sequence[StreamAppend],
        metadata: EventMetadata,
        idempotency: Idempotency | None = None,
        outbox: Sequence[OutboxRow] = (),
    ) -> AppendResult:
        self.calls["append"] += 1
        return super().append(streams, metadata, idempotency, outbox)

    def read_stream(
        self, stream_id: str, from_version: int = 1, *, upcast: bool = True
    ) -> list[RecordedEvent]:
        self.calls["read_stream"] += 1
        return super().read_stream(stream_id, from_version, upcast=upcast)


def test_a_lone_players_bet_stays_one_call_and_a_table_two_processes_write_is_played_in_turns(
    app_pool: Pool,
) -> None:
    store, locks = CountingStore(app_pool), CountingLocks(app_pool)
    game = GameService(store, utc_now, stream_locks=locks)
    game.create_table("T1", TableSettings(), OPS)
    wallets = WalletService(store, utc_now)
    for seat, player in enumerate(["alice", "bob"], start=1):
        wallets.deposit(player, 1_000_000, "float", OPS)
        game.sit("T1", player, seat, FRONTEND)
    game.place_bet("T1", "alice", Spot.BANKER, 100, FRONTEND)  # opens the round
    store.calls.clear()

    game.place_bet("T1", "alice", Spot.BANKER, 100, FRONTEND)

    assert store.calls == Counter({"append": 1})
    assert locks.turns == 0
    # Another process (caches of its own) bets at the table too: this one's next bet, decided
    # on its cache, loses the race, and from then on it plays the table in turns.
    other = GameService(PostgresEventStore(app_pool), utc_now, stream_locks=locks)
    other.place_bet("T1", "bob", Spot.PLAYER, 100, FRONTEND)
    turns = locks.turns
    store.calls.clear()
    game.place_bet("T1", "alice", Spot.BANKER, 100, FRONTEND)
    # Its one-call try lost to bob's bet; one read of the log says a player won it (not the
    # table's clock, which would not make the table hot), and the turn read bob's bet and
    # appended in its own transaction, not through the store.
    assert store.calls == Counter({"append": 1, "read_stream": 1})
    store.calls.clear()
    game.place_bet("T1", "alice", Spot.BANKER, 100, FRONTEND)
    assert locks.turns == turns + 2
    # Hot now: the turn alone, its read and its append, on one connection.
    assert store.calls == Counter()


def test_the_worker_closing_a_window_reads_the_table_once(app_pool: Pool) -> None:
    """The close is decided on the table read in the table's turn: one read of the table,
    one of each bettor's wallet (moved by the web process's bets), and the append."""
    now = [utc_now()]
    web = GameService(PostgresEventStore(app_pool), lambda: now[0])
    web.create_table("T1", TableSettings(), OPS)
    wallets = WalletService(PostgresEventStore(app_pool), utc_now)
    for seat, player in enumerate(["alice", "bob", "carol"], start=1):
        wallets.deposit(player, 10_000, "float", OPS)
        web.sit("T1", player, seat, FRONTEND)
    store = CountingStore(app_pool)
    worker = GameService(store, lambda: now[0], stream_locks=PostgresStreamLocks(app_pool))
    worker.table("T1")  # cached, as a worker's tables are after their first close
    for player in ("alice", "bob"):  # carol sits and never acts: the window runs out
        web.place_bet("T1", player, Spot.BANKER, 100, FRONTEND)
        web.press_deal("T1", player, FRONTEND)
    now[0] += timedelta(seconds=16)
    store.calls.clear()

    assert worker.close_window("T1", "T1-1") is not None

    assert store.calls == Counter({"read_stream": 3, "append": 1})
    assert len(store.read_all(types=["RoundSettled"])) == 1
