"""Which events are significant to a regulator, and of what kind: the rest is routine play.

An event is significant by its type (malfunctions, voids, recoveries, keys, limits, moderation
and the operators' own events), a wallet's daily reconciliation by finding a difference, or by
who appended it: every event an operator (an `ops` key or the `cli`) appended, and every event
recovery appended, whatever its type. Type names come
from the event classes in domain/, never from strings, so a renamed or new event cannot fall
silently out of the list.

The projection keeps one row per significant event, with what a regulator filters by (kind,
type, actor, table, time), so the significant-event log is read through its indexes instead of
by scanning the whole log (migrations/0010_read_models.sql).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from psycopg import Connection
from psycopg.rows import TupleRow

from domain import round as table_round
from domain import wallet
from domain.api_keys import ApiKeyCreated, ApiKeyRevoked
from domain.player_limits import PlayerLimitSet
from domain.reconciliation import WalletReconciled
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
from events.projections.base import Projection, copy_rows
from events.store import RecordedEvent
from service.application.game.recovery import RECOVERY
from service.application.keys import CATEGORY as APIKEY_CATEGORY
from service.application.keys import Role
from service.application.streams import CHAT, PLAYER, TABLE, WALLET, id_of
from service.application.wallet_reconciliation import RECONCILIATION

OPERATOR = "operator"
MODERATION = "moderation"
VOID = "void"
RECOVERY_KIND = "recovery"
MALFUNCTION = "malfunction"
APIKEY = "apikey"
LIMIT = "limit"
RECONCILIATION_KIND = "reconciliation"
KINDS: Final = (
    OPERATOR,
    MODERATION,
    VOID,
    RECOVERY_KIND,
    MALFUNCTION,
    APIKEY,
    LIMIT,
    RECONCILIATION_KIND,
)

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
    if event.type == WalletReconciled.type:
        # A day the wallet and the log agree on is routine; one they differ on is not. The
        # significant-event log lists only significant events, so a clean day is not listed.
        differences = event.payload.get("differences")
        return RECONCILIATION_KIND if isinstance(differences, int) and differences > 0 else None
    metadata = event.metadata
    if metadata.role in OPERATOR_ROLES:
        return OPERATOR
    # Recovery appends as the system, like routine dealing, so it is told apart by its actor:
    # every round it completes (cards, settlements, credits) is listed as a recovery.
    if (metadata.actor, metadata.role) == (RECOVERY.actor_id, RECOVERY.role):
        return RECOVERY_KIND
    return None


# Every category the log holds: an event of any of them is significant when an operator or
# recovery appended it. The checkpoints' stream is `audit:checkpoints`.
ALL_CATEGORIES: Final = tuple(
    sorted({APIKEY_CATEGORY, "audit", CHAT, PLAYER, RECONCILIATION, TABLE, WALLET})
)


def table_of(event: RecordedEvent) -> str | None:
    """The table an event is about: its own stream's, or the table its payload names."""
    if event.category == TABLE:
        return id_of(event.stream_id)
    named = event.payload.get("table_id")
    return named if isinstance(named, str) else None


class SignificantProjection(Projection):
    """One row per significant event: its position (the keyset) and what it is filtered by."""

    name = "significant"
    categories = ALL_CATEGORIES
    tables = ("proj_significant",)

    def apply(self, conn: Connection[TupleRow], events: Sequence[RecordedEvent]) -> None:
        """Add a row for each significant event of the batch; routine play adds nothing."""
        rows = []
        for event in events:
            kind = kind_of(event)
            if kind is not None:
                rows.append(
                    (
                        event.position,
                        kind,
                        event.type,
                        event.metadata.actor,
                        table_of(event),
                        event.recorded_at,
                    )
                )
        if rows:
            # Rows are only ever added, one per position: COPY, the fastest way in.
            copy_rows(
                conn,
                self.table("proj_significant"),
                ("position", "kind", "type", "actor", "table_id", "recorded_at"),
                rows,
            )
