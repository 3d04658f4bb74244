"""The event store's abstract interface and the values that cross it."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TypeAlias

# The values an event is made of live in events.recorded, which events.upcasting needs too;
# they are re-exported here, where every caller of the store looks for them.
from events.recorded import EventMetadata as EventMetadata
from events.recorded import JsonObject as JsonObject
from events.recorded import JsonValue as JsonValue
from events.recorded import RecordedEvent as RecordedEvent
from events.upcasting import Upcasters

Clock: TypeAlias = Callable[[], datetime]

GENESIS_HASH = "0" * 64
"""The `prev_hash` of the first event in the log."""

NOTIFY_CHANNEL = "shoebox_events"
"""The LISTEN/NOTIFY channel the sequencer announces the log's new head on."""

UNSEQUENCED = 0
"""The position of an event that is committed but not yet sequenced (read_stream shows it)."""


class EventStoreError(Exception):
    """Base class of the errors a caller of the event store can handle."""


# The subclasses are named for what happened (N818 wants an "Error" suffix); callers read
# `except ConcurrencyConflict` as a sentence.


class ConcurrencyConflict(EventStoreError):  # noqa: N818
    """A stream was not at the version the caller expected: someone else appended first."""

    def __init__(self, stream_id: str, expected: int, actual: int) -> None:
        super().__init__(f"stream {stream_id!r} is at version {actual}, expected {expected}")
        self.stream_id = stream_id
        self.expected = expected
        self.actual = actual


class IdempotencyKeyReused(EventStoreError):  # noqa: N818
    """An idempotency key came back with a request that differs from its first use."""

    def __init__(self, key: str) -> None:
        super().__init__(f"idempotency key {key!r} was already used for a different request")
        self.key = key


class UnknownIdempotencyKey(EventStoreError):  # noqa: N818
    """A response was offered for an idempotency key that no append recorded."""

    def __init__(self, key: str) -> None:
        super().__init__(f"no append recorded idempotency key {key!r}")
        self.key = key


class AppendTimedOut(EventStoreError):  # noqa: N818
    """An append waited too long for its streams' row locks, or ran too long; nothing was appended.

    Retrying later is safe and usually works: the wait is bounded so that a stuck append
    (a long lock held by hand, an overloaded server) costs callers a quick refusal, not a hang.
    """

    def __init__(self, waited_for: str, *, by_deadline: bool = False) -> None:
        super().__init__(f"the append gave up waiting for {waited_for}; nothing was appended")
        self.waited_for = waited_for
        # True when the caller's deadline (events/deadlines.py) ended the wait, not the
        # append's own bound: an operator tells a slow request from a contended stream so.
        self.by_deadline = by_deadline


class LogBusy(EventStoreError):  # noqa: N818
    """The sequencer is behind (or absent) by more than the bound; nothing was appended.

    Refused so that the backlog of appends without a position stays bounded, and so that no
    reader waits on it without bound. Retrying after `retry_after` seconds is safe.
    """

    def __init__(self, behind_seconds: float, retry_after: int = 1) -> None:
        super().__init__(
            f"the log is busy: its oldest unsequenced append waited {behind_seconds:.1f} s;"
            " nothing was appended"
        )
        self.behind_seconds = behind_seconds
        self.retry_after = retry_after


class ShoeSecretAlreadyStored(EventStoreError):  # noqa: N818
    """A shoe's server seed is written once; a second write would break its commitment."""

    def __init__(self, shoe_id: str) -> None:
        super().__init__(f"shoe {shoe_id!r} already has a server seed")
        self.shoe_id = shoe_id


@dataclass(frozen=True, slots=True)
class NewEvent:
    """An event about to be appended: its type, its payload and the payload's schema version."""

    type: str
    payload: JsonObject
    schema_version: int = 1


@dataclass(frozen=True, slots=True)
class StreamAppend:
    """Events for one stream, with the version the caller last saw (0 for a new stream)."""

    stream_id: str
    expected_version: int
    events: Sequence[NewEvent]


@dataclass(frozen=True, slots=True)
class Idempotency:
    """A caller's idempotency key and a fingerprint of the request it was first used with."""

    key: str
    fingerprint: str
    # The caller's answer to the request, when it is known before the append: the store keeps
    # it with the key in the append's own transaction, so that the key is never recorded
    # without its answer. Not part of the key's identity (a retry's answer is the first one).
    response: JsonValue | None = field(default=None, compare=False)


OutboxValue: TypeAlias = str | int | bool | datetime | Sequence[str] | None
"""A value an outbox row may hold: text, a whole number, a flag, a moment, a text array."""


