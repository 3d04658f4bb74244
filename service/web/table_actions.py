"""What a table command did, read from the events its append recorded.

Bets, seats and chat answer their commands alike: the acting player's round and seat, and
everything the same append dealt or settled with it. A live shoe's seed and undealt cards are
never part of it: only a revealed seed is one of the events.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

import marshmallow as ma
import orjson

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
from domain.seamless import StakeDebited
from domain.table import (
    TABLE_EVENT_TYPES,
    PlayerChangedSeat,
    PlayerLeft,
    PlayerRemoved,
    PlayerSat,
    ShoeOpened,
    ShoeRevealed,
    TableEvent,
    is_round_event,
)
from service.application.actor import Outcome
from service.application.appends import Receipt
from service.application.seamless_bets import SeamlessService
from service.application.streams import seamless_stream, table_stream
from service.application.wallets import Balance, WalletService


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


class BalanceAfterSchema(ma.Schema):
    """A wallet's balances just after a command, at the wallet version the command made."""

    available_pence = ma.fields.Integer(required=True)
    reserved_pence = ma.fields.Integer(required=True)
    version = ma.fields.Integer(required=True, metadata={"description": "The wallet's version."})


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
    balance_after = ma.fields.Nested(
        BalanceAfterSchema,
        required=True,
        allow_none=True,
        metadata={
            "description": "The wallet of `player_id` (the player who acts; for a removal,"
            " the player removed) just after this command, exactly (not the read model's):"
            " null when the command moved none of their money (Deal pressed while others"
            " still have to act, a seat taken). Other players' balances are theirs, and never"
            " in the answer."
        },
    )


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
    balance_after: dict[str, int] | None


_CARD_FIELDS: Final = ("hand", "position", "card", "reason")


def action_document(action: TableAction) -> dict[str, Any]:
    """The answer as TableActionSchema dumps it, built without walking the schema.

    A bet's answer was a third of its CPU in marshmallow's dump (docs/benchmarks.md, issue 23);
    TableAction's dicts already hold exactly the schema's fields but for a card's shoe_id, so
    only that and the datetimes need writing. The schema stays the spec's and the tests'
    definition: tests/unit/test_table_actions.py holds the two equal.
    """
    coup = action.coup
    if coup is not None:
        coup = {**coup, "cards": [{k: card[k] for k in _CARD_FIELDS} for card in coup["cards"]]}
    next_round = action.next_round
    if next_round is not None:
        next_round = {**next_round, "window_closes_at": next_round["window_closes_at"].isoformat()}
    closes = action.window_closes_at
    return {
        "table_id": action.table_id,
        "player_id": action.player_id,
        "round_id": action.round_id,
        "seat": action.seat,
        "actions": action.actions,
        "bets": action.bets,
        "returned": action.returned,
        "excluded": action.excluded,
        "coup": coup,
        "settlements": action.settlements,
        "shoe_revealed": action.shoe_revealed,
        "shoe_opened": action.shoe_opened,
        "next_round": next_round,
        "window_closes_at": None if closes is None else closes.isoformat(),
        "table_version": action.table_version,
        "balance_after": action.balance_after,
    }


def action_json(action: TableAction) -> bytes:
    """The answer's body as Flask's jsonify writes it: sorted keys, compact, a newline."""
    return orjson.dumps(action_document(action), option=orjson.OPT_SORT_KEYS) + b"\n"


def table_action(
    table_id: str,
    player_id: str | None,
    receipt: Receipt | Outcome,
    balance_after: Balance | None = None,
) -> TableAction:
    """The answer to a table command, from the events its append records.

    Positions are no part of it, so it is the same from the prepared outcome, before the
    append, as from the receipt after: the answer can be stored by the append itself.
    `balance_after` is `player_id`'s wallet just after the command, if it moved it.
    """
    collected = _Collected(player_id)
    for event in receipt.events:
        if isinstance(event, TABLE_EVENT_TYPES):  # not the wallets' side of the same append
            collected.add(event)
    return TableAction(
        table_id=table_id,
        player_id=player_id,
        round_id=collected.round_id
        if collected.round_id is not None or collected.coup is None
        else collected.coup["round_id"],
        seat=collected.seat,
        actions=collected.actions,
        bets=collected.bets,
        returned=collected.returned,
        excluded=collected.excluded,
        coup=collected.coup,
        settlements=collected.settlements,
        shoe_revealed=collected.revealed,
        shoe_opened=collected.opened_shoe,
        next_round=collected.next_round,
        window_closes_at=collected.window_closes_at,
        table_version=receipt.versions.get(table_stream(table_id), 0),
        balance_after=None
        if balance_after is None
        else {
            "available_pence": balance_after.available,
            "reserved_pence": balance_after.reserved,
            "version": balance_after.version,
        },
    )


