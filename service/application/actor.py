"""Who is asking: the caller of an application service command, as the log records it."""

from dataclasses import dataclass

from events.store import EventMetadata, Idempotency


@dataclass(frozen=True, slots=True)
class Actor:
    """The authenticated caller of a command: id, role, request id and idempotency key."""

    actor_id: str
    role: str
    request_id: str | None = None
    idempotency: Idempotency | None = None

    def metadata(self, *, causation_id: str | None = None) -> EventMetadata:
        """The metadata recorded beside the events this actor's command causes."""
        return EventMetadata(
            actor=self.actor_id,
            role=self.role,
            request_id=self.request_id,
            correlation_id=self.request_id,
            causation_id=causation_id,
        )
