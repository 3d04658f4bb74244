"""A hot table's commands in their turn's transaction, in real PostgreSQL and real threads.

Each GameService here has caches of its own, as each server process has, so every table they
share is hot and its commands take turns (events/stream_locks.py): the turn's lock and read in
one round trip, the append and its commit in another, on one connection.
"""

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

import pytest

from domain.outcome import Spot
from domain.table import TableSettings
from domain.wallet import InsufficientFunds
from events import deadlines
from events.postgres import Pool, PostgresEventStore
from events.store import (
    AppendResult,
    AppendTimedOut,
    ConcurrencyConflict,
    EventMetadata,
    Idempotency,
    NewEvent,
    StreamAppend,
)
from events.stream_locks import PostgresStreamLocks
from service.application.actor import Actor
from service.application.appends import Patience
from service.application.errors import Conflict
from service.application.game.tables import GameService
from service.application.wallets import WalletService
from tests.integration.test_game_concurrency import race
from tests.integration.test_stream_locks import STREAM_LOCKS, held_by_another

NOW = datetime(2024, 5, 3, 20, 0, tzinfo=UTC)
OPS = Actor("ops-1", "ops")
FRONTEND = Actor("frontend-1", "frontend")
META = EventMetadata("ops-1", "ops")


def clock() -> datetime:
    return NOW


def process(pool: Pool, patience: Patience | None = None) -> GameService:
    """A game service with caches and turns of its own, as each server process has."""
    store = PostgresEventStore(pool, clock)
    locks = PostgresStreamLocks(pool, store=store)
    if patience is None:
        return GameService(store, clock, stream_locks=locks)
    return GameService(store, clock, stream_locks=locks, patience=patience)


def seated(pool: Pool, players: list[str], deposit: int) -> PostgresEventStore:
    store = PostgresEventStore(pool, clock)
    setup = GameService(store, clock)
    setup.create_table("T1", TableSettings(), OPS)
    wallets = WalletService(store, clock)
    for seat, player in enumerate(players, start=1):
        wallets.deposit(player, deposit, "float", OPS)
        setup.sit("T1", player, seat, FRONTEND)
    return store


def test_players_of_several_processes_betting_at_one_table_all_get_in_with_no_409(
    app_pool: Pool,
) -> None:
    players = [f"p{n}" for n in range(1, 8)]
    store = seated(app_pool, players, 100_000)
    processes = [process(app_pool) for _ in range(3)]
    bets_each = 6

    def bettor(n: int, player: str) -> Callable[[], object]:
        def place_all() -> int:
            for k in range(bets_each):
                # Each bet from another process than the last: the table is hot in all.
                game = processes[(n + k) % len(processes)]
                game.place_bet("T1", player, Spot.BANKER, 100, FRONTEND)
            return bets_each

        return place_all

    results = race([bettor(n, player) for n, player in enumerate(players)])

    assert results == [bets_each] * len(players)  # no Conflict, nothing else raised
    placed = store.read_all(categories=["table"], types=["BetPlaced"])
    assert len(placed) == bets_each * len(players)
    assert len(store.read_all(types=["RoundOpened"])) == 1
    versions = [e.version for e in store.read_stream("table:T1")]
    assert versions == list(range(1, len(versions) + 1))
    wallets = WalletService(store, clock)
    for player in players:
        balance = wallets.balance(player)
        assert (balance.available, balance.reserved) == (100_000 - 600, 600)


def test_one_players_bets_racing_from_several_processes_never_overdraw(app_pool: Pool) -> None:
    store = seated(app_pool, ["alice"], 300)
    processes = [process(app_pool) for _ in range(3)]
    for game in processes:
        game.table("T1")  # cached, so each one's first bet is its one-call try
    bets = [
        partial(processes[n % 3].place_bet, "T1", "alice", Spot.BANKER, 100, FRONTEND)
        for n in range(9)
    ]

    results = race(list(bets))

    refused = [r for r in results if isinstance(r, InsufficientFunds)]
    assert len(refused) == 6, results
    assert not [r for r in results if isinstance(r, Exception) and r not in refused], results
    balance = WalletService(store, clock).balance("alice")
    assert (balance.available, balance.reserved) == (0, 300)
    assert len(store.read_all(categories=["wallet"], types=["StakeReserved"])) == 3