@dataclass(frozen=True, slots=True)
class OutboxRow:
    """A row of the caller's own table, written in the same transaction as an append (an outbox).

    For work the events owe the world (a call to make, a message to send): committed with
    them or not at all, so that a crash between the append and whatever reads the log later
    cannot lose it. The store knows nothing of what the row means. The row is inserted once:
    a row already holding its `key` is left as it is, unless `update` names columns to set
    to this row's values. Not written when the append is refused or replayed.
    """

    table: str
    values: Mapping[str, OutboxValue]
    key: tuple[str, ...]
    update: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.key or not set(self.key) <= set(self.values):
            raise ValueError(f"an outbox row of {self.table!r} needs its key among its values")
        if not set(self.update) <= set(self.values) - set(self.key):
            raise ValueError(f"an outbox row of {self.table!r} updates a column it does not set")


@dataclass(frozen=True, slots=True)
class AppendResult:
    """What an append recorded: each stream's new version, and which versions it added.

    No positions: an append is answered once it is durable, before the sequencer gives it its
    place in the log (docs/scaling.md, "The sequencer"). Its events are found by version.
    """

    versions: Mapping[str, int]
    # The streams the append added events to, in append order, each with its first and last
    # new version (a guard adds none and is only in `versions`).
    appended: tuple[tuple[str, int, int], ...]
    # True when an idempotency key matched and nothing was appended; equality ignores it so
    # that a replayed result compares equal to the original.
    replayed: bool = field(default=False, compare=False)
    # For a replay: the response stored with the key, if its first request stored one.
    response: JsonValue | None = field(default=None, compare=False)
    # The primary's WAL write position read just after this append's own commit, in the same
    # round trip (a stream's turn reads it so), as pg_lsn text; None where it was not read.
    commit_lsn: str | None = field(default=None, compare=False)

    @classmethod
    def of(cls, streams: Sequence[StreamAppend]) -> AppendResult:
        """The result of appending `streams` as they are: known before the append runs."""
        return cls(
            {s.stream_id: s.expected_version + len(s.events) for s in streams},
            tuple(
                (s.stream_id, s.expected_version + 1, s.expected_version + len(s.events))
                for s in streams
                if s.events
            ),
        )

    def to_json(self) -> dict[str, JsonValue]:
        """The JSON form stored with an idempotency key."""
        return {
            "versions": dict(self.versions),
            "appended": [list(entry) for entry in self.appended],
        }

    @classmethod
    def from_json(cls, document: Mapping[str, object], *, replayed: bool) -> AppendResult:
        """Rebuild a result from `to_json`'s form (a key of before 0030 also has positions)."""
        versions, appended = document.get("versions"), document.get("appended")
        if not (isinstance(versions, dict) and isinstance(appended, list)):
            raise TypeError(f"not an append result: {document!r}")
        return cls(
            {str(k): int(v) for k, v in versions.items()},
            tuple((str(s), int(first), int(last)) for s, first, last in appended),
            replayed=replayed,
        )


@dataclass(frozen=True, slots=True)
class IdempotencyRecord:
    """What an idempotency key was first used for, and the response a caller stored with it."""

    key: str
    fingerprint: str
    result: AppendResult
    response: JsonValue | None


def category_of(stream_id: str) -> str:
    """The part of a stream id before its first ':' (`round:T1:000123` -> `round`)."""
    return stream_id.partition(":")[0]


def utc_now() -> datetime:
    """The production clock; domain code is handed a clock instead of calling this."""
    return datetime.now(UTC)


def check_appends(streams: Sequence[StreamAppend]) -> None:
    """Reject appends that no store could record, before any I/O."""
    seen: set[str] = set()
    if not any(stream.events for stream in streams):
        raise ValueError("an append needs at least one event")
    for stream in streams:
        if not stream.stream_id or "\x00" in stream.stream_id:
            raise ValueError(f"invalid stream id {stream.stream_id!r}")
        if stream.stream_id in seen:
            raise ValueError(f"stream {stream.stream_id!r} appears twice in one append")
        seen.add(stream.stream_id)
        if stream.expected_version < 0:
            raise ValueError(f"negative expected version for {stream.stream_id!r}")
        for event in stream.events:
            if not event.type or "\x00" in event.type:
                raise ValueError(f"invalid event type {event.type!r}")
            if event.schema_version < 1:
                raise ValueError(f"schema version of {event.type!r} must be at least 1")


def stamp_metadata(metadata: EventMetadata, idempotency: Idempotency | None) -> EventMetadata:
    """The metadata to record: the caller's, carrying the idempotency key of this append."""
    key = idempotency.key if idempotency is not None else None
    if metadata.idempotency_key not in (None, key):
        raise ValueError("metadata.idempotency_key disagrees with the idempotency argument")
    return replace(metadata, idempotency_key=key)


def to_utc(moment: datetime) -> datetime:
    """A clock reading as an aware UTC datetime; naive readings are a bug, not a guess."""
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError("the clock returned a naive datetime; it must be timezone-aware")
    return moment.astimezone(UTC)


