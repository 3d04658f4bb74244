"""The table and its round, phase by phase: seats, the window, Deal or Pass, the coup, voids."""

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta, timezone
from typing import get_args

import pytest

from domain.cards import parse_card
from domain.errors import (
    BetAbovePlayerLimit,
    BetAboveTableMaximum,
    BetBelowMinimum,
    DomainError,
)
from domain.limits import TableLimits
from domain.outcome import Outcome, Spot
from domain.round import (
    Action,
    Bet,
    BetPlaced,
    BetSettled,
    CardDrawn,
    CoupCompleted,
    ExclusionReason,
    HandStood,
    Phase,
    PlayerExcluded,
    PlayerPassed,
    ReturnReason,
    RoundEndedWithoutPlay,
    RoundOpened,
    RoundSettled,
    RoundVoided,
    SettlementReversed,
    StakeReturned,
)
from domain.round_errors import (
    AlreadyPassed,
    AlreadyPressedDeal,
    BettingWindowClosed,
    BettingWindowStillOpen,
    CoupAlreadyDealt,
    DealNeedsABet,
    InvalidTableSettings,
    NoBetsToRemove,
    NobodyToExclude,
    NoPlayersSeated,
    NoPreviousBets,
    NoRoundUnderWay,
    NotAParticipant,
    ParticipantExcluded,
    PlayerAlreadySeated,
    PlayerHasBetsInRound,
    PlayerNotSeated,
    PlayersStillToAct,
    RebetOverBets,
    RoundAlreadyUnderWay,
    RoundAlreadyVoided,
    RoundNotFound,
    SeatOutOfRange,
    SeatTaken,
    TableAlreadyExists,
    TableNotFound,
    VoidNeedsAReason,
)
from domain.table import (
    _DECISIONS,
    ChangeSeat,
    CloseWindow,
    Command,
    CreateTable,
    DealCoup,
    LeaveTable,
    OpenRound,
    Pass,
    PlaceBet,
    PlayerChangedSeat,
    PlayerLeft,
    PressDeal,
    Rebet,
    RemoveBets,
    SitDown,
    Table,
    TableCreated,
    TableEvent,
    TableSettings,
    VoidRound,
    decide,
    evolve,
    replay,
)
from domain.tableau import Hand

T0 = datetime(2024, 5, 3, 20, 0, 0, tzinfo=UTC)
WINDOW = timedelta(seconds=15)
LITTLEWOODS = TableSettings(seats=5)


def cards(*codes: str) -> tuple[int, ...]:
    """A shoe written as card codes, dealt P B P B then any third cards."""
    return tuple(parse_card(code) for code in codes)


# Player 4+5 = natural 9 against Banker T+K = 0.
PLAYER_NATURAL = cards("4C", "TC", "5C", "KC")
# Banker 5+4 = natural 9 against Player T+K = 0.
BANKER_NATURAL = cards("TC", "5C", "KC", "4C")
# Both hands 9: a natural tie.
NATURAL_TIE = cards("4C", "5C", "5D", "4D")
# Player A+A = 2 draws a 5 for 7; Banker 7+K = 7 stands against a third card: a tie at 7.
PLAYER_DRAWS_BANKER_STANDS = cards("AC", "7C", "AD", "KC", "5C")


class Game:
    """A table driven through decide and evolve, keeping every event, with a controllable clock."""

    def __init__(self, settings: TableSettings = LITTLEWOODS, table_id: str = "table-1") -> None:
        self.now = T0
        self.table: Table | None = None
        self.events: list[TableEvent] = []
        self.rounds = 0
        self.run(CreateTable(table_id, settings))

    def run(self, command: Command) -> list[TableEvent]:
        """Decide and apply one command at the current time; returns its events."""
        events = decide(self.table, command, self.now)
        for event in events:
            self.table = evolve(self.table, event)
        self.events.extend(events)
        return events

    def refused(self, command: Command) -> DomainError:
        """The refusal of a command, checking that it left the table untouched."""
        before = self.state
        with pytest.raises(DomainError) as refusal:
            decide(self.table, command, self.now)
        assert self.state == before
        return refusal.value

    @property
    def state(self) -> Table:
        """The table, which exists from construction on."""
        assert self.table is not None
        return self.table

    def sit(self, *players: str) -> None:
        """Seat the players at seats 1, 2, ... in order."""
        for number, player in enumerate(players, start=1):
            self.run(SitDown(player, number))

    def open(self) -> str:
        """Open a new round and return its id."""
        self.rounds += 1
        round_id = f"round-{self.rounds}"
        self.run(OpenRound(round_id))
        return round_id

    def bet(self, player: str, spot: Spot, stake: int) -> None:
        """Place one bet without a player limit."""
        self.run(PlaceBet(player, spot, stake))

    def deal(self, shoe: Sequence[int], position: int = 0) -> list[TableEvent]:
        """Deal the coup from a constructed shoe."""
        return self.run(DealCoup("shoe-1", shoe, position))

    def later(self, seconds: float) -> None:
        """Move the clock on."""
        self.now += timedelta(seconds=seconds)

    def last(self, count: int) -> list[TableEvent]:
        """The last `count` events recorded."""
        return self.events[-count:]


