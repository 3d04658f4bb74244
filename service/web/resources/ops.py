"""Operations: every table at a glance, how far each read model has read, rebuilding one, and
the invariants."""

from datetime import timedelta
from typing import Any, Final

import marshmallow as ma
from flask.views import MethodView
from redis.exceptions import RedisError
from rq import Queue, Retry
from rq.serializers import JSONSerializer

from events import deadlines
from service.application.keys import Role
from service.application.read_models import projector
from service.application.read_models.queries import TableOverview
from service.runtime.scheduler import REBUILD_QUEUE, redis_for_requests
from service.web.api import Blueprint, container, projections
from service.web.auth import OVERSIGHT, roles
from service.web.operators import ledger_operator
from service.web.problems import Problem

blp = Blueprint(
    "ops",
    __name__,
    url_prefix="/ops",
    description="Operations: the tables' overview, read models' lag, rebuilds, invariants.",
)

# A page of the overview holds the dashboard's 200 tables at once; more come by the keyset.
OVERVIEW_DEFAULT_LIMIT: Final = 200
OVERVIEW_MAX_LIMIT: Final = 500
RATE_WINDOW: Final = timedelta(minutes=1)
LEDGER_DAYS: Final = 30

REBUILD_JOB: Final = "service.runtime.jobs.rebuild_projection"
# A rebuild that cannot reach PostgreSQL is retried after these pauses (seconds).
REBUILD_RETRY_INTERVALS: Final = (10, 30, 90)
# Long enough for a rebuild of a large log; rq kills a job that runs past it.
REBUILD_TIMEOUT_SECONDS: Final = 3600
REBUILD_WAIT_SECONDS: Final = 60.0
"""How long a rebuild asked for with `wait` may take within its request (small logs only)."""


class ProjectionStatusSchema(ma.Schema):
    """Where a read model has read to, against the head of the log."""

    name = ma.fields.String(required=True)
    checkpoint = ma.fields.Integer(required=True)
    updated_at = ma.fields.DateTime(allow_none=True, required=True)
    head = ma.fields.Integer(required=True)
    lag_events = ma.fields.Integer(required=True)
    lag_seconds = ma.fields.Float(
        required=True,
        metadata={"description": "How long the oldest event it has not applied has waited."},
    )


class ProjectionsSchema(ma.Schema):
    """Every read model's progress."""

    head = ma.fields.Integer(required=True)
    projections = ma.fields.List(ma.fields.Nested(ProjectionStatusSchema), required=True)


class RebuildSchema(ma.Schema):
    """Which read models to rebuild, and whether to wait for it."""

    names = ma.fields.List(
        ma.fields.String(validate=ma.validate.OneOf(projector.NAMES)),
        load_default=list(projector.NAMES),
        validate=ma.validate.Length(min=1),
        metadata={"description": f"Default: all of {', '.join(projector.NAMES)}."},
    )
    wait = ma.fields.Boolean(
        load_default=False,
        metadata={
            "description": "Rebuild within this request (small logs) instead of queueing a job"
            " per read model for `shoebox worker --rebuilds`."
        },
    )


class RebuildResultSchema(ma.Schema):
    """A rebuild done (`position` set) or queued (`jobs` set)."""

    names = ma.fields.List(ma.fields.String(), required=True)
    events = ma.fields.Integer(allow_none=True, required=True)
    position = ma.fields.Integer(allow_none=True, required=True)
    jobs = ma.fields.List(ma.fields.String(), required=True)


class ViolationSchema(ma.Schema):
    """One broken invariant."""

    check = ma.fields.String(required=True)
    subject = ma.fields.String(required=True)
    detail = ma.fields.String(required=True)


class InvariantsSchema(ma.Schema):
    """Money conservation and the payout rules, checked over the read models."""

    ok = ma.fields.Boolean(required=True)
    comparable = ma.fields.Boolean(
        required=True,
        metadata={"description": "False while the read models are at different positions."},
    )
    checkpoints = ma.fields.Dict(keys=ma.fields.String(), values=ma.fields.Integer())
    wallets_total_pence = ma.fields.Integer(required=True)
    house_net_pence = ma.fields.Integer(required=True)
    credits_pence = ma.fields.Integer(required=True)
    debits_pence = ma.fields.Integer(required=True)
    rounds_checked = ma.fields.Integer(required=True)
    violations = ma.fields.List(ma.fields.Nested(ViolationSchema), required=True)


