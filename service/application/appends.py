"""How a command reaches the log: idempotent replay, one atomic append, bounded retries.

Every application service command is a `prepare` function that loads the streams it needs,
runs the pure domain and returns the appends with the versions it read. `run_command` answers
a repeated idempotency key from the log without deciding anything again, appends once, and on
a `ConcurrencyConflict` prepares afresh from the newer state, up to a bounded number of tries.

A caller that can say how it will answer (`Actor.respond`) gets the one-call path: the answer
is built from the prepared events before the append and stored with the idempotency key in the
append itself, and the key is not looked up first, since the append answers a known key with
its stored answer. A fresh keyed command is then one call to the store.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field, replace

from events.store import (
    AppendResult,
    ConcurrencyConflict,
    EventStore,
    Idempotency,
    IdempotencyKeyReused,
    JsonValue,
    StreamAppend,
)
from service.application.actor import Actor
from service.application.errors import Conflict
from service.application.streams import DomainEvent, from_recorded

DEFAULT_ATTEMPTS = 8

# The idempotency key that the caller (the HTTP layer) has already looked up in this context.
# Compared by identity: each request builds its own Idempotency, so a value left over from an
# earlier request on the same thread can never match a later one.
_LOOKED_UP: ContextVar[Idempotency | None] = ContextVar(
    "shoebox_idempotency_looked_up", default=None
)


def note_looked_up(idempotency: Idempotency) -> None:
    """Tell run_command that this key was found unused just now, so it need not look again.

    Only for a caller that also settles the race this leaves open: a twin request appending
    the same key in between makes this one's append replay (the store answers it), or this
    one's command refused, which the caller must then answer with the twin's response.
    """
    _LOOKED_UP.set(idempotency)


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a command's append records: its events in append order, each stream's new version.

    Known before the append (the versions are the ones read plus the events added), so an
    answer built from it can be stored in the append; the positions are not, and are no part
    of it.
    """

    events: tuple[DomainEvent, ...]
    versions: Mapping[str, int]


@dataclass(frozen=True, slots=True)
class Receipt:
    """What a command appended (or, for a repeated idempotency key, had appended before)."""

    events: tuple[DomainEvent, ...]
    # Each stream's version after the append (no positions: an append is answered before
    # the sequencer gives it its place in the log).
    versions: Mapping[str, int]
    # As with AppendResult: a replayed receipt equals the original it repeats.
    replayed: bool = field(default=False, compare=False)
    # The answer stored with the idempotency key by the append (the first request's, on a
    # replay); None when the caller gave no `respond`, or the first request stored none.
    response: JsonValue | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class Prepared:
    """A command's appends, its events in append order, and what to do once it is recorded."""

    appends: Sequence[StreamAppend]
    events: tuple[DomainEvent, ...]
    on_recorded: Callable[[AppendResult], None] = field(default=lambda result: None)


def run_command(
    store: EventStore,
    actor: Actor,
    prepare: Callable[[], Prepared],
    attempts: int = DEFAULT_ATTEMPTS,
) -> Receipt:
    """Prepare and append a command, retrying on conflicts; a repeated key replays the first."""
    idempotency = actor.idempotency
    respond = actor.respond if idempotency is not None else None
    if idempotency is not None and respond is None and _LOOKED_UP.get() is not idempotency:
        # Checked before deciding: the command may no longer be allowed (Deal pressed twice),
        # yet its retry must get the first answer, not a refusal. (With `respond`, the append
        # itself answers a known key, and the caller answers a refusal with the key's stored
        # answer if it has one.)
        earlier = replay(store, idempotency)
        if earlier is not None:
            return earlier
    conflicted: list[str] = []
    for _ in range(attempts):
        try:
            prepared = prepare()
            keyed = idempotency
            if idempotency is not None and respond is not None:
                answer = respond(Outcome(prepared.events, _new_versions(prepared.appends)))
                keyed = replace(idempotency, response=answer)
            result = store.append(prepared.appends, actor.metadata(), keyed)
        except ConcurrencyConflict as conflict:
            conflicted.append(conflict.stream_id)
            continue
        if result.replayed:
            # The key was used before (a retry, or a twin that won the race with this very
            # request): answer as the first request was.
            return _receipt_from_log(store, result)
        prepared.on_recorded(result)
        return Receipt(
            prepared.events,
            result.versions,
            response=None if keyed is None else keyed.response,
        )
    raise Conflict(sorted(set(conflicted)), attempts)


def _new_versions(appends: Sequence[StreamAppend]) -> dict[str, int]:
    # What the store will report once the append is recorded: the version read plus the
    # events added (a guard adds none).
    return {s.stream_id: s.expected_version + len(s.events) for s in appends}


def replay(store: EventStore, idempotency: Idempotency) -> Receipt | None:
    """The receipt of the append that first used this key, or None if none did."""
    record = store.idempotency_record(idempotency.key)
    if record is None:
        return None
    if record.fingerprint != idempotency.fingerprint:
        raise IdempotencyKeyReused(idempotency.key)
    return _receipt_from_log(store, replace(record.result, response=record.response))


def _receipt_from_log(store: EventStore, result: AppendResult) -> Receipt:
    # By version, stream after stream in append order: the append wrote each stream's events
    # together, and a stream read by version sees them whether or not they are sequenced yet.
    recorded = [
        event
        for stream_id, first, last in result.appended
        for event in store.read_stream(stream_id, first)[: last - first + 1]
    ]
    return Receipt(
        tuple(from_recorded(event) for event in recorded),
        result.versions,
        replayed=True,
        response=result.response,
    )
