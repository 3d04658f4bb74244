"""A table as a pure aggregate: its settings, its seats, and its current round.

`decide(table, command, now)` returns the events a command causes, or raises a `DomainError`
naming the rule that refused it (a refusal emits nothing); `evolve(table, event)` is the only
way the state changes, so folding a table's events from `None` rebuilds it exactly. The clock
and the shoe's cards come in with the commands; nothing here reads a global.

Event conventions are those of domain/round.py: plain facts whose payloads are JSON (see
`event_payload` and `event_from_payload`), instants as ISO 8601 UTC strings, money in pence.

Rounds open in one of two ways. A bet or rebet by a seated player at an idle table (no round,
or the last one over) opens a round for everyone seated and places the bet in the same
decision; and once a round has settled with play, the application opens the next one at once
if anyone is seated (`Table.next_round_due`). A round that ended without play leaves the table
idle, so an empty table does not churn a round every betting window.

The table also owns its shoe's lifecycle: `OpenShoe` publishes the commitment, client seed,
nonce and hand count; each coup is dealt from the open shoe at its next position; once
`coup_can_start` is false the shoe is retired (`RetireShoe`) and its seed revealed
(`RevealShoe`, checked against the commitment). The seed itself never enters the state
before the reveal. Moderation (mute, removal) is a table fact too, since removal unseats.
"""

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, ClassVar, TypeAlias, TypeGuard

from domain.cards import CARDS_PER_DECK, Card
from domain.errors import DomainError
from domain.limits import TableLimits
from domain.outcome import Spot
from domain.payloads import from_payload, to_payload
from domain.round import (
    ROUND_EVENT_TYPES,
    Action,
    Bet,
    CardDrawn,
    CoupCompleted,
    ExclusionReason,
    Phase,
    Round,
    RoundEvent,
    RoundOpened,
    RoundSettled,
    close_window,
    deal,
    evolve_round,
    open_round,
    pass_coup,
    place_bet,
    press_deal,
    rebet,
    remove_bets,
    void_round,
    withdraw,
)
from domain.round_errors import (
    BettingWindowClosed,
    ClientSeedNotRotated,
    InvalidTableSettings,
    MalfunctionNeedsAReason,
    MalfunctionScopeInvalid,
    MalfunctionVoidsNothing,
    NoPlayersSeated,
    NoRoundUnderWay,
    NoShoeOpen,
    PlayerAlreadyMuted,
    PlayerAlreadyRemoved,
    PlayerAlreadySeated,
    PlayerBarred,
    PlayerHasBetsInRound,
    PlayerNotMuted,
    PlayerNotSeated,
    RemovalNeedsAReason,
    RevealedSeedDiffers,
    RoundAlreadyUnderWay,
    RoundNotFound,
    SeatOutOfRange,
    SeatTaken,
    ShoeAlreadyOpen,
    ShoeCountsInvalid,
    ShoeNonceOutOfOrder,
    ShoeNotRetired,
    ShoeStillDealing,
    TableAlreadyExists,
    TableIsSuspended,
    TableNotFound,
    TableNotSuspended,
    WrongShoe,
)
from domain.shoe import HAND_CHOICES, MIN_HANDS, ByteStream, commitment, coup_can_start

MAX_SEATS = 7
MAX_DECKS = 8
_MILLISECOND = timedelta(milliseconds=1)


@dataclass(frozen=True, slots=True)
class TableSettings:
    """How a table is set up: Littlewoods seats 5 and William Hill 7; limits are per table."""

    seats: int = MAX_SEATS
    limits: TableLimits = field(default_factory=TableLimits)
    betting_window: timedelta = timedelta(seconds=15)
    decks: int = MAX_DECKS
    currency: str = "GBP"

    def __post_init__(self) -> None:
        if not 1 <= self.seats <= MAX_SEATS:
            raise InvalidTableSettings(
                f"a table has 1 to {MAX_SEATS} seats, not {self.seats} "
                f"(rule {InvalidTableSettings.rule})"
            )
        if not 1 <= self.decks <= MAX_DECKS:
            raise InvalidTableSettings(
                f"a table's shoe holds 1 to {MAX_DECKS} decks, not {self.decks} "
                f"(rule {InvalidTableSettings.rule})"
            )
        # Whole milliseconds, because the window is recorded in an event as an integer.
        if self.betting_window < timedelta(seconds=1) or self.betting_window % _MILLISECOND:
            raise InvalidTableSettings(
                f"a betting window is at least a second, in whole milliseconds, not "
                f"{self.betting_window} (rule {InvalidTableSettings.rule})"
            )
        # Limits and chips are pence of a pound, so no other currency can be honoured yet.
        if self.currency != "GBP":
            raise InvalidTableSettings(
                f"tables play in GBP, not {self.currency!r} (rule {InvalidTableSettings.rule})"
            )


@dataclass(frozen=True, slots=True)
class Seat:
    """A taken seat: who sits there, and the bets of the last round they played from it."""

    number: int
    player_id: str
    # Kept per seating, not per player: a player who leaves and sits again starts afresh,
    # as the ReBet button of the seed tables does.
    last_bets: tuple[Bet, ...] = ()


@dataclass(frozen=True, slots=True)
class Shoe:
    """The table's shoe as published: never its seed or cards, only where dealing has got to."""

    shoe_id: str
    commitment: str
    client_seed: str
    nonce: int
    decks: int
    hands: int
    next_position: int = 0
    coups_dealt: int = 0
    retired: bool = False

    @property
    def cards_left(self) -> int:
        """Cards not yet dealt from this shoe."""
        return self.decks * CARDS_PER_DECK - self.next_position

    @property
    def hands_left(self) -> int:
        """Coups this shoe deals before it retires on its hand count."""
        return max(self.hands - self.coups_dealt, 0)

    @property
    def can_deal(self) -> bool:
        """Whether another coup may start from this shoe."""
        return not self.retired and coup_can_start(self.cards_left, self.coups_dealt, self.hands)


