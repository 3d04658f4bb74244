"""Malfunctions, declared by ops: void the rounds in scope, suspend the table, retire its shoe.

"Malfunction voids all pays and play" as something the system does: one command decides every
step on the table aggregate (domain.table.DeclareMalfunction) and the wallets' side of each
void (stakes returned, settlements reversed), and appends all of it atomically with the
versions it read, so a malfunction is recorded whole or not at all. Nothing is updated or
deleted: a settled round is undone by compensating events.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from domain.round import (
    Round,
    RoundEvent,
    SettlementReversed,
    StakeReturned,
    replay_round,
)
from domain.round_errors import RoundNotFound, TableNotFound
from domain.table import (
    Command,
    DeclareMalfunction,
    MalfunctionScope,
    ReopenTable,
    RotateClientSeed,
    Table,
    TableEvent,
    decide,
    evolve,
    is_round_event,
)
from domain.wallet import (
    ReturnStake,
    ReverseSettlement,
    Wallet,
    WalletCommand,
    WalletEvent,
    decide_wallet,
    evolve_wallet,
    replay_wallet,
)
from events.store import Clock, EventStore, OutboxRow, RecordedEvent, StreamAppend
from service.application.actor import Actor
from service.application.appends import Prepared, Receipt, run_command
from service.application.streams import (
    DomainEvent,
    from_recorded,
    table_stream,
    to_new_event,
    wallet_stream,
)


@dataclass(frozen=True, slots=True)
class Scope:
    """Which rounds a malfunction voids: the current one, named ones, or those in a time range."""

    kind: MalfunctionScope
    round_ids: tuple[str, ...] = ()
    start: datetime | None = None
    end: datetime | None = None


class MalfunctionService:
    """Declaring malfunctions, reopening suspended tables, rotating the next client seed."""

    def __init__(
        self,
        store: EventStore,
        clock: Clock,
        seamless: Callable[[str], bool] | None = None,
        owed: Callable[[Sequence[StreamAppend]], Sequence[OutboxRow]] | None = None,
    ) -> None:
        self._store = store
        # The rollbacks a void owes seamless wallets, written in its own transaction.
        self._owed = owed
        self._clock = clock
        # A seamless player's returns and reversals are calls owed to the operator's wallet,
        # queued from the log (service/application/seamless_calls.py): no Shoebox wallet moves.
        self._seamless: Callable[[str], bool] = (
            seamless if seamless is not None else lambda player_id: False
        )

    def declare(
        self, table_id: str, reason: str, scope: Scope, actor: Actor, *, or_nothing: bool = False
    ) -> Receipt:
        """Declare a malfunction at a table and carry out every step of it in one append.

        `or_nothing`: suspend, retire and reveal even when no round in scope holds play.
        """
        malfunction_id = uuid.uuid4().hex

        def prepare() -> Prepared:
            recorded = self._store.read_stream(table_stream(table_id))
            table = _table(table_id, recorded)
            shoe = table.shoe
            secret = self._store.load_shoe_secret(shoe.shoe_id) if shoe is not None else None
            command = DeclareMalfunction(
                malfunction_id=malfunction_id,
                reason=reason,
                scope=scope.kind,
                rounds=_rounds_in_scope(recorded, scope),
                start=scope.start.isoformat() if scope.start is not None else None,
                end=scope.end.isoformat() if scope.end is not None else None,
                server_seed=secret,
                or_nothing=or_nothing,
            )
            return self._prepared(table_id, len(recorded), table, command)

        return run_command(self._store, actor, prepare)

    def reopen(self, table_id: str, reason: str, actor: Actor) -> Receipt:
        """Reopen a suspended table for play."""
        return self._simple(table_id, ReopenTable(reason), actor)

    def rotate_client_seed(
        self, table_id: str, client_seed: str, reason: str, actor: Actor
    ) -> Receipt:
        """Set the client seed the table's next shoe opens with."""
        return self._simple(table_id, RotateClientSeed(client_seed, reason), actor)

    def _simple(self, table_id: str, command: Command, actor: Actor) -> Receipt:
        def prepare() -> Prepared:
            recorded = self._store.read_stream(table_stream(table_id))
            table = _table(table_id, recorded)
            return self._prepared(table_id, len(recorded), table, command)

        return run_command(self._store, actor, prepare)

    def _prepared(self, table_id: str, version: int, table: Table, command: Command) -> Prepared:
        events = decide(table, command, self._clock())
        wallets: dict[str, tuple[int, Wallet, list[WalletEvent]]] = {}
        for event in events:
            money = _wallet_command(table_id, event)
            if money is None:
                continue
            player_id, wallet_command = money
            if self._seamless(player_id):
                continue
            if player_id not in wallets:
                stored = self._store.read_stream(wallet_stream(player_id))
                history: list[WalletEvent] = [from_recorded(e) for e in stored]  # type: ignore[misc]
                wallets[player_id] = (len(stored), replay_wallet(player_id, history), [])
            base, wallet, moved = wallets[player_id]
            for wallet_event in decide_wallet(wallet, wallet_command):
                wallet = evolve_wallet(wallet, wallet_event)
                moved.append(wallet_event)
            wallets[player_id] = (base, wallet, moved)
        appends = [StreamAppend(table_stream(table_id), version, [to_new_event(e) for e in events])]
        appends.extend(
            StreamAppend(wallet_stream(player_id), base, [to_new_event(e) for e in moved])
            for player_id, (base, _, moved) in sorted(wallets.items())
        )
        every: list[DomainEvent] = [*events]
        for _, (_, _, moved) in sorted(wallets.items()):
            every.extend(moved)
        outbox = self._owed(appends) if self._owed is not None else ()
        return Prepared(appends, tuple(every), outbox=outbox)


