"""What a table's live state shows a front end: never a seed, never an undealt card."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from domain.round import CardDrawn, Phase
from domain.table import Table


@dataclass(frozen=True, slots=True)
class BetView:
    """One bet on the layout: a spot and its stake in pence."""

    spot: str
    stake: int


@dataclass(frozen=True, slots=True)
class SeatView:
    """A seat as the table shows it: who sits there and what they did in the current round."""

    number: int
    player_id: str | None
    in_round: bool
    action: str | None
    bets: tuple[BetView, ...]


@dataclass(frozen=True, slots=True)
class CardView:
    """A card dealt in the current round: hand, shoe position, code and the tableau's reason."""

    hand: str
    position: int
    card: str
    reason: str


@dataclass(frozen=True, slots=True)
class LiveState:
    """A table's live state for a front end, read at one version of the table's stream."""

    table_id: str
    version: int
    seats_count: int
    decks: int
    minimum: int
    maximum: int
    currency: str
    betting_window_ms: int
    phase: str
    round_id: str | None
    round_number: int | None
    window_closes_at: datetime | None
    seats: tuple[SeatView, ...]
    shoe_id: str | None
    server_seed_hash: str | None
    hands_left: int | None
    cards_left: int | None
    cards: tuple[CardView, ...]
    outcome: str | None


IDLE = "idle"
"""The phase of a table with no round, or whose last round is over and no next one opened."""
CLOSING = "closing"
"""The phase of a round whose betting window has lapsed (or everyone acted) but which the table
has not yet closed and dealt: no bet is taken, and the deal follows within moments."""


def live_state(version: int, table: Table, *, closing: bool = False) -> LiveState:
    """The table at `version` as a front end sees it; `closing` if its window is overdue."""
    current = table.round
    settings = table.settings
    phase = IDLE if current is None or current.is_over else str(current.phase)
    if closing and current is not None and current.phase is Phase.BETTING:
        phase = CLOSING
    seats: list[SeatView] = []
    for number, seat in enumerate(table.seats, start=1):
        participant = (
            current.participant(seat.player_id)
            if seat is not None and current is not None and not current.is_over
            else None
        )
        seats.append(
            SeatView(
                number=number,
                player_id=seat.player_id if seat is not None else None,
                in_round=participant is not None,
                action=str(participant.action) if participant is not None else None,
                bets=tuple(BetView(str(b.spot), b.stake) for b in participant.bets)
                if participant is not None
                else (),
            )
        )
    shoe = table.live_shoe
    cards: tuple[CardView, ...] = ()
    if current is not None:
        cards = tuple(
            CardView(str(e.hand), e.position, e.card, e.reason)
            for e in current.deal_events
            if isinstance(e, CardDrawn)
        )
    return LiveState(
        table_id=table.table_id,
        version=version,
        seats_count=settings.seats,
        decks=settings.decks,
        minimum=settings.limits.minimum,
        maximum=settings.limits.maximum,
        currency=settings.currency,
        betting_window_ms=settings.betting_window // timedelta(milliseconds=1),
        phase=phase,
        round_id=current.round_id if current is not None else None,
        round_number=current.number if current is not None else None,
        window_closes_at=current.deadline if current is not None and not current.is_over else None,
        seats=tuple(seats),
        shoe_id=shoe.shoe_id if shoe is not None else None,
        server_seed_hash=shoe.commitment if shoe is not None else None,
        hands_left=shoe.hands_left if shoe is not None else None,
        cards_left=shoe.cards_left if shoe is not None else None,
        cards=cards,
        outcome=str(current.outcome) if current is not None and current.outcome else None,
    )
