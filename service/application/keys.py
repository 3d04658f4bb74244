"""API keys: created and revoked as events in the `apikey` category, never stored in clear.

A key is `sbx_` followed by 32 random bytes in unpadded base64url. The log keeps only its
SHA-256, so a copy of the log (or of a backup) lets no one call the API. The key is shown
once, by `shoebox keys create`.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum
from typing import Final

from domain.api_keys import ApiKeyCreated, ApiKeyRevoked
from events import deadlines
from events.store import (
    EventMetadata,
    EventStore,
    JsonValue,
    NewEvent,
    RecordedEvent,
    StreamAppend,
)
from service.application.operators import DEFAULT_OPERATOR, checked_operator

CATEGORY: Final = "apikey"
KEY_PREFIX: Final = "sbx_"
MAX_NAME_LENGTH: Final = 100
MAX_REASON_LENGTH: Final = 500
# A revocation reaches every worker within this many seconds of being appended.
REFRESH_SECONDS: Final = 1.0
# A key created a moment ago should work at once; an unknown key forces a re-read, but at
# most this often, so that a stream of made-up keys cannot turn into a stream of queries.
MISS_REFRESH_SECONDS: Final = 0.1
_SECRET_BYTES: Final = 32
_READ_BATCH: Final = 1000
# Far above a real key's 47 characters; hashing megabytes of header is not our job.
_MAX_SECRET_LENGTH: Final = 128


class Role(StrEnum):
    """What a key's holder may do: play, operate, or only read."""

    FRONTEND = "frontend"
    OPS = "ops"
    REGULATOR = "regulator"


ALL_ROLES: Final = frozenset(Role)


class ApiKeyError(Exception):
    """A key command that cannot be carried out."""


class UnknownApiKey(ApiKeyError):  # noqa: N818 - named for what happened, as in events.store
    """No key has this id."""

    def __init__(self, key_id: str) -> None:
        super().__init__(f"there is no API key {key_id!r}")
        self.key_id = key_id


class ApiKeyAlreadyRevoked(ApiKeyError):  # noqa: N818
    """A key is revoked once; the first reason stands."""

    def __init__(self, key_id: str) -> None:
        super().__init__(f"API key {key_id!r} is already revoked")
        self.key_id = key_id


@dataclass(frozen=True, slots=True)
class ApiKey:
    """A key as the log describes it: who holds it, what it may do, and the hash of its secret."""

    key_id: str
    name: str
    role: Role
    key_sha256: str
    created_at: datetime
    revoked_at: datetime | None = None
    revoke_reason: str | None = None
    # The operator whose players the key acts for. A frontend key always has one (the default
    # operator when created without); an ops or regulator key without one sees all operators.
    operator: str | None = None

    @property
    def revoked(self) -> bool:
        """Whether the key has been revoked."""
        return self.revoked_at is not None


@dataclass(frozen=True, slots=True)
class IssuedKey:
    """A new key and its secret, which exists only here and in the creator's terminal."""

    key: ApiKey
    secret: str


def stream_id(key_id: str) -> str:
    """The stream that holds one key's events."""
    return f"{CATEGORY}:{key_id}"


def hash_key(secret: str) -> str:
    """The hex SHA-256 of a key's secret, which is all the log ever holds of it."""
    return hashlib.sha256(secret.encode()).hexdigest()


def generate_secret() -> str:
    """A fresh key secret: the prefix and 256 random bits."""
    raw = secrets.token_bytes(_SECRET_BYTES)
    return KEY_PREFIX + base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _check_text(what: str, text: str, limit: int) -> str:
    if not text.strip() or len(text) > limit or not text.isprintable():
        raise ValueError(f"{what} must be 1 to {limit} printable characters, not {text!r}")
    return text


def create_key(
    store: EventStore,
    name: str,
    role: Role,
    metadata: EventMetadata,
    operator: str | None = None,
) -> IssuedKey:
    """Append ApiKeyCreated for a new key and return it with its secret.

    A frontend key created without an operator belongs to the default one; an ops or
    regulator key without one sees every operator.
    """
    _check_text("a key name", name, MAX_NAME_LENGTH)
    if operator is None and role is Role.FRONTEND:
        operator = DEFAULT_OPERATOR
    if operator is not None:
        checked_operator(operator)
    key_id = "key_" + secrets.token_hex(8)
    secret = generate_secret()
    digest = hash_key(secret)
    payload: dict[str, JsonValue] = {
        "key_id": key_id,
        "name": name,
        "role": role.value,
        "key_sha256": digest,
    }
    if operator is not None:
        payload["operator"] = operator
    event = NewEvent(ApiKeyCreated.type, payload)
    store.append([StreamAppend(stream_id(key_id), 0, [event])], metadata)
    recorded = store.read_stream(stream_id(key_id))
    return IssuedKey(_fold(recorded), secret)