def test_deal_presses_racing_from_several_processes_deal_each_round_once(app_pool: Pool) -> None:
    players = [f"p{n}" for n in range(1, 8)]
    store = seated(app_pool, players, 100_000)
    processes = [process(app_pool) for _ in range(3)]
    for _ in range(3):
        race(
            [
                partial(processes[n % 3].place_bet, "T1", p, Spot.PLAYER, 1_000, FRONTEND)
                for n, p in enumerate(players)
            ]
        )
        results = race(
            [partial(processes[n % 3].press_deal, "T1", p, FRONTEND) for n, p in enumerate(players)]
        )
        assert not [r for r in results if isinstance(r, Exception)], results
    coups = store.read_all(types=["CoupCompleted"])
    assert [event.payload["round_id"] for event in coups] == ["T1-1", "T1-2", "T1-3"]
    assert len(store.read_all(categories=["wallet"], types=["PayoutCredited"])) == 3 * 7
    positions = [e.payload["position"] for e in store.read_all(types=["CardDrawn"])]
    assert positions == list(range(len(positions)))


def test_a_turns_bet_and_deposits_to_its_wallet_racing_never_deadlock(app_pool: Pool) -> None:
    """The turn's bet writes the table and the wallet; deposits write the wallet alone, and
    a one-call writer the table and the wallet: none waits for another in a cycle."""
    store = seated(app_pool, ["alice", "bob"], 100_000)
    hot, cold = process(app_pool), GameService(PostgresEventStore(app_pool, clock), clock)
    wallets = WalletService(PostgresEventStore(app_pool, clock), clock)
    rounds = 15

    def bets(game: GameService, player: str) -> Callable[[], int]:
        def run() -> int:
            for _ in range(rounds):
                while True:
                    try:
                        game.place_bet("T1", player, Spot.BANKER, 100, FRONTEND)
                        break
                    except Conflict:
                        # Only the writer that takes no turn may lose all its races.
                        assert game is cold
            return rounds

        return run

    def deposits() -> int:
        for _ in range(rounds):
            wallets.deposit("alice", 1, "float", OPS)
        return rounds

    results = race([bets(hot, "alice"), bets(cold, "alice"), deposits, bets(hot, "bob")])

    assert results == [rounds] * 4
    balance = WalletService(store, clock).balance("alice")
    assert balance.reserved == 2 * rounds * 100
    assert balance.available + balance.reserved == 100_000 + rounds


def test_an_append_made_while_holding_a_turn_does_not_wait_for_it(app_pool: Pool) -> None:
    """A holder's catch-up append goes through the store on another connection: the turn
    holds no row that append needs, so it never waits for its own holder."""
    store = PostgresEventStore(app_pool, clock)
    locks = PostgresStreamLocks(app_pool, store=store)
    event = [NewEvent("Noted", {"n": 1})]
    with locks.hold("table:T9", timeout=2, read_from=1) as turn:
        assert turn.events == []
        store.append([StreamAppend("table:T9", 0, event)], META)
        appended = turn.append([StreamAppend("table:T9", 1, event)], META)
    assert appended.versions == {"table:T9": 2}
    assert [e.version for e in store.read_stream("table:T9")] == [1, 2]


def test_a_turns_stale_append_is_a_conflict_and_the_turn_ends_with_nothing_written(
    app_pool: Pool,
) -> None:
    store = PostgresEventStore(app_pool, clock)
    locks = PostgresStreamLocks(app_pool, store=store)
    event = [NewEvent("Noted", {"n": 1})]
    store.append([StreamAppend("table:T9", 0, event)], META)
    with locks.hold("table:T9", timeout=2, read_from=1) as turn:
        assert [e.version for e in turn.events or []] == [1]
        with pytest.raises(ConcurrencyConflict):
            turn.append([StreamAppend("table:T9", 0, event)], META)
        assert not turn.open
    with app_pool.connection() as conn:
        assert conn.execute(STREAM_LOCKS).fetchone() == (0,)
    assert [e.version for e in store.read_stream("table:T9")] == [1]


def test_a_turns_append_with_a_used_key_replays_the_first(app_pool: Pool) -> None:
    store = PostgresEventStore(app_pool, clock)
    locks = PostgresStreamLocks(app_pool, store=store)
    key = Idempotency("k-1", "f-1")
    event = [NewEvent("Noted", {"n": 1})]
    first = store.append([StreamAppend("table:T9", 0, event)], META, key)
    with locks.hold("table:T9", timeout=2) as turn:
        again = turn.append([StreamAppend("table:T9", 0, event)], META, key)
    assert again.replayed
    assert again == first
    assert len(store.read_stream("table:T9")) == 1


def no_stream_lock_left(pool: Pool, within: float = 5.0) -> None:
    """No stream lock held once the other holder has let go: its thread ends its turn a moment
    after being told to, so this waits (bounded) rather than looking once."""
    deadline = time.monotonic() + within
    while True:
        with pool.connection() as conn:
            if conn.execute(STREAM_LOCKS).fetchone() == (0,):
                return
        assert time.monotonic() < deadline, "a stream lock outlived its holder"
        time.sleep(0.05)


