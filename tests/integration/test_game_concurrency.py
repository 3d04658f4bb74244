"""The game service under real threads and real PostgreSQL: no overdraft, double deal, lost bet."""

import threading
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from typing import TypeVar

from domain.outcome import Spot
from domain.table import TableSettings
from domain.wallet import InsufficientFunds
from events.postgres import Pool, PostgresEventStore
from service.application.actor import Actor
from service.application.errors import Conflict
from service.application.game.tables import GameService
from service.application.wallets import WalletService

NOW = datetime(2024, 5, 3, 20, 0, tzinfo=UTC)
OPS = Actor("ops-1", "ops")
FRONTEND = Actor("frontend-1", "frontend")
T = TypeVar("T")


def clock() -> datetime:
    return NOW


def service(pool: Pool) -> GameService:
    """A game service with caches of its own, as each server process has."""
    return GameService(PostgresEventStore(pool, clock), clock)


def until_not_conflicted(action: Callable[[], T]) -> T:
    """Retry a command as a client retries a 409."""
    while True:
        try:
            return action()
        except Conflict:
            continue


def race(workers: list[Callable[[], object]]) -> list[object]:
    """Run the workers in threads started together; each result or the exception it raised."""
    barrier = threading.Barrier(len(workers))
    results: list[object] = [None] * len(workers)

    def run(index: int) -> None:
        barrier.wait()
        try:
            results[index] = workers[index]()
        except Exception as error:  # collected and asserted on by the test
            results[index] = error

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(workers))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    return results


def test_bets_racing_on_one_wallet_never_overdraw(app_pool: Pool) -> None:
    store = PostgresEventStore(app_pool, clock)
    setup = GameService(store, clock)
    WalletService(store, clock).deposit("alice", 1_000, "float", OPS)
    tables = [f"T{n}" for n in range(8)]
    for table_id in tables:
        setup.create_table(table_id, TableSettings(), OPS)
        setup.sit(table_id, "alice", 1, FRONTEND)

    def bet(table_id: str) -> Callable[[], object]:
        game = service(app_pool)
        return lambda: until_not_conflicted(
            lambda: game.place_bet(table_id, "alice", Spot.BANKER, 1_000, FRONTEND)
        )

    results = race([bet(table_id) for table_id in tables])
    refused = [r for r in results if isinstance(r, InsufficientFunds)]
    assert len(refused) == 7, results
    balance = WalletService(store, clock).balance("alice")
    assert (balance.available, balance.reserved) == (0, 1_000)
    assert len(store.read_all(types=["BetPlaced"])) == 1
    assert len(store.read_all(categories=["wallet"], types=["StakeReserved"])) == 1


def test_racing_deal_presses_deal_each_round_exactly_once(app_pool: Pool) -> None:
    store = PostgresEventStore(app_pool, clock)
    setup = GameService(store, clock)
    setup.create_table("T1", TableSettings(), OPS)
    players = [f"p{n}" for n in range(1, 8)]
    wallets = WalletService(store, clock)
    for seat, player in enumerate(players, start=1):
        wallets.deposit(player, 100_000, "float", OPS)
        setup.sit("T1", player, seat, FRONTEND)
    for _ in range(3):
        for player in players:
            until_not_conflicted(
                partial(setup.place_bet, "T1", player, Spot.PLAYER, 1_000, FRONTEND)
            )

        def press(player: str) -> Callable[[], object]:
            game = service(app_pool)
            return lambda: until_not_conflicted(lambda: game.press_deal("T1", player, FRONTEND))

        results = race([press(player) for player in players])
        assert not [r for r in results if isinstance(r, Exception)], results
    coups = store.read_all(types=["CoupCompleted"])
    assert [event.payload["round_id"] for event in coups] == ["T1-1", "T1-2", "T1-3"]
    settled = store.read_all(categories=["table"], types=["BetSettled"])
    assert len(settled) == 3 * 7
    credited = store.read_all(categories=["wallet"], types=["PayoutCredited"])
    assert len(credited) == 3 * 7
    # Three coups dealt from one shoe, card positions never reused.
    positions = [e.payload["position"] for e in store.read_all(types=["CardDrawn"])]
    assert positions == list(range(len(positions)))
    assert len(store.read_all(types=["ShoeOpened"])) == 1


def test_seven_players_betting_at_once_lose_no_bet(app_pool: Pool) -> None:
    store = PostgresEventStore(app_pool, clock)
    setup = GameService(store, clock)
    setup.create_table("T1", TableSettings(), OPS)
    players = [f"p{n}" for n in range(1, 8)]
    wallets = WalletService(store, clock)
    for seat, player in enumerate(players, start=1):
        wallets.deposit(player, 100_000, "float", OPS)
        setup.sit("T1", player, seat, FRONTEND)
    bets_each = 5

    def bettor(player: str) -> Callable[[], object]:
        game = service(app_pool)

        def place_all() -> int:
            placed = 0
            for _ in range(bets_each):
                until_not_conflicted(
                    lambda: game.place_bet("T1", player, Spot.BANKER, 100, FRONTEND)
                )
                placed += 1
            return placed

        return place_all

    results = race([bettor(player) for player in players])
    assert results == [bets_each] * len(players)
    placed = store.read_all(categories=["table"], types=["BetPlaced"])
    assert len(placed) == bets_each * len(players)
    assert len(store.read_all(types=["RoundOpened"])) == 1
    table = setup.table("T1")
    assert table.round is not None
    assert [p.staked for p in table.round.participants] == [bets_each * 100] * len(players)
    for player in players:
        balance = wallets.balance(player)
        assert (balance.available, balance.reserved) == (100_000 - 500, 500)


def test_many_players_removing_rebetting_and_dealing_at_once_never_see_a_stale_wallet(
    app_pool: Pool,
) -> None:
    """Each player's process reads the table, then its wallets: a read in between two appends
    must re-plan, never answer 409 wallet.stake_not_reserved (issue: spurious stake errors)."""
    store = PostgresEventStore(app_pool, clock)
    setup = GameService(store, clock)
    setup.create_table("T1", TableSettings(), OPS)
    players = [f"p{n}" for n in range(1, 8)]
    wallets = WalletService(store, clock)
    for seat, player in enumerate(players, start=1):
        wallets.deposit(player, 1_000_000, "float", OPS)
        setup.sit("T1", player, seat, FRONTEND)
    refusals: list[str] = []

    def player_round(player: str, game: GameService) -> Callable[[], object]:
        def play() -> object:
            for action in (
                lambda: game.place_bet("T1", player, Spot.BANKER, 200, FRONTEND),
                lambda: game.remove_bets("T1", player, FRONTEND),
                lambda: game.place_bet("T1", player, Spot.PLAYER, 100, FRONTEND),
                lambda: game.press_deal("T1", player, FRONTEND),
            ):
                try:
                    until_not_conflicted(action)
                except Exception as error:  # a refusal by the rules is fine; noted below
                    refusals.append(getattr(error, "rule", type(error).__name__))
            return None

        return play

    # Two processes of three or four threads each: threads share their process's caches.
    processes = [service(app_pool), service(app_pool)]
    games = {player: processes[n % 2] for n, player in enumerate(players)}
    for _ in range(4):
        race([player_round(player, games[player]) for player in players])
    assert "wallet.stake_not_reserved" not in refusals
    for player in players:
        balance = wallets.balance(player)
        assert balance.available + balance.reserved <= 1_000_000 + 4 * 100
