"""Tables: ops set them up; anyone may list them, read their settings and their live state.

The live state shows what a front end needs to draw the table: the phase and round, each seat
and what its player has done, the open shoe's commitment and hands left. It never shows a
seed or a card not yet dealt: those are not in the table's state at all (domain/table.py).
"""

from datetime import timedelta
from typing import Any, Final

import marshmallow as ma
from flask import url_for
from flask.views import MethodView

import domain.table
from domain.limits import TableLimits
from domain.shoe import DEFAULT_DECKS
from domain.table import MAX_DECKS, MAX_SEATS, TableSettings
from service.application.game.views import LiveState
from service.application.keys import Role
from service.web.api import Blueprint, actor, container
from service.web.auth import READERS, roles
from service.web.fields import MAX_PENCE, TABLE_ID_PARAMETER, id_field, pence_field

blp = Blueprint(
    "tables", __name__, url_prefix="/tables", description="Tables: settings and live state."
)

MAX_BETTING_WINDOW_SECONDS: Final = 300


class TableSchema(ma.Schema):
    """A table's settings."""

    table_id = ma.fields.String(required=True)
    seats = ma.fields.Integer(required=True)
    decks = ma.fields.Integer(required=True)
    minimum_pence = ma.fields.Integer(required=True)
    maximum_pence = ma.fields.Integer(required=True)
    chips_pence = ma.fields.List(ma.fields.Integer(), required=True)
    currency = ma.fields.String(required=True)
    betting_window_ms = ma.fields.Integer(
        required=True, metadata={"description": "The betting window, in milliseconds."}
    )


def table_settings(table: domain.table.Table) -> dict[str, Any]:
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

    table_id = id_field("The new table's id.", "T1")
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
    # Milliseconds, in the request as in every answer and event: one unit, one name.
    betting_window_ms = ma.fields.Integer(
        strict=True,
        load_default=15_000,
        validate=ma.validate.Range(min=1_000, max=MAX_BETTING_WINDOW_SECONDS * 1_000),
        metadata={"description": "How long the betting window stays open, in milliseconds."},
    )


class TableListSchema(ma.Schema):
    """Every table, in the order they were created."""

    tables = ma.fields.List(ma.fields.Nested(TableSchema), required=True)


class LiveBetSchema(ma.Schema):
    """A stake on the layout in the current round."""

    spot = ma.fields.String(required=True)
    stake_pence = ma.fields.Integer(required=True)


class LiveSeatSchema(ma.Schema):
    """A seat: who sits there, and what they have done in the current round."""

    seat = ma.fields.Integer(required=True)
    player_id = ma.fields.String(allow_none=True, required=True)
    in_round = ma.fields.Boolean(
        required=True, metadata={"description": "Seated when the current round opened."}
    )
    waiting = ma.fields.Boolean(
        required=True,
        metadata={"description": "Seated during the current round: plays from the next one."},
    )
    action = ma.fields.String(
        allow_none=True,
        required=True,
        metadata={"enum": ["pending", "pressed_deal", "passed", "excluded", None]},
    )
    acted = ma.fields.Boolean(
        required=True, metadata={"description": "Pressed Deal or Pass, or was excluded."}
    )
    bets = ma.fields.List(ma.fields.Nested(LiveBetSchema), required=True)


class LiveCardSchema(ma.Schema):
    """A card already dealt in the current round."""

    hand = ma.fields.String(required=True)
    position = ma.fields.Integer(required=True)
    card = ma.fields.String(required=True)
    reason = ma.fields.String(required=True)


class LiveShoeSchema(ma.Schema):
    """The open shoe as published: its commitment and how far it has got, never its cards."""

    shoe_id = ma.fields.String(required=True)
    server_seed_hash = ma.fields.String(required=True)
    hands_left = ma.fields.Integer(required=True)
    cards_left = ma.fields.Integer(required=True)


