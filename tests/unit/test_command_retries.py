"""How a command retries the races it loses: within a budget of time, never past the window."""

from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta

import pytest

from domain.outcome import Spot
from domain.round import BetPlaced, PlayerExcluded
from domain.table import TableSettings
from events.memory import InMemoryEventStore
from events.store import (
    AppendResult,
    ConcurrencyConflict,
    EventMetadata,
    Idempotency,
    OutboxRow,
    StreamAppend,
)
from service.application.actor import Actor
from service.application.appends import Patience
from service.application.errors import Conflict
from service.application.game.tables import GameService
from service.application.wallets import WalletService

T0 = datetime(2024, 5, 3, 20, 0, tzinfo=UTC)
OPS = Actor("ops-1", "ops")
FRONTEND = Actor("frontend-1", "frontend")


class Time:
    """One hand-moved time for the game's clock and the patience's: a pause moves both."""

    def __init__(self) -> None:
        self.now = T0
        self.pauses: list[float] = []

    def clock(self) -> datetime:
        return self.now

    def monotonic(self) -> float:
        return (self.now - T0).total_seconds()

    def sleep(self, seconds: float) -> None:
        self.pauses.append(seconds)
        self.now += timedelta(seconds=seconds)

    def patience(self, **overrides: float) -> Patience:
        return Patience(
            monotonic=self.monotonic,
            sleep=self.sleep,
            draw=lambda: 1.0,  # the ceiling itself: the longest pause each time
            **overrides,  # type: ignore[arg-type]
        )


class LosesBets(InMemoryEventStore):
    """A store where a front end's append to table T1 loses its race while `losing` says so."""

    def __init__(self, time: Time) -> None:
        super().__init__(clock=time.clock)
        self.losing: Callable[[], bool] = lambda: False
        self.lost = 0

    def append(
        self,
        streams: Sequence[StreamAppend],
        metadata: EventMetadata,
        idempotency: Idempotency | None = None,
        outbox: Sequence[OutboxRow] = (),
    ) -> AppendResult:
        if (
            metadata.role == "frontend"
            and any(s.stream_id == "table:T1" for s in streams)
            and self.losing()
        ):
            self.lost += 1
            raise ConcurrencyConflict("table:T1", 1, 2)
        return super().append(streams, metadata, idempotency, outbox)


def casino(time: Time, patience: Patience, window: timedelta) -> tuple[LosesBets, GameService]:
    store = LosesBets(time)
    game = GameService(store, time.clock, patience=patience)
    game.create_table("T1", TableSettings(betting_window=window), OPS)
    wallets = WalletService(store, time.clock)
    for seat, player in enumerate(["alice", "bob"], start=1):
        wallets.deposit(player, 100_000, "float", OPS)
        game.sit("T1", player, seat, FRONTEND)
    return store, game


def test_pauses_are_drawn_below_a_ceiling_that_doubles_up_to_its_cap() -> None:
    patience = Patience(first_pause=0.001, longest_pause=0.016, draw=lambda: 1.0)
    assert [patience.pause(lost) for lost in range(1, 8)] == [
        0.001,
        0.002,
        0.004,
        0.008,
        0.016,
        0.016,
        0.016,
    ]
    assert Patience(draw=lambda: 0.25).pause(5) == pytest.approx(0.004)


def test_a_bet_that_loses_many_more_than_eight_races_within_its_budget_is_recorded() -> None:
    time = Time()
    store, game = casino(time, time.patience(), timedelta(seconds=15))
    store.losing = lambda: store.lost < 40

    receipt = game.place_bet("T1", "alice", Spot.BANKER, 100, FRONTEND)

    assert store.lost == 40
    assert any(isinstance(e, BetPlaced) for e in receipt.events)
    assert time.monotonic() < 2.5


def test_a_command_gives_up_with_a_conflict_only_once_its_budget_is_spent() -> None:
    time = Time()
    store, game = casino(time, time.patience(budget_seconds=0.5), timedelta(seconds=15))
    store.losing = lambda: True
    started = time.monotonic()

    with pytest.raises(Conflict) as conflict:
        game.place_bet("T1", "alice", Spot.BANKER, 100, FRONTEND)

    # No pause ran past the budget; it was spent, to the microsecond, when it gave up.
    assert time.monotonic() - started == pytest.approx(0.5)
    assert conflict.value.streams == ["table:T1"]
    assert conflict.value.attempts == store.lost > 8


def test_no_pause_runs_past_the_close_of_the_betting_window() -> None:
    time = Time()
    store, game = casino(
        time, time.patience(first_pause=0.4, longest_pause=0.4), timedelta(seconds=1)
    )
    game.place_bet("T1", "alice", Spot.BANKER, 100, FRONTEND)  # opens the round's window
    deadline = T0 + timedelta(seconds=1)
    store.losing = lambda: time.now < deadline

    game.place_bet("T1", "bob", Spot.PLAYER, 100, FRONTEND)

    # 0.4 s, 0.4 s, then only the 0.2 s left before the close: the retry comes at the close.
    assert time.pauses == [0.4, 0.4, pytest.approx(0.2)]


def test_a_bet_still_losing_races_when_the_window_closes_gets_the_games_answer() -> None:
    """The window closes while bob's bet keeps losing races: his retry is decided on the
    closed window (he is excluded, alice's coup is dealt, the next round opens and takes his
    bet), as a bet sent after the close is, and never answered with a conflict."""
    time = Time()
    store, game = casino(time, time.patience(), timedelta(seconds=1))
    game.place_bet("T1", "alice", Spot.BANKER, 100, FRONTEND)
    game.press_deal("T1", "alice", FRONTEND)
    first_round = game.table("T1").round
    assert first_round is not None
    store.losing = lambda: time.now < first_round.deadline

    receipt = game.place_bet("T1", "bob", Spot.PLAYER, 100, FRONTEND)

    assert store.lost > 8
    log = [e for e in store.read_all()]
    excluded = [e for e in log if e.type == PlayerExcluded.type]
    assert [e.payload["player_id"] for e in excluded] == ["bob"]
    (bet,) = [e for e in receipt.events if isinstance(e, BetPlaced)]
    assert bet.round_id != first_round.round_id