def table_of(table_id: str, recorded: Sequence[RecordedEvent]) -> Table:
    """The table that its stream's recorded events build (TableNotFound if it has none)."""
    return _table(table_id, recorded)


def _table(table_id: str, recorded: Sequence[RecordedEvent]) -> Table:
    table: Table | None = None
    for stored in recorded:
        event: TableEvent = from_recorded(stored)  # type: ignore[assignment]
        table = evolve(table, event)
    if table is None:
        raise TableNotFound(f"no table {table_id} (rule {TableNotFound.rule})")
    return table


def _rounds_in_scope(recorded: Sequence[RecordedEvent], scope: Scope) -> tuple[Round, ...]:
    """The rounds a named or time-range scope covers, each rebuilt from its own events."""
    if scope.kind is MalfunctionScope.CURRENT_ROUND:
        return ()
    by_round: dict[str, list[RoundEvent]] = {}
    opened_at: dict[str, datetime] = {}
    for stored in recorded:
        event = from_recorded(stored)
        if is_round_event(event):  # type: ignore[arg-type]
            by_round.setdefault(event.round_id, []).append(event)
            opened_at.setdefault(event.round_id, stored.recorded_at)
    if scope.kind is MalfunctionScope.ROUNDS:
        missing = [r for r in scope.round_ids if r not in by_round]
        if missing:
            raise RoundNotFound(
                f"no round {', '.join(missing)} at this table (rule {RoundNotFound.rule})"
            )
        wanted = list(scope.round_ids)
    else:
        assert scope.start is not None
        assert scope.end is not None
        start, end = scope.start, scope.end
        wanted = [r for r, at in opened_at.items() if start <= at <= end]
    return tuple(replay_round(by_round[r]) for r in wanted)


def _wallet_command(table_id: str, event: TableEvent) -> tuple[str, WalletCommand] | None:
    match event:
        case StakeReturned():
            return event.player_id, ReturnStake(
                table_id, event.round_id, event.spot, event.stake, str(event.reason)
            )
        case SettlementReversed():
            return event.player_id, ReverseSettlement(
                table_id, event.round_id, event.spot, event.stake, event.payout, event.commission
            )
    return None