class OverviewQuerySchema(ma.Schema):
    """Which page of tables: those created after a position, up to a limit."""

    after = ma.fields.Integer(
        load_default=0,
        validate=ma.validate.Range(min=0),
        metadata={"description": "The keyset: the `next_after` of the page before."},
    )
    limit = ma.fields.Integer(
        load_default=OVERVIEW_DEFAULT_LIMIT,
        validate=ma.validate.Range(min=1, max=OVERVIEW_MAX_LIMIT),
    )


class OverviewSeatSchema(ma.Schema):
    """A seat and who sits in it."""

    seat = ma.fields.Integer(required=True)
    player_id = ma.fields.String(allow_none=True, required=True)


class OverviewShoeSchema(ma.Schema):
    """The open shoe: its commitment and the coups it has left."""

    shoe_id = ma.fields.String(required=True)
    server_seed_hash = ma.fields.String(required=True)
    hands_left = ma.fields.Integer(required=True)


class OverviewCoupSchema(ma.Schema):
    """The table's latest coup."""

    round_id = ma.fields.String(required=True)
    outcome = ma.fields.String(required=True)
    player_total = ma.fields.Integer(required=True)
    banker_total = ma.fields.Integer(required=True)


class OverviewLedgerSchema(ma.Schema):
    """The house's figures for one bet type over the last 30 days."""

    spot = ma.fields.String(required=True)
    bets = ma.fields.Integer(required=True)
    wagered_pence = ma.fields.Integer(required=True)
    paid_out_pence = ma.fields.Integer(required=True)
    commission_pence = ma.fields.Integer(required=True)
    hold_pence = ma.fields.Integer(required=True)
    observed_rtp = ma.fields.Float(allow_none=True, required=True)
    theoretical_rtp = ma.fields.Float(allow_none=True, required=True)


class OverviewTableSchema(ma.Schema):
    """A table at a glance, from the read models."""

    table_id = ma.fields.String(required=True)
    version = ma.fields.Integer(
        required=True, metadata={"description": "The table's stream version the model has read."}
    )
    settings = ma.fields.Dict(
        required=True, metadata={"description": "As GET /v1/tables/{table_id} answers."}
    )
    phase = ma.fields.String(
        required=True,
        metadata={"enum": ["idle", "betting", "closing", "dealing", "settling"]},
    )
    round_id = ma.fields.String(allow_none=True, required=True)
    round_number = ma.fields.Integer(allow_none=True, required=True)
    window_closes_at = ma.fields.DateTime(allow_none=True, required=True)
    seats = ma.fields.List(ma.fields.Nested(OverviewSeatSchema), required=True)
    shoe = ma.fields.Nested(OverviewShoeSchema, allow_none=True, required=True)
    latest_coup = ma.fields.Nested(OverviewCoupSchema, allow_none=True, required=True)
    suspended = ma.fields.Boolean(
        required=True, metadata={"description": "A malfunction suspended it; ops reopen it."}
    )
    rounds_last_minute = ma.fields.Integer(required=True)
    roads = ma.fields.Dict(
        required=True,
        metadata={"description": "The current shoe's roads, as GET .../statistics draws them."},
    )
    ledger = ma.fields.List(ma.fields.Nested(OverviewLedgerSchema), required=True)


class OverviewSchema(ma.Schema):
    """A page of tables in the order they were created."""

    tables = ma.fields.List(ma.fields.Nested(OverviewTableSchema), required=True)
    next_after = ma.fields.Integer(
        allow_none=True,
        required=True,
        metadata={"description": "The `after` of the next page; null on the last page."},
    )


def _overview_table(table: TableOverview) -> dict[str, Any]:
    # Ratios, not money: floats are fine here, and JSON has no exact fractions.
    return {
        "table_id": table.table_id,
        "version": table.version,
        "settings": table.settings,
        "phase": table.phase,
        "round_id": table.round_id,
        "round_number": table.round_number,
        "window_closes_at": table.window_closes_at,
        "seats": [
            {"seat": number, "player_id": player_id}
            for number, player_id in enumerate(table.seats, start=1)
        ],
        "shoe": None
        if table.shoe_id is None
        else {
            "shoe_id": table.shoe_id,
            "server_seed_hash": table.server_seed_hash,
            "hands_left": table.hands_left,
        },
        "latest_coup": table.latest_coup,
        "suspended": table.suspended,
        "rounds_last_minute": table.rounds_last_minute,
        "roads": table.roads.to_dict(),
        "ledger": [
            {
                "spot": line.spot,
                "bets": line.bets,
                "wagered_pence": line.wagered,
                "paid_out_pence": line.paid_out,
                "commission_pence": line.commission,
                "hold_pence": line.hold,
                "observed_rtp": None if line.observed_rtp is None else float(line.observed_rtp),
                "theoretical_rtp": None
                if line.theoretical_rtp is None
                else float(line.theoretical_rtp),
            }
            for line in table.ledger
        ],
    }


