"""Every wallet movement of an operator's players over a time range, for ops and regulators.

One list across all of an operator's wallets, in the order the movements were recorded: what a
cashier reconciles against payments, and what a regulator samples. A key created for one
operator sees only its own players' movements; an ops or regulator key that is not sees every
operator's, or one operator's with `?operator=`.
"""

from datetime import datetime
from typing import Any

import marshmallow as ma
from flask.views import MethodView

from service.application.operators import operator_of
from service.application.streams import wallet_stream
from service.application.wallets import MovementKind, WalletMovement
from service.web.api import Blueprint, projections
from service.web.auth import OVERSIGHT, roles
from service.web.fields import (
    DEFAULT_PAGE,
    EARLIEST_INSTANT,
    LATEST_INSTANT,
    MAX_PAGE,
    instant_field,
)
from service.web.operators import ledger_operator
from service.web.problems import FieldError, Problem

blp = Blueprint(
    "wallet_movements",
    __name__,
    url_prefix="/wallet-movements",
    description="Wallet movements: every movement of an operator's players over a time range.",
)


class MovementsQuerySchema(ma.Schema):
    """The time range to list, and a page of it."""

    start = instant_field(
        "Recorded at or after this instant (default: the earliest).",
        data_key="from",
        load_default=EARLIEST_INSTANT,
    )
    end = instant_field(
        "Recorded before this instant (default: no end).",
        data_key="to",
        load_default=LATEST_INSTANT,
    )
    after = ma.fields.Integer(
        validate=ma.validate.Range(min=1),
        metadata={
            "description": "The cursor: movements after the one at this log position (pass "
            "`next_after`)."
        },
    )
    limit = ma.fields.Integer(
        load_default=DEFAULT_PAGE,
        validate=ma.validate.Range(min=1, max=MAX_PAGE),
        metadata={"description": f"At most this many movements, 1 to {MAX_PAGE}."},
    )


class WalletMovementSchema(ma.Schema):
    """One movement on a player's wallet, with the balances after it."""

    player_id = ma.fields.String(required=True)
    operator = ma.fields.String(required=True)
    recorded_at = ma.fields.DateTime(required=True)
    kind = ma.fields.String(required=True, metadata={"enum": [k.value for k in MovementKind]})
    type = ma.fields.String(required=True, metadata={"description": "The event's type."})
    amount_pence = ma.fields.Integer(
        required=True,
        metadata={"description": "The change to the available balance (negative: out)."},
    )
    reserved_change_pence = ma.fields.Integer(required=True)
    available_after_pence = ma.fields.Integer(required=True)
    reserved_after_pence = ma.fields.Integer(required=True)
    stream_id = ma.fields.String(required=True, metadata={"description": "The wallet's stream."})
    version = ma.fields.Integer(required=True, metadata={"description": "In the wallet's stream."})
    position = ma.fields.Integer(required=True, metadata={"description": "In the global log."})
    reason = ma.fields.String(allow_none=True, required=True)
    table_id = ma.fields.String(allow_none=True, required=True)
    round_id = ma.fields.String(allow_none=True, required=True)
    spot = ma.fields.String(allow_none=True, required=True)
    stake_pence = ma.fields.Integer(allow_none=True, required=True)
    payout_pence = ma.fields.Integer(allow_none=True, required=True)
    commission_pence = ma.fields.Integer(allow_none=True, required=True)


class WalletMovementsSchema(ma.Schema):
    """A page of movements, oldest first, and the cursor of the next page."""

    operator = ma.fields.String(
        allow_none=True,
        required=True,
        metadata={"description": "Whose players' movements; null: every operator's."},
    )
    start = ma.fields.DateTime(required=True, data_key="from")
    end = ma.fields.DateTime(required=True, data_key="to")
    movements = ma.fields.List(ma.fields.Nested(WalletMovementSchema), required=True)
    next_after = ma.fields.Integer(
        allow_none=True,
        required=True,
        metadata={"description": "Pass as `after` for the next page; null on the last."},
    )


def _movement(movement: WalletMovement) -> dict[str, Any]:
    entry = movement.entry
    return {
        "player_id": movement.player_id,
        "operator": operator_of(movement.player_id),
        "recorded_at": entry.recorded_at,
        "kind": movement.kind.value,
        "type": entry.type,
        "amount_pence": entry.amount,
        "reserved_change_pence": entry.reserved_change,
        "available_after_pence": entry.available_after,
        "reserved_after_pence": entry.reserved_after,
        "stream_id": wallet_stream(movement.player_id),
        "version": entry.version,
        "position": entry.position,
        "reason": entry.reason,
        "table_id": entry.table_id,
        "round_id": entry.round_id,
        "spot": entry.spot,
        "stake_pence": entry.stake,
        "payout_pence": entry.payout,
        "commission_pence": entry.commission,
    }


@blp.route("", names_player=True)
class WalletMovements(MethodView):
    """Every wallet movement of an operator's players."""

    @roles(*OVERSIGHT)
    @blp.arguments(MovementsQuerySchema, location="query")
    @blp.response(200, WalletMovementsSchema)
    def get(self, query: dict[str, Any]) -> dict[str, Any]:
        """List the wallet movements recorded in [from, to), oldest first, a page at a time."""
        start: datetime = query["start"]
        end: datetime = query["end"]
        if start >= end:
            raise Problem(
                422,
                "validation-failed",
                "`from` must be before `to`.",
                errors=[FieldError("from", "Must be before `to`.", "query")],
            )
        operator = ledger_operator()
        limit: int = query["limit"]
        try:
            # One more than a page, to know whether there is a next one.
            found = projections().wallet_movements(
                operator, start, end, limit + 1, query.get("after")
            )
        except ValueError as error:
            raise Problem(
                422,
                "validation-failed",
                f"after: {error}.",
                errors=[FieldError("after", "Not a wallet movement's log position.", "query")],
            ) from error
        page = found[:limit]
        return {
            "operator": operator,
            "start": start,
            "end": end,
            "movements": [_movement(m) for m in page],
            "next_after": page[-1].entry.position if len(found) > limit else None,
        }