@dataclass(frozen=True, slots=True)
class Table:
    """A table's state: settings, seats (index 0 is seat 1), and the current or latest round."""

    table_id: str
    settings: TableSettings
    seats: tuple[Seat | None, ...]
    rounds_opened: int = 0
    round: Round | None = None
    # The open shoe, or the retired one awaiting its reveal; None before the first and between.
    shoe: Shoe | None = None
    shoes_opened: int = 0
    muted: frozenset[str] = frozenset()
    removed: frozenset[str] = frozenset()
    # The malfunction that suspended the table, while it refuses play; None when open.
    suspended_by: str | None = None
    # A client seed ops rotated in for the next shoe, until that shoe opens with it.
    next_client_seed: str | None = None

    def seat_of(self, player_id: str) -> Seat | None:
        """The seat this player holds, if any."""
        for seat in self.seats:
            if seat is not None and seat.player_id == player_id:
                return seat
        return None

    @property
    def seated(self) -> tuple[Seat, ...]:
        """The taken seats, in seat order."""
        return tuple(seat for seat in self.seats if seat is not None)

    @property
    def round_under_way(self) -> bool:
        """Whether a round is open and not yet over, so a newcomer waits for the next one."""
        return self.round is not None and not self.round.is_over

    @property
    def next_round_id(self) -> str:
        """The id the next round opened at this table takes: the table's id and its number."""
        return round_id_for(self.table_id, self.rounds_opened + 1)

    @property
    def next_round_due(self) -> bool:
        """Whether the next round opens now: the last one settled with play and someone sits."""
        return self.round is not None and self.round.phase is Phase.SETTLED and bool(self.seated)

    @property
    def live_shoe(self) -> Shoe | None:
        """The shoe that deals the next coup, if one is open and not retired."""
        return self.shoe if self.shoe is not None and not self.shoe.retired else None


def round_id_for(table_id: str, number: int) -> str:
    """A round's id: unique across tables, readable, and the same on every retry of a command."""
    return f"{table_id}-{number}"


def expect_betting_round(table: Table, round_id: str) -> None:
    """A command that names its round goes into that round, or is refused as late.

    Unnamed, a bet, Deal or Pass goes into whatever round is open when it arrives: one sent as
    a window closes lands in the next round (a bet at an idle table opens one), which its
    player never saw. Named, it is refused instead: `round.betting_window_closed` for a round
    of this table that is past betting, `round.not_found` for any other id. Whether the
    window's deadline has passed is the command's own check, at its own time.
    """
    current = table.round
    if current is not None and current.round_id == round_id and current.phase is Phase.BETTING:
        return
    number = round_id.removeprefix(f"{table.table_id}-")
    past = number.isascii() and number.isdigit() and round_id_for(table.table_id, int(number))
    if past == round_id and 1 <= int(number) <= table.rounds_opened:
        now_at = (
            f"; the table is at round {current.round_id} now"
            if current is not None and current.round_id != round_id
            else ""
        )
        raise BettingWindowClosed(
            f"round {round_id} is past betting{now_at} (rule {BettingWindowClosed.rule})"
        )
    raise RoundNotFound(
        f"round {round_id} is not a round of table {table.table_id} (rule {RoundNotFound.rule})"
    )


# Table-level events; the round's events are in domain/round.py.


@dataclass(frozen=True, slots=True)
class TableCreated:
    """A table was set up with these settings."""

    type: ClassVar[str] = "TableCreated"
    table_id: str
    seats: int
    decks: int
    minimum: int
    maximum: int
    chips: tuple[int, ...]
    betting_window_ms: int
    currency: str


@dataclass(frozen=True, slots=True)
class PlayerSat:
    """A player took a free seat."""

    type: ClassVar[str] = "PlayerSat"
    seat: int
    player_id: str


@dataclass(frozen=True, slots=True)
class PlayerLeft:
    """A player gave up their seat."""

    type: ClassVar[str] = "PlayerLeft"
    seat: int
    player_id: str


@dataclass(frozen=True, slots=True)
class PlayerChangedSeat:
    """A seated player moved to a free seat between hands, in one step: never seen unseated."""

    type: ClassVar[str] = "PlayerChangedSeat"
    from_seat: int
    seat: int
    player_id: str


@dataclass(frozen=True, slots=True)
class ShoeOpened:
    """A shoe was opened: its commitment, seeds and hand count are published before any deal."""

    type: ClassVar[str] = "ShoeOpened"
    shoe_id: str
    server_seed_hash: str
    client_seed: str
    nonce: int
    decks: int
    hands: int


@dataclass(frozen=True, slots=True)
class ShoeRetired:
    """The shoe can start no further coup and deals no more."""

    type: ClassVar[str] = "ShoeRetired"
    shoe_id: str


@dataclass(frozen=True, slots=True)
class ShoeRevealed:
    """The retired shoe's server seed, published so anyone can replay the shoe."""

    type: ClassVar[str] = "ShoeRevealed"
    shoe_id: str
    server_seed: str


@dataclass(frozen=True, slots=True)
class PlayerMuted:
    """Ops muted a player in this table's chat."""

    type: ClassVar[str] = "PlayerMuted"
    player_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class PlayerUnmuted:
    """Ops lifted a player's mute at this table."""

    type: ClassVar[str] = "PlayerUnmuted"
    player_id: str