@blp.route("/tables")
class Overview(MethodView):
    """Every table at a glance: what the ops dashboard draws."""

    @roles(*OVERSIGHT)
    @blp.arguments(OverviewQuerySchema, location="query")
    @blp.response(200, OverviewSchema)
    def get(self, query: dict[str, Any]) -> dict[str, Any]:
        """Read a page of tables with their round, seats, shoe, roads, ledger and pace.

        One query a page over the read models (the overview, statistics, ledger and rounds),
        however many tables the page holds.
        """
        now = container().clock()
        today = now.date()
        limit = query["limit"]
        # One table more than the page: whether there is a next page, without asking again.
        tables = projections().overview(
            after=query["after"],
            limit=limit + 1,
            since=now - RATE_WINDOW,
            first=today - timedelta(days=LEDGER_DAYS),
            last=today,
            operator=ledger_operator(),
        )
        page = tables[:limit]
        return {
            "tables": [_overview_table(t) for t in page],
            "next_after": page[-1].position if len(tables) > limit else None,
        }


@blp.route("/projections")
class Projections(MethodView):
    """The read models' progress."""

    @roles(*OVERSIGHT)
    @blp.response(200, ProjectionsSchema)
    def get(self) -> dict[str, Any]:
        """Read each read model's checkpoint, the log's head, and the lag."""
        found = projections().status()
        return {
            "head": found[0].head if found else 0,
            "projections": [
                {
                    "name": s.name,
                    "checkpoint": s.checkpoint,
                    "updated_at": s.updated_at,
                    "head": s.head,
                    "lag_events": s.lag_events,
                    "lag_seconds": s.lag_seconds,
                }
                for s in found
            ],
        }


@blp.route("/projections/rebuild")
class Rebuild(MethodView):
    """Rebuilding read models from position 0."""

    @roles(Role.OPS)
    @blp.arguments(RebuildSchema)
    @blp.response(202, RebuildResultSchema)
    @blp.alt_response(200, schema=RebuildResultSchema, description="Rebuilt (wait=true).")
    def post(self, rebuild: dict[str, Any]) -> Any:
        """Rebuild read models beside the live ones and swap them in atomically."""
        names = list(dict.fromkeys(rebuild["names"]))
        if rebuild["wait"]:
            # Asked to wait for the rebuild: the one request not held to the 3 s answer, but
            # held to a bound of its own (docs/api.md).
            with deadlines.instead(REBUILD_WAIT_SECONDS):
                result = projections().rebuild(names)
            body = {
                "names": list(result.names),
                "events": result.events,
                "position": result.position,
                "jobs": [],
            }
            return body, 200
        url = container().settings.redis_url
        if not url:
            raise Problem(
                503, "service-unavailable", "No job queue is configured; rebuild with wait=true."
            )
        # Never the windows' queue: a rebuild there would hold up every betting window.
        queue = Queue(REBUILD_QUEUE, connection=redis_for_requests(url), serializer=JSONSerializer)
        jobs: list[str] = []
        try:
            for name in names:
                job = queue.enqueue(
                    REBUILD_JOB,
                    name,
                    retry=Retry(
                        max=len(REBUILD_RETRY_INTERVALS), interval=list(REBUILD_RETRY_INTERVALS)
                    ),
                    job_timeout=REBUILD_TIMEOUT_SECONDS,
                    description=f"rebuild the {name} read model",
                )
                jobs.append(job.id)
        except RedisError as error:
            raise Problem(
                503,
                "service-unavailable",
                "The job queue is unreachable; retry, or rebuild with wait=true.",
            ) from error
        return {"names": names, "events": None, "position": None, "jobs": jobs}


@blp.route("/invariants")
class Invariants(MethodView):
    """Checks over the read models."""

    @roles(*OVERSIGHT)
    @blp.response(200, InvariantsSchema)
    def get(self) -> dict[str, Any]:
        """Check money conservation and that every round paid by the rules."""
        report = projections().invariants()
        return {
            "ok": report.ok,
            "comparable": report.comparable,
            "checkpoints": report.checkpoints,
            "wallets_total_pence": report.wallets_total,
            "house_net_pence": report.house_net,
            "credits_pence": report.credits,
            "debits_pence": report.debits,
            "rounds_checked": report.rounds_checked,
            "violations": [
                {"check": v.check, "subject": v.subject, "detail": v.detail}
                for v in report.violations
            ],
        }
