"""GET /v1/tables/{table_id}/feed and GET /v1/feed: the live feed, as Server-Sent Events.

Each event is one SSE message: `id:` its log position, `event:` its type, `data:` its public
view (service/application/feed.py decides what that holds). A client resumes with the
`Last-Event-ID` header, which EventSource sends by itself when it reconnects, or `?after=`;
the header wins when both are sent, since it is the later of the two. Without either, the
feed starts at the log's head: read the table's state, then follow.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final

import marshmallow as ma
from flask import Response, request
from flask.views import MethodView

from events import deadlines
from events.deadlines import DeadlinePassed
from service.application.errors import TableNotFound
from service.application.feed import (
    PROJECTION_LAG_EVENT,
    PUBLIC_EVENT_CLASSES,
    Closing,
    FeedItem,
    FeedMessage,
    FeedService,
    Heartbeat,
    projection_lag_schema,
    public_view_schema,
)
from service.application.operators import Audience
from service.application.streams import table_stream
from service.runtime.metrics import FEED_CLIENTS
from service.web.api import Blueprint, actor, container
from service.web.auth import OVERSIGHT, READERS, roles
from service.web.fields import TABLE_ID_PARAMETER
from service.web.operators import audience
from service.web.problems import FieldError, Problem

blp = Blueprint(
    "feed", __name__, url_prefix=None, description="The live feed (Server-Sent Events)."
)

EVENT_STREAM: Final = "text/event-stream"
TAIL_START_SECONDS: Final = 10.0
LAST_EVENT_ID: Final = "Last-Event-ID"
RETRY_MS: Final = 1000
"""How soon EventSource should reconnect after the server closes a feed (it is stopping)."""

JSON: Final = "application/json"
LAG_COMPONENT: Final = "ProjectionLag"


def _view_component(event_type: str) -> str:
    return f"{event_type}FeedView"


COMPONENTS: Final[dict[str, dict[str, Any]]] = {
    **{_view_component(name): public_view_schema(name) for name in PUBLIC_EVENT_CLASSES},
    LAG_COMPONENT: projection_lag_schema(),
}
"""The JSON Schemas of the messages' data, as named components of the OpenAPI document."""


def _data(component: str) -> dict[str, Any]:
    return {
        "type": "string",
        "contentMediaType": JSON,
        "contentSchema": {"$ref": f"#/components/schemas/{component}"},
    }


def _message_schema(*, with_lag: bool) -> dict[str, Any]:
    """One message of a feed, as schemathesis reads a text/event-stream under OpenAPI 3.1.

    OpenAPI 3.1 has no `itemSchema` (3.2 adds it), and flask-smorest writes 3.1; so, as
    schemathesis reads an event stream's `schema` under 3.1, this describes one message:
    `{id, event, data}`, `data` being JSON whose schema `contentSchema` names, one branch per
    event type. Comments (heartbeats) and `retry:` alone are not messages.
    """
    branches: list[dict[str, Any]] = [
        {
            "properties": {
                "event": {"const": name},
                "id": {"type": "string", "pattern": "^[1-9][0-9]{0,17}$"},
                "data": _data(_view_component(name)),
            },
            "required": ["id"],
        }
        for name in PUBLIC_EVENT_CLASSES
    ]
    if with_lag:
        # No id of its own: a client reading the stream carries the last event's id over.
        branches.append(
            {"properties": {"event": {"const": PROJECTION_LAG_EVENT}, "data": _data(LAG_COMPONENT)}}
        )
    return {
        "type": "object",
        "properties": {
            "id": {"type": "string", "description": "The event's log position."},
            "event": {"type": "string", "description": "The event's type."},
            "data": {"type": "string", "description": "Its public view, as JSON."},
            "retry": {"type": "integer"},
        },
        "required": ["event", "data"],
        "oneOf": branches,
    }


def _feed_doc(*, with_lag: bool) -> dict[str, Any]:
    lag = " and, every few seconds, a `projection-lag` message (no id)" if with_lag else ""
    return {
        "responses": {
            "200": {
                "description": (
                    "A never-ending text/event-stream: a message for each event, `id:` its log"
                    " position, `event:` its type and `data:` its public view as JSON (position,"
                    " type, table_id, recorded_at, payload; the event that opens a betting"
                    f" window adds window_closes_at){lag}. A comment line arrives at least every"
                    " 15 s; `retry:` precedes a close by the server. OpenAPI 3.1 has no"
                    " `itemSchema`: following schemathesis's convention for event streams under"
                    " 3.1, the schema describes one message, its `data` by `contentSchema`."
                ),
                "content": {EVENT_STREAM: {"schema": _message_schema(with_lag=with_lag)}},
            }
        },
    }


