"""One round at a table as a pure state machine: bets, Deal or Pass, the coup, settlement, void.

The round is driven by the table (domain/table.py), which opens it with the players seated at
that moment and routes the players' commands here. Every function below either returns the
events that record what happened or raises a `RoundError` naming the rule that refused it;
state changes only in `evolve_round`.

Event conventions, shared with domain/table.py:
- every event is a frozen dataclass whose fields are str, int, bool, None, StrEnum values
  (written as their string) or tuples of those, so `event_payload` turns it into JSON;
- every event has a stable `type` name that never changes with the class name;
- instants are ISO 8601 strings in UTC with a "+00:00" offset (`datetime.isoformat()`);
- cards are spec codes such as "4D", with their shoe position beside them;
- money is integer pence.

Stake movement is explicit so that a wallet projection can follow it exactly: `BetPlaced`
reserves a stake; each reserved stake later leaves by exactly one of `StakeReturned` (the
stake comes back: bets removed, Pass, exclusion, void) or `BetSettled` (the payout, stake
included, is paid). A settled round that is voided gets `SettlementReversed` per bet, which
takes the payout back and returns the stake, so a voided round nets to nothing.
"""

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import ClassVar, TypeAlias

from domain.cards import Card, card_code
from domain.limits import TableLimits, check_stake
from domain.outcome import Outcome, Spot
from domain.payouts import settle
from domain.round_errors import (
    AlreadyPassed,
    AlreadyPressedDeal,
    BettingWindowClosed,
    BettingWindowStillOpen,
    CoupAlreadyDealt,
    DealNeedsABet,
    NoBetsToRemove,
    NobodyToExclude,
    NoPreviousBets,
    NoRoundUnderWay,
    NotAParticipant,
    ParticipantExcluded,
    PlayersStillToAct,
    RebetOverBets,
    RecordedDealDiffers,
    RoundAlreadyVoided,
    VoidNeedsAReason,
)
from domain.tableau import Hand, deal_coup


class Phase(StrEnum):
    """Where a round is in its life."""

    BETTING = "betting"
    DEALING = "dealing"
    SETTLING = "settling"
    SETTLED = "settled"
    ENDED_WITHOUT_PLAY = "ended_without_play"
    VOIDED = "voided"


class Action(StrEnum):
    """What a participant has done about the coup so far."""

    PENDING = "pending"
    PRESSED_DEAL = "pressed_deal"
    PASSED = "passed"
    EXCLUDED = "excluded"


class ExclusionReason(StrEnum):
    """Why a participant was dropped from a round without pressing Deal or Pass."""

    TIMED_OUT = "timed_out"
    LEFT_TABLE = "left_table"
    REMOVED = "removed"
    # Moved to another seat before betting: they play from there from the next round.
    CHANGED_SEAT = "changed_seat"


class ReturnReason(StrEnum):
    """Why a reserved stake went back to the player unplayed."""

    REMOVED = "removed"
    PASSED = "passed"
    EXCLUDED = "excluded"
    VOIDED = "voided"


_SPOT_ORDER: dict[Spot, int] = {spot: index for index, spot in enumerate(Spot)}
_OVER = (Phase.SETTLED, Phase.ENDED_WITHOUT_PLAY, Phase.VOIDED)
_MID_DEAL = (Phase.DEALING, Phase.SETTLING)


# Events. Each records one fact; none carries anything that can be worked out from the others
# except the coup's totals and outcome, which regulators read without re-running the tableau.


@dataclass(frozen=True, slots=True)
class RoundOpened:
    """The betting window opened for the players seated at that moment."""

    type: ClassVar[str] = "RoundOpened"
    round_id: str
    number: int
    opened_at: str
    deadline: str
    participants: tuple[tuple[int, str], ...]  # (seat, player_id), in seat order