def ready_round() -> Game:
    """Alice bets £10 on Player and £5 on Banker, Bob £20 on Tie, and both press Deal."""
    game = Game()
    game.sit("alice", "bob")
    game.open()
    game.bet("alice", Spot.PLAYER, 1_000)
    game.bet("alice", Spot.BANKER, 500)
    game.bet("bob", Spot.TIE, 2_000)
    game.run(PressDeal("alice"))
    game.run(PressDeal("bob"))
    return game


def played_round(shoe: Sequence[int] = PLAYER_NATURAL) -> Game:
    """The ready round, dealt from `shoe`."""
    game = ready_round()
    game.deal(shoe)
    return game


# The table.


def test_a_table_records_its_settings_when_created() -> None:
    settings = TableSettings(
        seats=5,
        limits=TableLimits(minimum=500, maximum=100_000),
        betting_window=timedelta(seconds=20),
        decks=6,
    )
    game = Game(settings)
    assert game.events == [
        TableCreated(
            table_id="table-1",
            seats=5,
            decks=6,
            minimum=500,
            maximum=100_000,
            chips=(100, 500, 2_500, 10_000, 50_000),
            betting_window_ms=20_000,
            currency="GBP",
        )
    ]
    assert game.state.settings == settings
    assert game.state.seats == (None,) * 5


def test_a_table_is_created_once() -> None:
    game = Game()
    assert isinstance(game.refused(CreateTable("table-1")), TableAlreadyExists)


def test_commands_to_a_table_never_created_are_refused() -> None:
    with pytest.raises(TableNotFound):
        decide(None, SitDown("alice", 1), T0)


def test_every_command_but_create_table_has_a_decision_of_its_own() -> None:
    # decide dispatches on the command's type; a command missing here would fail only when sent.
    assert set(_DECISIONS) == set(get_args(Command)) - {CreateTable}


@pytest.mark.parametrize(
    ("seats", "decks", "window", "currency"),
    [
        (0, 8, 15, "GBP"),
        (8, 8, 15, "GBP"),
        (7, 0, 15, "GBP"),
        (7, 9, 15, "GBP"),
        (7, 8, 0.5, "GBP"),
        (7, 8, 15.0001, "GBP"),
        (7, 8, 15, "EUR"),
    ],
)
def test_table_settings_keep_seats_decks_window_and_currency_in_range(
    seats: int, decks: int, window: float, currency: str
) -> None:
    with pytest.raises(InvalidTableSettings):
        TableSettings(
            seats=seats, decks=decks, betting_window=timedelta(seconds=window), currency=currency
        )


# Seats.


def test_a_player_sits_at_a_free_seat() -> None:
    game = Game()
    game.run(SitDown("alice", 3))
    seat = game.state.seat_of("alice")
    assert seat is not None
    assert seat.number == 3


def test_a_seat_beyond_the_tables_count_is_refused() -> None:
    game = Game(LITTLEWOODS)
    assert isinstance(game.refused(SitDown("alice", 6)), SeatOutOfRange)
    assert isinstance(game.refused(SitDown("alice", 0)), SeatOutOfRange)


def test_a_william_hill_table_seats_seven() -> None:
    game = Game(TableSettings(seats=7))
    game.run(SitDown("alice", 7))
    assert game.state.seated[0].number == 7


def test_a_taken_seat_is_refused() -> None:
    game = Game()
    game.run(SitDown("alice", 1))
    assert isinstance(game.refused(SitDown("bob", 1)), SeatTaken)


def test_a_player_holds_at_most_one_seat() -> None:
    game = Game()
    game.run(SitDown("alice", 1))
    error = game.refused(SitDown("alice", 2))
    assert isinstance(error, PlayerAlreadySeated)
    assert error.rule == "seat.player_already_seated"


def test_leaving_frees_the_seat() -> None:
    game = Game()
    game.run(SitDown("alice", 1))
    game.run(LeaveTable("alice"))
    assert game.state.seat_of("alice") is None
    game.run(SitDown("bob", 1))