def revoke_key(store: EventStore, key_id: str, reason: str, metadata: EventMetadata) -> ApiKey:
    """Append ApiKeyRevoked for a live key; the key stops working within REFRESH_SECONDS."""
    _check_text("a revocation reason", reason, MAX_REASON_LENGTH)
    recorded = store.read_stream(stream_id(key_id))
    if not recorded:
        raise UnknownApiKey(key_id)
    if _fold(recorded).revoked:
        raise ApiKeyAlreadyRevoked(key_id)
    event = NewEvent(ApiKeyRevoked.type, {"key_id": key_id, "reason": reason})
    # The expected version makes two racing revocations record one reason, not two.
    store.append([StreamAppend(stream_id(key_id), len(recorded), [event])], metadata)
    return _fold(store.read_stream(stream_id(key_id)))


def list_keys(store: EventStore) -> list[ApiKey]:
    """Every key ever created, in order of creation, revoked ones included."""
    keys: dict[str, ApiKey] = {}
    for event in _events_after(store, 0):
        _apply(keys, event)
    return list(keys.values())


def _events_after(store: EventStore, position: int) -> Iterator[RecordedEvent]:
    while True:
        batch = store.read_all(position, _READ_BATCH, categories=[CATEGORY])
        yield from batch
        if len(batch) < _READ_BATCH:
            return
        position = batch[-1].position


def _fold(events: list[RecordedEvent]) -> ApiKey:
    keys: dict[str, ApiKey] = {}
    for event in events:
        _apply(keys, event)
    (key,) = keys.values()
    return key


def _apply(keys: dict[str, ApiKey], event: RecordedEvent) -> None:
    """Evolve the key map by one recorded event."""
    payload = event.payload
    key_id = str(payload["key_id"])
    if event.type == ApiKeyCreated.type:
        role = Role(str(payload["role"]))
        operator = payload.get("operator")
        # A key created before operators existed names none: a frontend one is the default's.
        if operator is None and role is Role.FRONTEND:
            operator = DEFAULT_OPERATOR
        keys[key_id] = ApiKey(
            key_id=key_id,
            name=str(payload["name"]),
            role=role,
            key_sha256=str(payload["key_sha256"]),
            created_at=event.recorded_at,
            operator=None if operator is None else str(operator),
        )
    elif event.type == ApiKeyRevoked.type and key_id in keys:
        keys[key_id] = replace(
            keys[key_id], revoked_at=event.recorded_at, revoke_reason=str(payload["reason"])
        )


class KeyRing:
    """The process's map from key hash to live key, re-read from the log when stale."""

    def __init__(
        self,
        store: EventStore,
        *,
        refresh_seconds: float = REFRESH_SECONDS,
        miss_refresh_seconds: float = MISS_REFRESH_SECONDS,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._refresh_seconds = refresh_seconds
        self._miss_refresh_seconds = miss_refresh_seconds
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._position = 0
        self._refreshed_at: float | None = None
        self._keys: dict[str, ApiKey] = {}
        self._by_hash: dict[str, ApiKey] = {}

    def authenticate(self, secret: str) -> ApiKey | None:
        """The live key whose secret this is, or None for unknown, malformed or revoked ones."""
        if not secret.startswith(KEY_PREFIX) or len(secret) > _MAX_SECRET_LENGTH:
            return None
        digest = hash_key(secret)
        self._refresh_if_older_than(self._refresh_seconds)
        key = self._by_hash.get(digest)
        if key is None:
            self._refresh_if_older_than(self._miss_refresh_seconds)
            key = self._by_hash.get(digest)
        # The dict lookup already matched the digest; comparing again in constant time costs
        # nothing and keeps the check safe should the lookup ever become a prefix search.
        if key is None or not hmac.compare_digest(key.key_sha256, digest) or key.revoked:
            return None
        return key

    def operators(self) -> frozenset[str]:
        """Every operator a key has named, and the default one."""
        self._refresh_if_older_than(self._refresh_seconds)
        named = {k.operator for k in self._keys.values() if k.operator is not None}
        return frozenset({DEFAULT_OPERATOR, *named})

    def refresh(self) -> None:
        """Read the key events appended since the last read."""
        with deadlines.holding(self._lock, "the key ring's refresh"):
            self._read_new_events()

    def _refresh_if_older_than(self, seconds: float) -> None:
        if self._fresh_within(seconds):
            return
        # Within the request's deadline: while the database is away each refresh fails slowly,
        # and the requests queued on this lock would otherwise wait for every one before them.
        with deadlines.holding(self._lock, "the key ring's refresh"):
            # Another thread may have refreshed while this one waited for the lock.
            if not self._fresh_within(seconds):
                self._read_new_events()

    def _fresh_within(self, seconds: float) -> bool:
        refreshed_at = self._refreshed_at
        return refreshed_at is not None and self._monotonic() - refreshed_at < seconds

    def _read_new_events(self) -> None:
        started = self._monotonic()
        for event in _events_after(self._store, self._position):
            _apply(self._keys, event)
            key = self._keys[str(event.payload["key_id"])]
            self._by_hash[key.key_sha256] = key
            self._position = event.position
        self._refreshed_at = started
