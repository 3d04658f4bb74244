"""An in-memory event store: the fake that unit tests use in place of PostgreSQL."""

from __future__ import annotations

import threading
from collections.abc import Collection, Sequence
from dataclasses import replace

from events.canonical import chain_events, normalise
from events.store import (
    GENESIS_HASH,
    AppendResult,
    Clock,
    ConcurrencyConflict,
    EventMetadata,
    EventStore,
    Idempotency,
    IdempotencyKeyReused,
    IdempotencyRecord,
    JsonValue,
    OutboxRow,
    RecordedEvent,
    ShoeSecretAlreadyStored,
    StreamAppend,
    UnknownIdempotencyKey,
    check_appends,
    stamp_metadata,
    to_utc,
    utc_now,
)
from events.upcasting import Upcasters


class InMemoryEventStore(EventStore):
    """The same contract as PostgresEventStore, held in lists behind one lock."""

    def __init__(self, clock: Clock = utc_now, upcasters: Upcasters | None = None) -> None:
        super().__init__(clock, upcasters)
        # One lock plays the part of PostgreSQL's row locks and of the sequencer at once: each
        # append is sequenced as it is recorded, as the PostgreSQL store's inline sequencing
        # does, so a read by position after an append sees it.
        self._lock = threading.Lock()
        self._log: list[RecordedEvent] = []
        self._streams: dict[str, list[RecordedEvent]] = {}
        self._idempotency: dict[str, tuple[str, AppendResult]] = {}
        self._responses: dict[str, JsonValue] = {}
        self._shoe_secrets: dict[str, str] = {}
        self._claimed_shoes: dict[tuple[str, int], str] = {}
        # The outbox rows of every append recorded, in append order, as PostgreSQL would hold
        # them in their tables: for tests of what an append owes.
        self._outbox: list[OutboxRow] = []

    def append(
        self,
        streams: Sequence[StreamAppend],
        metadata: EventMetadata,
        idempotency: Idempotency | None = None,
        outbox: Sequence[OutboxRow] = (),
    ) -> AppendResult:
        """Append every stream's events atomically, or none; raise ConcurrencyConflict if stale."""
        check_appends(streams)
        metadata = stamp_metadata(metadata, idempotency)
        recorded_at = to_utc(self._clock())
        with self._lock:
            if idempotency is not None and idempotency.key in self._idempotency:
                return self._replay(idempotency)
            for stream in streams:
                actual = len(self._streams.get(stream.stream_id, ()))
                if actual != stream.expected_version:
                    raise ConcurrencyConflict(stream.stream_id, stream.expected_version, actual)
            head_hash = self._log[-1].hash if self._log else GENESIS_HASH
            if self._log:
                # As append_events() does under its lock: the clock was read before the lock,
                # and the log's time never runs backwards along its positions.
                recorded_at = max(recorded_at, self._log[-1].recorded_at)
            records = chain_events(streams, metadata, recorded_at, len(self._log), head_hash)
            for record in records:
                self._log.append(record)
                self._streams.setdefault(record.stream_id, []).append(record)
            result = AppendResult.of(streams)
            self._outbox.extend(outbox)
            if idempotency is not None:
                self._idempotency[idempotency.key] = (idempotency.fingerprint, result)
                if idempotency.response is not None:
                    # Under the same lock as the events, as append_events() stores it.
                    self._responses[idempotency.key] = normalise(idempotency.response)
            return result

    def outbox(self) -> list[OutboxRow]:
        """Every outbox row recorded with an append, in append order."""
        with self._lock:
            return list(self._outbox)

    def _replay(self, idempotency: Idempotency) -> AppendResult:
        fingerprint, result = self._idempotency[idempotency.key]
        if fingerprint != idempotency.fingerprint:
            raise IdempotencyKeyReused(idempotency.key)
        return replace(result, replayed=True, response=self._responses.get(idempotency.key))

    def read_stream(
        self, stream_id: str, from_version: int = 1, *, upcast: bool = True
    ) -> list[RecordedEvent]:
        """A stream's events from `from_version` on, upcast to their latest schema unless told."""
        with self._lock:
            events = self._streams.get(stream_id, [])[max(from_version, 1) - 1 :]
        return self._upcast(events) if upcast else events

    def read_all(
        self,
        from_position: int = 0,
        limit: int = 1000,
        categories: Collection[str] | None = None,
        types: Collection[str] | None = None,
        *,
        upcast: bool = True,
    ) -> list[RecordedEvent]:
        """Up to `limit` events after `from_position` in log order, optionally filtered."""
        if limit < 1:
            raise ValueError("limit must be at least 1")
        with self._lock:
            tail = self._log[max(from_position, 0) :]
        events: list[RecordedEvent] = []
        for event in tail:
            if categories is not None and event.category not in categories:
                continue
            if types is not None and event.type not in types:
                continue
            events.append(event)
            if len(events) == limit:
                break
        return self._upcast(events) if upcast else events

    def head(self) -> int:
        """The position of the last event in the log (0 when it is empty)."""
        with self._lock:
            return len(self._log)

    def last_of_stream(self, stream_id: str, *, upcast: bool = True) -> RecordedEvent | None:
        """A stream's last event, or None for an empty stream."""
        with self._lock:
            events = self._streams.get(stream_id, [])[-1:]
        events = self._upcast(events) if upcast else events
        return events[0] if events else None

    def idempotency_record(self, key: str) -> IdempotencyRecord | None:
        """What an idempotency key was used for, or None if no append recorded it."""
        with self._lock:
            if key not in self._idempotency:
                return None
            fingerprint, result = self._idempotency[key]
            return IdempotencyRecord(key, fingerprint, result, self._responses.get(key))

    def record_response(self, key: str, response: JsonValue) -> JsonValue:
        """Store the caller's response to replay for a key; return the one now stored."""
        response = normalise(response)
        with self._lock:
            if key not in self._idempotency:
                raise UnknownIdempotencyKey(key)
            return self._responses.setdefault(key, response)

    def claim_shoe_secret(
        self, table_id: str, nonce: int, shoe_id: str, server_seed: str
    ) -> tuple[str, str]:
        """The shoe id and seed kept for a table's `nonce`-th shoe: these, unless some are."""
        with self._lock:
            claimed = self._claimed_shoes.get((table_id, nonce))
            if claimed is not None:
                return claimed, self._shoe_secrets[claimed]
            if shoe_id in self._shoe_secrets:
                raise ShoeSecretAlreadyStored(shoe_id)
            self._shoe_secrets[shoe_id] = server_seed
            self._claimed_shoes[table_id, nonce] = shoe_id
            return shoe_id, server_seed

    def load_shoe_secret(self, shoe_id: str) -> str | None:
        """A live shoe's server seed, or None if none was stored."""
        with self._lock:
            return self._shoe_secrets.get(shoe_id)