_LAST_EVENT_ID_PARAMETER: Final[dict[str, Any]] = {
    "in": "header",
    "name": LAST_EVENT_ID,
    "required": False,
    "description": "Resume after this log position (EventSource sends it itself); wins over"
    " `after`.",
    "schema": {"type": "string", "pattern": "^[0-9]{1,18}$"},
}


class FeedQuerySchema(ma.Schema):
    """Where a feed starts."""

    after = ma.fields.Integer(
        strict=False,
        validate=ma.validate.Range(min=0, max=10**18),
        metadata={
            "description": "Resume after this log position; 0 replays from the start."
            " Without it (and without Last-Event-ID), the feed starts at the log's head."
        },
    )


def _after(query: dict[str, Any], feed: FeedService) -> int:
    header = request.headers.get(LAST_EVENT_ID)
    if header is not None and header.strip():
        value = header.strip()
        if not value.isdecimal() or len(value) > 18:
            raise Problem(
                422,
                "validation-failed",
                f"{LAST_EVENT_ID}: a log position, a whole number; not {value[:40]!r}.",
                errors=[FieldError(LAST_EVENT_ID, "Not a log position.", "headers")],
            )
        return int(value)
    after = query.get("after")
    if isinstance(after, int):
        return after
    # While the database is away the head stays unknown: a 503 within the request's deadline,
    # never a feed that starts from position 0.
    if not feed.tail.start(timeout=deadlines.bounded(TAIL_START_SECONDS) or 0.0):
        raise DeadlinePassed("the live feed's first read of the log's head")
    return feed.head()


def _feed() -> FeedService:
    feed = container().feed
    if feed is None:
        raise Problem(503, "service-unavailable", "This server was started without a live feed.")
    return feed


def _message(item: FeedItem) -> bytes:
    if isinstance(item, FeedMessage):
        lines = b"" if item.id is None else b"id: %d\n" % item.id
        return lines + b"event: " + item.event.encode() + b"\ndata: " + item.data + b"\n\n"
    if isinstance(item, Heartbeat):
        return b": heartbeat\n\n"
    return b"retry: %d\n: the server is stopping; reconnect to resume\n\n" % RETRY_MS


def _stream(deliveries: Iterator[list[FeedItem]]) -> Response:
    def body() -> Iterator[bytes]:
        FEED_CLIENTS.inc()
        try:
            # Said first, so that a client reconnects promptly whenever the connection drops.
            yield b"retry: %d\n\n" % RETRY_MS
            for delivery in deliveries:
                # One write a wake-up, however many events it found.
                yield b"".join(_message(item) for item in delivery)
                if any(isinstance(item, Closing) for item in delivery):
                    return
        finally:
            FEED_CLIENTS.dec()
            close = getattr(deliveries, "close", None)
            if callable(close):
                close()

    response = Response(body(), mimetype=EVENT_STREAM, direct_passthrough=True)
    response.headers["Cache-Control"] = "no-cache"
    # Proxies that buffer (nginx) must pass each message on as it comes.
    response.headers["X-Accel-Buffering"] = "no"
    return response


@blp.route("/tables/<id:table_id>/feed", parameters=[TABLE_ID_PARAMETER, _LAST_EVENT_ID_PARAMETER])
class TableFeed(MethodView):
    """A table's live feed."""

    @roles(*READERS)
    @blp.arguments(FeedQuerySchema, location="query")
    @blp.doc(**_feed_doc(with_lag=False))
    def get(self, query: dict[str, Any], table_id: str) -> Response:
        """Follow a table's events and chat as they happen (text/event-stream)."""
        feed = _feed()
        if container().store.last_of_stream(table_stream(table_id), upcast=False) is None:
            raise TableNotFound(table_id)
        viewer: Audience = audience()
        oversight = actor().role in {role.value for role in OVERSIGHT}
        return _stream(feed.table(table_id, _after(query, feed), viewer, oversight=oversight))


@blp.route("/feed", parameters=[_LAST_EVENT_ID_PARAMETER])
class Feed(MethodView):
    """Every table's live feed, with the projections' lag."""

    @roles(*OVERSIGHT)
    @blp.arguments(FeedQuerySchema, location="query")
    @blp.doc(**_feed_doc(with_lag=True))
    def get(self, query: dict[str, Any]) -> Response:
        """Follow every table's events, and the projections' lag every few seconds."""
        feed = _feed()
        return _stream(feed.everything(_after(query, feed), audience()))
