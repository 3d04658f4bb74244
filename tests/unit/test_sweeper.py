"""The sweeper closes lapsed windows from the index of open rounds alone, and only those."""

from datetime import timedelta

from domain.outcome import Spot
from domain.table import TableSettings
from events.memory import InMemoryEventStore
from service.application.actor import Actor
from service.application.game.open_rounds import InMemoryOpenRounds
from service.application.game.sweeper import WindowSweeper
from service.application.game.tables import GameService
from service.application.wallets import WalletService
from tests.histories import HandClock

OPS = Actor("ops-1", "ops")
FRONTEND = Actor("frontend-1", "frontend")


def _tables_with_open_rounds(count: int) -> tuple[InMemoryEventStore, GameService, HandClock]:
    clock = HandClock()
    store = InMemoryEventStore(clock)
    games = GameService(store, clock)
    WalletService(store, clock).deposit("alice", 100_000, "float", OPS)
    for number in range(count):
        table_id = f"T{number}"
        games.create_table(table_id, TableSettings(betting_window=timedelta(seconds=5)), OPS)
        games.sit(table_id, "alice", 1, FRONTEND)
        games.place_bet(table_id, "alice", Spot.BANKER, 100, FRONTEND)
        clock.now += timedelta(seconds=2)
    return store, games, clock


def test_a_sweep_closes_exactly_the_windows_that_have_lapsed() -> None:
    store, games, clock = _tables_with_open_rounds(3)
    sweeper = WindowSweeper(games, InMemoryOpenRounds(store), clock)
    assert sweeper.sweep() == 1  # T0's window closed at +5 s; now is +6 s
    assert [games.live_state(t).phase for t in ("T0", "T1", "T2")] == ["idle", "betting", "betting"]
    assert sweeper.sweep() == 0
    clock.now += timedelta(seconds=10)
    assert sweeper.sweep() == 2
    assert sweeper.sweep() == 0


def test_a_sweep_with_nothing_due_appends_nothing() -> None:
    store, games, clock = _tables_with_open_rounds(2)
    clock.now -= timedelta(seconds=4)
    head = store.head()
    assert WindowSweeper(games, InMemoryOpenRounds(store), clock).sweep() == 0
    assert store.head() == head
