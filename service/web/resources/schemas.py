"""The schemas shared by the game's resources, and the one way a request body is parsed.

Requests are strict: unknown fields are refused (marshmallow's RAISE), money is an integer
number of pence (`fields.Integer(strict=True)`: no floats, strings, booleans, NaN or 1e400),
capped at the wallet's largest single movement, and ids match ID_PATTERN. Responses name
money `*_pence` and never carry a live shoe's seed or its undealt cards: a table command's
answer is built from the events it appended, and only a revealed seed is one of those.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

import flask
import marshmallow as ma
from webargs.flaskparser import FlaskParser
from werkzeug.datastructures import MultiDict

from domain.limits import TableLimits
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
from domain.shoe import DEFAULT_DECKS
from domain.table import (
    MAX_DECKS,
    MAX_SEATS,
    TABLE_EVENT_TYPES,
    PlayerLeft,
    PlayerRemoved,
    PlayerSat,
    ShoeOpened,
    ShoeRevealed,
    Table,
    is_round_event,
)
from domain.wallet import MAX_AMOUNT
from service.application.appends import Receipt
from service.application.streams import table_stream
from service.web.api import OPERATOR_PARAMETER, Blueprint
from service.web.operators import player_field
from service.web.problems import FieldError, Problem

ID_PATTERN: Final = r"^[A-Za-z0-9_.-]{1,64}$"
"""Table and player ids: 1 to 64 letters, digits, `_`, `.` or `-` (safe in a URL and a log)."""
_ID: Final = re.compile(r"[A-Za-z0-9_.-]{1,64}")
MAX_PENCE: Final = MAX_AMOUNT
"""The largest amount a request may name, £1bn: anything larger is a typing error."""
MAX_REASON_LENGTH: Final = 500
MAX_BETTING_WINDOW_SECONDS: Final = 300
DEFAULT_PAGE: Final = 50
MAX_PAGE: Final = 500


# Request parsing.


class StrictJsonParser(FlaskParser):
    """webargs' Flask parser, answering every undecodable body as malformed JSON.

    The standard decoder raises ValueError for integers of more than 4,300 digits and
    RecursionError for deeply nested arrays; both fit in a 16 KiB body and would otherwise
    reach the view's caller as a 500.
    """

    def load_querystring(self, req: flask.Request, schema: ma.Schema) -> Any:
        """The query's arguments, less `operator`: service.web.operators reads that one."""
        args = MultiDict(req.args)
        args.poplist(OPERATOR_PARAMETER)
        return self._makeproxy(args, schema)

    def _raw_load_json(self, req: flask.Request) -> Any:
        try:
            return super()._raw_load_json(req)
        except json.JSONDecodeError:
            raise
        except (ValueError, RecursionError) as error:
            # A non-empty `doc`: webargs reads an empty one as "no body" rather than a bad one.
            raise json.JSONDecodeError(str(error)[:200], "(body)", 0) from error


PARSER: Final = StrictJsonParser()


def resource(name: str, import_name: str, url_prefix: str, description: str) -> Blueprint:
    """A resource's Blueprint, parsing request bodies with the strict parser."""
    blueprint = Blueprint(name, import_name, url_prefix=url_prefix, description=description)
    blueprint.ARGUMENTS_PARSER = PARSER
    return blueprint


def checked_id(name: str, value: str) -> str:
    """A path's table or player id if it matches ID_PATTERN, else a 422 naming the parameter."""
    # A path's player id is a player key by now (service.web.operators): its id is checked.
    checked = value.rpartition("/")[2] if name == "player_id" else value
    if _ID.fullmatch(checked) is None:
        raise Problem(
            422,
            "validation-failed",
            f"{name}: must be 1 to 64 letters, digits, '_', '.' or '-'.",
            errors=[FieldError(name, f"Does not match {ID_PATTERN}.", "path")],
        )
    return value


def path_parameter(name: str, description: str) -> dict[str, Any]:
    """The OpenAPI description of an id in the path, with its pattern."""
    return {
        "in": "path",
        "name": name,
        "required": True,
        "description": description,
        "schema": {"type": "string", "pattern": ID_PATTERN},
    }


TABLE_ID_PARAMETER: Final = path_parameter("table_id", "The table's id.")
PLAYER_ID_PARAMETER: Final = path_parameter("player_id", "The player's id.")


