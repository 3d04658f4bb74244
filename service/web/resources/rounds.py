"""Round history from the read models: one round, or a table's latest rounds."""

from typing import Any

import marshmallow as ma
from flask.views import MethodView

from service.application.read_models.invariants import RoundRecord
from service.web.api import Blueprint, projections
from service.web.auth import READERS, roles
from service.web.fields import (
    DEFAULT_PAGE,
    TABLE_ID_PARAMETER,
    PageQuerySchema,
    path_parameter,
)
from service.web.problems import Problem

blp = Blueprint(
    "rounds",
    __name__,
    url_prefix="",
    description="Round history: bets, cards, outcome, money, voids.",
)

ROUND_ID_PARAMETER = path_parameter("round_id", "The round's id.")


class RoundBetSchema(ma.Schema):
    """A bet in a round and how it ended."""

    seat = ma.fields.Integer(required=True)
    player_id = ma.fields.String(required=True)
    spot = ma.fields.String(required=True)
    stake_pence = ma.fields.Integer(required=True)
    payout_pence = ma.fields.Integer(allow_none=True, required=True)
    commission_pence = ma.fields.Integer(allow_none=True, required=True)
    returned = ma.fields.String(
        allow_none=True,
        required=True,
        metadata={"description": "Why the stake came back unplayed, or `reversed` by a void."},
    )


class RoundCardSchema(ma.Schema):
    """A card of the coup, with its shoe position."""

    hand = ma.fields.String(required=True)
    position = ma.fields.Integer(required=True)
    card = ma.fields.String(required=True)
    reason = ma.fields.String(required=True)


class RoundSchema(ma.Schema):
    """One round: its bets, cards, outcome, the house's money on it, and whether voided."""

    round_id = ma.fields.String(required=True)
    table_id = ma.fields.String(required=True)
    number = ma.fields.Integer(required=True)
    opened_at = ma.fields.DateTime(required=True)
    ended_at = ma.fields.DateTime(allow_none=True, required=True)
    shoe_id = ma.fields.String(allow_none=True, required=True)
    status = ma.fields.String(
        required=True,
        metadata={"enum": ["betting", "dealing", "settled", "ended_without_play", "voided"]},
    )
    outcome = ma.fields.String(allow_none=True, required=True)
    player_total = ma.fields.Integer(allow_none=True, required=True)
    banker_total = ma.fields.Integer(allow_none=True, required=True)
    cards = ma.fields.List(ma.fields.Nested(RoundCardSchema), required=True)
    bets = ma.fields.List(ma.fields.Nested(RoundBetSchema), required=True)
    wagered_pence = ma.fields.Integer(required=True, metadata={"description": "Stakes settled."})
    paid_out_pence = ma.fields.Integer(required=True, metadata={"description": "Stake included."})
    commission_pence = ma.fields.Integer(required=True)
    voided = ma.fields.Boolean(required=True)
    void_reason = ma.fields.String(allow_none=True, required=True)


class TableRoundsQuerySchema(PageQuerySchema):
    """A page of a table's rounds, newest first."""

    before = ma.fields.Integer(
        validate=ma.validate.Range(min=1),
        metadata={"description": "Only rounds opened before this log position (next page)."},
    )


class TableRoundsSchema(ma.Schema):
    """A page of a table's rounds, newest first."""

    table_id = ma.fields.String(required=True)
    rounds = ma.fields.List(ma.fields.Nested(RoundSchema), required=True)
    next_before = ma.fields.Integer(allow_none=True, required=True)


def round_document(record: RoundRecord) -> dict[str, Any]:
    """A round as the API shows it."""
    return {
        "round_id": record.round_id,
        "table_id": record.table_id,
        "number": record.number,
        "opened_at": record.opened_at,
        "ended_at": record.ended_at,
        "shoe_id": record.shoe_id,
        "status": record.status,
        "outcome": record.outcome,
        "player_total": record.player_total,
        "banker_total": record.banker_total,
        "cards": list(record.cards),
        "bets": [
            {
                "seat": bet["seat"],
                "player_id": bet["player_id"],
                "spot": bet["spot"],
                "stake_pence": bet["stake"],
                "payout_pence": bet["payout"],
                "commission_pence": bet["commission"],
                "returned": bet["returned"],
            }
            for bet in record.bets
        ],
        "wagered_pence": record.wagered,
        "paid_out_pence": record.paid_out,
        "commission_pence": record.commission,
        "voided": record.voided,
        "void_reason": record.void_reason,
    }


@blp.route("/rounds/<id:round_id>", parameters=[ROUND_ID_PARAMETER])
class Round(MethodView):
    """One round's history."""

    @roles(*READERS)
    @blp.response(200, RoundSchema)
    def get(self, round_id: str) -> dict[str, Any]:
        """Read one round: bets, cards, outcome, payouts, commission, void."""
        record = projections().round(round_id)
        if record is None:
            raise Problem(404, "not-found", f"There is no round {round_id}.")
        return round_document(record)


@blp.route("/tables/<id:table_id>/rounds", parameters=[TABLE_ID_PARAMETER])
class TableRounds(MethodView):
    """A table's round history."""

    @roles(*READERS)
    @blp.arguments(TableRoundsQuerySchema, location="query")
    @blp.response(200, TableRoundsSchema)
    def get(self, page: dict[str, Any], table_id: str) -> dict[str, Any]:
        """Read a table's latest rounds, newest first."""
        limit = page.get("limit", DEFAULT_PAGE)
        records = projections().table_rounds(table_id, limit, page.get("before"))
        return {
            "table_id": table_id,
            "rounds": [round_document(r) for r in records],
            "next_before": records[-1].position if len(records) == limit else None,
        }