def test_only_a_seated_player_can_leave() -> None:
    assert isinstance(Game().refused(LeaveTable("alice")), PlayerNotSeated)


def test_changing_seat_between_hands_is_one_step_that_keeps_the_rebet() -> None:
    game = played_round()
    assert game.run(ChangeSeat("alice", 4)) == [PlayerChangedSeat(1, 4, "alice")]
    assert game.state.seats[0] is None
    moved = game.state.seat_of("alice")
    assert moved is not None
    assert (moved.number, moved.last_bets) == (
        4,
        (Bet(Spot.PLAYER, 1_000), Bet(Spot.BANKER, 500)),
    )
    game.run(SitDown("carol", 1))


def test_changing_seat_with_bets_on_the_round_is_refused() -> None:
    game = Game()
    game.sit("alice", "bob")
    game.open()
    game.bet("alice", Spot.BANKER, 500)
    error = game.refused(ChangeSeat("alice", 3))
    assert isinstance(error, PlayerHasBetsInRound)
    assert error.rule == "seat.bets_in_play"
    game.run(PressDeal("alice"))
    assert isinstance(game.refused(ChangeSeat("alice", 3)), PlayerHasBetsInRound)


def test_changing_to_a_taken_seat_or_ones_own_is_refused() -> None:
    game = Game()
    game.sit("alice", "bob")
    assert isinstance(game.refused(ChangeSeat("alice", 2)), SeatTaken)
    assert isinstance(game.refused(ChangeSeat("alice", 1)), SeatTaken)
    assert isinstance(game.refused(ChangeSeat("alice", 6)), SeatOutOfRange)
    assert isinstance(game.refused(ChangeSeat("carol", 3)), PlayerNotSeated)


def test_a_player_yet_to_bet_who_changes_seat_sits_the_round_out() -> None:
    game = Game()
    game.sit("alice", "bob")
    round_id = game.open()
    events = game.run(ChangeSeat("bob", 5))
    assert events == [
        PlayerExcluded(round_id, 2, "bob", ExclusionReason.CHANGED_SEAT),
        PlayerChangedSeat(2, 5, "bob"),
    ]
    current = game.state.round
    assert current is not None
    bob = current.participant("bob")
    assert bob is not None
    assert bob.action is Action.EXCLUDED
    # Bob's bet now waits for the next round, at the new seat.
    assert isinstance(game.refused(PlaceBet("bob", Spot.PLAYER, 500)), DomainError)


def test_a_player_who_passed_may_change_seat_before_the_coup() -> None:
    game = Game()
    game.sit("alice", "bob")
    game.open()
    game.bet("alice", Spot.BANKER, 500)
    game.run(PressDeal("alice"))
    game.run(Pass("bob"))
    assert game.run(ChangeSeat("bob", 3)) == [PlayerChangedSeat(2, 3, "bob")]
    game.deal(PLAYER_NATURAL)
    seat = game.state.seat_of("bob")
    assert seat is not None
    assert seat.number == 3


# Opening the betting window.


def test_opening_a_round_makes_the_seated_players_its_participants_until_the_deadline() -> None:
    game = Game()
    game.run(SitDown("bob", 4))
    game.run(SitDown("alice", 2))
    assert game.run(OpenRound("round-1")) == [
        RoundOpened(
            round_id="round-1",
            number=1,
            opened_at="2024-05-03T20:00:00+00:00",
            deadline="2024-05-03T20:00:15+00:00",
            participants=((2, "alice"), (4, "bob")),
        )
    ]
    current = game.state.round
    assert current is not None
    assert current.phase is Phase.BETTING
    assert current.deadline == T0 + WINDOW
    assert [p.player_id for p in current.pending] == ["alice", "bob"]


def test_the_clock_may_be_in_any_timezone_but_is_recorded_in_utc() -> None:
    game = Game()
    game.sit("alice")
    game.now = datetime(2024, 5, 4, 0, 0, tzinfo=timezone(timedelta(hours=2)))
    opened = game.run(OpenRound("round-1"))[0]
    assert isinstance(opened, RoundOpened)
    assert opened.opened_at == "2024-05-03T22:00:00+00:00"


def test_a_naive_clock_is_a_bug_not_a_refusal() -> None:
    game = Game()
    game.sit("alice")
    with pytest.raises(ValueError, match="timezone-aware"):
        decide(game.table, OpenRound("round-1"), datetime(2024, 5, 3, 20, 0))


def test_a_round_does_not_open_with_nobody_seated() -> None:
    assert isinstance(Game().refused(OpenRound("round-1")), NoPlayersSeated)