@dataclass(frozen=True, slots=True)
class PlayerRemoved:
    """Ops removed a player from this table: unseated (from `seat`, if any) and barred."""

    type: ClassVar[str] = "PlayerRemoved"
    player_id: str
    seat: int | None
    reason: str


class MalfunctionScope(StrEnum):
    """Which rounds a malfunction voids."""

    CURRENT_ROUND = "current_round"
    ROUNDS = "rounds"
    TIME_RANGE = "time_range"


@dataclass(frozen=True, slots=True)
class MalfunctionDeclared:
    """Ops declared a malfunction: why, the scope they gave, and the rounds it voids."""

    type: ClassVar[str] = "MalfunctionDeclared"
    malfunction_id: str
    reason: str
    scope: str  # a MalfunctionScope value, kept a plain string in the stored payload
    round_ids: tuple[str, ...]  # the rounds in scope not already void, voided in this append
    start: str | None = None  # the time range, for a TIME_RANGE scope
    end: str | None = None


@dataclass(frozen=True, slots=True)
class TableSuspended:
    """The table refuses play until ops reopen it."""

    type: ClassVar[str] = "TableSuspended"
    malfunction_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class TableReopened:
    """Ops reopened a suspended table for play."""

    type: ClassVar[str] = "TableReopened"
    malfunction_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class ClientSeedRotated:
    """Ops chose the client seed of the table's next shoe, before that shoe opens."""

    type: ClassVar[str] = "ClientSeedRotated"
    client_seed: str
    reason: str


ShoeEvent: TypeAlias = ShoeOpened | ShoeRetired | ShoeRevealed
PlayerEvent: TypeAlias = (
    PlayerSat | PlayerLeft | PlayerChangedSeat | PlayerMuted | PlayerUnmuted | PlayerRemoved
)
ModerationEvent: TypeAlias = PlayerMuted | PlayerUnmuted | PlayerRemoved
MalfunctionEvent: TypeAlias = (
    MalfunctionDeclared | TableSuspended | TableReopened | ClientSeedRotated
)
TableEvent: TypeAlias = (
    TableCreated
    | PlayerSat
    | PlayerLeft
    | PlayerChangedSeat
    | ShoeEvent
    | ModerationEvent
    | MalfunctionEvent
    | RoundEvent
)
TABLE_EVENT_TYPES: tuple[type[TableEvent], ...] = (
    TableCreated,
    PlayerSat,
    PlayerLeft,
    PlayerChangedSeat,
    ShoeOpened,
    ShoeRetired,
    ShoeRevealed,
    PlayerMuted,
    PlayerUnmuted,
    PlayerRemoved,
    MalfunctionDeclared,
    TableSuspended,
    TableReopened,
    ClientSeedRotated,
    *ROUND_EVENT_TYPES,
)
EVENT_TYPES: Mapping[str, type[TableEvent]] = {cls.type: cls for cls in TABLE_EVENT_TYPES}


def is_round_event(event: TableEvent) -> TypeGuard[RoundEvent]:
    """Whether the event belongs to a round, and so carries its `round_id`."""
    return isinstance(event, ROUND_EVENT_TYPES)


# Commands.


@dataclass(frozen=True, slots=True)
class CreateTable:
    """Set up a new table."""

    table_id: str
    settings: TableSettings = field(default_factory=TableSettings)


@dataclass(frozen=True, slots=True)
class SitDown:
    """Take a free seat."""

    player_id: str
    seat: int


@dataclass(frozen=True, slots=True)
class LeaveTable:
    """Give up one's seat."""

    player_id: str


@dataclass(frozen=True, slots=True)
class ChangeSeat:
    """Move to another free seat between hands."""

    player_id: str
    seat: int


@dataclass(frozen=True, slots=True)
class OpenRound:
    """Open the betting window of a new round for everyone seated now."""

    round_id: str


@dataclass(frozen=True, slots=True)
class PlaceBet:
    """Put a stake in pence on a spot; `player_limit` is the player's own maximum, if set."""

    player_id: str
    spot: Spot
    stake: int
    player_limit: int | None = None


@dataclass(frozen=True, slots=True)
class RemoveBets:
    """Take all of one's bets back before pressing Deal or Pass."""

    player_id: str


@dataclass(frozen=True, slots=True)
class Rebet:
    """Repeat the bets of the last round one played at this seat."""

    player_id: str
    player_limit: int | None = None


@dataclass(frozen=True, slots=True)
class PressDeal:
    """Confirm one's bets for this coup."""

    player_id: str


@dataclass(frozen=True, slots=True)
class Pass:
    """Sit this coup out; one's bets are returned."""

    player_id: str


@dataclass(frozen=True, slots=True)
class CloseWindow:
    """Exclude, after the deadline, everyone who has neither pressed Deal nor passed."""


@dataclass(frozen=True, slots=True)
class DealCoup:
    """Deal and settle the coup from the open shoe's `cards`, starting at `position`."""

    shoe_id: str
    cards: Sequence[Card] = field(repr=False)  # the whole shoe: never log it
    position: int


@dataclass(frozen=True, slots=True)
class VoidRound:
    """Void the current round, whatever its phase, saying why."""

    round_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class OpenShoe:
    """Publish a new shoe's commitment, seeds and hand count; its seed stays with the caller."""

    shoe_id: str
    server_seed_hash: str
    client_seed: str
    nonce: int
    decks: int
    hands: int


@dataclass(frozen=True, slots=True)
class RetireShoe:
    """Retire the open shoe once it can start no further coup."""