@dataclass(frozen=True, slots=True)
class BetPlaced:
    """A participant put a stake on a spot; the stake is reserved from their wallet."""

    type: ClassVar[str] = "BetPlaced"
    round_id: str
    seat: int
    player_id: str
    spot: Spot
    stake: int


@dataclass(frozen=True, slots=True)
class StakeReturned:
    """The whole stake on one spot went back to the player unplayed."""

    type: ClassVar[str] = "StakeReturned"
    round_id: str
    seat: int
    player_id: str
    spot: Spot
    stake: int
    reason: ReturnReason


@dataclass(frozen=True, slots=True)
class DealPressed:
    """A participant pressed Deal: their bets are final and will be played."""

    type: ClassVar[str] = "DealPressed"
    round_id: str
    seat: int
    player_id: str


@dataclass(frozen=True, slots=True)
class PlayerPassed:
    """A participant pressed Pass and sits this coup out."""

    type: ClassVar[str] = "PlayerPassed"
    round_id: str
    seat: int
    player_id: str


@dataclass(frozen=True, slots=True)
class PlayerExcluded:
    """A participant was dropped from the coup without pressing Deal or Pass."""

    type: ClassVar[str] = "PlayerExcluded"
    round_id: str
    seat: int
    player_id: str
    reason: ExclusionReason


@dataclass(frozen=True, slots=True)
class CardDrawn:
    """A card left the shoe for one hand, with the tableau's reason for drawing it."""

    type: ClassVar[str] = "CardDrawn"
    round_id: str
    shoe_id: str
    hand: Hand
    position: int
    card: str
    reason: str


@dataclass(frozen=True, slots=True)
class HandStood:
    """A hand took no third card, with the tableau's reason."""

    type: ClassVar[str] = "HandStood"
    round_id: str
    hand: Hand
    reason: str


@dataclass(frozen=True, slots=True)
class CoupCompleted:
    """Both hands are complete and the coup has an outcome."""

    type: ClassVar[str] = "CoupCompleted"
    round_id: str
    player_total: int
    banker_total: int
    outcome: Outcome


@dataclass(frozen=True, slots=True)
class BetSettled:
    """A played bet was settled: `payout` (stake included) paid, `commission` kept by the house."""

    type: ClassVar[str] = "BetSettled"
    round_id: str
    seat: int
    player_id: str
    spot: Spot
    stake: int
    payout: int
    commission: int


@dataclass(frozen=True, slots=True)
class RoundSettled:
    """Every played bet of the round is settled and the round is over."""

    type: ClassVar[str] = "RoundSettled"
    round_id: str


@dataclass(frozen=True, slots=True)
class RoundEndedWithoutPlay:
    """Nobody had a bet in play, so no card was dealt and the round is over."""

    type: ClassVar[str] = "RoundEndedWithoutPlay"
    round_id: str


@dataclass(frozen=True, slots=True)
class DealResumed:
    """An interrupted deal is being completed from its shoe; the events after this finish it."""

    type: ClassVar[str] = "DealResumed"
    round_id: str
    events_already_recorded: int


@dataclass(frozen=True, slots=True)
class SettlementReversed:
    """A void undid a settled bet: the payout was taken back and the stake returned."""

    type: ClassVar[str] = "SettlementReversed"
    round_id: str
    seat: int
    player_id: str
    spot: Spot
    stake: int
    payout: int
    commission: int


@dataclass(frozen=True, slots=True)
class RoundVoided:
    """The round was voided: every stake is back with its player and nothing is paid."""

    type: ClassVar[str] = "RoundVoided"
    round_id: str
    reason: str