def test_a_round_does_not_open_while_another_is_under_way() -> None:
    game = Game()
    game.sit("alice")
    game.open()
    assert isinstance(game.refused(OpenRound("round-2")), RoundAlreadyUnderWay)


def test_rounds_are_numbered_in_order() -> None:
    game = played_round()
    game.open()
    current = game.state.round
    assert current is not None
    assert (current.round_id, current.number) == ("round-2", 2)


def test_a_player_who_sits_during_a_round_waits_for_the_next() -> None:
    game = Game()
    game.sit("alice")
    game.open()
    game.run(SitDown("carol", 3))
    assert isinstance(game.refused(PlaceBet("carol", Spot.PLAYER, 100)), NotAParticipant)
    assert isinstance(game.refused(Pass("carol")), NotAParticipant)
    # The coup does not wait for her either.
    game.bet("alice", Spot.PLAYER, 100)
    game.run(PressDeal("alice"))
    game.deal(PLAYER_NATURAL)
    game.open()
    game.bet("carol", Spot.PLAYER, 100)


# Bets.


def test_bets_on_the_same_spot_add_up_to_one_bet() -> None:
    game = Game()
    game.sit("alice")
    game.open()
    game.bet("alice", Spot.BANKER, 2_500)
    game.bet("alice", Spot.BANKER, 500)
    game.bet("alice", Spot.TIE, 100)
    assert game.last(3) == [
        BetPlaced("round-1", 1, "alice", Spot.BANKER, 2_500),
        BetPlaced("round-1", 1, "alice", Spot.BANKER, 500),
        BetPlaced("round-1", 1, "alice", Spot.TIE, 100),
    ]
    assert game.state.round is not None
    participant = game.state.round.participant("alice")
    assert participant is not None
    assert participant.bets == (Bet(Spot.BANKER, 3_000), Bet(Spot.TIE, 100))


def test_a_bet_below_the_table_minimum_is_refused() -> None:
    game = Game(TableSettings(limits=TableLimits(minimum=500)))
    game.sit("alice")
    game.open()
    error = game.refused(PlaceBet("alice", Spot.PLAYER, 100))
    assert isinstance(error, BetBelowMinimum)


def test_the_table_maximum_caps_a_players_bets_summed_over_the_round() -> None:
    game = Game()
    game.sit("alice", "bob")
    game.open()
    game.bet("alice", Spot.PLAYER, 200_000)
    error = game.refused(PlaceBet("alice", Spot.BANKER, 50_100))
    assert isinstance(error, BetAboveTableMaximum)
    game.bet("alice", Spot.BANKER, 50_000)
    # The maximum is per player: Bob's bets are his own.
    game.bet("bob", Spot.PLAYER, 250_000)


def test_the_players_own_limit_lowers_the_maximum() -> None:
    game = Game()
    game.sit("alice")
    game.open()
    game.run(PlaceBet("alice", Spot.PLAYER, 5_000, player_limit=10_000))
    error = game.refused(PlaceBet("alice", Spot.PLAYER, 5_100, player_limit=10_000))
    assert isinstance(error, BetAbovePlayerLimit)


def test_a_bet_at_an_idle_table_opens_a_round_for_everyone_seated() -> None:
    game = Game()
    game.sit("alice", "bob")
    events = game.run(PlaceBet("bob", Spot.PLAYER, 100))
    assert events == [
        RoundOpened(
            round_id="table-1-1",
            number=1,
            opened_at="2024-05-03T20:00:00+00:00",
            deadline="2024-05-03T20:00:15+00:00",
            participants=((1, "alice"), (2, "bob")),
        ),
        BetPlaced("table-1-1", 2, "bob", Spot.PLAYER, 100),
    ]


def test_a_refused_bet_at_an_idle_table_opens_no_round() -> None:
    game = Game()
    game.sit("alice")
    assert isinstance(game.refused(PlaceBet("alice", Spot.PLAYER, 150)), DomainError)
    assert game.state.round is None


def test_a_bet_by_someone_unseated_at_an_idle_table_is_refused() -> None:
    game = Game()
    game.sit("alice")
    assert isinstance(game.refused(PlaceBet("carol", Spot.PLAYER, 100)), NoRoundUnderWay)


def test_bets_by_someone_not_at_the_table_are_refused() -> None:
    game = Game()
    game.sit("alice")
    game.open()
    error = game.refused(PlaceBet("mallory", Spot.PLAYER, 100))
    assert isinstance(error, NotAParticipant)
    assert error.rule == "round.not_a_participant"


