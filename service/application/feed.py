"""The live feed: a table's events (or every table's) as they commit, for front ends and ops.

What a feed shows is the *public view* of an event, decided here and nowhere else:

- only the events of a table's own stream and of its chat: a wallet's events are private (a
  balance is read through REST), and so are a player's limit, the keys and the checkpoints;
- the payload as the log holds it, which is already free of hidden state: a shoe's server
  seed enters the log only when the shoe is revealed (`ShoeOpened` carries its hash), and a
  card enters it only as it is dealt (`CardDrawn`); never the metadata, which names keys;
- players named for the audience (`Audience.rename`), as every JSON response names them;
- the event that opens a betting window (`RoundOpened`) with the window's deadline as
  `window_closes_at`.

Events come from the committed log by position (events/tail.py), so a client never sees an
event that was rolled back, and a client that resumes after the last position it was sent
misses nothing and gets nothing twice.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Final

import orjson

from domain.payloads import payload_json_schema
from domain.round import RoundOpened
from domain.table import (
    ClientSeedRotated,
    MalfunctionDeclared,
    PlayerMuted,
    PlayerRemoved,
    PlayerUnmuted,
    TableReopened,
    TableSuspended,
)
from events.postgres import Pool
from events.projections.runner import ProjectionStatus
from events.store import JsonValue, RecordedEvent
from events.tail import BATCH, LogTail, read_after
from service.application.operators import PLAYER_FIELD, Audience
from service.application.streams import (
    CHAT,
    EVENT_REGISTRY,
    TABLE,
    chat_stream,
    from_recorded_as,
    id_of,
    table_stream,
)

PUBLIC_CATEGORIES: Final = frozenset({TABLE, CHAT})
MODERATION_REASON: Final = "reason"
MODERATION_TYPES: Final = frozenset(
    cls.type
    for cls in (
        PlayerMuted,
        PlayerUnmuted,
        PlayerRemoved,
        MalfunctionDeclared,
        TableSuspended,
        TableReopened,
        ClientSeedRotated,
    )
)
"""Events whose `reason` is written by ops for ops and regulators: REST never shows it to a
front end, so neither does a front end's feed (the fact itself, a mute or a suspension, it
may see)."""
"""The stream categories a feed shows; every other category is private."""

WINDOW_CLOSES_AT: Final = "window_closes_at"
PARTICIPANTS: Final = "participants"
PROJECTION_LAG_EVENT: Final = "projection-lag"
"""The SSE event name of the global feed's periodic projection lag message."""


PUBLIC_EVENT_CLASSES: Final[Mapping[str, type]] = {
    name: cls
    for (category, name), cls in sorted(EVENT_REGISTRY.items())
    if category in PUBLIC_CATEGORIES
}
"""Every event type a feed may show, by its type name."""


def public_view_schema(event_type: str) -> dict[str, JsonValue]:
    """The JSON Schema of `public_view` of an event of this type: its feed message's data."""
    payload = payload_json_schema(PUBLIC_EVENT_CLASSES[event_type])
    fields: dict[str, JsonValue] = dict(payload["properties"])
    required: list[JsonValue] = list(payload["required"])
    if event_type in MODERATION_TYPES:
        # Left out of a front end's view (public_view).
        required = [name for name in required if name != MODERATION_REASON]
    view_fields: dict[str, JsonValue] = {
        "position": {"type": "integer", "minimum": 1},
        "type": {"const": event_type},
        "table_id": {"type": "string"},
        "recorded_at": {"type": "string", "format": "date-time"},
    }
    if event_type == RoundOpened.type:
        fields[PARTICIPANTS] = {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"seat": {"type": "integer"}, PLAYER_FIELD: {"type": "string"}},
                "required": ["seat", PLAYER_FIELD],
            },
        }
        view_fields[WINDOW_CLOSES_AT] = {"type": "string", "format": "date-time"}
    view_fields["payload"] = {"type": "object", "properties": fields, "required": required}
    return {"type": "object", "properties": view_fields, "required": sorted(view_fields)}


def projection_lag_schema() -> dict[str, JsonValue]:
    """The JSON Schema of `lag_document`: the global feed's projection-lag message's data."""
    integer: JsonValue = {"type": "integer", "minimum": 0}
    projection: JsonValue = {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "checkpoint": integer,
            "lag_events": integer,
            "lag_ms": {"type": "integer"},
        },
        "required": ["name", "checkpoint", "lag_events", "lag_ms"],
    }
    return {
        "type": "object",
        "properties": {
            "head": integer,
            "at": {"type": "string", "format": "date-time"},
            "projections": {"type": "array", "items": projection},
        },
        "required": ["head", "at", "projections"],
    }


def is_public(event: RecordedEvent) -> bool:
    """Whether a feed may show this event at all."""
    return event.category in PUBLIC_CATEGORIES


def public_view(
    event: RecordedEvent, audience: Audience, *, oversight: bool
) -> dict[str, JsonValue]:
    """The event as a feed shows it to `audience` (`oversight`: an ops or regulator key)."""
    if not is_public(event):
        raise ValueError(f"{event.type} at {event.position} is private to its stream")
    table_id = id_of(event.stream_id)
    payload: dict[str, JsonValue] = dict(event.payload)
    if not oversight and event.type in MODERATION_TYPES:
        payload.pop(MODERATION_REASON, None)
    if event.type == RoundOpened.type:
        # Stored as [seat, player] pairs; shown as objects, so that every player in a view is
        # a `player_id` field and is named for the audience like any other.
        opened = from_recorded_as(event, (RoundOpened,))
        payload[PARTICIPANTS] = [
            {"seat": seat, PLAYER_FIELD: player} for seat, player in opened.participants
        ]
    view: dict[str, JsonValue] = {
        "position": event.position,
        "type": event.type,
        "table_id": table_id,
        "recorded_at": event.recorded_at.isoformat(),
        "payload": audience.rename(payload, table_id),
    }
    if event.type == RoundOpened.type:
        view[WINDOW_CLOSES_AT] = event.payload["deadline"]
    return view


