"""The canonical JSON encoding of an event and the SHA-256 hash chain built on it.

docs/audit-log.md is the normative description; this module must stay byte-for-byte with it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import TypeAlias

import orjson

from events.store import (
    GENESIS_HASH,
    EventMetadata,
    JsonObject,
    JsonValue,
    RecordedEvent,
    StreamAppend,
    category_of,
)

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1


class CanonicalJsonError(ValueError):
    """A value lies outside the JSON subset the hash chain can encode canonically."""


def normalise(value: object, path: str = "$") -> JsonValue:
    """A plain dict/list copy of `value`, or CanonicalJsonError if it is not canonical JSON.

    Allowed: None, bool, int in signed 64-bit, str without U+0000 (PostgreSQL's jsonb cannot
    hold it), lists/tuples of these, and dicts with str keys. Floats are refused so that money
    and every other number has exactly one written form.
    """
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        if not INT64_MIN <= value <= INT64_MAX:
            raise CanonicalJsonError(f"{path}: integer {value} is outside signed 64-bit")
        return int(value)
    if isinstance(value, str):
        if "\x00" in value:
            raise CanonicalJsonError(f"{path}: strings may not contain U+0000")
        return str(value)
    if isinstance(value, Mapping):
        copy: dict[str, JsonValue] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise CanonicalJsonError(f"{path}: object key {key!r} is not a string")
            if "\x00" in key:
                raise CanonicalJsonError(f"{path}: object keys may not contain U+0000")
            copy[key] = normalise(item, f"{path}.{key}")
        return copy
    if isinstance(value, list | tuple):
        return [normalise(item, f"{path}[{index}]") for index, item in enumerate(value)]
    raise CanonicalJsonError(f"{path}: {type(value).__name__} is not allowed in canonical JSON")


def _dumps(value: object) -> bytes:
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    except orjson.JSONEncodeError as error:
        # Lone surrogates end up here: they have no UTF-8 form.
        raise CanonicalJsonError(str(error)) from error


def canonical_json(value: object) -> bytes:
    """The canonical UTF-8 JSON bytes of a value: sorted keys, no whitespace, no floats."""
    return _dumps(normalise(value))


def format_timestamp(moment: datetime) -> str:
    """RFC 3339 in UTC with exactly six fractional digits and a `Z`."""
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError("timestamps in the log are timezone-aware")
    # isoformat zero-pads the year to four digits on every platform (strftime's %Y does not)
    # and writes UTC as "+00:00"; it is three times faster than formatting field by field.
    return moment.astimezone(UTC).isoformat(timespec="microseconds")[:-6] + "Z"


def metadata_document(metadata: EventMetadata) -> dict[str, JsonValue]:
    """The JSON object of an event's metadata, every key present (absent values are null)."""
    return {
        "actor": metadata.actor,
        "role": metadata.role,
        "request_id": metadata.request_id,
        "correlation_id": metadata.correlation_id,
        "causation_id": metadata.causation_id,
        "idempotency_key": metadata.idempotency_key,
    }


def metadata_from_document(document: Mapping[str, JsonValue]) -> EventMetadata:
    """The inverse of `metadata_document`; an unknown key is an error, never silently dropped."""
    return EventMetadata(**document)  # type: ignore[arg-type]


def event_bytes(
    position: int,
    stream_id: str,
    category: str,
    version: int,
    type: str,
    schema_version: int,
    payload: JsonObject,
    metadata: EventMetadata,
    recorded_at: datetime,
) -> bytes:
    """The canonical bytes of an event's hashed document (its prev_hash is not inside)."""
    return _dumps(
        {
            "position": position,
            "stream_id": stream_id,
            "category": category,
            "version": version,
            "type": type,
            "schema_version": schema_version,
            "payload": payload,
            "metadata": metadata_document(metadata),
            "recorded_at": format_timestamp(recorded_at),
        }
    )


def chain_hash(prev_hash: str, document: bytes) -> str:
    """SHA-256 over the previous hash's 64 ASCII hex characters then the document, in hex."""
    return hashlib.sha256(prev_hash.encode("ascii") + document).hexdigest()


def hash_event(event: RecordedEvent) -> str:
    """The hash an event should carry, recomputed from its recorded fields and prev_hash."""
    return chain_hash(
        event.prev_hash,
        event_bytes(
            event.position,
            event.stream_id,
            event.category,
            event.version,
            event.type,
            event.schema_version,
            event.payload,
            event.metadata,
            event.recorded_at,
        ),
    )


