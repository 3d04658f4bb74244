"""Table statistics from the read models: the roads and counts of the current shoe or all time."""

from typing import Any

import marshmallow as ma
from flask.views import MethodView

from service.application.read_models.queries import ALL_TIME, CURRENT_SHOE
from service.web.api import Blueprint, projections
from service.web.auth import READERS, roles
from service.web.fields import TABLE_ID_PARAMETER
from service.web.problems import Problem

blp = Blueprint(
    "statistics",
    __name__,
    url_prefix="/tables",
    description="Statistics: each table's roads and counts, read models.",
)


class StatisticsQuerySchema(ma.Schema):
    """Which hands the roads cover."""

    scope = ma.fields.String(
        load_default=CURRENT_SHOE,
        validate=ma.validate.OneOf((CURRENT_SHOE, ALL_TIME)),
        metadata={"description": "`shoe`: the shoe being dealt; `all`: every shoe ever."},
    )


class StatisticsSchema(ma.Schema):
    """A table's roads: Bead Plate, Big Road, the three derived roads, and the counts."""

    table_id = ma.fields.String(required=True)
    scope = ma.fields.String(required=True)
    shoe_id = ma.fields.String(
        allow_none=True, required=True, metadata={"description": "The shoe being dealt."}
    )
    decks = ma.fields.Integer(required=True)
    roads = ma.fields.Dict(
        required=True,
        metadata={
            "description": "domain.roads' Roads: counts, leading_ties, bead_plate, big_road,"
            " big_eye_boy, small_road, cockroach_pig. Voided rounds are left out. A bead's"
            " column and row are both numbered from 1; the Big Road and the derived roads"
            " number columns from 1 and rows from 0, the convention their rules are stated in."
        },
    )
    checkpoint = ma.fields.Integer(
        required=True,
        metadata={
            "description": "The log position the read model had reached when these roads were"
            " read: every coup at or before it is in them. A front end that saw a coup's"
            " RoundSettled (or RoundVoided) on the feed, whose event id is its position, reads"
            " again until the checkpoint has reached that position."
        },
    )


@blp.route("/<id:table_id>/statistics", parameters=[TABLE_ID_PARAMETER])
class Statistics(MethodView):
    """A table's roads and counts."""

    @roles(*READERS)
    @blp.arguments(StatisticsQuerySchema, location="query")
    @blp.response(200, StatisticsSchema)
    def get(self, query: dict[str, Any], table_id: str) -> dict[str, Any]:
        """Read a table's roads and Banker, Player, tie and hand counts, as the read model has them.

        The read model follows the log within moments; `checkpoint` says how far.
        """
        found = projections().statistics(table_id, query["scope"])
        if found is None:
            raise Problem(404, "not-found", f"There is no table {table_id}.")
        return {
            "table_id": found.table_id,
            "scope": found.scope,
            "shoe_id": found.shoe_id,
            "decks": found.decks,
            "roads": found.roads.to_dict(),
            "checkpoint": found.checkpoint,
        }