@dataclass(frozen=True, slots=True)
class RevealShoe:
    """Publish the retired shoe's server seed."""

    shoe_id: str
    server_seed: str = field(repr=False)


@dataclass(frozen=True, slots=True)
class MutePlayer:
    """Mute a player in this table's chat."""

    player_id: str
    reason: str = ""


@dataclass(frozen=True, slots=True)
class UnmutePlayer:
    """Lift a player's mute at this table."""

    player_id: str


@dataclass(frozen=True, slots=True)
class RemovePlayer:
    """Remove a player from this table for good, saying why."""

    player_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class DeclareMalfunction:
    """Void the rounds in scope, suspend the table, retire its shoe and reveal the seed.

    `rounds` are the earlier rounds in scope as rebuilt from the log by the caller
    (`domain.round.replay_round`), since the table keeps only its latest round; the current
    round is taken from the table itself. `server_seed` is the open shoe's stored seed, or
    None if it is lost: the shoe then retires unrevealed.
    """

    malfunction_id: str
    reason: str
    scope: MalfunctionScope
    rounds: tuple[Round, ...] = ()
    start: str | None = None
    end: str | None = None
    server_seed: str | None = field(default=None, repr=False)
    or_nothing: bool = False
    """Retire and reveal the shoe even if no round in scope holds play (a restored log)."""


@dataclass(frozen=True, slots=True)
class ReopenTable:
    """Lift a malfunction's suspension, saying why play may resume."""

    reason: str


@dataclass(frozen=True, slots=True)
class RotateClientSeed:
    """Choose the client seed the table's next shoe opens with."""

    client_seed: str
    reason: str


Command: TypeAlias = (
    CreateTable
    | SitDown
    | LeaveTable
    | ChangeSeat
    | OpenRound
    | PlaceBet
    | RemoveBets
    | Rebet
    | PressDeal
    | Pass
    | CloseWindow
    | DealCoup
    | VoidRound
    | OpenShoe
    | RetireShoe
    | RevealShoe
    | MutePlayer
    | UnmutePlayer
    | RemovePlayer
    | DeclareMalfunction
    | ReopenTable
    | RotateClientSeed
)

# Play that a suspended table refuses; leaving, moderation and reading stay open.
_PLAY: tuple[type, ...] = (
    OpenRound,
    PlaceBet,
    RemoveBets,
    Rebet,
    PressDeal,
    Pass,
    CloseWindow,
    DealCoup,
    OpenShoe,
)
# Any valid seed: ByteStream checks the client seed by the spec's rule, and this one
# never keys anything.
_CHECKING_SEED = "0" * 64


def decide(table: Table | None, command: Command, now: datetime) -> list[TableEvent]:
    """The events `command` causes at `now`, or a DomainError naming the rule that refuses it."""
    if isinstance(command, CreateTable):
        if table is not None:
            raise TableAlreadyExists(
                f"table {table.table_id} already exists (rule {TableAlreadyExists.rule})"
            )
        return [_table_created(command.table_id, command.settings)]
    if table is None:
        raise TableNotFound(f"no such table (rule {TableNotFound.rule})")
    if table.suspended_by is not None and isinstance(command, _PLAY):
        raise TableIsSuspended(
            f"table {table.table_id} is suspended after malfunction {table.suspended_by} "
            f"until ops reopen it (rule {TableIsSuspended.rule})"
        )
    return _DECISIONS[type(command)](table, command, now)


# One decision per command, each given an existing table that is open to it. `now` is the
# same clock argument for all, though only those that open, bet or act on a round read it.


def _decide_sit_down(table: Table, command: SitDown, now: datetime) -> list[TableEvent]:
    player_id, number = command.player_id, command.seat
    if player_id in table.removed:
        raise PlayerBarred(
            f"{player_id} was removed from table {table.table_id} and may not sit there again "
            f"(rule {PlayerBarred.rule})"
        )
    _check_seat_number(table, number)
    held = table.seat_of(player_id)
    if held is not None:
        raise PlayerAlreadySeated(
            f"{player_id} already sits at seat {held.number} (rule {PlayerAlreadySeated.rule})"
        )
    _check_seat_free(table, number)
    # Sitting while a round is under way is allowed: the round's participants were fixed when
    # its window opened, so the newcomer simply plays from the next round.
    return [PlayerSat(number, player_id)]


def _decide_leave_table(table: Table, command: LeaveTable, now: datetime) -> list[TableEvent]:
    seat = _seat_of(table, command.player_id)
    events: list[TableEvent] = []
    if table.round is not None:
        events.extend(withdraw(table.round, command.player_id))
    events.append(PlayerLeft(seat.number, command.player_id))
    return events


def _decide_change_seat(table: Table, command: ChangeSeat, now: datetime) -> list[TableEvent]:
    player_id, number = command.player_id, command.seat
    held = _seat_of(table, player_id)
    _check_seat_number(table, number)
    if held.number == number:
        raise SeatTaken(f"{player_id} already sits at seat {number} (rule {SeatTaken.rule})")
    _check_seat_free(table, number)
    events: list[TableEvent] = []
    current = table.round
    if current is not None and not current.is_over:
        participant = current.participant(player_id)
        if participant is not None and participant.bets:
            # The seat is on every bet, settlement and return of the round: a player moves
            # between hands, as the rules say, not while their stakes lie at the old seat.
            raise PlayerHasBetsInRound(
                f"{player_id} has bets on round {current.round_id} at seat {held.number} and "
                f"changes seat once it is over (rule {PlayerHasBetsInRound.rule})"
            )
        # One still to bet in this window sits it out, as a newcomer would: the round's
        # participants keep the seats they had when it opened.
        events.extend(withdraw(current, player_id, ExclusionReason.CHANGED_SEAT))
    events.append(PlayerChangedSeat(held.number, number, player_id))
    return events


