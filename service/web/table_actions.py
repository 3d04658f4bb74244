"""What a table command did, read from the events its append recorded.

Bets, seats and chat answer their commands alike: the acting player's round and seat, and
everything the same append dealt or settled with it. A live shoe's seed and undealt cards are
never part of it: only a revealed seed is one of the events.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

import marshmallow as ma

from domain.outcome import Spot
from domain.round import (
    BetPlaced,
    BetSettled,
    CardDrawn,
    CoupCompleted,
    DealPressed,
    HandStood,
    PlayerExcluded,
    PlayerPassed,
    RoundOpened,
    StakeReturned,
)
from domain.table import (
    TABLE_EVENT_TYPES,
    PlayerLeft,
    PlayerRemoved,
    PlayerSat,
    ShoeOpened,
    ShoeRevealed,
    is_round_event,
)
from service.application.actor import Outcome
from service.application.appends import Receipt
from service.application.streams import table_stream


class BetEntrySchema(ma.Schema):
    """A stake placed on a spot."""

    seat = ma.fields.Integer(required=True)
    player_id = ma.fields.String(required=True)
    spot = ma.fields.String(required=True, metadata={"enum": [str(s) for s in Spot]})
    stake_pence = ma.fields.Integer(required=True)


class ReturnedStakeSchema(BetEntrySchema):
    """A stake that went back to its player unplayed, and why."""

    reason = ma.fields.String(
        required=True, metadata={"description": "removed, passed, excluded or voided"}
    )


class SettlementSchema(BetEntrySchema):
    """A played bet settled: the payout (stake included, 0 if lost) and the commission kept."""

    payout_pence = ma.fields.Integer(required=True)
    commission_pence = ma.fields.Integer(required=True)


class DealtCardSchema(ma.Schema):
    """A card dealt to a hand, with its shoe position and the tableau's reason."""

    hand = ma.fields.String(required=True, metadata={"enum": ["player", "banker"]})
    position = ma.fields.Integer(required=True, metadata={"description": "0-based, in the shoe"})
    card = ma.fields.String(required=True, metadata={"example": "4D"})
    reason = ma.fields.String(required=True)


class StandSchema(ma.Schema):
    """A hand that took no third card, and the tableau's reason."""

    hand = ma.fields.String(required=True)
    reason = ma.fields.String(required=True)


class CoupSchema(ma.Schema):
    """A coup dealt and settled: the cards in order, the totals and the outcome."""

    round_id = ma.fields.String(required=True)
    shoe_id = ma.fields.String(required=True)
    cards = ma.fields.List(ma.fields.Nested(DealtCardSchema), required=True)
    stands = ma.fields.List(ma.fields.Nested(StandSchema), required=True)
    player_total = ma.fields.Integer(required=True)
    banker_total = ma.fields.Integer(required=True)
    outcome = ma.fields.String(required=True, metadata={"enum": ["player", "banker", "tie"]})


class ExclusionSchema(ma.Schema):
    """A participant dropped from the coup without pressing Deal or Pass."""

    seat = ma.fields.Integer(required=True)
    player_id = ma.fields.String(required=True)
    reason = ma.fields.String(
        required=True, metadata={"description": "timed_out, left_table or removed"}
    )


class OpenedRoundSchema(ma.Schema):
    """A round whose betting window opened."""

    round_id = ma.fields.String(required=True)
    number = ma.fields.Integer(required=True)
    window_closes_at = ma.fields.DateTime(required=True)
    seats = ma.fields.List(ma.fields.Integer(), required=True)


class OpenedShoeSchema(ma.Schema):
    """A shoe opened: its commitment and seeds, published before it deals."""

    shoe_id = ma.fields.String(required=True)
    server_seed_hash = ma.fields.String(required=True)
    client_seed = ma.fields.String(required=True)
    nonce = ma.fields.Integer(required=True)
    decks = ma.fields.Integer(required=True)
    hands = ma.fields.Integer(required=True)


class RevealedShoeSchema(ma.Schema):
    """A retired shoe's server seed, revealed so that anyone can replay the shoe."""

    shoe_id = ma.fields.String(required=True)
    server_seed = ma.fields.String(required=True)


class TableActionSchema(ma.Schema):
    """What a command at a table did, and everything its append dealt or settled with it."""

    table_id = ma.fields.String(required=True)
    player_id = ma.fields.String(allow_none=True)
    round_id = ma.fields.String(
        allow_none=True, metadata={"description": "The round the action went into, if any."}
    )
    seat = ma.fields.Integer(allow_none=True)
    actions = ma.fields.List(
        ma.fields.String(),
        required=True,
        metadata={"description": "The table's events, in order, by type."},
    )
    bets = ma.fields.List(ma.fields.Nested(BetEntrySchema), required=True)
    returned = ma.fields.List(ma.fields.Nested(ReturnedStakeSchema), required=True)
    excluded = ma.fields.List(ma.fields.Nested(ExclusionSchema), required=True)
    coup = ma.fields.Nested(CoupSchema, allow_none=True)
    settlements = ma.fields.List(ma.fields.Nested(SettlementSchema), required=True)
    shoe_revealed = ma.fields.Nested(RevealedShoeSchema, allow_none=True)
    shoe_opened = ma.fields.Nested(OpenedShoeSchema, allow_none=True)
    next_round = ma.fields.Nested(OpenedRoundSchema, allow_none=True)
    window_closes_at = ma.fields.DateTime(
        allow_none=True,
        metadata={
            "description": "When the betting window of the round this action opened closes,"
            " if it opened one (the first bet at an idle table); a front end draws its"
            " countdown from it."
        },
    )
    table_version = ma.fields.Integer(required=True)