def _valid_id(value: str) -> None:
    # fullmatch, because `$` in a marshmallow Regexp would also accept a trailing newline.
    if _ID.fullmatch(value) is None:
        raise ma.ValidationError(f"Must match {ID_PATTERN}.")


def id_field(description: str) -> ma.fields.String:
    """A required table or player id in a request body."""
    return ma.fields.String(
        required=True,
        validate=_valid_id,
        metadata={"description": description, "pattern": ID_PATTERN, "example": "alice"},
    )


def pence_field(description: str, *, minimum: int = 1, **options: Any) -> ma.fields.Integer:
    """A required amount of pence: an integer (never a float, string or bool), bounded."""
    return ma.fields.Integer(
        strict=True,
        validate=ma.validate.Range(min=minimum, max=MAX_PENCE),
        metadata={"description": description},
        **options,
    )


def reason_field(description: str) -> ma.fields.String:
    """A required reason, 1 to 500 characters."""
    return ma.fields.String(
        required=True,
        validate=ma.validate.Length(min=1, max=MAX_REASON_LENGTH),
        metadata={"description": description},
    )


class PlayerSchema(ma.Schema):
    """A body naming only the player who acts."""

    player_id = player_field("The player who acts.")


class PageQuerySchema(ma.Schema):
    """How many of the latest entries to list."""

    limit = ma.fields.Integer(
        load_default=DEFAULT_PAGE,
        validate=ma.validate.Range(min=1, max=MAX_PAGE),
        metadata={"description": f"At most this many entries, 1 to {MAX_PAGE}."},
    )


# What a table command did, read from the events it appended.


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
    deadline = ma.fields.DateTime(required=True)
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
    table_version: int


def table_action(table_id: str, player_id: str | None, receipt: Receipt) -> TableAction:
    """The answer to a table command, from the events its append recorded."""
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
                    "deadline": datetime.fromisoformat(event.deadline),
                    "seats": [seat_number for seat_number, _ in event.participants],
                }
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


# Tables.


class TableSchema(ma.Schema):
    """A table's settings."""

    table_id = ma.fields.String(required=True)
    seats = ma.fields.Integer(required=True)
    decks = ma.fields.Integer(required=True)
    minimum_pence = ma.fields.Integer(required=True)
    maximum_pence = ma.fields.Integer(required=True)
    chips_pence = ma.fields.List(ma.fields.Integer(), required=True)
    currency = ma.fields.String(required=True)
    betting_window_ms = ma.fields.Integer(required=True)


def table_settings(table: Table) -> dict[str, Any]:
    """A table's settings as TableSchema writes them."""
    settings = table.settings
    return {
        "table_id": table.table_id,
        "seats": settings.seats,
        "decks": settings.decks,
        "minimum_pence": settings.limits.minimum,
        "maximum_pence": settings.limits.maximum,
        "chips_pence": list(settings.limits.chips),
        "currency": settings.currency,
        "betting_window_ms": settings.betting_window // timedelta(milliseconds=1),
    }


class NewTableSchema(ma.Schema):
    """A new table's settings."""

    table_id = id_field("The new table's id.")
    # The defaults are the seed rules' table: 7 seats, 8 decks, £1 minimum, £2,500 maximum.
    seats = ma.fields.Integer(
        strict=True, load_default=MAX_SEATS, validate=ma.validate.Range(min=1, max=MAX_SEATS)
    )
    decks = ma.fields.Integer(
        strict=True, load_default=DEFAULT_DECKS, validate=ma.validate.Range(min=1, max=MAX_DECKS)
    )
    minimum_pence = pence_field(
        "The smallest bet, whole pounds.", load_default=TableLimits().minimum
    )
    maximum_pence = pence_field(
        "The most a player may stake in one round, whole pounds.",
        load_default=TableLimits().maximum,
    )
    chips_pence = ma.fields.List(
        ma.fields.Integer(strict=True, validate=ma.validate.Range(min=1, max=MAX_PENCE)),
        validate=ma.validate.Length(min=1, max=20),
        metadata={"description": "The table's chips, smallest first (default £1 to £500)."},
    )
    currency = ma.fields.String(load_default="GBP", validate=ma.validate.OneOf(["GBP"]))
    betting_window_seconds = ma.fields.Integer(
        strict=True,
        load_default=15,
        validate=ma.validate.Range(min=1, max=MAX_BETTING_WINDOW_SECONDS),
    )
