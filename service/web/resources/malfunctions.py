"""Malfunctions: ops declare one at a table (voids, suspension, shoe retired) and reopen it."""

from typing import Any

import marshmallow as ma
from flask.views import MethodView

from domain.round import RoundVoided, SettlementReversed, StakeReturned
from domain.table import (
    MalfunctionDeclared,
    MalfunctionScope,
    ShoeRetired,
    ShoeRevealed,
    TableReopened,
    TableSuspended,
)
from service.application.appends import Receipt
from service.application.keys import Role
from service.application.malfunctions import MalfunctionService, Scope
from service.web.api import Blueprint, actor, container
from service.web.auth import roles
from service.web.fields import TABLE_ID_PARAMETER, id_field, instant_field, reason_field
from service.web.problems import Problem

blp = Blueprint(
    "malfunctions",
    __name__,
    url_prefix="/tables",
    description="Malfunctions: voids and suspensions.",
)


class MalfunctionSchema(ma.Schema):
    """A malfunction: why, and which rounds it voids."""

    reason = reason_field("Why play is void, for players and regulators.")
    scope = ma.fields.String(
        required=True,
        validate=ma.validate.OneOf([str(s) for s in MalfunctionScope]),
        metadata={"description": "current_round, rounds (name them) or time_range."},
    )
    round_ids = ma.fields.List(
        id_field("A round to void.", "T1-7", required=False),
        load_default=list,
        validate=ma.validate.Length(max=1000),
    )
    start = instant_field("A time_range scope's start.", data_key="from", load_default=None)
    end = instant_field("A time_range scope's end.", data_key="to", load_default=None)


class ReopeningSchema(ma.Schema):
    """Why a suspended table may play again."""

    reason = reason_field("Why the table may play again.")


class MoneyMovementSchema(ma.Schema):
    """A stake returned or a settlement reversed by the void."""

    round_id = ma.fields.String(required=True)
    player_id = ma.fields.String(required=True)
    spot = ma.fields.String(required=True)
    stake_pence = ma.fields.Integer(required=True)
    payout_taken_back_pence = ma.fields.Integer(required=True)


class MalfunctionResultSchema(ma.Schema):
    """Every step the malfunction took, as recorded."""

    malfunction_id = ma.fields.String(allow_none=True, required=True)
    voided_rounds = ma.fields.List(ma.fields.String(), required=True)
    money = ma.fields.List(ma.fields.Nested(MoneyMovementSchema), required=True)
    suspended = ma.fields.Boolean(required=True)
    reopened = ma.fields.Boolean(required=True)
    shoe_retired = ma.fields.String(allow_none=True, required=True)
    shoe_revealed = ma.fields.String(allow_none=True, required=True)
    events = ma.fields.List(ma.fields.String(), required=True)


def malfunction_result(receipt: Receipt) -> dict[str, Any]:
    """What a malfunction or reopening appended, as MalfunctionResultSchema writes it."""
    declared = next((e for e in receipt.events if isinstance(e, MalfunctionDeclared)), None)
    reopened = next((e for e in receipt.events if isinstance(e, TableReopened)), None)
    money = [
        {
            "round_id": e.round_id,
            "player_id": e.player_id,
            "spot": str(e.spot),
            "stake_pence": e.stake,
            "payout_taken_back_pence": e.payout if isinstance(e, SettlementReversed) else 0,
        }
        for e in receipt.events
        if isinstance(e, StakeReturned | SettlementReversed)
    ]
    return {
        "malfunction_id": declared.malfunction_id
        if declared
        else (reopened.malfunction_id if reopened else None),
        "voided_rounds": [e.round_id for e in receipt.events if isinstance(e, RoundVoided)],
        "money": money,
        "suspended": any(isinstance(e, TableSuspended) for e in receipt.events),
        "reopened": reopened is not None,
        "shoe_retired": next(
            (e.shoe_id for e in receipt.events if isinstance(e, ShoeRetired)), None
        ),
        "shoe_revealed": next(
            (e.shoe_id for e in receipt.events if isinstance(e, ShoeRevealed)), None
        ),
        "events": [e.type for e in receipt.events],
    }


def _service() -> MalfunctionService:
    wiring = container()
    return MalfunctionService(
        wiring.store, wiring.clock, wiring.games.is_seamless, wiring.games.owed
    )


@blp.route("/<id:table_id>/malfunctions", parameters=[TABLE_ID_PARAMETER])
class Malfunctions(MethodView):
    """A table's malfunctions."""

    @roles(Role.OPS)
    @blp.arguments(MalfunctionSchema)
    @blp.response(201, MalfunctionResultSchema)
    def post(self, body: dict[str, Any], table_id: str) -> dict[str, Any]:
        """Declare a malfunction: void the rounds in scope, suspend, retire and reveal the shoe."""
        scope = Scope(
            MalfunctionScope(body["scope"]),
            tuple(body["round_ids"]),
            body["start"],
            body["end"],
        )
        needs_rounds = scope.kind is MalfunctionScope.ROUNDS
        needs_range = scope.kind is MalfunctionScope.TIME_RANGE
        if needs_rounds != bool(scope.round_ids) or needs_range != (
            scope.start is not None and scope.end is not None
        ):
            raise Problem(
                422,
                "validation-failed",
                "A rounds scope names round_ids, a time_range scope gives from and to, "
                "and a current_round scope gives neither.",
            )
        if scope.start is not None and scope.end is not None and scope.start > scope.end:
            raise Problem(422, "validation-failed", "from must not be after to.")
        receipt = _service().declare(table_id, body["reason"], scope, actor())
        return malfunction_result(receipt)


@blp.route("/<id:table_id>/reopenings", parameters=[TABLE_ID_PARAMETER])
class Reopenings(MethodView):
    """Reopening a suspended table."""

    @roles(Role.OPS)
    @blp.arguments(ReopeningSchema)
    @blp.response(201, MalfunctionResultSchema)
    def post(self, body: dict[str, Any], table_id: str) -> dict[str, Any]:
        """Reopen a table suspended by a malfunction."""
        receipt = _service().reopen(table_id, body["reason"], actor())
        return malfunction_result(receipt)
