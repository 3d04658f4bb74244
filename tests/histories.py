"""Random but legal histories of a table, played through the real services, for property tests."""

import contextlib
import random
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from domain.errors import DomainError
from domain.outcome import Spot
from domain.table import TableSettings
from events.store import EventStore
from service.application.actor import Actor
from service.application.errors import ServiceError
from service.application.game.tables import GameService
from service.application.streams import TableCache
from service.application.wallets import WalletCache, WalletService

T0 = datetime(2024, 5, 3, 20, 0, tzinfo=UTC)
OPS = Actor("ops-1", "ops")
PLAYERS = ("alice", "bob", "carol")


class HandClock:
    """A clock the history moves by hand."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


def play_history(
    store: EventStore,
    clock: HandClock,
    rng: random.Random,
    steps: int,
    *,
    tables: TableCache | None = None,
    wallets: WalletCache | None = None,
    table_id: str = "T1",
) -> None:
    """Play `steps` random commands at a table; refusals are part of a legal history too."""
    tables = tables if tables is not None else TableCache()
    wallets = wallets if wallets is not None else WalletCache()
    games = GameService(store, clock, tables=tables, wallets=wallets)
    money = WalletService(store, clock, wallets=wallets)
    games.create_table(table_id, TableSettings(seats=4), OPS)
    for name in PLAYERS:
        money.deposit(name, 1_000_000, "float", OPS, reference=f"ref-{name}")

    def player() -> str:
        return rng.choice(PLAYERS)

    moves: list[Callable[[], object]] = [
        lambda: games.sit(table_id, player(), rng.randint(1, 4), OPS),
        lambda: games.place_bet(
            table_id, player(), rng.choice(list(Spot)), rng.choice((100, 500, 2500)), OPS
        ),
        lambda: games.place_bet(table_id, player(), Spot.BANKER, 1000, OPS),
        lambda: games.press_deal(table_id, player(), OPS),
        lambda: games.press_deal(table_id, player(), OPS),
        lambda: games.pass_turn(table_id, player(), OPS),
        lambda: games.rebet(table_id, player(), OPS),
        lambda: games.remove_bets(table_id, player(), OPS),
        lambda: games.leave(table_id, player(), OPS),
        lambda: games.change_seat(table_id, player(), rng.randint(1, 4), OPS),
        lambda: games.mute(table_id, player(), OPS, "noise"),
        lambda: money.deposit(player(), 5_000, "top up", OPS),
        lambda: money.withdraw(player(), 700, "cash out", OPS),
    ]
    for _ in range(steps):
        if rng.random() < 0.15:
            # A lapsed window, closed by the next write to the table.
            clock.now += timedelta(seconds=rng.choice((1, 16)))
        # Refused commands append nothing; they stay in to make the history realistic.
        with contextlib.suppress(DomainError, ServiceError):
            rng.choice(moves)()
