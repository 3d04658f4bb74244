"""Betting: place and remove bets, rebet, and press Deal or Pass.

Each command is one append: the bet with its stake reserved from the wallet, or, when the
command is the last a round waits for, everything the deal brings with it. The answer says
which round the action went into and, when it dealt the coup, the cards and settlements.
With an Idempotency-Key the append also stores the answer (service/web/idempotency.py,
`answer_command`), so a keyed bet is one call to the database.
"""

from typing import Any

import marshmallow as ma
from flask import Response
from flask.views import MethodView

from domain.outcome import Spot
from service.application.keys import Role
from service.web.api import Blueprint, container
from service.web.auth import roles
from service.web.fields import (
    PLAYER_ID_PARAMETER,
    TABLE_ID_PARAMETER,
    id_field,
    pence_field,
)
from service.web.idempotency import answer_command, answered_in_append
from service.web.operators import known_player, player_field
from service.web.table_actions import (
    TableAction,
    TableActionSchema,
    answered_with_debit,
    answered_with_wallet,
)

# The answer's schema, also used to build an answer before the append stores it.
_ACTION = TableActionSchema()

blp = Blueprint(
    "bets", __name__, url_prefix="/tables", description="Betting: bets, rebet, Deal and Pass."
)


def _round_field() -> ma.fields.String:
    return id_field(
        "The round this action is meant for. If given and that round is no longer open for"
        " betting, the action is refused (409 `round.betting_window_closed`; `round.not_found`"
        " for an id that is no round of this table) instead of going into the round open now,"
        " or opening the next one. Without it, the action goes into whatever round is open"
        " when it arrives.",
        example="table-1-7",
        required=False,
        load_default=None,
    )


class PlayerSchema(ma.Schema):
    """A body naming the player who acts, and optionally the round it is meant for."""

    player_id = player_field("The player who acts.")
    round_id = _round_field()


class NewBetSchema(ma.Schema):
    """A stake on one spot."""

    player_id = player_field("The player who bets.")
    spot = ma.fields.Enum(Spot, by_value=True, required=True)
    stake_pence = pence_field("The stake: whole pounds, in the table's chips.", required=True)
    round_id = _round_field()


@blp.route("/<id:table_id>/bets", parameters=[TABLE_ID_PARAMETER])
class Bets(MethodView):
    """The bets on a table's layout."""

    @answered_in_append
    @roles(Role.FRONTEND)
    # Instances, not classes: given a class, webargs builds a schema on every request.
    @blp.arguments(NewBetSchema())
    @blp.alt_response(404, response="NOT_FOUND")
    @blp.response(201, TableActionSchema)
    def post(self, bet: dict[str, Any], table_id: str) -> TableAction | Response:
        """Place a bet; at an idle table the first bet opens the round and its window."""
        player_id = bet["player_id"]
        seamless = container().seamless
        if seamless is not None and seamless.is_seamless(player_id):
            # The stake is debited from the operator's wallet before the bet is placed.
            return answer_command(
                201,
                _ACTION,
                lambda caller: seamless.place_bet(
                    table_id, player_id, bet["spot"], bet["stake_pence"], caller, bet["round_id"]
                ),
                answered_with_debit(table_id, player_id),
            )
        return answer_command(
            201,
            _ACTION,
            lambda caller: container().games.place_bet(
                table_id,
                player_id,
                bet["spot"],
                bet["stake_pence"],
                caller,
                round_id=bet["round_id"],
            ),
            answered_with_wallet(table_id, player_id, container().wallets, container().seamless),
        )


@blp.route(
    "/<id:table_id>/bets/<id:player_id>", parameters=[TABLE_ID_PARAMETER, PLAYER_ID_PARAMETER]
)
class PlayerBets(MethodView):
    """One player's bets in the current round."""

    @answered_in_append
    @roles(Role.FRONTEND)
    @blp.alt_response(404, response="NOT_FOUND")
    @blp.response(200, TableActionSchema)
    def delete(self, table_id: str, player_id: str) -> TableAction | Response:
        """Take all of one's bets back before pressing Deal or Pass."""
        known_player(player_id)
        return answer_command(
            200,
            _ACTION,
            lambda caller: container().games.remove_bets(table_id, player_id, caller),
            answered_with_wallet(table_id, player_id, container().wallets, container().seamless),
        )


@blp.route("/<id:table_id>/rebet", parameters=[TABLE_ID_PARAMETER])
class Rebet(MethodView):
    """Repeating one's bets of the last round."""

    @answered_in_append
    @roles(Role.FRONTEND)
    @blp.arguments(PlayerSchema())
    @blp.alt_response(404, response="NOT_FOUND")
    @blp.response(201, TableActionSchema)
    def post(self, acting: dict[str, Any], table_id: str) -> TableAction | Response:
        """Repeat one's bets of the last round played at this seat.

        For a seamless player each stake is debited from the operator's wallet, one `bet` call
        per bet; if the wallet does not confirm one, the debits already taken are rolled back
        and the rebet is refused with that answer's problem (nothing is placed).
        """
        player_id = acting["player_id"]
        seamless = container().seamless
        if seamless is not None and seamless.is_seamless(player_id):
            return answer_command(
                201,
                _ACTION,
                lambda caller: seamless.rebet(table_id, player_id, caller, acting["round_id"]),
                answered_with_debit(table_id, player_id),
            )
        return answer_command(
            201,
            _ACTION,
            lambda caller: container().games.rebet(
                table_id, player_id, caller, round_id=acting["round_id"]
            ),
            answered_with_wallet(table_id, player_id, container().wallets, container().seamless),
        )


@blp.route("/<id:table_id>/deal", parameters=[TABLE_ID_PARAMETER])
class Deal(MethodView):
    """Pressing Deal."""

    @answered_in_append
    @roles(Role.FRONTEND)
    @blp.arguments(PlayerSchema())
    @blp.alt_response(404, response="NOT_FOUND")
    @blp.response(200, TableActionSchema)
    def post(self, acting: dict[str, Any], table_id: str) -> TableAction | Response:
        """Confirm one's bets; the last participant to act brings the deal and settlement."""
        player_id = acting["player_id"]
        return answer_command(
            200,
            _ACTION,
            lambda caller: container().games.press_deal(
                table_id, player_id, caller, acting["round_id"]
            ),
            answered_with_wallet(table_id, player_id, container().wallets, container().seamless),
        )


@blp.route("/<id:table_id>/pass", parameters=[TABLE_ID_PARAMETER])
class Pass(MethodView):
    """Pressing Pass."""

    @answered_in_append
    @roles(Role.FRONTEND)
    @blp.arguments(PlayerSchema())
    @blp.alt_response(404, response="NOT_FOUND")
    @blp.response(200, TableActionSchema)
    def post(self, acting: dict[str, Any], table_id: str) -> TableAction | Response:
        """Sit this coup out; one's bets come back, and the last to act brings the deal."""
        player_id = acting["player_id"]
        return answer_command(
            200,
            _ACTION,
            lambda caller: container().games.pass_turn(
                table_id, player_id, caller, acting["round_id"]
            ),
            answered_with_wallet(table_id, player_id, container().wallets, container().seamless),
        )
