"""Who is asking: the caller of an application service command, as the log records it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from events.store import EventMetadata, Idempotency, JsonValue

if TYPE_CHECKING:
    from service.application.appends import Outcome


@dataclass(frozen=True, slots=True)
class Actor:
    """The authenticated caller of a command: id, role, request id and idempotency key."""

    actor_id: str
    role: str
    request_id: str | None = None
    idempotency: Idempotency | None = None
    # How the caller will answer the command, given what its append records: with an
    # idempotency key, the answer is stored in that very append (run_command), so a retry
    # replays it and the request costs one call to the store. Not part of who is asking.
    respond: Callable[[Outcome], JsonValue] | None = field(default=None, compare=False)

    def metadata(self, *, causation_id: str | None = None) -> EventMetadata:
        """The metadata recorded beside the events this actor's command causes."""
        return EventMetadata(
            actor=self.actor_id,
            role=self.role,
            request_id=self.request_id,
            correlation_id=self.request_id,
            causation_id=causation_id,
        )
