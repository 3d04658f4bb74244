"""Which events are significant to a regulator, and of what kind: the rest is routine play.

An event is significant by its type (malfunctions, voids, recoveries, keys, limits, moderation
and the operators' own events), or by who appended it: every event an operator (an `ops` key
or the `cli`) appended, and every event recovery appended, whatever its type. Type names come
from the event classes in domain/, never from strings, so a renamed or new event cannot fall
silently out of the list.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from domain import round as table_round
from domain import wallet
from domain.api_keys import ApiKeyCreated, ApiKeyRevoked
from domain.player_limits import PlayerLimitSet
from domain.table import (
    ClientSeedRotated,
    MalfunctionDeclared,
    PlayerMuted,
    PlayerRemoved,
    PlayerUnmuted,
    TableCreated,
    TableReopened,
    TableSuspended,
)
from events.store import RecordedEvent
from service.application.game.recovery import RECOVERY
from service.application.keys import Role

OPERATOR = "operator"
MODERATION = "moderation"
VOID = "void"
RECOVERY_KIND = "recovery"
MALFUNCTION = "malfunction"
APIKEY = "apikey"
LIMIT = "limit"
KINDS: Final = (OPERATOR, MODERATION, VOID, RECOVERY_KIND, MALFUNCTION, APIKEY, LIMIT)

SIGNIFICANT_TYPES: Final[Mapping[str, str]] = {
    TableCreated.type: OPERATOR,
    PlayerMuted.type: MODERATION,
    PlayerUnmuted.type: MODERATION,
    PlayerRemoved.type: MODERATION,
    table_round.RoundVoided.type: VOID,
    # The table's and the wallet's SettlementReversed share the name.
    table_round.SettlementReversed.type: VOID,
    wallet.SettlementReversed.type: VOID,
    table_round.DealResumed.type: RECOVERY_KIND,
    MalfunctionDeclared.type: MALFUNCTION,
    TableSuspended.type: MALFUNCTION,
    TableReopened.type: OPERATOR,
    ClientSeedRotated.type: OPERATOR,
    wallet.Deposited.type: OPERATOR,
    wallet.Withdrawn.type: OPERATOR,
    wallet.Corrected.type: OPERATOR,
    ApiKeyCreated.type: APIKEY,
    ApiKeyRevoked.type: APIKEY,
    PlayerLimitSet.type: LIMIT,
}
"""The kind of each event type that is significant whoever appended it."""

# The command line appends as "cli" (service/cli); ops keys carry their role's value.
OPERATOR_ROLES: Final = frozenset({Role.OPS.value, "cli"})


def kind_of(event: RecordedEvent) -> str | None:
    """The significant-event kind of an event, or None when it is routine play."""
    kind = SIGNIFICANT_TYPES.get(event.type)
    if kind is not None:
        return kind
    metadata = event.metadata
    if metadata.role in OPERATOR_ROLES:
        return OPERATOR
    # Recovery appends as the system, like routine dealing, so it is told apart by its actor:
    # every round it completes (cards, settlements, credits) is listed as a recovery.
    if (metadata.actor, metadata.role) == (RECOVERY.actor_id, RECOVERY.role):
        return RECOVERY_KIND
    return None
