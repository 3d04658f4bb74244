"""Interrupted rounds: found on start-up and by a periodic job, completed or voided.

What "interrupted" means here. A coup's cards, outcome, settlements and wallet credits are
one atomic append (service/game.py), so a process killed during a deal leaves the log with
the whole coup or none of it: never a half-dealt round. What a crash *can* leave is a round
that is due but not dealt: every participant has acted, or its betting window has lapsed, and
the request or job that would have dealt it died first. Such a round is interrupted. Its
cards are already fixed by the committed shoe, so recovery deals it exactly as the lost
request would have, from the shoe's stored seed. The one round that cannot be completed is one
whose shoe's secret is lost: recovery then voids it as a malfunction (every stake back,
table suspended, shoe retired), because nobody could verify cards dealt from that shoe.

(A `DealResumed` event exists for a log written by an older, non-atomic dealer: a round whose
card events stopped part-way is completed from the same shoe position, and the domain checks
the recorded cards against the re-dealt ones before appending only the missing events.)
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import TYPE_CHECKING

from domain.round import Phase, Round
from domain.table import MalfunctionScope, Table
from events.store import EventStore
from service.application.actor import Actor
from service.application.errors import TableNotFound
from service.application.game.open_rounds import InMemoryOpenRounds, OpenRounds
from service.application.malfunctions import MalfunctionService, Scope

if TYPE_CHECKING:
    # Only for types: tables imports this module's sibling helpers, so importing it would cycle.
    from service.application.game.tables import GameService

log = logging.getLogger(__name__)

RECOVERY = Actor("recovery", "system")
"""The actor recorded on every append recovery makes, so the log marks each as a recovery."""


class RecoveryAction(StrEnum):
    """What recovery did to an interrupted round."""

    COMPLETED = "completed"
    VOIDED = "voided"


@dataclass(frozen=True, slots=True)
class RecoveredRound:
    """One interrupted round and what recovery did with it."""

    table_id: str
    round_id: str
    action: RecoveryAction
    detail: str


def is_interrupted(current: Round | None, now: datetime) -> bool:
    """Whether a round is due to be dealt but has not been: the state a crash leaves."""
    if current is None:
        return False
    if current.phase is Phase.BETTING:
        return not current.pending or current.window_closed(now)
    return current.deal_interrupted


def recover(
    store: EventStore,
    games: GameService,
    clock: Callable[[], datetime],
    open_rounds: OpenRounds | None = None,
    grace: timedelta = timedelta(0),
) -> list[RecoveredRound]:
    """Find every interrupted round and complete it, or void it if it cannot be.

    `grace` leaves a window that has only just closed to the timer that owns it: the periodic
    sweep passes one, so a healthy round is never recorded as a recovery merely because the
    sweep ran in the moment between the window's close and the timer's firing.

    Only the rounds that the index of open rounds names as past their window are looked at,
    so a sweep costs the same over one table or a thousand idle ones; each is confirmed by
    loading its table before anything is appended. Without an index (the in-memory wiring),
    one is folded from the log.
    """
    index = open_rounds if open_rounds is not None else InMemoryOpenRounds(store)
    recovered: list[RecoveredRound] = []
    for candidate in index.due(clock() - grace):
        outcome = recover_table(store, games, clock, candidate.table_id, grace)
        if outcome is not None:
            recovered.append(outcome)
    return recovered


def recover_table(
    store: EventStore,
    games: GameService,
    clock: Callable[[], datetime],
    table_id: str,
    grace: timedelta = timedelta(0),
) -> RecoveredRound | None:
    """Complete or void the table's interrupted round; None if it has none."""
    table = _table(games, table_id)
    current = table.round if table is not None else None
    if table is None or current is None or not is_interrupted(current, clock() - grace):
        return None
    lost = _lost_shoe(store, table, current)
    if lost is not None:
        reason = (
            f"recovery: the secret of shoe {lost} is lost, so round {current.round_id} "
            f"cannot be completed from it"
        )
        MalfunctionService(store, clock, games.is_seamless, games.owed).declare(
            table_id, reason, Scope(MalfunctionScope.CURRENT_ROUND), RECOVERY
        )
        log.info("voided interrupted round %s: %s", current.round_id, reason)
        return RecoveredRound(table_id, current.round_id, RecoveryAction.VOIDED, reason)
    games.catch_up(table_id, RECOVERY)
    after = _table(games, table_id)
    finished = after is not None and after.round is not None
    if finished and after is not None and after.round is not None:
        # The settling append may already have opened the next round.
        finished = after.round.round_id != current.round_id or after.round.is_over
    detail = "dealt from the committed shoe" if finished else "still not dealt"
    log.info("recovered interrupted round %s: %s", current.round_id, detail)
    return RecoveredRound(table_id, current.round_id, RecoveryAction.COMPLETED, detail)


def _lost_shoe(store: EventStore, table: Table, current: Round) -> str | None:
    """The shoe the round must be dealt from if its secret is gone; None if dealing can go on."""
    if current.deal_interrupted:
        shoe_id = current.shoe_id
    elif current.has_bets_in_play and table.live_shoe is not None:
        shoe_id = table.live_shoe.shoe_id
    else:
        return None  # no card needed, or a fresh shoe will be opened for it
    if shoe_id is None or store.load_shoe_secret(shoe_id) is None:
        return shoe_id or "(unknown)"
    return None


def _table(games: GameService, table_id: str) -> Table | None:
    # Through the game's cache: a snapshot and its tail, never the whole stream.
    try:
        return games.table(table_id)
    except TableNotFound:
        return None


def recover_on_start(
    store: EventStore,
    games: GameService,
    clock: Callable[[], datetime],
    open_rounds: OpenRounds | None = None,
) -> int:
    """Recover interrupted rounds before serving; the number recovered. For serve and run."""
    recovered = recover(store, games, clock, open_rounds)
    for outcome in recovered:
        log.warning(
            "start-up recovery: round %s at table %s %s (%s)",
            outcome.round_id,
            outcome.table_id,
            outcome.action,
            outcome.detail,
        )
    return len(recovered)