class LiveStateSchema(ma.Schema):
    """A table now, at a version of its stream."""

    table_id = ma.fields.String(required=True)
    version = ma.fields.Integer(required=True)
    phase = ma.fields.String(
        required=True,
        metadata={
            "enum": [
                "idle",
                "betting",
                "closing",
                "dealing",
                "settling",
                "settled",
                "ended_without_play",
            ],
            "description": "`closing`: the betting window has lapsed and the deal follows"
            " within moments; no bet is taken. Reading the state never closes it.",
        },
    )
    round_id = ma.fields.String(allow_none=True, required=True)
    round_number = ma.fields.Integer(allow_none=True, required=True)
    window_closes_at = ma.fields.DateTime(
        allow_none=True,
        required=True,
        metadata={
            "description": "When the round's betting window closes (to the microsecond): the"
            " same name in a bet's answer and in the feed's RoundOpened."
        },
    )
    seats = ma.fields.List(ma.fields.Nested(LiveSeatSchema), required=True)
    shoe = ma.fields.Nested(LiveShoeSchema, allow_none=True, required=True)
    cards = ma.fields.List(ma.fields.Nested(LiveCardSchema), required=True)
    outcome = ma.fields.String(allow_none=True, required=True)


def live_state(state: LiveState) -> dict[str, Any]:
    """A live state as LiveStateSchema writes it."""
    under_way = state.phase != "idle"
    return {
        "table_id": state.table_id,
        "version": state.version,
        "phase": state.phase,
        "round_id": state.round_id,
        "round_number": state.round_number,
        "window_closes_at": state.window_closes_at,
        "seats": [
            {
                "seat": seat.number,
                "player_id": seat.player_id,
                "in_round": seat.in_round,
                "waiting": under_way and seat.player_id is not None and not seat.in_round,
                "action": seat.action,
                "acted": seat.action not in (None, "pending"),
                "bets": [{"spot": bet.spot, "stake_pence": bet.stake} for bet in seat.bets],
            }
            for seat in state.seats
        ],
        "shoe": None
        if state.shoe_id is None
        else {
            "shoe_id": state.shoe_id,
            "server_seed_hash": state.server_seed_hash,
            "hands_left": state.hands_left,
            "cards_left": state.cards_left,
        },
        "cards": [
            {"hand": c.hand, "position": c.position, "card": c.card, "reason": c.reason}
            for c in state.cards
        ],
        "outcome": state.outcome,
    }


@blp.route("")
class Tables(MethodView):
    """The casino's tables."""

    @roles(*READERS)
    @blp.response(200, TableListSchema)
    def get(self) -> dict[str, Any]:
        """List every table's settings."""
        return {"tables": [table_settings(t) for t in container().games.list_tables()]}

    @roles(Role.OPS)
    @blp.arguments(NewTableSchema)
    @blp.response(201, TableSchema)
    def post(self, new: dict[str, Any]) -> tuple[dict[str, Any], int, dict[str, str]]:
        """Set up a new table (GBP only; stakes in whole pounds)."""
        chips = new.get("chips_pence")
        limits = TableLimits(
            minimum=new["minimum_pence"],
            maximum=new["maximum_pence"],
            **({"chips": tuple(chips)} if chips is not None else {}),
        )
        settings = TableSettings(
            seats=new["seats"],
            limits=limits,
            betting_window=timedelta(milliseconds=new["betting_window_ms"]),
            decks=new["decks"],
            currency=new["currency"],
        )
        table_id = new["table_id"]
        games = container().games
        games.create_table(table_id, settings, actor())
        location = url_for("tables.Table", table_id=table_id)
        return table_settings(games.table(table_id)), 201, {"Location": location}


@blp.route("/<id:table_id>", parameters=[TABLE_ID_PARAMETER])
class Table(MethodView):
    """One table's settings."""

    @roles(*READERS)
    @blp.response(200, TableSchema)
    def get(self, table_id: str) -> dict[str, Any]:
        """Read a table's settings."""
        return table_settings(container().games.table(table_id))


@blp.route("/<id:table_id>/state", parameters=[TABLE_ID_PARAMETER])
class TableState(MethodView):
    """One table's live state."""

    @roles(*READERS)
    @blp.response(200, LiveStateSchema)
    def get(self, table_id: str) -> dict[str, Any]:
        """Read a table's live state; a lapsed betting window is closed and dealt first."""
        return live_state(container().games.live_state(table_id))