def _decide_open_round(table: Table, command: OpenRound, now: datetime) -> list[TableEvent]:
    return [*_open(table, command.round_id, now)]


def _decide_place_bet(table: Table, command: PlaceBet, now: datetime) -> list[TableEvent]:
    current, opened = _current_or_opened(table, command.player_id, now)
    placed = place_bet(
        current,
        command.player_id,
        command.spot,
        command.stake,
        command.player_limit,
        table.settings.limits,
        now,
    )
    return [*opened, *placed]


def _decide_remove_bets(table: Table, command: RemoveBets, now: datetime) -> list[TableEvent]:
    return [*remove_bets(_current(table), command.player_id, now)]


def _decide_rebet(table: Table, command: Rebet, now: datetime) -> list[TableEvent]:
    held = table.seat_of(command.player_id)
    last_bets = held.last_bets if held is not None else ()
    current, opened = _current_or_opened(table, command.player_id, now)
    placed = rebet(
        current, command.player_id, last_bets, command.player_limit, table.settings.limits, now
    )
    return [*opened, *placed]


def _decide_press_deal(table: Table, command: PressDeal, now: datetime) -> list[TableEvent]:
    return [*press_deal(_current(table), command.player_id, now)]


def _decide_pass(table: Table, command: Pass, now: datetime) -> list[TableEvent]:
    return [*pass_coup(_current(table), command.player_id, now)]


def _decide_close_window(table: Table, command: CloseWindow, now: datetime) -> list[TableEvent]:
    return [*close_window(_current(table), now)]


def _decide_deal_coup(table: Table, command: DealCoup, now: datetime) -> list[TableEvent]:
    current = _current(table)
    _check_dealing_shoe(table, current, command.shoe_id, command.position)
    return [*deal(current, command.shoe_id, command.cards, command.position)]


def _decide_void_round(table: Table, command: VoidRound, now: datetime) -> list[TableEvent]:
    latest = table.round
    if latest is None or latest.round_id != command.round_id:
        # An earlier round is voided through its own events: see round.replay_round.
        raise RoundNotFound(
            f"round {command.round_id} is not the current round of table {table.table_id} "
            f"(rule {RoundNotFound.rule})"
        )
    return [*void_round(latest, command.reason)]


def _decide_open_shoe(table: Table, command: OpenShoe, now: datetime) -> list[TableEvent]:
    if table.next_client_seed not in (None, command.client_seed):
        raise ClientSeedNotRotated(
            f"the next shoe at table {table.table_id} opens with the client seed ops "
            f"rotated in (rule {ClientSeedNotRotated.rule})"
        )
    if table.shoe is not None:
        raise ShoeAlreadyOpen(
            f"shoe {table.shoe.shoe_id} is still open at table {table.table_id} "
            f"(rule {ShoeAlreadyOpen.rule})"
        )
    if command.nonce != table.shoes_opened + 1:
        raise ShoeNonceOutOfOrder(
            f"the next shoe at table {table.table_id} takes nonce {table.shoes_opened + 1}, "
            f"not {command.nonce} (rule {ShoeNonceOutOfOrder.rule})"
        )
    if command.decks != table.settings.decks or not (
        MIN_HANDS <= command.hands < MIN_HANDS + HAND_CHOICES
    ):
        raise ShoeCountsInvalid(
            f"a shoe at table {table.table_id} has {table.settings.decks} decks and "
            f"{MIN_HANDS} to {MIN_HANDS + HAND_CHOICES - 1} hands, not {command.decks} decks "
            f"and {command.hands} hands (rule {ShoeCountsInvalid.rule})"
        )
    return [
        ShoeOpened(
            shoe_id=command.shoe_id,
            server_seed_hash=command.server_seed_hash,
            client_seed=command.client_seed,
            nonce=command.nonce,
            decks=command.decks,
            hands=command.hands,
        )
    ]


def _decide_retire_shoe(table: Table, command: RetireShoe, now: datetime) -> list[TableEvent]:
    shoe = table.live_shoe
    if shoe is None:
        raise NoShoeOpen(f"table {table.table_id} has no open shoe (rule {NoShoeOpen.rule})")
    if shoe.can_deal:
        raise ShoeStillDealing(
            f"shoe {shoe.shoe_id} has {shoe.hands_left} hands and {shoe.cards_left} cards left "
            f"(rule {ShoeStillDealing.rule})"
        )
    if table.round is not None and table.round.deal_interrupted:
        raise ShoeStillDealing(
            f"shoe {shoe.shoe_id} is part-way through the coup of round {table.round.round_id} "
            f"(rule {ShoeStillDealing.rule})"
        )
    return [ShoeRetired(shoe.shoe_id)]


def _decide_reveal_shoe(table: Table, command: RevealShoe, now: datetime) -> list[TableEvent]:
    return [_reveal_shoe(table, command.shoe_id, command.server_seed)]


def _decide_mute_player(table: Table, command: MutePlayer, now: datetime) -> list[TableEvent]:
    if command.player_id in table.muted:
        raise PlayerAlreadyMuted(
            f"{command.player_id} is already muted at table {table.table_id} "
            f"(rule {PlayerAlreadyMuted.rule})"
        )
    return [PlayerMuted(command.player_id, command.reason)]