def test_bets_after_pressing_deal_are_refused() -> None:
    game = Game()
    game.sit("alice", "bob")
    game.open()
    game.bet("alice", Spot.PLAYER, 100)
    game.run(PressDeal("alice"))
    error = game.refused(PlaceBet("alice", Spot.PLAYER, 100))
    assert isinstance(error, AlreadyPressedDeal)
    assert "round.already_pressed_deal" in str(error)
    assert isinstance(game.refused(PressDeal("alice")), AlreadyPressedDeal)
    assert isinstance(game.refused(Pass("alice")), AlreadyPressedDeal)


def test_bets_after_passing_are_refused() -> None:
    game = Game()
    game.sit("alice", "bob")
    game.open()
    game.run(Pass("alice"))
    assert isinstance(game.refused(PlaceBet("alice", Spot.PLAYER, 100)), AlreadyPassed)


def test_bets_once_the_deadline_has_passed_are_refused() -> None:
    game = Game()
    game.sit("alice")
    game.open()
    game.later(14.999)
    game.bet("alice", Spot.PLAYER, 100)
    game.later(0.001)
    assert isinstance(game.refused(PlaceBet("alice", Spot.PLAYER, 100)), BettingWindowClosed)
    assert isinstance(game.refused(PressDeal("alice")), BettingWindowClosed)
    assert isinstance(game.refused(Pass("alice")), BettingWindowClosed)


def test_a_bet_once_the_coup_is_settled_goes_into_the_next_round() -> None:
    game = played_round()
    opened, placed = game.run(PlaceBet("alice", Spot.PLAYER, 100))
    assert isinstance(opened, RoundOpened)
    assert opened.number == 2
    assert placed == BetPlaced(opened.round_id, 1, "alice", Spot.PLAYER, 100)


def test_bets_while_the_coup_is_being_dealt_are_refused() -> None:
    game = ready_round()
    first_card = decide(game.table, DealCoup("shoe-1", PLAYER_NATURAL, 0), game.now)[0]
    game.table = evolve(game.table, first_card)
    error = game.refused(PlaceBet("alice", Spot.PLAYER, 100))
    assert isinstance(error, CoupAlreadyDealt)


# Removing bets.


def test_removing_bets_returns_every_stake() -> None:
    game = Game()
    game.sit("alice")
    game.open()
    game.bet("alice", Spot.PLAYER, 500)
    game.bet("alice", Spot.PLAYER, 100)
    game.bet("alice", Spot.TIE, 100)
    assert game.run(RemoveBets("alice")) == [
        StakeReturned("round-1", 1, "alice", Spot.PLAYER, 600, ReturnReason.REMOVED),
        StakeReturned("round-1", 1, "alice", Spot.TIE, 100, ReturnReason.REMOVED),
    ]
    assert game.state.round is not None
    participant = game.state.round.participant("alice")
    assert participant is not None
    assert participant.bets == ()
    assert participant.action is Action.PENDING


def test_bets_removed_free_the_round_maximum_again() -> None:
    game = Game()
    game.sit("alice")
    game.open()
    game.bet("alice", Spot.PLAYER, 250_000)
    game.run(RemoveBets("alice"))
    assert game.run(PlaceBet("alice", Spot.BANKER, 250_000)) == [
        BetPlaced("round-1", 1, "alice", Spot.BANKER, 250_000)
    ]
    assert game.state.round is not None
    participant = game.state.round.participant("alice")
    assert participant is not None
    assert participant.bets == (Bet(Spot.BANKER, 250_000),)


def test_removing_bets_when_there_are_none_is_refused() -> None:
    game = Game()
    game.sit("alice")
    game.open()
    assert isinstance(game.refused(RemoveBets("alice")), NoBetsToRemove)


def test_removing_bets_after_pressing_deal_is_refused() -> None:
    game = Game()
    game.sit("alice", "bob")
    game.open()
    game.bet("alice", Spot.PLAYER, 100)
    game.run(PressDeal("alice"))
    assert isinstance(game.refused(RemoveBets("alice")), AlreadyPressedDeal)


# Rebet.


def test_rebet_repeats_the_bets_of_the_last_round_played() -> None:
    game = played_round()
    game.open()
    assert game.run(Rebet("alice")) == [
        BetPlaced("round-2", 1, "alice", Spot.PLAYER, 1_000),
        BetPlaced("round-2", 1, "alice", Spot.BANKER, 500),
    ]


def test_rebet_skips_rounds_the_player_passed() -> None:
    game = played_round()
    game.open()
    game.bet("alice", Spot.TIE, 100)
    game.run(Pass("alice"))
    game.run(Pass("bob"))
    game.deal(PLAYER_NATURAL, 4)
    game.open()
    placed = game.run(Rebet("alice"))
    assert [(e.spot, e.stake) for e in placed if isinstance(e, BetPlaced)] == [
        (Spot.PLAYER, 1_000),
        (Spot.BANKER, 500),
    ]