RoundEvent: TypeAlias = (
    RoundOpened
    | BetPlaced
    | StakeReturned
    | DealPressed
    | PlayerPassed
    | PlayerExcluded
    | CardDrawn
    | HandStood
    | CoupCompleted
    | BetSettled
    | RoundSettled
    | RoundEndedWithoutPlay
    | DealResumed
    | SettlementReversed
    | RoundVoided
)
DealEvent: TypeAlias = CardDrawn | HandStood | CoupCompleted | BetSettled
ROUND_EVENT_TYPES: tuple[type[RoundEvent], ...] = (
    RoundOpened,
    BetPlaced,
    StakeReturned,
    DealPressed,
    PlayerPassed,
    PlayerExcluded,
    CardDrawn,
    HandStood,
    CoupCompleted,
    BetSettled,
    RoundSettled,
    RoundEndedWithoutPlay,
    DealResumed,
    SettlementReversed,
    RoundVoided,
)


# State.


@dataclass(frozen=True, slots=True)
class Bet:
    """A participant's stake on one spot; several placements on a spot add up to one bet."""

    spot: Spot
    stake: int


@dataclass(frozen=True, slots=True)
class Participant:
    """A player seated when the window opened, with what they have done and their open bets."""

    seat: int
    player_id: str
    action: Action = Action.PENDING
    # Stakes reserved and not returned, in spot order; settled bets stay, for Rebet and voids.
    bets: tuple[Bet, ...] = ()

    @property
    def staked(self) -> int:
        """The pence this participant has on the layout this round."""
        return sum(bet.stake for bet in self.bets)


@dataclass(frozen=True, slots=True)
class Round:
    """A round's state, rebuilt by folding its events through `evolve_round`."""

    round_id: str
    number: int
    opened_at: datetime
    deadline: datetime
    participants: tuple[Participant, ...]
    phase: Phase = Phase.BETTING
    shoe_id: str | None = None
    first_position: int | None = None
    # What the deal has recorded so far, in order; an interrupted deal is checked against it.
    deal_events: tuple[DealEvent, ...] = ()
    outcome: Outcome | None = None
    void_reason: str | None = None

    def participant(self, player_id: str) -> Participant | None:
        """The participant with this player id, if the player is in the round."""
        for participant in self.participants:
            if participant.player_id == player_id:
                return participant
        return None

    @property
    def pending(self) -> tuple[Participant, ...]:
        """Participants who have neither pressed Deal, passed, nor been excluded."""
        return tuple(p for p in self.participants if p.action is Action.PENDING)

    @property
    def is_over(self) -> bool:
        """Whether the round is settled, ended without play, or voided."""
        return self.phase in _OVER

    @property
    def ready_to_deal(self) -> bool:
        """Whether every participant has acted or been excluded and no card is dealt yet."""
        return self.phase is Phase.BETTING and not self.pending

    @property
    def deal_interrupted(self) -> bool:
        """Whether a deal began but its events stopped before the round was settled."""
        return self.phase in _MID_DEAL

    @property
    def has_bets_in_play(self) -> bool:
        """Whether anyone pressed Deal with a bet, so the coup is dealt rather than skipped."""
        return any(p.action is Action.PRESSED_DEAL and p.bets for p in self.participants)

    @property
    def holds_play(self) -> bool:
        """Whether a void would undo anything: a stake still on the layout, or a card dealt."""
        return bool(self.deal_events) or any(p.bets for p in self.participants)

    def window_closed(self, now: datetime) -> bool:
        """Whether the betting window's deadline has passed at `now`."""
        return now >= self.deadline


# Deciding: each function returns the events a command causes, or raises naming the rule.


def open_round(
    round_id: str,
    number: int,
    now: datetime,
    window: timedelta,
    participants: Iterable[tuple[int, str]],
) -> list[RoundEvent]:
    """Open the betting window now for the given (seat, player_id) pairs, closing after `window`."""
    now = _utc(now)
    return [
        RoundOpened(
            round_id=round_id,
            number=number,
            opened_at=now.isoformat(),
            deadline=(now + window).isoformat(),
            participants=tuple(sorted(participants)),
        )
    ]


