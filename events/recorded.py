"""The values an event is made of as the log holds it: its JSON payload, metadata and row.

Kept apart from events.store so that events.upcasting, which the store uses, can use them
without importing the store back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TypeAlias

JsonValue: TypeAlias = "bool | int | str | Sequence[JsonValue] | Mapping[str, JsonValue] | None"
JsonObject: TypeAlias = Mapping[str, JsonValue]


@dataclass(frozen=True, slots=True)
class EventMetadata:
    """Who caused an event and in answer to what; stored beside every event and hashed with it."""

    actor: str
    role: str
    request_id: str | None = None
    correlation_id: str | None = None
    causation_id: str | None = None
    # Filled in by `append` from its `Idempotency` argument, so that it cannot disagree.
    idempotency_key: str | None = None


@dataclass(frozen=True, slots=True)
class RecordedEvent:
    """An event as the log holds it: every column of its row."""

    position: int
    stream_id: str
    category: str
    version: int
    type: str
    schema_version: int
    payload: JsonObject
    metadata: EventMetadata
    recorded_at: datetime
    prev_hash: str
    hash: str