def test_rebet_without_a_previous_round_is_refused() -> None:
    game = Game()
    game.sit("alice")
    game.open()
    error = game.refused(Rebet("alice"))
    assert isinstance(error, NoPreviousBets)
    assert error.rule == "rebet.no_previous_bets"


def test_rebet_is_forgotten_when_the_player_leaves_the_seat() -> None:
    game = played_round()
    game.run(LeaveTable("alice"))
    game.run(SitDown("alice", 3))
    game.open()
    assert isinstance(game.refused(Rebet("alice")), NoPreviousBets)


def test_rebet_on_top_of_new_bets_is_refused() -> None:
    game = played_round()
    game.open()
    game.bet("alice", Spot.TIE, 100)
    assert isinstance(game.refused(Rebet("alice")), RebetOverBets)


def test_rebet_that_breaks_a_limit_is_refused_whole() -> None:
    game = played_round()
    game.open()
    # Alice's last bets were £10 and £5: a £12 limit admits the first but not both.
    error = game.refused(Rebet("alice", player_limit=1_200))
    assert isinstance(error, BetAbovePlayerLimit)


# Deal and Pass.


def test_deal_requires_a_bet() -> None:
    game = Game()
    game.sit("alice")
    game.open()
    error = game.refused(PressDeal("alice"))
    assert isinstance(error, DealNeedsABet)
    assert error.rule == "deal.requires_a_bet"


def test_pass_returns_the_players_bets() -> None:
    game = Game()
    game.sit("alice", "bob")
    game.open()
    game.bet("alice", Spot.BANKER, 500)
    assert game.run(Pass("alice")) == [
        StakeReturned("round-1", 1, "alice", Spot.BANKER, 500, ReturnReason.PASSED),
        PlayerPassed("round-1", 1, "alice"),
    ]


def test_pass_without_a_bet_skips_the_coup() -> None:
    game = Game()
    game.sit("alice", "bob")
    game.open()
    assert game.run(Pass("alice")) == [PlayerPassed("round-1", 1, "alice")]


def test_the_coup_waits_until_every_participant_has_acted() -> None:
    game = Game()
    game.sit("alice", "bob")
    game.open()
    game.bet("alice", Spot.PLAYER, 100)
    game.run(PressDeal("alice"))
    error = game.refused(DealCoup("shoe-1", PLAYER_NATURAL, 0))
    assert isinstance(error, PlayersStillToAct)
    assert "seat 2" in str(error)
    game.run(Pass("bob"))
    assert game.state.round is not None
    assert game.state.round.ready_to_deal


def test_the_coup_deals_every_card_then_the_outcome_then_each_settlement() -> None:
    game = played_round(PLAYER_NATURAL)
    dealt = game.events[-11:]
    drawn = [e for e in dealt[:4] if isinstance(e, CardDrawn)]
    assert [(e.round_id, e.shoe_id, e.hand, e.position, e.card) for e in drawn] == [
        ("round-1", "shoe-1", "player", 0, "4C"),
        ("round-1", "shoe-1", "banker", 1, "TC"),
        ("round-1", "shoe-1", "player", 2, "5C"),
        ("round-1", "shoe-1", "banker", 3, "KC"),
    ]
    assert drawn[0].reason == "initial deal: Player's first card"
    assert dealt[4:6] == [
        HandStood("round-1", Hand.PLAYER, "Player 9 is a natural: both stand"),
        HandStood("round-1", Hand.BANKER, "Player 9 is a natural: both stand"),
    ]
    assert dealt[6:] == [
        CoupCompleted("round-1", 9, 0, Outcome.PLAYER),
        BetSettled("round-1", 1, "alice", Spot.PLAYER, 1_000, 2_000, 0),
        BetSettled("round-1", 1, "alice", Spot.BANKER, 500, 0, 0),
        BetSettled("round-1", 2, "bob", Spot.TIE, 2_000, 0, 0),
        RoundSettled("round-1"),
    ]
    assert game.state.round is not None
    assert game.state.round.phase is Phase.SETTLED
    assert game.state.round.outcome is Outcome.PLAYER


def test_a_banker_win_pays_even_money_less_five_percent_commission() -> None:
    game = played_round(BANKER_NATURAL)
    settled = [e for e in game.events if isinstance(e, BetSettled)]
    assert settled[1] == BetSettled("round-1", 1, "alice", Spot.BANKER, 500, 975, 25)