def place_bet(
    current: Round,
    player_id: str,
    spot: Spot,
    stake: int,
    player_limit: int | None,
    limits: TableLimits,
    now: datetime,
) -> list[RoundEvent]:
    """Put a stake on a spot, within the table's limits and the player's own, over the round."""
    participant = _acting(current, player_id, now)
    check_stake(limits, stake, participant.staked, player_limit)
    return [BetPlaced(current.round_id, participant.seat, player_id, Spot(spot), stake)]


def remove_bets(current: Round, player_id: str, now: datetime) -> list[RoundEvent]:
    """Take all of a participant's bets back off the layout before they act."""
    participant = _acting(current, player_id, now)
    if not participant.bets:
        raise NoBetsToRemove(f"{player_id} has no bets to remove (rule {NoBetsToRemove.rule})")
    return _returns(current.round_id, participant, ReturnReason.REMOVED)


def rebet(
    current: Round,
    player_id: str,
    last_bets: Sequence[Bet],
    player_limit: int | None,
    limits: TableLimits,
    now: datetime,
) -> list[RoundEvent]:
    """Repeat the bets of the player's last played round; all of them are placed or none is."""
    participant = _acting(current, player_id, now)
    if not last_bets:
        raise NoPreviousBets(
            f"{player_id} has no bets from a previous round at this seat to repeat "
            f"(rule {NoPreviousBets.rule})"
        )
    if participant.bets:
        raise RebetOverBets(
            f"{player_id} already has bets on the layout; rebet repeats the last round's bets "
            f"onto an empty layout (rule {RebetOverBets.rule})"
        )
    staked = 0
    events: list[RoundEvent] = []
    for bet in last_bets:
        check_stake(limits, bet.stake, staked, player_limit)
        staked += bet.stake
        events.append(BetPlaced(current.round_id, participant.seat, player_id, bet.spot, bet.stake))
    return events


def press_deal(current: Round, player_id: str, now: datetime) -> list[RoundEvent]:
    """Confirm the participant's bets for this coup."""
    participant = _acting(current, player_id, now)
    if not participant.bets:
        raise DealNeedsABet(
            f"{player_id} pressed Deal with no bet on the layout; place a bet or press Pass "
            f"(rule {DealNeedsABet.rule})"
        )
    return [DealPressed(current.round_id, participant.seat, player_id)]


def pass_coup(current: Round, player_id: str, now: datetime) -> list[RoundEvent]:
    """Skip this coup: any bets on the layout are returned."""
    participant = _acting(current, player_id, now)
    events = _returns(current.round_id, participant, ReturnReason.PASSED)
    events.append(PlayerPassed(current.round_id, participant.seat, player_id))
    return events


def close_window(current: Round, now: datetime) -> list[RoundEvent]:
    """Once the deadline has passed, exclude everyone who has not acted and return their bets."""
    _require_betting(current)
    now = _utc(now)
    if not current.window_closed(now):
        raise BettingWindowStillOpen(
            f"the betting window of round {current.round_id} is open until "
            f"{current.deadline.isoformat()}; it is {now.isoformat()} "
            f"(rule {BettingWindowStillOpen.rule})"
        )
    pending = current.pending
    if not pending:
        raise NobodyToExclude(
            f"every participant of round {current.round_id} has already acted or been excluded "
            f"(rule {NobodyToExclude.rule})"
        )
    events: list[RoundEvent] = []
    for participant in pending:
        events.extend(_exclusion(current.round_id, participant, ExclusionReason.TIMED_OUT))
    return events


def withdraw(
    current: Round, player_id: str, reason: ExclusionReason = ExclusionReason.LEFT_TABLE
) -> list[RoundEvent]:
    """What leaving the table does to the round: a player yet to act is excluded, bets returned.

    A player who already pressed Deal has committed their bets, so they stay in play and are
    settled to the player even after they leave; one who passed or was excluded has nothing left
    in the round. Either way leaving changes nothing here.
    """
    participant = current.participant(player_id)
    if (
        current.phase is not Phase.BETTING
        or participant is None
        or participant.action is not Action.PENDING
    ):
        return []
    return _exclusion(current.round_id, participant, reason)


