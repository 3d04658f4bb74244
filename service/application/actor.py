"""Who is asking: the caller of an application service command, as the log records it, and
what its command's append will record, from which the caller builds its answer."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from events.store import EventMetadata, Idempotency, JsonValue
from service.application.streams import DomainEvent


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a command's append records: its events in append order, each stream's new version.

    Known before the append (the versions are the ones read plus the events added), so an
    answer built from it can be stored in the append; the positions are not, and are no part
    of it. It lives here, beside `Actor.respond` that takes it, so that the caller's side
    needs nothing of how a command is run (service/application/appends.py).
    """

    events: tuple[DomainEvent, ...]
    versions: Mapping[str, int]


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
