"""The significant-event log: operator actions, malfunctions, voids, recoveries, keys, limits.

An entry is an event of one of the significant types, or any event an operator or recovery
appended (service/application/read_models/significant.py). Each entry says when, who, in which
role, why (the event's reason, when it has one) and what changed (its stream and facts).

Listing reads the significant-event read model up to its checkpoint, through its indexes, and
the log after the checkpoint (what the projector has not applied yet), so the answer is the
log's own and the cost of a page does not grow with the log's age.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

import marshmallow as ma
from flask.views import MethodView

from events.canonical import format_timestamp
from events.store import EventStore, RecordedEvent
from service.application.keys import Role
from service.application.read_models.queries import ProjectionService
from service.application.read_models.significant import KINDS, kind_of
from service.web.api import Blueprint, container, read_models
from service.web.auth import roles
from service.web.fields import DEFAULT_PAGE, MAX_PAGE, id_field, instant_field

blp = Blueprint(
    "audit", __name__, url_prefix="/audit", description="Audit: the significant-event log."
)

_BATCH: Final = 5000


@dataclass(frozen=True, slots=True)
class Filters:
    """Which significant events to list."""

    type: str | None = None
    actor: str | None = None
    table_id: str | None = None
    start: datetime | None = None
    end: datetime | None = None


def _matches(event: RecordedEvent, filters: Filters) -> bool:
    if filters.type is not None and event.type != filters.type:
        return False
    if filters.actor is not None and event.metadata.actor != filters.actor:
        return False
    if filters.table_id is not None and not (
        event.stream_id == f"table:{filters.table_id}"
        or event.payload.get("table_id") == filters.table_id
    ):
        return False
    if filters.start is not None and event.recorded_at < filters.start:
        return False
    return filters.end is None or event.recorded_at <= filters.end


def significant_events(
    store: EventStore,
    filters: Filters,
    after: int,
    limit: int,
    read_models: ProjectionService | None = None,
) -> tuple[list[dict[str, Any]], int | None]:
    """Up to `limit` entries after log position `after`, and the cursor of the next page.

    Without read models (the in-memory wiring) the log is scanned from `after`.
    """
    entries: list[dict[str, Any]] = []
    if read_models is not None:
        # One more than a page, to know whether there is a next one.
        found, checkpoint = read_models.significant(
            after,
            limit + 1,
            type=filters.type,
            actor=filters.actor,
            table_id=filters.table_id,
            start=filters.start,
            end=filters.end,
        )
        entries = [_entry(event, kind) for kind, event in found]
        if len(entries) > limit:
            return entries[:limit], entries[limit - 1]["position"]
        after = max(after, checkpoint)
    for event in _log(store, after):
        kind = kind_of(event)
        if kind is None or not _matches(event, filters):
            continue
        if len(entries) == limit:
            return entries, entries[-1]["position"]
        entries.append(_entry(event, kind))
    return entries, None


def _log(store: EventStore, after: int) -> Iterator[RecordedEvent]:
    while True:
        batch = store.read_all(after, _BATCH)
        if not batch:
            return
        yield from batch
        after = batch[-1].position


def _entry(event: RecordedEvent, kind: str) -> dict[str, Any]:
    reason = event.payload.get("reason")
    return {
        "position": event.position,
        "kind": kind,
        "type": event.type,
        "when": format_timestamp(event.recorded_at),
        "who": event.metadata.actor,
        "role": event.metadata.role,
        "why": reason if isinstance(reason, str) else None,
        "stream_id": event.stream_id,
        "what": dict(event.payload),
        "request_id": event.metadata.request_id,
    }


class SignificantQuerySchema(ma.Schema):
    """Filters and a page of the significant-event log."""

    type = ma.fields.String(metadata={"description": "Only events of this type."})
    actor = ma.fields.String(metadata={"description": "Only events by this actor."})
    table_id = id_field("Only events about this table.", "T1", required=False)
    start = instant_field("Recorded at or after this instant.", data_key="from")
    end = instant_field("Recorded at or before this instant.", data_key="to")
    after = ma.fields.Integer(
        load_default=0,
        validate=ma.validate.Range(min=0),
        metadata={"description": "The cursor: entries after this log position."},
    )
    limit = ma.fields.Integer(
        load_default=DEFAULT_PAGE,
        validate=ma.validate.Range(min=1, max=MAX_PAGE),
        metadata={"description": f"At most this many entries, 1 to {MAX_PAGE}."},
    )


class SignificantEventSchema(ma.Schema):
    """One significant event: when, who, in which role, why, and what changed."""

    position = ma.fields.Integer(required=True)
    kind = ma.fields.String(
        required=True,
        metadata={"enum": list(KINDS)},
    )
    type = ma.fields.String(required=True)
    when = ma.fields.String(required=True)
    who = ma.fields.String(required=True)
    role = ma.fields.String(required=True)
    why = ma.fields.String(allow_none=True, required=True)
    stream_id = ma.fields.String(required=True)
    what = ma.fields.Dict(required=True)
    request_id = ma.fields.String(allow_none=True, required=True)


class SignificantPageSchema(ma.Schema):
    """A page of significant events in log order, and the cursor of the next page."""

    events = ma.fields.List(ma.fields.Nested(SignificantEventSchema), required=True)
    next_after = ma.fields.Integer(
        allow_none=True,
        required=True,
        metadata={"description": "Pass as `after` for the next page; null on the last."},
    )


@blp.route("/significant-events")
class SignificantEvents(MethodView):
    """The significant-event log."""

    @roles(Role.REGULATOR, Role.OPS)
    @blp.arguments(SignificantQuerySchema, location="query")
    @blp.response(200, SignificantPageSchema)
    def get(self, query: dict[str, Any]) -> dict[str, Any]:
        """List significant events, filtered by type, actor, table and time, a page at a time."""
        filters = Filters(
            type=query.get("type"),
            actor=query.get("actor"),
            table_id=query.get("table_id"),
            start=query.get("start"),
            end=query.get("end"),
        )
        wiring = container()
        entries, cursor = significant_events(
            wiring.store, filters, query["after"], query["limit"], read_models()
        )
        return {"events": entries, "next_after": cursor}