def deal(current: Round, shoe_id: str, cards: Sequence[Card], position: int) -> list[RoundEvent]:
    """Deal and settle the coup from `cards[position:]` once everyone has acted or been excluded.

    If nobody pressed Deal with a bet, a live dealer would not deal to an empty layout: no card
    leaves the shoe (its next position is unchanged) and the round ends with
    `RoundEndedWithoutPlay`. If an earlier deal of this round was interrupted part-way, the same
    command completes it: the coup is dealt again from the same position, the events already
    recorded must match it exactly, and `DealResumed` is followed by only the missing events.
    """
    if current.phase is Phase.BETTING:
        if current.pending:
            waiting = ", ".join(f"seat {p.seat}" for p in current.pending)
            raise PlayersStillToAct(
                f"the coup of round {current.round_id} waits for {waiting} to press Deal or Pass "
                f"or to be excluded (rule {PlayersStillToAct.rule})"
            )
        if not current.has_bets_in_play:
            return [RoundEndedWithoutPlay(current.round_id)]
        return _deal_events(current, shoe_id, cards, position)
    if current.deal_interrupted:
        expected = _deal_events(current, shoe_id, cards, position)
        recorded = current.deal_events
        if (
            shoe_id != current.shoe_id
            or position != current.first_position
            or tuple(expected[: len(recorded)]) != recorded
        ):
            raise RecordedDealDiffers(
                f"round {current.round_id} was dealt from shoe {current.shoe_id} at position "
                f"{current.first_position}, and shoe {shoe_id} at position {position} does not "
                f"reproduce its recorded events (rule {RecordedDealDiffers.rule})"
            )
        resumed: list[RoundEvent] = [DealResumed(current.round_id, len(recorded))]
        resumed.extend(expected[len(recorded) :])
        return resumed
    _require_not_over(current)
    raise AssertionError(f"unhandled phase {current.phase}")  # pragma: no cover


def void_round(current: Round, reason: str) -> list[RoundEvent]:
    """Void the round in any phase: return every stake, reverse any settlement, pay nothing."""
    if current.phase is Phase.VOIDED:
        raise RoundAlreadyVoided(
            f"round {current.round_id} is already voided (rule {RoundAlreadyVoided.rule})"
        )
    if not reason.strip():
        raise VoidNeedsAReason(f"a void must say why (rule {VoidNeedsAReason.rule})")
    settled = {
        (event.player_id, event.spot): event
        for event in current.deal_events
        if isinstance(event, BetSettled)
    }
    events: list[RoundEvent] = []
    for participant in current.participants:
        for bet in participant.bets:
            settlement = settled.get((participant.player_id, bet.spot))
            if settlement is None:
                events.append(
                    StakeReturned(
                        current.round_id,
                        participant.seat,
                        participant.player_id,
                        bet.spot,
                        bet.stake,
                        ReturnReason.VOIDED,
                    )
                )
            else:
                events.append(
                    SettlementReversed(
                        current.round_id,
                        settlement.seat,
                        settlement.player_id,
                        settlement.spot,
                        settlement.stake,
                        settlement.payout,
                        settlement.commission,
                    )
                )
    events.append(RoundVoided(current.round_id, reason))
    return events


def _utc(now: datetime) -> datetime:
    if now.tzinfo is None or now.utcoffset() is None:
        # A naive time is a caller's bug, not a player's refusal, hence not a DomainError.
        raise ValueError(f"the clock must give timezone-aware times, not {now!r}")
    return now.astimezone(UTC)


