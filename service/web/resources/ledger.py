"""The house ledger from the read models: per table and day, split by bet type."""

from datetime import date, timedelta
from typing import Any

import marshmallow as ma
from flask.views import MethodView

from service.application.read_models.queries import LedgerLine
from service.web.api import Blueprint, container, projections
from service.web.auth import OVERSIGHT, roles
from service.web.fields import TABLE_ID_PARAMETER, day_field
from service.web.operators import ledger_operator
from service.web.problems import Problem

blp = Blueprint(
    "ledger",
    __name__,
    url_prefix="/tables",
    description="The house ledger: wagered, paid out, hold, RTP.",
)

# The house's books are for the operator and the regulator, not the players' front end.
MAX_DAYS = 366


class LedgerQuerySchema(ma.Schema):
    """The days to report, inclusive (UTC)."""

    first = day_field("First day (default: 30 days before `to`).", data_key="from")
    last = day_field("Last day (default: today).", data_key="to")


class LedgerLineSchema(ma.Schema):
    """One bet type on one day: the house's figures and the return to player."""

    day = ma.fields.Date(required=True)
    spot = ma.fields.String(required=True)
    bets = ma.fields.Integer(required=True)
    wagered_pence = ma.fields.Integer(required=True)
    paid_out_pence = ma.fields.Integer(
        required=True, metadata={"description": "Stake included, commission already off."}
    )
    commission_pence = ma.fields.Integer(required=True)
    hold_pence = ma.fields.Integer(required=True, metadata={"description": "Wagered - paid."})
    observed_rtp = ma.fields.Float(
        allow_none=True, required=True, metadata={"description": "Paid out / wagered."}
    )
    theoretical_rtp = ma.fields.Float(
        allow_none=True,
        required=True,
        metadata={"description": "Exact expected return of a fresh shoe of the table's decks."},
    )


class LedgerSchema(ma.Schema):
    """A table's ledger over a range of days."""

    table_id = ma.fields.String(required=True)
    first = ma.fields.Date(required=True, data_key="from")
    last = ma.fields.Date(required=True, data_key="to")
    lines = ma.fields.List(ma.fields.Nested(LedgerLineSchema), required=True)


def _line(line: LedgerLine) -> dict[str, Any]:
    # Ratios, not money: floats are fine here, and JSON has no exact fractions.
    observed, theoretical = line.observed_rtp, line.theoretical_rtp
    return {
        "day": line.day,
        "spot": line.spot,
        "bets": line.bets,
        "wagered_pence": line.wagered,
        "paid_out_pence": line.paid_out,
        "commission_pence": line.commission,
        "hold_pence": line.hold,
        "observed_rtp": None if observed is None else float(observed),
        "theoretical_rtp": None if theoretical is None else float(theoretical),
    }


@blp.route("/<id:table_id>/ledger", parameters=[TABLE_ID_PARAMETER], names_player=True)
class Ledger(MethodView):
    """A table's house ledger."""

    @roles(*OVERSIGHT)
    @blp.arguments(LedgerQuerySchema, location="query")
    @blp.response(200, LedgerSchema)
    def get(self, query: dict[str, Any], table_id: str) -> dict[str, Any]:
        """Read a table's ledger per day and bet type, with observed and theoretical RTP."""
        last: date = query.get("last") or container().clock().date()
        first: date = query.get("first") or last - timedelta(days=30)
        if first > last or (last - first).days >= MAX_DAYS:
            raise Problem(
                422,
                "validation-failed",
                f"`from` must be on or before `to`, at most {MAX_DAYS} days apart.",
            )
        lines = projections().ledger(table_id, first, last, ledger_operator())
        return {
            "table_id": table_id,
            "first": first,
            "last": last,
            "lines": [_line(line) for line in lines],
        }