def chain_events(
    streams: Sequence[StreamAppend],
    metadata: EventMetadata,
    recorded_at: datetime,
    head_position: int,
    head_hash: str,
) -> list[RecordedEvent]:
    """The sealed records of an append that starts after the given head, in position order.

    Each stream's first new version is its expected version plus one; the caller has already
    checked the expected versions under the append lock.
    """
    records: list[RecordedEvent] = []
    position, prev_hash = head_position, head_hash
    for stream in streams:
        category = category_of(stream.stream_id)
        version = stream.expected_version
        for event in stream.events:
            position += 1
            version += 1
            payload = normalise(event.payload, "$.payload")
            if not isinstance(payload, dict):
                raise CanonicalJsonError(f"the payload of {event.type} must be a JSON object")
            document = event_bytes(
                position,
                stream.stream_id,
                category,
                version,
                event.type,
                event.schema_version,
                payload,
                metadata,
                recorded_at,
            )
            digest = chain_hash(prev_hash, document)
            records.append(
                RecordedEvent(
                    position,
                    stream.stream_id,
                    category,
                    version,
                    event.type,
                    event.schema_version,
                    payload,
                    metadata,
                    recorded_at,
                    prev_hash,
                    digest,
                )
            )
            prev_hash = digest
    return records


def split_event_documents(
    streams: Sequence[StreamAppend], metadata: EventMetadata, recorded_at: datetime
) -> list[tuple[bytes, bytes]]:
    """Each new event's canonical document cut where its position goes, in append order.

    For the event that lands at position p, `prefix + str(p).encode() + suffix` is exactly its
    `event_bytes`: sorted keys put "position" between "payload" and "recorded_at", so a store
    that learns the head only under its lock can finish the documents (and the hashes) there.
    """
    metadata_json = metadata_document(metadata)
    recorded = format_timestamp(recorded_at)
    documents: list[tuple[bytes, bytes]] = []
    for stream in streams:
        category = category_of(stream.stream_id)
        version = stream.expected_version
        for event in stream.events:
            version += 1
            payload = normalise(event.payload, "$.payload")
            if not isinstance(payload, dict):
                raise CanonicalJsonError(f"the payload of {event.type} must be a JSON object")
            before = _dumps({"category": category, "metadata": metadata_json, "payload": payload})
            after = _dumps(
                {
                    "recorded_at": recorded,
                    "schema_version": event.schema_version,
                    "stream_id": stream.stream_id,
                    "type": event.type,
                    "version": version,
                }
            )
            documents.append((before[:-1] + b',"position":', b"," + after[1:]))
    return documents


class BreakKind(StrEnum):
    """Which property of the chain a broken link violates."""

    POSITION = "position"
    PREV_HASH = "prev_hash"
    HASH = "hash"
    UNREADABLE = "unreadable"
    """A column holds what no appended row can: a number beyond canonical JSON (a float, or
    an integer outside 64 bits), a time outside years 1 to 9999. `expected` names the column,
    `found` says what is wrong."""


@dataclass(frozen=True, slots=True)
class ChainBreak:
    """The first broken link of a chain: where, which check failed, and the two values."""

    position: int
    kind: BreakKind
    expected: str
    found: str

    def __str__(self) -> str:
        return f"position {self.position}: {self.kind} expected {self.expected}, found {self.found}"


def verify_chain(
    events: Iterable[RecordedEvent],
    expected_prev_hash: str = GENESIS_HASH,
    first_position: int | None = None,
) -> ChainBreak | None:
    """The first broken link among events read in position order, or None if all hold.

    Pass events as recorded (`read_all(..., upcast=False)`). To verify in batches, pass the
    previous batch's last hash and last position + 1. From the genesis hash the first position
    must be 1; otherwise `first_position` is checked when given.
    """
    expected_position = first_position
    if expected_position is None and expected_prev_hash == GENESIS_HASH:
        expected_position = 1
    prev_hash = expected_prev_hash
    # The events of one append share their metadata object (the stores read them back that
    # way) and their timestamp, so each is written out once per append, not once per event.
    # Metadata is compared by identity: equality would cost as much as writing it out.
    last_metadata: EventMetadata | None = None
    metadata_json: dict[str, JsonValue] = {}
    last_recorded_at: datetime | None = None
    recorded = ""
    dumps, sort_keys, sha256 = orjson.dumps, orjson.OPT_SORT_KEYS, hashlib.sha256
    for event in events:
        position = event.position
        if expected_position is not None and position != expected_position:
            return ChainBreak(
                expected_position, BreakKind.POSITION, str(expected_position), str(position)
            )
        if event.prev_hash != prev_hash:
            return ChainBreak(position, BreakKind.PREV_HASH, prev_hash, event.prev_hash)
        if event.metadata is not last_metadata:
            last_metadata = event.metadata
            metadata_json = metadata_document(last_metadata)
        if event.recorded_at != last_recorded_at:
            last_recorded_at = event.recorded_at
            recorded = format_timestamp(last_recorded_at)
        # The document of event_bytes, inlined: this loop is the verifier's whole cost.
        document = dumps(
            {
                "position": position,
                "stream_id": event.stream_id,
                "category": event.category,
                "version": event.version,
                "type": event.type,
                "schema_version": event.schema_version,
                "payload": event.payload,
                "metadata": metadata_json,
                "recorded_at": recorded,
            },
            option=sort_keys,
        )
        digest = sha256(prev_hash.encode("ascii") + document).hexdigest()
        if event.hash != digest:
            return ChainBreak(position, BreakKind.HASH, digest, event.hash)
        prev_hash = digest
        expected_position = position + 1
    return None