def _require_not_over(current: Round) -> None:
    if current.phase is Phase.VOIDED:
        raise RoundAlreadyVoided(
            f"round {current.round_id} was voided (rule {RoundAlreadyVoided.rule})"
        )
    if current.phase is Phase.SETTLED:
        raise CoupAlreadyDealt(
            f"the coup of round {current.round_id} was dealt and settled "
            f"(rule {CoupAlreadyDealt.rule})"
        )
    if current.phase is Phase.ENDED_WITHOUT_PLAY:
        raise NoRoundUnderWay(
            f"round {current.round_id} ended with nobody in play; wait for the next betting "
            f"window (rule {NoRoundUnderWay.rule})"
        )


def _require_betting(current: Round) -> None:
    _require_not_over(current)
    if current.phase is not Phase.BETTING:
        raise CoupAlreadyDealt(
            f"the coup of round {current.round_id} is being dealt; bets, Deal and Pass are "
            f"closed (rule {CoupAlreadyDealt.rule})"
        )


def _acting(current: Round, player_id: str, now: datetime) -> Participant:
    """The participant who may still bet, Deal or Pass, or the refusal saying why not."""
    _require_betting(current)
    participant = current.participant(player_id)
    if participant is None:
        raise NotAParticipant(
            f"{player_id} was not seated when round {current.round_id} opened and plays from "
            f"the next round (rule {NotAParticipant.rule})"
        )
    if participant.action is Action.PRESSED_DEAL:
        raise AlreadyPressedDeal(
            f"{player_id} pressed Deal; their bets are final (rule {AlreadyPressedDeal.rule})"
        )
    if participant.action is Action.PASSED:
        raise AlreadyPassed(f"{player_id} passed this coup (rule {AlreadyPassed.rule})")
    if participant.action is Action.EXCLUDED:
        raise ParticipantExcluded(
            f"{player_id} was excluded from this coup (rule {ParticipantExcluded.rule})"
        )
    if current.window_closed(_utc(now)):
        raise BettingWindowClosed(
            f"the betting window of round {current.round_id} closed at "
            f"{current.deadline.isoformat()} (rule {BettingWindowClosed.rule})"
        )
    return participant


def _returns(round_id: str, participant: Participant, reason: ReturnReason) -> list[RoundEvent]:
    return [
        StakeReturned(
            round_id, participant.seat, participant.player_id, bet.spot, bet.stake, reason
        )
        for bet in participant.bets
    ]


def _exclusion(
    round_id: str, participant: Participant, reason: ExclusionReason
) -> list[RoundEvent]:
    events = _returns(round_id, participant, ReturnReason.EXCLUDED)
    events.append(PlayerExcluded(round_id, participant.seat, participant.player_id, reason))
    return events


def _deal_events(
    current: Round, shoe_id: str, cards: Sequence[Card], position: int
) -> list[RoundEvent]:
    """Every event of a complete deal: cards and stands in tableau order, outcome, settlements."""
    round_id = current.round_id
    coup = deal_coup(cards, position)
    drawn = coup.cards
    events: list[RoundEvent] = [
        CardDrawn(round_id, shoe_id, card.hand, card.position, card_code(card.card), card.reason)
        for card in drawn[:4]
    ]
    third_cards = iter(drawn[4:])
    for decision in coup.decisions:
        if decision.draws:
            card = next(third_cards)
            events.append(
                CardDrawn(
                    round_id, shoe_id, card.hand, card.position, card_code(card.card), card.reason
                )
            )
        else:
            events.append(HandStood(round_id, decision.hand, decision.reason))
    outcome = coup.outcome
    events.append(CoupCompleted(round_id, coup.player_total, coup.banker_total, outcome))
    for participant in current.participants:
        if participant.action is not Action.PRESSED_DEAL:
            continue
        for bet in participant.bets:
            settlement = settle(bet.spot, bet.stake, outcome)
            events.append(
                BetSettled(
                    round_id,
                    participant.seat,
                    participant.player_id,
                    bet.spot,
                    bet.stake,
                    settlement.payout,
                    settlement.commission,
                )
            )
    events.append(RoundSettled(round_id))
    return events