class EventStore(ABC):
    """An append-only, hash-chained, ordered log of events with optimistic concurrency."""

    def __init__(self, clock: Clock = utc_now, upcasters: Upcasters | None = None) -> None:
        self._clock = clock
        self._upcasters = upcasters if upcasters is not None else Upcasters()

    @abstractmethod
    def append(
        self,
        streams: Sequence[StreamAppend],
        metadata: EventMetadata,
        idempotency: Idempotency | None = None,
        outbox: Sequence[OutboxRow] = (),
    ) -> AppendResult:
        """Append every stream's events atomically, or none; raise ConcurrencyConflict if stale.

        `outbox` rows are written in the same transaction as the events (see OutboxRow).
        """

    @abstractmethod
    def read_stream(
        self, stream_id: str, from_version: int = 1, *, upcast: bool = True
    ) -> list[RecordedEvent]:
        """A stream's events from `from_version` on, upcast to their latest schema unless told.

        Every committed event of the stream, sequenced or not, as a command deciding on the
        stream needs: one not yet sequenced has position UNSEQUENCED and no hashes yet.
        """

    @abstractmethod
    def read_all(
        self,
        from_position: int = 0,
        limit: int = 1000,
        categories: Collection[str] | None = None,
        types: Collection[str] | None = None,
        *,
        upcast: bool = True,
    ) -> list[RecordedEvent]:
        """Up to `limit` events after `from_position` in log order, optionally filtered.

        Only sequenced events: an append's events appear here once the sequencer placed them.
        Pass `upcast=False` to get events exactly as recorded, which is what the chain hashes.
        """

    @abstractmethod
    def head(self) -> int:
        """The position of the last event in the log (0 when it is empty)."""

    @abstractmethod
    def last_of_stream(self, stream_id: str, *, upcast: bool = True) -> RecordedEvent | None:
        """A stream's last event, or None for an empty stream; as cheap for a long stream."""

    @abstractmethod
    def idempotency_record(self, key: str) -> IdempotencyRecord | None:
        """What an idempotency key was used for, or None if no append recorded it."""

    @abstractmethod
    def record_response(self, key: str, response: JsonValue) -> JsonValue:
        """Store the caller's response to replay for a key; return the one now stored.

        The first response stored wins, so a caller that raced a twin learns the winner's
        answer from the return value without reading it back.
        """

    @abstractmethod
    def claim_shoe_secret(
        self, table_id: str, nonce: int, shoe_id: str, server_seed: str
    ) -> tuple[str, str]:
        """The shoe id and seed kept for a table's `nonce`-th shoe: these, unless some already are.

        At most one seed is ever kept for a table's nonce, so every opening of that shoe (a
        retry, a twin racing it in another process) publishes the same one, and none is left
        behind unpublished by an opening that lost its race.
        """

    @abstractmethod
    def load_shoe_secret(self, shoe_id: str) -> str | None:
        """A live shoe's server seed, or None if none was stored."""

    def _upcast(self, events: list[RecordedEvent]) -> list[RecordedEvent]:
        return self._upcasters.upcast_all(events)


class DelegatingEventStore(EventStore):
    """A store that passes every call to `inner`: a wrapper overrides only what it changes
    (counting appends, appending in a stream's turn) and inherits the rest."""

    def __init__(self, inner: EventStore) -> None:
        super().__init__()
        self._inner = inner

    def append(
        self,
        streams: Sequence[StreamAppend],
        metadata: EventMetadata,
        idempotency: Idempotency | None = None,
        outbox: Sequence[OutboxRow] = (),
    ) -> AppendResult:
        """The inner store's append."""
        return self._inner.append(streams, metadata, idempotency, outbox)

    def read_stream(
        self, stream_id: str, from_version: int = 1, *, upcast: bool = True
    ) -> list[RecordedEvent]:
        """The inner store's read_stream."""
        return self._inner.read_stream(stream_id, from_version, upcast=upcast)

    def read_all(
        self,
        from_position: int = 0,
        limit: int = 1000,
        categories: Collection[str] | None = None,
        types: Collection[str] | None = None,
        *,
        upcast: bool = True,
    ) -> list[RecordedEvent]:
        """The inner store's read_all."""
        return self._inner.read_all(from_position, limit, categories, types, upcast=upcast)

    def head(self) -> int:
        """The inner store's head."""
        return self._inner.head()

    def last_of_stream(self, stream_id: str, *, upcast: bool = True) -> RecordedEvent | None:
        """The inner store's last_of_stream."""
        return self._inner.last_of_stream(stream_id, upcast=upcast)

    def idempotency_record(self, key: str) -> IdempotencyRecord | None:
        """The inner store's idempotency_record."""
        return self._inner.idempotency_record(key)

    def record_response(self, key: str, response: JsonValue) -> JsonValue:
        """The inner store's record_response."""
        return self._inner.record_response(key, response)

    def claim_shoe_secret(
        self, table_id: str, nonce: int, shoe_id: str, server_seed: str
    ) -> tuple[str, str]:
        """The inner store's claim_shoe_secret."""
        return self._inner.claim_shoe_secret(table_id, nonce, shoe_id, server_seed)

    def load_shoe_secret(self, shoe_id: str) -> str | None:
        """The inner store's load_shoe_secret."""
        return self._inner.load_shoe_secret(shoe_id)