@dataclass(slots=True)
class _Collected:
    """The parts of an answer, gathered event by event in append order."""

    player_id: str | None
    round_id: str | None = None
    seat: int | None = None
    actions: list[str] = field(default_factory=list)
    bets: list[dict[str, Any]] = field(default_factory=list)
    returned: list[dict[str, Any]] = field(default_factory=list)
    excluded: list[dict[str, Any]] = field(default_factory=list)
    settlements: list[dict[str, Any]] = field(default_factory=list)
    cards: list[dict[str, Any]] = field(default_factory=list)
    stands: list[dict[str, Any]] = field(default_factory=list)
    coup: dict[str, Any] | None = None
    revealed: dict[str, Any] | None = None
    opened_shoe: dict[str, Any] | None = None
    next_round: dict[str, Any] | None = None
    window_closes_at: datetime | None = None

    def add(self, event: TableEvent) -> None:
        self.actions.append(event.type)
        if self.round_id is None and is_round_event(event) and _acts(event, self.player_id):
            self.round_id = event.round_id
        collect = _COLLECTORS.get(type(event))
        if collect is not None:
            collect(self, event)

    def _seat(self, event: PlayerSat | PlayerLeft | PlayerRemoved | PlayerChangedSeat) -> None:
        if event.player_id == self.player_id:
            self.seat = event.seat

    def _bet(self, event: BetPlaced) -> None:
        self.bets.append(_bet(event))

    def _returned(self, event: StakeReturned) -> None:
        self.returned.append({**_bet(event), "reason": str(event.reason)})

    def _excluded(self, event: PlayerExcluded) -> None:
        self.excluded.append(
            {"seat": event.seat, "player_id": event.player_id, "reason": str(event.reason)}
        )

    def _card(self, event: CardDrawn) -> None:
        self.cards.append(
            {
                "hand": str(event.hand),
                "position": event.position,
                "card": event.card,
                "reason": event.reason,
                "shoe_id": event.shoe_id,
            }
        )

    def _stand(self, event: HandStood) -> None:
        self.stands.append({"hand": str(event.hand), "reason": event.reason})

    def _coup(self, event: CoupCompleted) -> None:
        self.coup = {
            "round_id": event.round_id,
            "shoe_id": self.cards[0]["shoe_id"] if self.cards else "",
            "cards": self.cards,
            "stands": self.stands,
            "player_total": event.player_total,
            "banker_total": event.banker_total,
            "outcome": str(event.outcome),
        }

    def _settled(self, event: BetSettled) -> None:
        self.settlements.append(
            {**_bet(event), "payout_pence": event.payout, "commission_pence": event.commission}
        )

    def _shoe_revealed(self, event: ShoeRevealed) -> None:
        self.revealed = {"shoe_id": event.shoe_id, "server_seed": event.server_seed}

    def _shoe_opened(self, event: ShoeOpened) -> None:
        self.opened_shoe = {
            "shoe_id": event.shoe_id,
            "server_seed_hash": event.server_seed_hash,
            "client_seed": event.client_seed,
            "nonce": event.nonce,
            "decks": event.decks,
            "hands": event.hands,
        }

    def _round_opened(self, event: RoundOpened) -> None:
        if self.coup is None and self.round_id == event.round_id:
            # This command's own round: the bet that opened it.
            self.window_closes_at = datetime.fromisoformat(event.deadline)
            return
        # A round opened after this command's own: the table moving on.
        self.next_round = {
            "round_id": event.round_id,
            "number": event.number,
            "window_closes_at": datetime.fromisoformat(event.deadline),
            "seats": [seat_number for seat_number, _ in event.participants],
        }


# What each kind of table event adds to an answer; any other kind adds only its type.
_COLLECTORS: Final[dict[type[Any], Callable[[_Collected, Any], None]]] = {
    PlayerSat: _Collected._seat,
    PlayerLeft: _Collected._seat,
    PlayerRemoved: _Collected._seat,
    PlayerChangedSeat: _Collected._seat,
    BetPlaced: _Collected._bet,
    StakeReturned: _Collected._returned,
    PlayerExcluded: _Collected._excluded,
    CardDrawn: _Collected._card,
    HandStood: _Collected._stand,
    CoupCompleted: _Collected._coup,
    BetSettled: _Collected._settled,
    ShoeRevealed: _Collected._shoe_revealed,
    ShoeOpened: _Collected._shoe_opened,
    RoundOpened: _Collected._round_opened,
}


def answered_with_balance(
    table_id: str, player_id: str, wallets: WalletService
) -> Callable[[Receipt | Outcome], TableAction]:
    """How a view answers a table command: the action, and the player's wallet just after it."""

    def render(receipt: Receipt | Outcome) -> TableAction:
        balance = wallets.balances_after(receipt).get(player_id)
        return table_action(table_id, player_id, receipt, balance)

    return render


def answered_with_debit(
    table_id: str, player_id: str
) -> Callable[[Receipt | Outcome], TableAction]:
    """How a seamless player's bet is answered: the action, and the balance the operator's
    wallet stated when it debited the stake (docs/wallets.md); Shoebox holds none of theirs.
    `version` is then the player's seamless stream's."""

    def render(receipt: Receipt | Outcome) -> TableAction:
        debits = [e for e in receipt.events if isinstance(e, StakeDebited)]
        balance = None
        if debits:
            version = receipt.versions.get(seamless_stream(player_id), 0)
            balance = Balance(player_id, debits[-1].balance, 0, version)
        return table_action(table_id, player_id, receipt, balance)

    return render


def answered_with_wallet(
    table_id: str, player_id: str, wallets: WalletService, seamless: SeamlessService | None
) -> Callable[[Receipt | Outcome], TableAction]:
    """How a view answers a table command that may move a player's money (Deal, Pass, a
    removal): their Shoebox wallet just after it, or for a seamless player, as their bet's
    answer does, the balance the operator's wallet last stated (None when the command moved
    none of their money, or before any answer).

    That balance is the wallet's own word, read after the command: a win or a rollback the
    command owes is sent by the worker within seconds and is not in it yet.
    """
    if seamless is None or not seamless.is_seamless(player_id):
        return answered_with_balance(table_id, player_id, wallets)

    def render(receipt: Receipt | Outcome) -> TableAction:
        # As for a Shoebox wallet, null when the command moved none of the player's money.
        moved = any(
            isinstance(e, (BetPlaced, StakeReturned, BetSettled)) and e.player_id == player_id
            for e in receipt.events
        )
        last = seamless.last_answer(player_id) if moved else None
        balance = None if last is None else Balance(player_id, last.balance, 0, last.version)
        return table_action(table_id, player_id, receipt, balance)

    return render


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