# Evolving: the only way a round's state changes.


def evolve_round(current: Round | None, event: RoundEvent) -> Round:
    """The round after `event`; `RoundOpened` starts a new round from nothing."""
    if isinstance(event, RoundOpened):
        return Round(
            round_id=event.round_id,
            number=event.number,
            opened_at=datetime.fromisoformat(event.opened_at),
            deadline=datetime.fromisoformat(event.deadline),
            participants=tuple(
                Participant(seat, player_id) for seat, player_id in event.participants
            ),
        )
    if current is None:
        raise ValueError(f"a round's first event is RoundOpened, not {event.type}")
    match event:
        case BetPlaced(player_id=player_id, spot=spot, stake=stake):
            return _with_stake(current, player_id, spot, stake)
        case StakeReturned(player_id=player_id, spot=spot, stake=stake):
            return _with_stake(current, player_id, spot, -stake)
        case DealPressed(player_id=player_id):
            return _with_action(current, player_id, Action.PRESSED_DEAL)
        case PlayerPassed(player_id=player_id):
            return _with_action(current, player_id, Action.PASSED)
        case PlayerExcluded(player_id=player_id):
            return _with_action(current, player_id, Action.EXCLUDED)
        case CardDrawn():
            if current.phase is Phase.BETTING:
                return replace(
                    current,
                    phase=Phase.DEALING,
                    shoe_id=event.shoe_id,
                    first_position=event.position,
                    deal_events=(event,),
                )
            return replace(current, deal_events=(*current.deal_events, event))
        case HandStood():
            return replace(current, deal_events=(*current.deal_events, event))
        case CoupCompleted(outcome=outcome):
            return replace(
                current,
                phase=Phase.SETTLING,
                outcome=outcome,
                deal_events=(*current.deal_events, event),
            )
        case BetSettled():
            return replace(current, deal_events=(*current.deal_events, event))
        case RoundSettled():
            return replace(current, phase=Phase.SETTLED)
        case RoundEndedWithoutPlay():
            return replace(current, phase=Phase.ENDED_WITHOUT_PLAY)
        case DealResumed():
            return current
        case SettlementReversed(player_id=player_id, spot=spot, stake=stake):
            return _with_stake(current, player_id, spot, -stake)
        case RoundVoided(reason=reason):
            return replace(current, phase=Phase.VOIDED, void_reason=reason)
    raise AssertionError(f"unhandled event {event!r}")  # pragma: no cover


def replay_round(events: Iterable[RoundEvent]) -> Round:
    """A round rebuilt from its own events, e.g. to void a round that is no longer current."""
    current: Round | None = None
    for event in events:
        current = evolve_round(current, event)
    if current is None:
        raise ValueError("a round needs at least its RoundOpened event")
    return current


def _with_participant(current: Round, player_id: str, participant: Participant) -> Round:
    return replace(
        current,
        participants=tuple(
            participant if p.player_id == player_id else p for p in current.participants
        ),
    )


def _find(current: Round, player_id: str) -> Participant:
    participant = current.participant(player_id)
    if participant is None:
        raise ValueError(f"round {current.round_id} has no participant {player_id!r}")
    return participant


def _with_action(current: Round, player_id: str, action: Action) -> Round:
    participant = _find(current, player_id)
    return _with_participant(current, player_id, replace(participant, action=action))


def _with_stake(current: Round, player_id: str, spot: Spot, change: int) -> Round:
    participant = _find(current, player_id)
    stakes = {bet.spot: bet.stake for bet in participant.bets}
    stake = stakes.get(spot, 0) + change
    if stake:
        stakes[Spot(spot)] = stake
    else:
        stakes.pop(spot, None)
    bets = tuple(
        Bet(bet_spot, stakes[bet_spot]) for bet_spot in sorted(stakes, key=_SPOT_ORDER.__getitem__)
    )
    return _with_participant(current, player_id, replace(participant, bets=bets))