@dataclass(frozen=True, slots=True)
class FeedMessage:
    """One message of a feed: an event (with its position as id), or the projection lag.

    `data` is the view already encoded as compact JSON: the clients of one table share one
    encoding of each event (FeedService caches them), which is most of what a feed costs.
    """

    event: str
    data: bytes
    id: int | None = None


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """Nothing happened for a while; the connection is alive."""


@dataclass(frozen=True, slots=True)
class Closing:
    """The server is stopping: the client should reconnect (to another process) and resume."""


FeedItem = FeedMessage | Heartbeat | Closing
VIEW_CACHE: Final = 8192
"""Encoded views kept per process: the recent events, once per kind of audience."""


class FeedService:
    """Streams of public events after a position, woken by the process's log tail."""

    def __init__(
        self,
        pool: Pool,
        tail: LogTail,
        *,
        heartbeat_seconds: float = 10.0,
        lag: Callable[[], Mapping[str, JsonValue]] | None = None,
        lag_seconds: float = 5.0,
    ) -> None:
        self._pool = pool
        self._tail = tail
        self._heartbeat_seconds = heartbeat_seconds
        self._lag = lag
        self._lag_seconds = lag_seconds
        self._views: OrderedDict[tuple[int, str | None, bool], FeedMessage] = OrderedDict()
        self._views_lock = threading.Lock()

    @property
    def tail(self) -> LogTail:
        """The process's log tail."""
        return self._tail

    def head(self) -> int:
        """The last position the tail has read."""
        return self._tail.head

    def table(
        self, table_id: str, after: int, audience: Audience, *, oversight: bool
    ) -> Iterator[list[FeedItem]]:
        """A table's public events after `after`, then each as it commits, until stopped; in
        deliveries, each what one wake-up found, to be written to the client at once."""
        streams = frozenset({table_stream(table_id), chat_stream(table_id)})
        return self._follow(streams, after, audience, oversight=oversight, with_lag=False)

    def everything(self, after: int, audience: Audience) -> Iterator[list[FeedItem]]:
        """Every table's public events after `after`, and the projection lag now and then
        (for ops and regulators only)."""
        return self._follow(None, after, audience, oversight=True, with_lag=self._lag is not None)

    def _follow(
        self,
        streams: frozenset[str] | None,
        after: int,
        audience: Audience,
        *,
        oversight: bool,
        with_lag: bool,
    ) -> Iterator[list[FeedItem]]:
        clock = time.monotonic
        waiter = self._tail.subscribe(streams)
        try:
            next_lag = clock() if with_lag else None
            next_beat = clock() + self._heartbeat_seconds
            while not self._tail.stopping:
                waiter.woken.clear()
                events, full = self._events_after(waiter.streams, after)
                delivery: list[FeedItem] = [
                    self._message(event, audience, oversight)
                    for event in events
                    if is_public(event)
                ]
                if events:
                    after = events[-1].position
                    next_beat = clock() + self._heartbeat_seconds
                if full:
                    yield delivery
                    continue  # the log holds more than one batch for this client: read on
                if next_lag is not None and clock() >= next_lag and self._lag is not None:
                    delivery.append(FeedMessage(PROJECTION_LAG_EVENT, orjson.dumps(self._lag())))
                    next_lag = clock() + self._lag_seconds
                if clock() >= next_beat:
                    delivery.append(Heartbeat())
                    next_beat = clock() + self._heartbeat_seconds
                if delivery:
                    yield delivery
                wake_at = next_beat if next_lag is None else min(next_beat, next_lag)
                waiter.woken.wait(max(0.0, wake_at - clock()))
            yield [Closing()]
        finally:
            self._tail.unsubscribe(waiter)

    def _message(self, event: RecordedEvent, audience: Audience, oversight: bool) -> FeedMessage:
        """The event's message for this kind of audience, encoded once and shared."""
        key = (event.position, audience.operator, oversight)
        with self._views_lock:
            cached = self._views.get(key)
        if cached is not None:
            return cached
        view = public_view(event, audience, oversight=oversight)
        message = FeedMessage(event.type, orjson.dumps(view), event.position)
        with self._views_lock:
            self._views[key] = message
            while len(self._views) > VIEW_CACHE:
                self._views.popitem(last=False)
        return message

    def _events_after(
        self, streams: frozenset[str] | None, after: int
    ) -> tuple[list[RecordedEvent], bool]:
        """What follows `after`, from the tail's memory or else the log; and whether the log
        has more than one batch of it."""
        remembered = self._tail.recent(streams, after)
        if remembered is not None:
            return remembered, False
        with self._pool.connection() as conn:
            if streams is None:
                found = read_after(conn, after, categories=PUBLIC_CATEGORIES, limit=BATCH)
            else:
                found = read_after(conn, after, stream_ids=streams, limit=BATCH)
        return found, len(found) == BATCH


def lag_document(
    statuses: Sequence[ProjectionStatus], head: int, now: datetime
) -> dict[str, JsonValue]:
    """The global feed's projection lag message: the head, and each model's lag."""
    return {
        "head": head,
        "at": now.isoformat(),
        "projections": [
            {
                "name": status.name,
                "checkpoint": status.checkpoint,
                "lag_events": status.lag_events,
                # Milliseconds, an integer: the feed's JSON holds no floats.
                "lag_ms": round(status.lag_seconds * 1000),
            }
            for status in statuses
        ],
    }