def test_a_turn_that_does_not_come_within_the_budget_is_a_prompt_409_writing_nothing(
    app_pool: Pool,
) -> None:
    store = seated(app_pool, ["alice"], 100_000)
    # Its cache is empty: a table it has not played is hot from its first command.
    game = process(app_pool, Patience(budget_seconds=0.3))
    waiting = PostgresStreamLocks(app_pool)
    _, let_go = held_by_another(waiting, "table:T1")
    done = threading.Event()
    try:
        with pytest.raises(Conflict):
            game.place_bet("T1", "alice", Spot.BANKER, 100, FRONTEND)
        done.set()
    finally:
        let_go.set()
    assert done.is_set()
    assert store.read_all(types=["BetPlaced"]) == []
    no_stream_lock_left(app_pool)


def test_a_turn_not_reached_within_the_requests_deadline_is_refused_by_the_server_cleanly(
    app_pool: Pool,
) -> None:
    """The server's lock_timeout ends the wait before the request's deadline does: the caller
    hears a refusal for want of time (a 503 log-busy), not its own client timeout, which
    would close the connection."""
    locks = PostgresStreamLocks(app_pool)
    _, let_go = held_by_another(locks, "table:T1")
    try:
        with (
            deadlines.until(time.monotonic() + 0.5),
            pytest.raises(AppendTimedOut) as refused,
            locks.hold("table:T1", timeout=5),
        ):
            pass
    finally:
        let_go.set()
    assert refused.value.by_deadline
    no_stream_lock_left(app_pool)


def test_every_append_reads_its_commits_wal_position_on_its_own_connection(
    app_pool: Pool,
) -> None:
    """The position the consistency token answers (service/web/consistency.py): read after the
    COMMIT, so at or past the commit record, and no later than the server's position after; in
    a turn's round trip, and after a group commit's batch on the connection it holds."""
    store = PostgresEventStore(app_pool, clock)
    locks = PostgresStreamLocks(app_pool, store=store)

    def position() -> int:
        with app_pool.connection() as conn:
            row = conn.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn").fetchone()
        assert row is not None
        return int(row[0])

    def number(lsn: str) -> int:
        high, low = lsn.split("/")
        return int(high, 16) << 32 | int(low, 16)

    before = position()
    with locks.hold("table:T9", timeout=2) as turn:
        appended = turn.append([StreamAppend("table:T9", 0, [NewEvent("Noted", {"n": 1})])], META)
    assert appended.commit_lsn is not None
    assert before < number(appended.commit_lsn) <= position()
    before = position()
    grouped = store.append([StreamAppend("table:T8", 0, [NewEvent("Noted", {"n": 1})])], META)
    assert grouped.commit_lsn is not None
    assert before < number(grouped.commit_lsn) <= position()
    # A replay wrote nothing of its own now: its token asks the server, as before.
    keyed = Idempotency("k-lsn", "f")
    first = store.append(
        [StreamAppend("table:T7", 0, [NewEvent("Noted", {"n": 1})])], META, idempotency=keyed
    )
    assert first.commit_lsn is not None
    again = store.append(
        [StreamAppend("table:T7", 0, [NewEvent("Noted", {"n": 1})])], META, idempotency=keyed
    )
    assert again.replayed
    assert again.commit_lsn is None


def test_the_table_clocks_writes_from_another_process_do_not_make_a_table_take_turns(
    app_pool: Pool,
) -> None:
    """A window closed by the worker (the system's role) is written once a round by another
    process; were it taken for another player's writes, every bet at every table would take
    its turn for good (a window every few seconds, hot for ten). A player's write elsewhere
    still makes the table hot, as issue 21 needs."""
    now = [NOW]
    seated_store = seated(app_pool, ["p1", "p2"], 100_000)
    assert seated_store is not None
    ticks = [0.0]
    patience = Patience(monotonic=lambda: ticks[0])

    def service() -> GameService:
        store = PostgresEventStore(app_pool, lambda: now[0])
        locks = PostgresStreamLocks(app_pool, store=store)
        return GameService(store, lambda: now[0], stream_locks=locks, patience=patience)

    web, worker, other_web = service(), service(), service()
    web.place_bet("T1", "p1", Spot.BANKER, 100, FRONTEND)  # a first read: hot for a while
    ticks[0] += 11
    # The private heat is the behaviour under test: which path a bet takes is not in its answer.
    assert not web._heat.hot("T1")
    web.place_bet("T1", "p1", Spot.BANKER, 100, FRONTEND)  # cached and current: one call
    assert not web._heat.hot("T1")

    now[0] = NOW + timedelta(seconds=16)
    assert worker.close_window("T1", "T1-1") is not None  # the timer, in the system's role
    placed = web.place_bet("T1", "p1", Spot.PLAYER, 100, FRONTEND)  # stale: decided again
    assert placed.versions
    assert not web._heat.hot("T1")

    other_web.place_bet("T1", "p2", Spot.PLAYER, 100, FRONTEND)  # a player, elsewhere
    web.place_bet("T1", "p1", Spot.TIE, 100, FRONTEND)
    assert web._heat.hot("T1")


