"""Players: their own bet limit, the rounds they played, and their totals.

The limit is the player's own choice, so the front end sets it; it lowers every table's
maximum and may change once a week (the week turns Friday 00:00 GMT). A refusal says when
the next change is allowed, in the detail and as `next_change_at`.
"""

from typing import Any

import marshmallow as ma
from flask.views import MethodView

from domain.player_limits import LimitChangedThisWeek, PlayerLimit
from service.application.keys import Role
from service.application.players import RoundHistory
from service.application.read_models.queries import history
from service.web.api import Blueprint, actor, container, projections, read_models
from service.web.auth import READERS, roles
from service.web.consistency import exact_read
from service.web.fields import PLAYER_ID_PARAMETER, PageQuerySchema, pence_field
from service.web.operators import known_player
from service.web.problems import domain_problem
from service.web.table_actions import BetEntrySchema, DealtCardSchema

blp = Blueprint(
    "players", __name__, url_prefix="/players", description="Players: own bet limit, round history."
)

DEFAULT_ROUNDS = 20


class NewLimitSchema(ma.Schema):
    """The player's own maximum stake per round, or null for none of their own."""

    limit_pence = pence_field(
        "Whole pounds, at least £1; null removes the player's own limit.",
        minimum=100,
        required=True,
        allow_none=True,
    )


class LimitSchema(ma.Schema):
    """A player's own limit, when it last changed, and when it may change next."""

    player_id = ma.fields.String(required=True)
    limit_pence = ma.fields.Integer(allow_none=True, required=True)
    changed_at = ma.fields.DateTime(allow_none=True, required=True)
    next_change_at = ma.fields.DateTime(
        allow_none=True,
        required=True,
        metadata={"description": "null: the limit may change now."},
    )


class RoundsQuerySchema(PageQuerySchema):
    """How many of the player's latest rounds to list."""

    limit = ma.fields.Integer(
        load_default=DEFAULT_ROUNDS,
        validate=ma.validate.Range(min=1, max=100),
        metadata={"description": "At most this many rounds, 1 to 100."},
    )
    before = ma.fields.Integer(
        validate=ma.validate.Range(min=1),
        metadata={"description": "Only rounds opened before this log position (next page)."},
    )


class PlayedBetSchema(BetEntrySchema):
    """A bet of the player's and how it ended."""

    player_id = ma.fields.String()
    payout_pence = ma.fields.Integer(
        allow_none=True, required=True, metadata={"description": "Stake included; 0 if lost."}
    )
    commission_pence = ma.fields.Integer(allow_none=True, required=True)
    returned = ma.fields.String(
        allow_none=True,
        required=True,
        metadata={"description": "Why the stake came back unplayed, or `reversed` by a void."},
    )


class PlayedRoundSchema(ma.Schema):
    """A round the player staked in: their bets, the cards, the outcome and their payout."""

    table_id = ma.fields.String(required=True)
    round_id = ma.fields.String(required=True)
    opened_at = ma.fields.DateTime(allow_none=True, required=True)
    bets = ma.fields.List(ma.fields.Nested(PlayedBetSchema), required=True)
    cards = ma.fields.List(ma.fields.Nested(DealtCardSchema), required=True)
    outcome = ma.fields.String(allow_none=True, required=True)
    player_total = ma.fields.Integer(allow_none=True, required=True)
    banker_total = ma.fields.Integer(allow_none=True, required=True)
    payout_pence = ma.fields.Integer(
        required=True, metadata={"description": "Everything paid back to the player."}
    )
    voided = ma.fields.Boolean(required=True)


class PlayedRoundsSchema(ma.Schema):
    """A player's latest rounds, newest first."""

    player_id = ma.fields.String(required=True)
    rounds = ma.fields.List(ma.fields.Nested(PlayedRoundSchema), required=True)
    next_before = ma.fields.Integer(
        allow_none=True,
        required=True,
        metadata={"description": "Pass as `before` for the next page; null on the last."},
    )


def _limit(limit: PlayerLimit) -> dict[str, Any]:
    return {
        "player_id": limit.player_id,
        "limit_pence": limit.limit,
        "changed_at": limit.changed_at,
        "next_change_at": limit.next_change_at(),
    }