def test_a_tie_pays_eight_to_one_and_pushes_player_and_banker() -> None:
    game = played_round(NATURAL_TIE)
    settled = [(e.spot, e.stake, e.payout) for e in game.events if isinstance(e, BetSettled)]
    assert settled == [
        (Spot.PLAYER, 1_000, 1_000),
        (Spot.BANKER, 500, 500),
        (Spot.TIE, 2_000, 18_000),
    ]


def test_draws_and_stands_carry_the_tableaus_reasons() -> None:
    game = played_round(PLAYER_DRAWS_BANKER_STANDS)
    third = [e for e in game.events if isinstance(e, CardDrawn)][4]
    stood = [e for e in game.events if isinstance(e, HandStood)]
    assert (third.hand, third.position, third.card) == ("player", 4, "5C")
    assert third.reason == "Player 2 draws: Player draws on 0-5"
    assert [(e.hand, e.reason) for e in stood] == [
        ("banker", "Banker 7 stands: Banker 7 always stands")
    ]
    completed = [e for e in game.events if isinstance(e, CoupCompleted)]
    assert completed == [CoupCompleted("round-1", 7, 7, Outcome.TIE)]


def test_cards_are_dealt_from_the_given_shoe_position() -> None:
    game = Game()
    game.sit("alice")
    game.open()
    game.bet("alice", Spot.PLAYER, 100)
    game.run(PressDeal("alice"))
    game.deal((*BANKER_NATURAL, *PLAYER_NATURAL), position=4)
    drawn = [(e.position, e.card) for e in game.events if isinstance(e, CardDrawn)]
    assert drawn == [(4, "4C"), (5, "TC"), (6, "5C"), (7, "KC")]


def test_a_second_deal_is_refused() -> None:
    game = played_round()
    error = game.refused(DealCoup("shoe-1", PLAYER_NATURAL, 4))
    assert isinstance(error, CoupAlreadyDealt)
    assert error.rule == "round.coup_already_dealt"


def test_with_nobody_in_play_no_card_is_dealt_and_the_round_ends() -> None:
    game = Game()
    game.sit("alice", "bob")
    game.open()
    game.bet("alice", Spot.PLAYER, 100)
    game.run(Pass("alice"))
    game.run(Pass("bob"))
    assert game.deal(PLAYER_NATURAL) == [RoundEndedWithoutPlay("round-1")]
    assert game.state.round is not None
    assert game.state.round.is_over
    assert isinstance(game.refused(DealCoup("shoe-1", PLAYER_NATURAL, 0)), NoRoundUnderWay)
    game.open()


# The deadline.


def test_the_window_cannot_be_closed_before_the_deadline() -> None:
    game = Game()
    game.sit("alice")
    game.open()
    game.later(14.9)
    error = game.refused(CloseWindow())
    assert isinstance(error, BettingWindowStillOpen)
    assert "2024-05-03T20:00:15+00:00" in str(error)


def test_at_the_deadline_players_who_have_not_acted_are_excluded_with_bets_returned() -> None:
    game = Game()
    game.sit("alice", "bob", "carol")
    game.open()
    game.bet("alice", Spot.PLAYER, 100)
    game.run(PressDeal("alice"))
    game.bet("bob", Spot.BANKER, 500)
    game.later(15)
    assert game.run(CloseWindow()) == [
        StakeReturned("round-1", 2, "bob", Spot.BANKER, 500, ReturnReason.EXCLUDED),
        PlayerExcluded("round-1", 2, "bob", ExclusionReason.TIMED_OUT),
        PlayerExcluded("round-1", 3, "carol", ExclusionReason.TIMED_OUT),
    ]
    assert isinstance(game.refused(PlaceBet("bob", Spot.PLAYER, 100)), ParticipantExcluded)
    settled = [e for e in game.deal(PLAYER_NATURAL) if isinstance(e, BetSettled)]
    assert [e.player_id for e in settled] == ["alice"]


def test_closing_the_window_when_everyone_has_acted_is_refused() -> None:
    game = Game()
    game.sit("alice")
    game.open()
    game.run(Pass("alice"))
    game.later(20)
    assert isinstance(game.refused(CloseWindow()), NobodyToExclude)


def test_when_everyone_is_excluded_the_round_ends_without_play() -> None:
    game = Game()
    game.sit("alice")
    game.open()
    game.bet("alice", Spot.PLAYER, 100)
    game.later(16)
    game.run(CloseWindow())
    assert game.deal(PLAYER_NATURAL) == [RoundEndedWithoutPlay("round-1")]


# Leaving mid-round.