class _CountingStore(PostgresEventStore):
    """The store, counting the appends it refused as stale: each a race lost."""

    lost = 0

    def append(self, *args: Any, **kwargs: Any) -> AppendResult:
        try:
            return super().append(*args, **kwargs)
        except ConcurrencyConflict:
            self.lost += 1
            raise


class _CountingLocks(PostgresStreamLocks):
    """The stream locks, counting the turns taken."""

    turns = 0

    def hold(self, *args: Any, **kwargs: Any) -> Any:
        self.turns += 1
        return super().hold(*args, **kwargs)


def test_a_round_settled_elsewhere_costs_the_next_bets_no_lost_race_and_no_turn(
    app_pool: Pool,
) -> None:
    """The worker settles a round in another process and pays its players there. The web
    process's cached wallets of the table's players are then stale: a bet trusting them
    would lose its race to the settlement, once a round at every seat. The settlement's table
    events, read with the table (as the overdue window makes it), cast doubt on the wallets
    they moved, so each is read first."""
    now = [NOW]
    # p3 sits and never acts, so the window runs to its deadline, and the worker's timer
    # closes it and deals.
    seated(app_pool, ["p1", "p2", "p3"], 100_000)
    ticks = [0.0]
    patience = Patience(monotonic=lambda: ticks[0])
    store = _CountingStore(app_pool, lambda: now[0])
    locks = _CountingLocks(app_pool, store=store)
    web = GameService(store, lambda: now[0], stream_locks=locks, patience=patience)
    worker_store = PostgresEventStore(app_pool, lambda: now[0])
    worker = GameService(
        worker_store,
        lambda: now[0],
        stream_locks=PostgresStreamLocks(app_pool, store=worker_store),
        patience=patience,
    )
    web.place_bet("T1", "p1", Spot.BANKER, 100, FRONTEND)  # a first read: hot for a while
    web.place_bet("T1", "p2", Spot.PLAYER, 100, FRONTEND)
    web.press_deal("T1", "p1", FRONTEND)
    web.press_deal("T1", "p2", FRONTEND)
    ticks[0] += 11
    now[0] = NOW + timedelta(seconds=16)
    assert worker.close_window("T1", "T1-1") is not None  # dealt and settled there
    settled = len(store.read_all(types=["RoundSettled"]))
    assert settled == 1
    store.lost, locks.turns = 0, 0

    web.place_bet("T1", "p1", Spot.BANKER, 200, FRONTEND)
    web.place_bet("T1", "p2", Spot.BANKER, 300, FRONTEND)

    assert (store.lost, locks.turns) == (0, 0)
    wallets = WalletService(PostgresEventStore(app_pool, clock), clock)
    for player, stake in (("p1", 200), ("p2", 300)):
        balance = wallets.balance(player)
        assert balance.reserved == stake


def test_a_race_lost_only_to_a_wallet_moved_elsewhere_is_decided_again_without_a_turn(
    app_pool: Pool,
) -> None:
    """A deposit made in another process: the bet loses its race on the wallet alone. Nobody
    else wrote the table, so the bet is decided again on fresh reads in one more call, into
    the group commit, rather than in the table's turn."""
    seated(app_pool, ["p1"], 100_000)
    ticks = [0.0]
    patience = Patience(monotonic=lambda: ticks[0])
    store = _CountingStore(app_pool, clock)
    locks = _CountingLocks(app_pool, store=store)
    web = GameService(store, clock, stream_locks=locks, patience=patience)
    web.place_bet("T1", "p1", Spot.BANKER, 100, FRONTEND)  # a first read: hot for a while
    ticks[0] += 11
    WalletService(PostgresEventStore(app_pool, clock), clock).deposit("p1", 50, "float", OPS)
    store.lost, locks.turns = 0, 0

    web.place_bet("T1", "p1", Spot.BANKER, 100, FRONTEND)

    assert (store.lost, locks.turns) == (1, 0)
    assert not web._heat.hot("T1")
    balance = WalletService(PostgresEventStore(app_pool, clock), clock).balance("p1")
    assert (balance.available, balance.reserved) == (100_000 + 50 - 200, 200)
