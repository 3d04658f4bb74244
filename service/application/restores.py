"""Recording a restore of the database in the log itself, before play resumes (`LogRestored`).

A restore to an earlier point loses what the log held after it, and with it checkpoints that
regulators may already keep. It must be a significant event of the log, not something only
an operator knows: `LogRestored` names the last position kept and the last checkpoint the
restored log extends, and `shoebox audit verify` reports the checkpoints lost by it as such.
Then every table whose shoe was open has the shoe retired and its seed revealed and its open
round voided, stakes returned (a MalfunctionDeclared naming the restore): cards dealt after
the restore point may already have been seen, so that shoe must never deal again. The tables
stay suspended until ops reopen them.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from domain.audit import CheckpointSigned, LogRestored
from domain.payloads import from_payload, to_payload
from domain.table import MalfunctionScope, TableCreated
from events.canonical import format_timestamp
from events.store import Clock, EventStore, NewEvent, OutboxRow, StreamAppend, to_utc
from service.application.actor import Actor
from service.application.checkpoints import STREAM as CHECKPOINT_STREAM
from service.application.errors import ServiceError
from service.application.malfunctions import MalfunctionService, Scope, table_of
from service.application.streams import id_of, table_stream

STREAM: Final = "audit:restores"
_PAGE: Final = 1000


class RestoreNotRecordableError(ServiceError):
    """The log has moved on since the restore, or the restore was already recorded."""


@dataclass(frozen=True, slots=True)
class RestoreRecorded:
    """The LogRestored appended, and the tables whose shoes it retired."""

    restored: LogRestored
    tables: tuple[str, ...]


def record_restore(
    store: EventStore,
    clock: Clock,
    actor: Actor,
    *,
    last_position_kept: int,
    recovered_head: int | None = None,
    recovery_target: str,
    reason: str,
    seamless: Callable[[str], bool] | None = None,
    owed: Callable[[Sequence[StreamAppend]], Sequence[OutboxRow]] | None = None,
) -> RestoreRecorded:
    """Append LogRestored, then retire every open shoe; refused if anything was appended since.

    `recovered_head`, where recovery ended, is below `last_position_kept` when the appends
    the recovery kept unsequenced were placed after it (LogRestored says why that matters).
    """
    if recovered_head is not None and recovered_head > last_position_kept:
        raise ValueError(f"recovery ended at {recovered_head}, past {last_position_kept}")
    head = store.head()
    if head != last_position_kept:
        raise RestoreNotRecordableError(
            f"the log's head is {head}, not the restored {last_position_kept}: something has"
            " written since the restore (or it is recorded already); record it before play"
        )
    last = store.last_of_stream(CHECKPOINT_STREAM)
    checkpoint = None if last is None else from_payload(CheckpointSigned, last.payload)
    restored = LogRestored(
        restore_id=uuid.uuid4().hex,
        last_position_kept=last_position_kept,
        last_checkpoint_position=None if checkpoint is None else checkpoint.position,
        last_checkpoint_hash=None if checkpoint is None else checkpoint.head_hash,
        recovery_target=recovery_target,
        reason=reason,
        restored_at=format_timestamp(to_utc(clock())),
        recovered_head=None if recovered_head == last_position_kept else recovered_head,
    )
    prior = store.last_of_stream(STREAM)
    event = NewEvent(LogRestored.type, to_payload(restored))  # type: ignore[arg-type]
    store.append(
        [StreamAppend(STREAM, 0 if prior is None else prior.version, [event])], actor.metadata()
    )
    why = f"log restored to position {last_position_kept} (restore {restored.restore_id})"
    # A seamless player's voided bets are calls owed to their operator's wallet (written
    # with the void), never a move of a Shoebox wallet they do not have.
    malfunctions = MalfunctionService(store, clock, seamless, owed)
    retired = []
    for table_id in _tables(store):
        table = table_of(table_id, store.read_stream(table_stream(table_id)))
        open_round = table.round is not None and not table.round.is_over
        if table.shoe is None and not open_round:
            continue
        malfunctions.declare(table_id, why, Scope(MalfunctionScope.ROUNDS), actor, or_nothing=True)
        retired.append(table_id)
    return RestoreRecorded(restored, tuple(retired))


def _tables(store: EventStore) -> list[str]:
    found: list[str] = []
    after = 0
    while True:
        page = store.read_all(after, _PAGE, types=[TableCreated.type], upcast=False)
        found.extend(id_of(e.stream_id) for e in page)
        if len(page) < _PAGE:
            return found
        after = page[-1].position


def restores(store: EventStore) -> list[tuple[int, LogRestored]]:
    """Every restore recorded in the log, with the position of its LogRestored, in log order."""
    return [(e.position, from_payload(LogRestored, e.payload)) for e in store.read_stream(STREAM)]


def lost_by_restore(
    checkpoint: CheckpointSigned,
    recorded: Sequence[tuple[int, LogRestored]],
) -> str | None:
    """Which recorded restore lost `checkpoint`, said in one line; None if none explains it.

    A restore explains a checkpoint that signed a position after the last one it kept, and
    that was signed before the restore was recorded: one signed since is over the new log,
    which must extend it.
    """
    for position, restored in recorded:
        signed_before = _moment(checkpoint.recorded_at) < _moment(restored.restored_at)
        if checkpoint.position > restored.lost_after and signed_before:
            extends = (
                "no checkpoint"
                if restored.last_checkpoint_position is None
                else f"the checkpoint at {restored.last_checkpoint_position}"
            )
            return (
                f"checkpoint at position {checkpoint.position}: LOST by the restore recorded at"
                f" position {position} ({restored.restored_at}: the log was restored to position"
                f" {restored.lost_after}, extending {extends};"
                f" reason: {restored.reason})"
            )
    return None


def _moment(timestamp: str) -> datetime:
    # Both are the log's RFC 3339 in UTC (events.canonical.format_timestamp).
    return datetime.fromisoformat(timestamp.replace("Z", "+00:00"))


@dataclass(frozen=True, slots=True)
class Continuity:
    """How the log stands against checkpoints kept outside it (a regulator's copy, say)."""

    head: int
    lost: tuple[CheckpointSigned, ...]
    """Signed past the log's head, and no recorded restore explains them: the log was cut."""
    rewritten: tuple[CheckpointSigned, ...]
    """At a position the log holds, with another hash: not a loss but a different log."""
    explained: tuple[str, ...]
    """Checkpoints lost by a recorded restore, each said in one line."""

    @property
    def cut(self) -> bool:
        return bool(self.lost or self.rewritten)


def continuity(store: EventStore, kept: Sequence[CheckpointSigned]) -> Continuity:
    """Whether the log still extends every kept checkpoint, or a recorded restore explains it.

    What a data-losing failover leaves (a promoted standby that lacked the primary's last
    commits): checkpoints signed over positions the new primary never had. A failover within
    Patroni's strict synchronous mode cannot; a manual one to an asynchronous standby can.
    """
    head = store.head()
    recorded = restores(store)
    lost: list[CheckpointSigned] = []
    rewritten: list[CheckpointSigned] = []
    explained: list[str] = []
    for checkpoint in kept:
        if checkpoint.position <= head:
            found = store.read_all(checkpoint.position - 1, 1, upcast=False)
            if not found or found[0].hash != checkpoint.head_hash:
                rewritten.append(checkpoint)
            continue
        why = lost_by_restore(checkpoint, recorded)
        if why is None:
            lost.append(checkpoint)
        else:
            explained.append(why)
    return Continuity(head, tuple(lost), tuple(rewritten), tuple(explained))


def record_loss(
    store: EventStore,
    clock: Clock,
    actor: Actor,
    *,
    kept: Sequence[CheckpointSigned],
    reason: str,
    force: bool = False,
    seamless: Callable[[str], bool] | None = None,
    owed: Callable[[Sequence[StreamAppend]], Sequence[OutboxRow]] | None = None,
    place_queued: Callable[[], int] | None = None,
) -> RestoreRecorded | None:
    """Record that the log lost its tail (a failover to a standby that lacked it), before play.

    The log as it stands is what is kept: LogRestored names its head, and every open shoe is
    retired, as after a restore, because cards dealt in the lost tail may have been seen and
    the shoe would deal them again. None when the kept checkpoints show no loss and `force`
    is not set (an operator who knows unsigned writes were lost sets it). `place_queued`
    places the appends the promoted server holds committed but unsequenced, after the log
    is compared with the checkpoints and before LogRestored (as `shoebox restore` does).
    """
    standing = continuity(store, kept)
    if standing.rewritten:
        positions = ", ".join(str(c.position) for c in standing.rewritten)
        raise RestoreNotRecordableError(
            f"the log holds other events at the kept checkpoints' positions ({positions}):"
            " it was rewritten or written after the loss, which no LogRestored can explain;"
            " stop every Shoebox process before recording a loss"
        )
    if not standing.lost and not force:
        return None
    last_lost = max((c.position for c in standing.lost), default=None)
    target = f"failover: the log ends at position {standing.head}" + (
        "" if last_lost is None else f"; kept checkpoints reach {last_lost}"
    )
    placed = 0 if place_queued is None else place_queued()
    return record_restore(
        store,
        clock,
        actor,
        last_position_kept=standing.head + placed,
        recovered_head=standing.head,
        recovery_target=target,
        reason=reason,
        # A seamless player's voided stakes are rollbacks owed to their wallet, as in a restore.
        seamless=seamless,
        owed=owed,
    )
