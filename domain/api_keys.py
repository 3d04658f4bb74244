"""The events of an API key's life: created with the hash of its secret, revoked with a reason.

Keys are not the game, but their events are in the same log, so their names live with every
other event's, here in `domain/` (see domain/events.py). The rules for keys, and the secret
itself, are in service/application/keys.py.
"""

from dataclasses import dataclass
from typing import ClassVar, TypeAlias


@dataclass(frozen=True, slots=True)
class ApiKeyCreated:
    """A key was issued to `name` for `role`; the log keeps only its secret's SHA-256."""

    type: ClassVar[str] = "ApiKeyCreated"
    key_id: str
    name: str
    role: str
    key_sha256: str


@dataclass(frozen=True, slots=True)
class ApiKeyRevoked:
    """A key stopped working, for `reason`."""

    type: ClassVar[str] = "ApiKeyRevoked"
    key_id: str
    reason: str


ApiKeyEvent: TypeAlias = ApiKeyCreated | ApiKeyRevoked
API_KEY_EVENT_TYPES: tuple[type[ApiKeyEvent], ...] = (ApiKeyCreated, ApiKeyRevoked)