def _decide_unmute_player(table: Table, command: UnmutePlayer, now: datetime) -> list[TableEvent]:
    if command.player_id not in table.muted:
        raise PlayerNotMuted(
            f"{command.player_id} is not muted at table {table.table_id} "
            f"(rule {PlayerNotMuted.rule})"
        )
    return [PlayerUnmuted(command.player_id)]


def _decide_remove_player(table: Table, command: RemovePlayer, now: datetime) -> list[TableEvent]:
    player_id = command.player_id
    if player_id in table.removed:
        raise PlayerAlreadyRemoved(
            f"{player_id} was already removed from table {table.table_id} "
            f"(rule {PlayerAlreadyRemoved.rule})"
        )
    if not command.reason.strip():
        raise RemovalNeedsAReason(f"a removal must say why (rule {RemovalNeedsAReason.rule})")
    events: list[TableEvent] = []
    seat = table.seat_of(player_id)
    if seat is not None and table.round is not None:
        # As when leaving: bets not yet confirmed by Deal go back; confirmed ones stay in play.
        events.extend(withdraw(table.round, player_id, ExclusionReason.REMOVED))
    events.append(
        PlayerRemoved(player_id, seat.number if seat is not None else None, command.reason)
    )
    return events


def _decide_declare_malfunction(
    table: Table, command: DeclareMalfunction, now: datetime
) -> list[TableEvent]:
    """Every step of a malfunction, in order: declare, void, suspend, retire and reveal."""
    _require_reason(command.reason)
    voided = _rounds_to_void(table, command)
    events: list[TableEvent] = [
        MalfunctionDeclared(
            command.malfunction_id,
            command.reason,
            str(command.scope),
            tuple(r.round_id for r in voided),
            command.start,
            command.end,
        )
    ]
    why = f"malfunction {command.malfunction_id}: {command.reason}"
    for round_ in voided:
        events.extend(void_round(round_, why))
    if table.suspended_by is None:
        events.append(TableSuspended(command.malfunction_id, command.reason))
    shoe = table.shoe
    if shoe is not None and not shoe.retired:
        events.append(ShoeRetired(shoe.shoe_id))
    if shoe is not None and command.server_seed is not None:
        retired = replace(table, shoe=replace(shoe, retired=True))
        events.append(_reveal_shoe(retired, shoe.shoe_id, command.server_seed))
    return events


def _rounds_to_void(table: Table, command: DeclareMalfunction) -> list[Round]:
    """The rounds a malfunction voids, in the order they were opened: those in scope, not void."""
    if (command.scope is MalfunctionScope.TIME_RANGE) != (
        command.start is not None and command.end is not None
    ):
        raise MalfunctionScopeInvalid(
            f"a time range scope, and only that, gives a start and an end "
            f"(rule {MalfunctionScopeInvalid.rule})"
        )
    current = table.round
    in_scope: dict[str, Round] = {r.round_id: r for r in command.rounds}
    if command.scope is MalfunctionScope.CURRENT_ROUND:
        if current is None:
            raise MalfunctionScopeInvalid(
                f"table {table.table_id} has no round to void (rule {MalfunctionScopeInvalid.rule})"
            )
        in_scope = {current.round_id: current}
    elif current is not None and (current.round_id in in_scope or not current.is_over):
        # A round still under way is voided whatever the scope: a suspended table cannot
        # finish it, and its stakes must not stay on the layout. The table's own state of
        # it is the latest.
        in_scope[current.round_id] = current
    voided = [
        r for r in sorted(in_scope.values(), key=lambda r: r.number) if r.phase is not Phase.VOIDED
    ]
    if not any(r.holds_play for r in voided) and not command.or_nothing:
        # Most often current_round just after a coup: the settling append has already opened
        # the next round, empty, and voiding it would leave the coup meant standing.
        raise MalfunctionVoidsNothing(_voids_nothing(table, command, in_scope))
    return voided


def _voids_nothing(table: Table, command: DeclareMalfunction, in_scope: Mapping[str, Round]) -> str:
    named = ", ".join(sorted(in_scope)) or "no round"
    message = f"the {command.scope} scope covers {named}, which holds no stake and no card"
    current = table.round
    if (
        command.scope is MalfunctionScope.CURRENT_ROUND
        and current is not None
        and current.number > 1
    ):
        dealt = round_id_for(table.table_id, current.number - 1)
        message += f"; to void the coup before it, use the rounds scope with round {dealt}"
    return f"{message} (rule {MalfunctionVoidsNothing.rule})"


def _decide_reopen_table(table: Table, command: ReopenTable, now: datetime) -> list[TableEvent]:
    if table.suspended_by is None:
        raise TableNotSuspended(
            f"table {table.table_id} is not suspended (rule {TableNotSuspended.rule})"
        )
    _require_reason(command.reason)
    return [TableReopened(table.suspended_by, command.reason)]


def _decide_rotate_client_seed(
    table: Table, command: RotateClientSeed, now: datetime
) -> list[TableEvent]:
    _require_reason(command.reason)
    ByteStream(_CHECKING_SEED, command.client_seed, 0)
    return [ClientSeedRotated(command.client_seed, command.reason)]