def test_leaving_before_acting_excludes_the_player_and_returns_their_bets() -> None:
    game = Game()
    game.sit("alice", "bob")
    game.open()
    game.bet("alice", Spot.TIE, 100)
    assert game.run(LeaveTable("alice")) == [
        StakeReturned("round-1", 1, "alice", Spot.TIE, 100, ReturnReason.EXCLUDED),
        PlayerExcluded("round-1", 1, "alice", ExclusionReason.LEFT_TABLE),
        PlayerLeft(1, "alice"),
    ]
    assert game.state.seat_of("alice") is None


def test_bets_stay_in_play_when_a_player_leaves_after_pressing_deal() -> None:
    game = Game()
    game.sit("alice", "bob")
    game.open()
    game.bet("alice", Spot.PLAYER, 100)
    game.run(PressDeal("alice"))
    game.run(LeaveTable("alice"))
    game.run(SitDown("dave", 1))
    game.run(Pass("bob"))
    settled = [e for e in game.deal(PLAYER_NATURAL) if isinstance(e, BetSettled)]
    assert settled == [BetSettled("round-1", 1, "alice", Spot.PLAYER, 100, 200, 0)]
    # The seat's new player does not inherit Alice's bets for Rebet.
    game.open()
    assert isinstance(game.refused(Rebet("dave")), NoPreviousBets)


# Voids.


def test_a_void_during_betting_returns_every_stake_and_pays_nothing() -> None:
    game = Game()
    game.sit("alice", "bob")
    game.open()
    game.bet("alice", Spot.PLAYER, 100)
    game.run(PressDeal("alice"))
    game.bet("bob", Spot.TIE, 500)
    assert game.run(VoidRound("round-1", "card reader fault")) == [
        StakeReturned("round-1", 1, "alice", Spot.PLAYER, 100, ReturnReason.VOIDED),
        StakeReturned("round-1", 2, "bob", Spot.TIE, 500, ReturnReason.VOIDED),
        RoundVoided("round-1", "card reader fault"),
    ]
    assert game.state.round is not None
    assert game.state.round.phase is Phase.VOIDED
    assert isinstance(game.refused(DealCoup("shoe-1", PLAYER_NATURAL, 0)), RoundAlreadyVoided)
    game.open()


def test_a_void_once_everyone_has_acted_returns_the_bets_in_play() -> None:
    game = Game()
    game.sit("alice", "bob")
    game.open()
    game.bet("alice", Spot.BANKER, 100)
    game.run(PressDeal("alice"))
    game.run(Pass("bob"))
    assert game.run(VoidRound("round-1", "dealer error")) == [
        StakeReturned("round-1", 1, "alice", Spot.BANKER, 100, ReturnReason.VOIDED),
        RoundVoided("round-1", "dealer error"),
    ]


def test_a_void_after_settlement_reverses_every_settlement() -> None:
    game = played_round(BANKER_NATURAL)
    assert game.run(VoidRound("round-1", "malfunction voids all pays and play")) == [
        SettlementReversed("round-1", 1, "alice", Spot.PLAYER, 1_000, 0, 0),
        SettlementReversed("round-1", 1, "alice", Spot.BANKER, 500, 975, 25),
        SettlementReversed("round-1", 2, "bob", Spot.TIE, 2_000, 0, 0),
        RoundVoided("round-1", "malfunction voids all pays and play"),
    ]


def test_a_round_that_ended_without_play_is_voided_with_no_money_moving() -> None:
    game = Game()
    game.sit("alice")
    game.open()
    game.run(Pass("alice"))
    game.deal(PLAYER_NATURAL)
    assert game.run(VoidRound("round-1", "audit")) == [RoundVoided("round-1", "audit")]


def test_a_round_is_voided_once() -> None:
    game = played_round()
    game.run(VoidRound("round-1", "malfunction"))
    assert isinstance(game.refused(VoidRound("round-1", "again")), RoundAlreadyVoided)


def test_a_void_must_say_why() -> None:
    game = played_round()
    error = game.refused(VoidRound("round-1", "  "))
    assert isinstance(error, VoidNeedsAReason)
    assert error.rule == "void.reason_required"


def test_the_table_voids_only_its_current_round() -> None:
    game = played_round()
    game.open()
    assert isinstance(game.refused(VoidRound("round-1", "malfunction")), RoundNotFound)


def test_replaying_a_tables_events_rebuilds_it() -> None:
    game = played_round(BANKER_NATURAL)
    game.open()
    game.run(Rebet("alice"))
    game.run(VoidRound("round-2", "malfunction"))
    assert replay(game.events) == game.state
