"""Round replays for regulators and ops: everything the log records about one round, re-enacted.

(service/api/rounds.py serves round history from the read models; a replay reads the log
itself, so that it cannot be wrong in the way a projection could be.)
"""

from typing import Any

import marshmallow as ma
from flask.views import MethodView

from service.application.keys import Role
from service.regulator.replay import NotInLogError, round_replay
from service.web.api import Blueprint, container
from service.web.auth import roles
from service.web.fields import path_parameter
from service.web.problems import Problem

blp = Blueprint(
    "replays", __name__, url_prefix="", description="Round replays for regulators and ops."
)

ROUND_ID_PARAMETER = path_parameter(
    "round_id", "The round's id: its table's id, '-', and its number."
)


class ReplaySeatSchema(ma.Schema):
    """A seat in the round and the stakes its player left on the layout."""

    seat = ma.fields.Integer(required=True)
    player_id = ma.fields.String(required=True)
    action = ma.fields.String(allow_none=True, required=True)
    bets = ma.fields.List(ma.fields.Dict(), required=True)


class ReplayWalletSchema(ma.Schema):
    """A participant's wallet just before the round and just after its last money movement."""

    player_id = ma.fields.String(required=True)
    before = ma.fields.Dict(required=True)
    after = ma.fields.Dict(required=True)


class RoundReplaySchema(ma.Schema):
    """A replay: the recorded events in log order, and a re-enactment described step by step."""

    replay = ma.fields.Boolean(required=True, metadata={"description": "Always true."})
    notice = ma.fields.String(required=True)
    round_id = ma.fields.String(required=True)
    table_id = ma.fields.String(required=True)
    status = ma.fields.String(
        required=True,
        metadata={"enum": ["in_progress", "complete", "interrupted", "voided"]},
    )
    events = ma.fields.List(
        ma.fields.Dict(),
        required=True,
        metadata={"description": "Table and wallet events of the round, as exported."},
    )
    seats = ma.fields.List(ma.fields.Nested(ReplaySeatSchema), required=True)
    steps = ma.fields.List(ma.fields.String(), required=True)
    outcome = ma.fields.String(allow_none=True, required=True)
    settlements = ma.fields.List(ma.fields.Dict(), required=True)
    wallets = ma.fields.List(ma.fields.Nested(ReplayWalletSchema), required=True)


@blp.route("/rounds/<id:round_id>/replay", parameters=[ROUND_ID_PARAMETER])
class RoundReplay(MethodView):
    """One round, replayed from the log."""

    @roles(Role.REGULATOR, Role.OPS)
    @blp.response(200, RoundReplaySchema)
    def get(self, round_id: str) -> dict[str, Any]:
        """Replay a round: its events, each card, total, draw reason, payout and balance."""
        try:
            return round_replay(container().store, round_id)
        except NotInLogError as error:
            raise Problem(404, "not-found", f"{error}.") from None
