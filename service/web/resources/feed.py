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
from service.application.feed import Closing, FeedItem, FeedMessage, FeedService, Heartbeat
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

_FEED_DOC: Final[dict[str, Any]] = {
    "responses": {
        "200": {
            "description": (
                "A never-ending text/event-stream. Each message is `id: POSITION`, `event: TYPE`"
                " and `data: JSON` (position, type, table_id, recorded_at, payload; the event"
                " that opens a betting window adds window_closes_at). A comment line arrives at"
                " least every 15 s; `retry:` precedes a close by the server."
            ),
            "content": {EVENT_STREAM: {"schema": {"type": "string"}}},
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
    @blp.doc(**_FEED_DOC)
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
    @blp.doc(**_FEED_DOC)
    def get(self, query: dict[str, Any]) -> Response:
        """Follow every table's events, and the projections' lag every few seconds."""
        feed = _feed()
        return _stream(feed.everything(_after(query, feed), audience()))