RecordedRow: TypeAlias = tuple[int, str, str, int, str, int, str, str, datetime, str, str]
"""An events row as read for verification: the columns in table order, JSON left as text."""


def verify_rows(
    rows: Iterable[RecordedRow],
    expected_prev_hash: str = GENESIS_HASH,
    first_position: int | None = None,
) -> ChainBreak | None:
    """`verify_chain` over raw rows, without building an event object for each one.

    Each row's payload and metadata are the text of their JSON values (as `payload::text`
    reads them); everything else is as `verify_chain` describes.
    """
    expected_position = first_position
    if expected_position is None and expected_prev_hash == GENESIS_HASH:
        expected_position = 1
    prev_hash = expected_prev_hash
    last_metadata_text: str | None = None
    metadata_json: JsonValue = None
    last_recorded_at: datetime | None = None
    recorded = ""
    loads, dumps, sort_keys, sha256 = (
        orjson.loads,
        orjson.dumps,
        orjson.OPT_SORT_KEYS,
        hashlib.sha256,
    )
    row: RecordedRow | None = None
    # A damaged row must be named, never crash the walk: the try costs nothing until it raises
    # (Python 3.11), and the row is examined column by column only once it has.
    try:
        for row in rows:
            position, stream_id, category, version, type_, schema_version = row[:6]
            payload, metadata, recorded_at, row_prev_hash, row_hash = row[6:]
            if expected_position is not None and position != expected_position:
                return ChainBreak(
                    expected_position, BreakKind.POSITION, str(expected_position), str(position)
                )
            if row_prev_hash != prev_hash:
                return ChainBreak(position, BreakKind.PREV_HASH, prev_hash, row_prev_hash)
            if metadata != last_metadata_text:
                last_metadata_text = metadata
                metadata_json = loads(metadata)
            if recorded_at != last_recorded_at:
                last_recorded_at = recorded_at
                recorded = format_timestamp(recorded_at)
            document = dumps(
                {
                    "position": position,
                    "stream_id": stream_id,
                    "category": category,
                    "version": version,
                    "type": type_,
                    "schema_version": schema_version,
                    "payload": loads(payload),
                    "metadata": metadata_json,
                    "recorded_at": recorded,
                },
                option=sort_keys,
            )
            digest = sha256(prev_hash.encode("ascii") + document).hexdigest()
            if row_hash != digest:
                return ChainBreak(position, BreakKind.HASH, digest, row_hash)
            prev_hash = digest
            expected_position = position + 1
    except (ValueError, TypeError, AttributeError, OverflowError) as error:
        if row is None:
            raise
        return unreadable(row, error)
    return None


def unreadable(row: Sequence[object], error: Exception) -> ChainBreak:
    """The break for a row that cannot be rehashed: which column, and what is wrong with it."""
    position = row[0] if isinstance(row[0], int) else -1
    for index, column in ((6, "payload"), (7, "metadata")):
        text = row[index]
        try:
            orjson.dumps(orjson.loads(text) if isinstance(text, str | bytes) else text)
        except (ValueError, TypeError) as column_error:
            return ChainBreak(position, BreakKind.UNREADABLE, column, _said(text, column_error))
    recorded_at = row[8]
    if not isinstance(recorded_at, datetime) or recorded_at.utcoffset() is None:
        found = f"{recorded_at!s:.60} is not a UTC time in years 1 to 9999"
        return ChainBreak(position, BreakKind.UNREADABLE, "recorded_at", found)
    return ChainBreak(position, BreakKind.UNREADABLE, "row", _said(row, error))


def _said(value: object, error: Exception) -> str:
    return f"{value!s:.60} ({type(error).__name__}: {error})"
