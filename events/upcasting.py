"""Upcasters: functions that lift an old event payload one schema version at a time."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TypeAlias

from events.recorded import JsonValue, RecordedEvent

Upcaster: TypeAlias = "Callable[[Mapping[str, JsonValue]], Mapping[str, JsonValue]]"


class Upcasters:
    """A registry of payload upcasters, keyed by event type and the version they lift from."""

    def __init__(self) -> None:
        self._steps: dict[tuple[str, int], Upcaster] = {}
        self._latest: dict[str, int] = {}

    def register(self, event_type: str, from_version: int, upcast: Upcaster) -> None:
        """Register `upcast`, which turns a `from_version` payload into a `from_version + 1` one."""
        if from_version < 1:
            raise ValueError("schema versions start at 1")
        if (event_type, from_version) in self._steps:
            raise ValueError(f"{event_type} v{from_version} already has an upcaster")
        self._steps[event_type, from_version] = upcast
        self._latest[event_type] = max(self._latest.get(event_type, 1), from_version + 1)

    def latest_version(self, event_type: str) -> int:
        """The newest schema version of an event type (1 if it was never upcast)."""
        return self._latest.get(event_type, 1)

    def upcast(self, event: RecordedEvent) -> RecordedEvent:
        """The event with its payload lifted to the latest schema version of its type."""
        latest = self._latest.get(event.type)
        if latest is None or event.schema_version >= latest:
            return event
        payload, version = event.payload, event.schema_version
        while version < latest:
            step = self._steps.get((event.type, version))
            if step is None:
                raise LookupError(f"no upcaster for {event.type} v{version} -> v{version + 1}")
            payload, version = step(payload), version + 1
        # The hash still covers the recorded payload: verify the chain on un-upcast events.
        return replace(event, payload=payload, schema_version=version)

    def upcast_all(self, events: list[RecordedEvent]) -> list[RecordedEvent]:
        """Every event upcast; the list itself when no registered type could need it."""
        if not self._latest:
            return events
        return [self.upcast(event) for event in events]