# Each decision takes its own command type, which a Mapping cannot express: the keys and
# handlers are paired by hand here, and tests/unit/test_table.py checks that every command
# but CreateTable (decided before a table exists) has one.
_DECISIONS: Mapping[type[Command], Callable[[Table, Any, datetime], list[TableEvent]]] = {
    SitDown: _decide_sit_down,
    LeaveTable: _decide_leave_table,
    ChangeSeat: _decide_change_seat,
    OpenRound: _decide_open_round,
    PlaceBet: _decide_place_bet,
    RemoveBets: _decide_remove_bets,
    Rebet: _decide_rebet,
    PressDeal: _decide_press_deal,
    Pass: _decide_pass,
    CloseWindow: _decide_close_window,
    DealCoup: _decide_deal_coup,
    VoidRound: _decide_void_round,
    OpenShoe: _decide_open_shoe,
    RetireShoe: _decide_retire_shoe,
    RevealShoe: _decide_reveal_shoe,
    MutePlayer: _decide_mute_player,
    UnmutePlayer: _decide_unmute_player,
    RemovePlayer: _decide_remove_player,
    DeclareMalfunction: _decide_declare_malfunction,
    ReopenTable: _decide_reopen_table,
    RotateClientSeed: _decide_rotate_client_seed,
}


# What several decisions share.


def _table_created(table_id: str, settings: TableSettings) -> TableCreated:
    limits = settings.limits
    return TableCreated(
        table_id=table_id,
        seats=settings.seats,
        decks=settings.decks,
        minimum=limits.minimum,
        maximum=limits.maximum,
        chips=tuple(limits.chips),
        betting_window_ms=settings.betting_window // _MILLISECOND,
        currency=settings.currency,
    )


def _check_seat_number(table: Table, number: int) -> None:
    if not 1 <= number <= table.settings.seats:
        raise SeatOutOfRange(
            f"table {table.table_id} has seats 1 to {table.settings.seats}, not {number} "
            f"(rule {SeatOutOfRange.rule})"
        )


def _check_seat_free(table: Table, number: int) -> None:
    if table.seats[number - 1] is not None:
        raise SeatTaken(f"seat {number} is taken (rule {SeatTaken.rule})")


def _seat_of(table: Table, player_id: str) -> Seat:
    seat = table.seat_of(player_id)
    if seat is None:
        raise PlayerNotSeated(
            f"{player_id} holds no seat at table {table.table_id} (rule {PlayerNotSeated.rule})"
        )
    return seat


def _open(table: Table, round_id: str, now: datetime) -> list[RoundEvent]:
    if table.round is not None and not table.round.is_over:
        raise RoundAlreadyUnderWay(
            f"round {table.round.round_id} is still under way (rule {RoundAlreadyUnderWay.rule})"
        )
    seated = table.seated
    if not seated:
        raise NoPlayersSeated(
            f"nobody is seated at table {table.table_id} (rule {NoPlayersSeated.rule})"
        )
    return open_round(
        round_id,
        table.rounds_opened + 1,
        now,
        table.settings.betting_window,
        ((seat.number, seat.player_id) for seat in seated),
    )


def _current_or_opened(
    table: Table, player_id: str, now: datetime
) -> tuple[Round, list[RoundEvent]]:
    """The round a bet goes into: the current one, or a new one its bet opens at an idle table."""
    if table.round_under_way or table.seat_of(player_id) is None:
        # A bettor holding no seat is refused by the round itself, naming the right rule.
        return _current(table), []
    opened = _open(table, table.next_round_id, now)
    current: Round | None = None
    for event in opened:
        current = evolve_round(current, event)
    assert current is not None
    return current, opened


def _check_dealing_shoe(table: Table, current: Round, shoe_id: str, position: int) -> None:
    """A coup comes from the open shoe at its next card; a resumed deal from its first card."""
    shoe = table.shoe
    if shoe is None:
        # Tables driven without a shoe lifecycle (the domain's own tests, replays of a bare
        # deal) take the cards they are given; the application always opens a shoe first.
        return
    if current.phase is not Phase.BETTING or not current.has_bets_in_play:
        # A resumed deal is checked against its own recorded cards by the round, and a round
        # without play draws no card at all.
        return
    if shoe.retired:
        raise NoShoeOpen(
            f"shoe {shoe.shoe_id} has retired; a new shoe must open before the next coup "
            f"(rule {NoShoeOpen.rule})"
        )
    if shoe_id != shoe.shoe_id or position != shoe.next_position:
        raise WrongShoe(
            f"the next coup is dealt from shoe {shoe.shoe_id} at position {shoe.next_position}, "
            f"not from shoe {shoe_id} at position {position} (rule {WrongShoe.rule})"
        )


def _reveal_shoe(table: Table, shoe_id: str, server_seed: str) -> ShoeRevealed:
    shoe = table.shoe
    if shoe is None or shoe.shoe_id != shoe_id or not shoe.retired:
        raise ShoeNotRetired(
            f"shoe {shoe_id} is not the retired shoe of table {table.table_id} "
            f"(rule {ShoeNotRetired.rule})"
        )
    try:
        matches = commitment(server_seed) == shoe.commitment
    except DomainError:
        matches = False
    if not matches:
        # Never echo the offered seed: it may be a live seed sent to the wrong shoe.
        raise RevealedSeedDiffers(
            f"the seed offered for shoe {shoe_id} does not hash to its commitment "
            f"{shoe.commitment} (rule {RevealedSeedDiffers.rule})"
        )
    return ShoeRevealed(shoe_id, server_seed)


def _require_reason(reason: str) -> None:
    if not reason.strip():
        raise MalfunctionNeedsAReason(
            f"an operator's action on a table must say why (rule {MalfunctionNeedsAReason.rule})"
        )


def _current(table: Table) -> Round:
    if table.round is None:
        raise NoRoundUnderWay(
            f"no betting window has opened at table {table.table_id} (rule {NoRoundUnderWay.rule})"
        )
    return table.round


