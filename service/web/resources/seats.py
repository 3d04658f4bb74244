"""Seats: a player sits at a free seat, moves to another between hands, and leaves; sitting
during a round waits for the next."""

from typing import Any

import marshmallow as ma
from flask.views import MethodView

from domain.table import MAX_SEATS
from service.application.keys import Role
from service.web.api import Blueprint, actor, container
from service.web.auth import roles
from service.web.fields import PLAYER_ID_PARAMETER, TABLE_ID_PARAMETER
from service.web.operators import known_player, player_field
from service.web.table_actions import TableAction, TableActionSchema, answered_with_wallet

blp = Blueprint(
    "seats", __name__, url_prefix="/tables", description="Seats: sit down, change seat and leave."
)


class SitDownSchema(ma.Schema):
    """A player taking a seat."""

    player_id = player_field("The player who sits down.")
    seat = ma.fields.Integer(
        strict=True,
        required=True,
        validate=ma.validate.Range(min=1, max=MAX_SEATS),
        metadata={"description": "1 to the table's seat count."},
    )


class ChangeSeatSchema(ma.Schema):
    """A seated player's new seat."""

    seat = ma.fields.Integer(
        strict=True,
        required=True,
        validate=ma.validate.Range(min=1, max=MAX_SEATS),
        metadata={"description": "A free seat, 1 to the table's seat count."},
    )


@blp.route("/<id:table_id>/seats", parameters=[TABLE_ID_PARAMETER])
class Seats(MethodView):
    """A table's seats."""

    @roles(Role.FRONTEND)
    @blp.arguments(SitDownSchema)
    @blp.alt_response(404, response="NOT_FOUND")
    @blp.response(201, TableActionSchema)
    def post(self, sitting: dict[str, Any], table_id: str) -> TableAction:
        """Sit a player at a free seat; during a round they play from the next one."""
        player_id = sitting["player_id"]
        receipt = container().games.sit(table_id, player_id, sitting["seat"], actor())
        return answered_with_wallet(table_id, player_id, container().wallets, container().seamless)(
            receipt
        )


@blp.route(
    "/<id:table_id>/seats/<id:player_id>", parameters=[TABLE_ID_PARAMETER, PLAYER_ID_PARAMETER]
)
class Seat(MethodView):
    """A player's seat at a table."""

    @roles(Role.FRONTEND)
    @blp.arguments(ChangeSeatSchema)
    @blp.alt_response(404, response="NOT_FOUND")
    @blp.response(200, TableActionSchema)
    def put(self, moving: dict[str, Any], table_id: str, player_id: str) -> TableAction:
        """Move the player to another free seat between hands, in one step.

        Refused while the player has bets on the round under way (rule seat.bets_in_play) or
        when the seat is taken (seat.taken); a player yet to bet in the open window sits that
        round out and plays from the new seat from the next one.
        """
        known_player(player_id)
        receipt = container().games.change_seat(table_id, player_id, moving["seat"], actor())
        return answered_with_wallet(table_id, player_id, container().wallets, container().seamless)(
            receipt
        )

    @roles(Role.FRONTEND)
    @blp.alt_response(404, response="NOT_FOUND")
    @blp.response(200, TableActionSchema)
    def delete(self, table_id: str, player_id: str) -> TableAction:
        """Leave the table: bets not yet confirmed come back; confirmed ones stay in play."""
        known_player(player_id)
        receipt = container().games.leave(table_id, player_id, actor())
        return answered_with_wallet(table_id, player_id, container().wallets, container().seamless)(
            receipt
        )