@dataclass(frozen=True, slots=True)
class TableAction:
    """The answer to a table command, as TableActionSchema writes it."""

    table_id: str
    player_id: str | None
    round_id: str | None
    seat: int | None
    actions: list[str]
    bets: list[dict[str, Any]]
    returned: list[dict[str, Any]]
    excluded: list[dict[str, Any]]
    coup: dict[str, Any] | None
    settlements: list[dict[str, Any]]
    shoe_revealed: dict[str, Any] | None
    shoe_opened: dict[str, Any] | None
    next_round: dict[str, Any] | None
    window_closes_at: datetime | None
    table_version: int


def table_action(table_id: str, player_id: str | None, receipt: Receipt | Outcome) -> TableAction:
    """The answer to a table command, from the events its append records.

    Positions are no part of it, so it is the same from the prepared outcome, before the
    append, as from the receipt after: the answer can be stored by the append itself.
    """
    round_id: str | None = None
    seat: int | None = None
    bets: list[dict[str, Any]] = []
    returned: list[dict[str, Any]] = []
    excluded: list[dict[str, Any]] = []
    settlements: list[dict[str, Any]] = []
    cards: list[dict[str, Any]] = []
    stands: list[dict[str, Any]] = []
    coup: dict[str, Any] | None = None
    revealed: dict[str, Any] | None = None
    opened_shoe: dict[str, Any] | None = None
    next_round: dict[str, Any] | None = None
    window_closes_at: datetime | None = None
    actions: list[str] = []
    for event in receipt.events:
        if not isinstance(event, TABLE_EVENT_TYPES):
            continue  # the wallets' side of the same append
        actions.append(event.type)
        if round_id is None and is_round_event(event) and _acts(event, player_id):
            round_id = event.round_id
        match event:
            case PlayerSat() | PlayerLeft() if event.player_id == player_id:
                seat = event.seat
            case PlayerRemoved() if event.player_id == player_id:
                seat = event.seat
            case BetPlaced():
                bets.append(_bet(event))
            case StakeReturned():
                returned.append({**_bet(event), "reason": str(event.reason)})
            case PlayerExcluded():
                excluded.append(
                    {"seat": event.seat, "player_id": event.player_id, "reason": str(event.reason)}
                )
            case CardDrawn():
                cards.append(
                    {
                        "hand": str(event.hand),
                        "position": event.position,
                        "card": event.card,
                        "reason": event.reason,
                        "shoe_id": event.shoe_id,
                    }
                )
            case HandStood():
                stands.append({"hand": str(event.hand), "reason": event.reason})
            case CoupCompleted():
                coup = {
                    "round_id": event.round_id,
                    "shoe_id": cards[0]["shoe_id"] if cards else "",
                    "cards": cards,
                    "stands": stands,
                    "player_total": event.player_total,
                    "banker_total": event.banker_total,
                    "outcome": str(event.outcome),
                }
            case BetSettled():
                settlements.append(
                    {
                        **_bet(event),
                        "payout_pence": event.payout,
                        "commission_pence": event.commission,
                    }
                )
            case ShoeRevealed():
                revealed = {"shoe_id": event.shoe_id, "server_seed": event.server_seed}
            case ShoeOpened():
                opened_shoe = {
                    "shoe_id": event.shoe_id,
                    "server_seed_hash": event.server_seed_hash,
                    "client_seed": event.client_seed,
                    "nonce": event.nonce,
                    "decks": event.decks,
                    "hands": event.hands,
                }
            case RoundOpened() if coup is not None or round_id != event.round_id:
                # A round opened after this command's own: the table moving on.
                next_round = {
                    "round_id": event.round_id,
                    "number": event.number,
                    "window_closes_at": datetime.fromisoformat(event.deadline),
                    "seats": [seat_number for seat_number, _ in event.participants],
                }
            case RoundOpened():
                # This command's own round: the bet that opened it.
                window_closes_at = datetime.fromisoformat(event.deadline)
            case _:
                pass
    if round_id is None and coup is not None:
        round_id = coup["round_id"]
    return TableAction(
        table_id=table_id,
        player_id=player_id,
        round_id=round_id,
        seat=seat,
        actions=actions,
        bets=bets,
        returned=returned,
        excluded=excluded,
        coup=coup,
        settlements=settlements,
        shoe_revealed=revealed,
        shoe_opened=opened_shoe,
        next_round=next_round,
        window_closes_at=window_closes_at,
        table_version=receipt.versions.get(table_stream(table_id), 0),
    )


_ACTS: Final = (BetPlaced, StakeReturned, DealPressed, PlayerPassed, PlayerExcluded)


def _acts(event: object, player_id: str | None) -> bool:
    """Whether a round event is the acting player's own, so it names their round."""
    if isinstance(event, RoundOpened):
        return any(who == player_id for _, who in event.participants)
    if isinstance(event, _ACTS):
        return event.player_id == player_id
    return False


def _bet(event: BetPlaced | StakeReturned | BetSettled) -> dict[str, Any]:
    return {
        "seat": event.seat,
        "player_id": event.player_id,
        "spot": str(event.spot),
        "stake_pence": event.stake,
    }
