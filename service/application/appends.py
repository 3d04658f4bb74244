"""How a command reaches the log: idempotent replay, one atomic append, retries within a budget.

Every application service command is a `prepare` function that loads the streams it needs,
runs the pure domain and returns the appends with the versions it read. `run_command` answers
a repeated idempotency key from the log without deciding anything again, appends once, and on
a `ConcurrencyConflict` prepares afresh from the newer state, after a short random pause, for
as long as its `Patience` allows: a request's budget of time, not a count of tries, since
seven players betting at one table in the same second lose several races each (issue 21).

A caller that can say how it will answer (`Actor.respond`) gets the one-call path: the answer
is built from the prepared events before the append and stored with the idempotency key in the
append itself, and the key is not looked up first, since the append answers a known key with
its stored answer. A fresh keyed command is then one call to the store.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from typing import Final

from events.store import (
    AppendResult,
    ConcurrencyConflict,
    EventStore,
    Idempotency,
    IdempotencyKeyReused,
    JsonValue,
    OutboxRow,
    StreamAppend,
)
from service.application.actor import Actor, Outcome
from service.application.errors import Conflict
from service.application.streams import DomainEvent, from_recorded

_log = logging.getLogger(__name__)

REQUEST_BUDGET_SECONDS: Final = 2.5
"""How long a command keeps trying to get its append in: a request answers within 3 s."""


def _monotonic() -> float:
    return time.monotonic()


def _sleep(seconds: float) -> None:
    # Looked up on every call, not bound at import: a gevent worker patches time.sleep after
    # this module may have been imported, and the unpatched sleep would stall every request
    # the worker is serving.
    time.sleep(seconds)


@dataclass(frozen=True, slots=True)
class Patience:
    """How a command retries while other appends keep beating it to its streams.

    After each lost race it pauses for a random time up to a ceiling that doubles from
    `first_pause` to `longest_pause` (full jitter: racers that lost together spread out
    instead of colliding again in step), then reads its streams from the log and decides
    again. It gives up, a 409 `concurrent-update`, only once `budget_seconds` have passed since
    the command began, or after `attempts` tries if that is set. The ceiling stays small: a
    loser that sat out long would only let the winners' next commands go first again.
    """

    budget_seconds: float = REQUEST_BUDGET_SECONDS
    attempts: int | None = None
    first_pause: float = 0.001
    longest_pause: float = 0.016
    monotonic: Callable[[], float] = _monotonic
    sleep: Callable[[float], None] = _sleep
    draw: Callable[[], float] = random.random

    def deadline(self) -> float:
        """The moment, on `monotonic`, at which a command beginning now gives up."""
        return self.monotonic() + self.budget_seconds

    def pause(self, lost: int) -> float:
        """Seconds to wait after the `lost`-th lost race."""
        ceiling = min(self.longest_pause, self.first_pause * 2.0 ** min(lost - 1, 30))
        return self.draw() * ceiling


DEFAULT_PATIENCE: Final = Patience()

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
    # Rows the append owes beside its events (the calls owed to a seamless wallet), written
    # in its transaction: events/store.py's OutboxRow.
    outbox: Sequence[OutboxRow] = ()


def run_command(
    store: EventStore,
    actor: Actor,
    prepare: Callable[[], Prepared],
    patience: Patience = DEFAULT_PATIENCE,
    *,
    deadline: float | None = None,
    window_left: Callable[[], float | None] | None = None,
) -> Receipt:
    """Prepare and append a command, retrying lost races; a repeated key replays the first.

    `deadline` (on `patience.monotonic`, by default the budget from now) is when to give up;
    `window_left`, if given, says how many seconds the betting window the command acts in
    stays open (None if none is), and no pause runs past its close: a retry after the close is
    decided on the closed window, so a late command gets the game's answer, never a 409 for
    having lost races.
    """
    if deadline is None:
        deadline = patience.deadline()
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
    while True:
        try:
            prepared = prepare()
            keyed = idempotency
            if idempotency is not None and respond is not None:
                answer = respond(Outcome(prepared.events, _new_versions(prepared.appends)))
                keyed = replace(idempotency, response=answer)
            result = store.append(prepared.appends, actor.metadata(), keyed, outbox=prepared.outbox)
        except ConcurrencyConflict as conflict:
            conflicted.append(conflict.stream_id)
            pause = _pause_before_retry(patience, len(conflicted), deadline, window_left)
            if pause is None:
                break
            if pause > 0:
                patience.sleep(pause)
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
    if patience.attempts != 1:
        # Rare enough to be worth a line (issue 21): a request refused only for losing races.
        # (A single try is a probe whose caller goes on another way.)
        _log.warning("gave up after %d lost races on %s", len(conflicted), sorted(set(conflicted)))
    raise Conflict(sorted(set(conflicted)), len(conflicted))


def _pause_before_retry(
    patience: Patience,
    lost: int,
    deadline: float,
    window_left: Callable[[], float | None] | None,
) -> float | None:
    """Seconds to wait before the next try after `lost` lost races, or None to give up."""
    if patience.attempts is not None and lost >= patience.attempts:
        return None
    left = deadline - patience.monotonic()
    if left <= 0:
        return None
    pause = min(patience.pause(lost), left)
    open_for = window_left() if window_left is not None else None
    if open_for is not None:
        pause = min(pause, max(0.0, open_for))
    return pause


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