def evolve(table: Table | None, event: TableEvent) -> Table:
    """The table after `event`; `TableCreated` starts it from nothing."""
    if isinstance(event, TableCreated):
        return _created(event)
    if table is None:
        raise ValueError(f"a table's first event is TableCreated, not {event.type}")
    if isinstance(
        event,
        PlayerSat | PlayerLeft | PlayerChangedSeat | PlayerMuted | PlayerUnmuted | PlayerRemoved,
    ):
        return _evolve_players(table, event)
    if isinstance(event, ShoeOpened | ShoeRetired | ShoeRevealed):
        return _evolve_shoe(table, event)
    if isinstance(event, MalfunctionDeclared | TableSuspended | TableReopened | ClientSeedRotated):
        return _evolve_malfunction(table, event)
    return _evolve_round(table, event)


def _created(event: TableCreated) -> Table:
    return Table(
        table_id=event.table_id,
        settings=TableSettings(
            seats=event.seats,
            limits=TableLimits(
                minimum=event.minimum, maximum=event.maximum, chips=tuple(event.chips)
            ),
            betting_window=event.betting_window_ms * _MILLISECOND,
            decks=event.decks,
            currency=event.currency,
        ),
        seats=(None,) * event.seats,
    )


def _evolve_players(table: Table, event: PlayerEvent) -> Table:
    match event:
        case PlayerSat():
            return _with_seat(table, event.seat, Seat(event.seat, event.player_id))
        case PlayerLeft():
            return _with_seat(table, event.seat, None)
        case PlayerChangedSeat():
            # The same seating moved, so Rebet still repeats the bets made at the old seat.
            moved = table.seats[event.from_seat - 1]
            last_bets = moved.last_bets if moved is not None else ()
            table = _with_seat(table, event.from_seat, None)
            return _with_seat(table, event.seat, Seat(event.seat, event.player_id, last_bets))
        case PlayerMuted():
            return replace(table, muted=table.muted | {event.player_id})
        case PlayerUnmuted():
            return replace(table, muted=table.muted - {event.player_id})
        case PlayerRemoved():
            if event.seat is not None:
                table = _with_seat(table, event.seat, None)
            return replace(table, removed=table.removed | {event.player_id})


def _evolve_malfunction(table: Table, event: MalfunctionEvent) -> Table:
    match event:
        case MalfunctionDeclared():
            # The voids and the suspension that follow it in the same append change the table.
            return table
        case TableSuspended():
            return replace(table, suspended_by=event.malfunction_id)
        case TableReopened():
            return replace(table, suspended_by=None)
        case ClientSeedRotated():
            return replace(table, next_client_seed=event.client_seed)


def _evolve_round(table: Table, event: RoundEvent) -> Table:
    if isinstance(event, RoundOpened):
        return replace(table, rounds_opened=event.number, round=evolve_round(None, event))
    current = table.round
    if current is None or event.round_id != current.round_id:
        # A void of an earlier round, appended to this table's stream, leaves the table as is.
        return table
    current = evolve_round(current, event)
    shoe = table.shoe
    if shoe is not None and isinstance(event, CardDrawn) and event.shoe_id == shoe.shoe_id:
        table = replace(table, shoe=replace(shoe, next_position=event.position + 1))
    elif shoe is not None and isinstance(event, CoupCompleted) and current.shoe_id == shoe.shoe_id:
        table = replace(table, shoe=replace(shoe, coups_dealt=shoe.coups_dealt + 1))
    if isinstance(event, RoundSettled):
        return replace(table, round=current, seats=_remember_bets(table.seats, current))
    return replace(table, round=current)


def _evolve_shoe(table: Table, event: ShoeOpened | ShoeRetired | ShoeRevealed) -> Table:
    match event:
        case ShoeOpened():
            shoe = Shoe(
                shoe_id=event.shoe_id,
                commitment=event.server_seed_hash,
                client_seed=event.client_seed,
                nonce=event.nonce,
                decks=event.decks,
                hands=event.hands,
            )
            return replace(table, shoe=shoe, shoes_opened=event.nonce, next_client_seed=None)
        case ShoeRetired():
            assert table.shoe is not None
            return replace(table, shoe=replace(table.shoe, retired=True))
        case ShoeRevealed():
            return replace(table, shoe=None)


def replay(events: Iterable[TableEvent]) -> Table:
    """A table rebuilt from its events, starting with TableCreated."""
    table: Table | None = None
    for event in events:
        table = evolve(table, event)
    if table is None:
        raise ValueError("a table needs at least its TableCreated event")
    return table


def _with_seat(table: Table, number: int, seat: Seat | None) -> Table:
    seats = list(table.seats)
    seats[number - 1] = seat
    return replace(table, seats=tuple(seats))


def _remember_bets(seats: tuple[Seat | None, ...], settled: Round) -> tuple[Seat | None, ...]:
    """Seats whose players played the settled round, with those bets kept for Rebet."""
    updated = list(seats)
    for participant in settled.participants:
        if participant.action is not Action.PRESSED_DEAL or not participant.bets:
            continue
        seat = updated[participant.seat - 1]
        # The player may have left after pressing Deal, and someone else sat down since.
        if seat is not None and seat.player_id == participant.player_id:
            updated[participant.seat - 1] = replace(seat, last_bets=participant.bets)
    return tuple(updated)


# Payloads: what the event store keeps for each event.


def event_payload(event: TableEvent) -> dict[str, object]:
    """The event's fields as JSON values: enums as their strings, tuples as lists."""
    return to_payload(event)


def event_from_payload(type_name: str, payload: Mapping[str, object]) -> TableEvent:
    """The event a stored `type` and payload describe; the inverse of `event_payload`."""
    return from_payload(EVENT_TYPES[type_name], payload)