def _round(history: RoundHistory) -> dict[str, Any]:
    return {
        "table_id": history.table_id,
        "round_id": history.round_id,
        "opened_at": history.opened_at,
        "bets": [
            {
                "seat": bet.seat,
                "spot": bet.spot,
                "stake_pence": bet.stake,
                "payout_pence": bet.payout,
                "commission_pence": bet.commission,
                "returned": bet.returned,
            }
            for bet in history.bets
        ],
        "cards": [
            {"hand": card.hand, "position": card.position, "card": card.card, "reason": card.reason}
            for card in history.cards
        ],
        "outcome": history.outcome,
        "player_total": history.player_total,
        "banker_total": history.banker_total,
        "payout_pence": history.payout,
        "voided": history.voided,
    }


@blp.route("/<id:player_id>/limit", parameters=[PLAYER_ID_PARAMETER])
class Limit(MethodView):
    """A player's own maximum stake per round."""

    # Decides money: always from the primary, never a replica (docs/scaling.md).
    @exact_read
    @roles(*READERS)
    @blp.alt_response(404, response="NOT_FOUND")
    @blp.response(200, LimitSchema)
    def get(self, player_id: str) -> dict[str, Any]:
        """Read a player's own limit and when it may next change."""
        known_player(player_id)
        return _limit(container().players.get_limit(player_id))

    @roles(Role.FRONTEND)
    @blp.arguments(NewLimitSchema)
    @blp.alt_response(404, response="NOT_FOUND")
    @blp.response(200, LimitSchema)
    def put(self, new: dict[str, Any], player_id: str) -> dict[str, Any]:
        """Set or remove the player's own limit; at most one change a week."""
        known_player(player_id)
        players = container().players
        try:
            players.set_limit(player_id, new["limit_pence"], actor())
        except LimitChangedThisWeek as refused:
            problem = domain_problem(refused)
            problem.extensions["next_change_at"] = refused.next_change_at.isoformat()
            raise problem from refused
        return _limit(players.get_limit(player_id))


@blp.route("/<id:player_id>/rounds", parameters=[PLAYER_ID_PARAMETER])
class Rounds(MethodView):
    """The rounds a player staked in."""

    @roles(*READERS)
    @blp.arguments(RoundsQuerySchema, location="query")
    @blp.alt_response(404, response="NOT_FOUND")
    @blp.response(200, PlayedRoundsSchema)
    def get(self, page: dict[str, Any], player_id: str) -> dict[str, Any]:
        """Read a player's latest rounds: bets, cards, outcome and payout, newest first."""
        known_player(player_id)
        limit = page.get("limit", DEFAULT_ROUNDS)
        models = read_models()
        if models is None:
            # The table streams only in the in-memory wiring, which has no read models: one
            # page, the latest.
            rounds = container().players.rounds(player_id, limit=limit)
            return {
                "player_id": player_id,
                "rounds": [_round(r) for r in rounds],
                "next_before": None,
            }
        # The round history read model, through proj_round_players_player_position
        # (player_id, position): a keyset page, whatever the player's history.
        records = models.player_round_records(player_id, limit, page.get("before"))
        return {
            "player_id": player_id,
            "rounds": [_round(history(r, player_id)) for r in records],
            "next_before": records[-1].position if len(records) == limit else None,
        }


class PlayerHistorySchema(ma.Schema):
    """A player's totals over every settled bet; voided rounds are left out."""

    player_id = ma.fields.String(required=True)
    rounds_played = ma.fields.Integer(required=True)
    wagered_pence = ma.fields.Integer(required=True)
    won_pence = ma.fields.Integer(
        required=True, metadata={"description": "Paid back, stakes included."}
    )
    commission_pence = ma.fields.Integer(required=True)
    net_pence = ma.fields.Integer(required=True, metadata={"description": "Won - wagered."})


@blp.route("/<id:player_id>/history", parameters=[PLAYER_ID_PARAMETER])
class History(MethodView):
    """A player's totals."""

    @roles(*READERS)
    @blp.alt_response(404, response="NOT_FOUND")
    @blp.response(200, PlayerHistorySchema)
    def get(self, player_id: str) -> dict[str, Any]:
        """Read a player's rounds played, wagered, won and net, from the read model."""
        known_player(player_id)
        summary = projections().player_summary(player_id)
        return {
            "player_id": summary.player_id,
            "rounds_played": summary.rounds_played,
            "wagered_pence": summary.wagered,
            "won_pence": summary.won,
            "commission_pence": summary.commission,
            "net_pence": summary.net,
        }
