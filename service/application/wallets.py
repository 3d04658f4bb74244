"""The wallet application service: ops move money, anyone entitled reads balance and statement.

Stakes, returns and payouts reach a wallet only through the game service, in the same append
as the table events that cause them; this service covers the rest.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from functools import cache
from typing import Final

from domain.wallet import (
    WALLET_EVENT_TYPES,
    Correct,
    Corrected,
    Deposit,
    Deposited,
    PayoutCredited,
    SettlementReversed,
    StakeReserved,
    StakeReturned,
    Wallet,
    WalletCommand,
    WalletEvent,
    Withdraw,
    Withdrawn,
    decide_wallet,
    evolve_wallet,
)
from events.snapshots import SnapshotStore
from events.store import AppendResult, EventStore, StreamAppend
from service.application.actor import Actor, Outcome
from service.application.appends import DEFAULT_PATIENCE, Patience, Prepared, Receipt, run_command
from service.application.snapshots import SnapshotCodec
from service.application.streams import (
    SNAPSHOT_EVERY,
    WALLET,
    DomainEvent,
    StreamCache,
    from_recorded_as,
    id_of,
    to_new_event,
    wallet_stream,
)


def _fold_wallet(wallet: Wallet, event: DomainEvent) -> Wallet:
    if not isinstance(event, WALLET_EVENT_TYPES):
        raise TypeError(f"{event.type} is not a wallet event")
    return evolve_wallet(wallet, event)


WALLET_KEEP_EVERY: Final = 2 * SNAPSHOT_EVERY
"""A wallet keeps a snapshot in every block of this many versions, besides its newest two.

The regulator's export states each wallet as it stood before the slice's first event of it
(service/regulator/export.py): it starts from the kept snapshot at or before that version, so
it folds at most about this many of the wallet's older events, however long the player has
played. A wallet snapshot is about 200 bytes: one for every 200 wallet events is nothing
beside the events themselves.
"""


@cache
def wallet_codec() -> SnapshotCodec[Wallet]:
    """The codec of wallet snapshots (built once: its schema reads the domain's source)."""
    return SnapshotCodec(Wallet, evolve_wallet)


class WalletCache(StreamCache[Wallet]):
    """The per-process cache of wallets: (version, Wallet) per wallet stream."""

    def __init__(
        self,
        capacity: int = 4096,
        *,
        snapshots: SnapshotStore | None = None,
        snapshot_every: int = SNAPSHOT_EVERY,
        keep_every: int | None = WALLET_KEEP_EVERY,
    ) -> None:
        super().__init__(
            lambda stream_id: Wallet(id_of(stream_id)),
            _fold_wallet,
            capacity,
            snapshots=snapshots,
            codec=wallet_codec() if snapshots is not None else None,
            snapshot_every=snapshot_every,
            keep_every=keep_every,
        )

    def wallet(self, store: EventStore, player_id: str) -> tuple[int, Wallet]:
        """A player's wallet and its stream's version (an unused wallet is empty, version 0)."""
        return self.load(store, wallet_stream(player_id))


@dataclass(frozen=True, slots=True)
class Balance:
    """A wallet's available and reserved pence, at a version of its stream."""

    player_id: str
    available: int
    reserved: int
    version: int


@dataclass(frozen=True, slots=True)
class MoneyOutcome(Outcome):
    """An outcome, with the balance just after it of every wallet its append moves.

    The command's plan knows each wallet it moved as it will stand once the append is
    recorded, so an answer built before the append can say what the player has after it
    without reading anything.
    """

    balances: Mapping[str, Balance]


@dataclass(frozen=True, slots=True)
class StatementEntry:
    """One movement on a wallet, with the balances after it.

    `amount` is the change to the available balance (negative for stakes and withdrawals);
    `reserved_change` the change to the reserved one.
    """

    version: int
    position: int
    recorded_at: datetime
    type: str
    amount: int
    reserved_change: int
    available_after: int
    reserved_after: int
    reason: str | None
    table_id: str | None
    round_id: str | None
    spot: str | None
    stake: int | None
    payout: int | None
    commission: int | None


class MovementKind(StrEnum):
    """What a wallet movement was, as ops and regulators list them."""

    DEPOSIT = "deposit"
    WITHDRAWAL = "withdrawal"
    CORRECTION = "correction"
    STAKE_RESERVED = "stake_reserved"
    STAKE_RETURNED = "stake_returned"
    SETTLED_WIN = "settled_win"
    SETTLED_PUSH = "settled_push"
    SETTLED_LOSS = "settled_loss"
    VOID_REVERSAL = "void_reversal"


_KINDS: Final = {
    Deposited.type: MovementKind.DEPOSIT,
    Withdrawn.type: MovementKind.WITHDRAWAL,
    Corrected.type: MovementKind.CORRECTION,
    StakeReserved.type: MovementKind.STAKE_RESERVED,
    StakeReturned.type: MovementKind.STAKE_RETURNED,
    SettlementReversed.type: MovementKind.VOID_REVERSAL,
}


def movement_kind(entry: StatementEntry) -> MovementKind:
    """The kind of a statement entry; a settlement by what it paid back against the stake."""
    if entry.type == PayoutCredited.type:
        payout, stake = entry.payout or 0, entry.stake or 0
        if payout > stake:
            return MovementKind.SETTLED_WIN
        return MovementKind.SETTLED_PUSH if payout == stake else MovementKind.SETTLED_LOSS
    return _KINDS[entry.type]


@dataclass(frozen=True, slots=True)
class WalletMovement:
    """One movement on some player's wallet, as an operator's listing of movements holds it."""

    player_id: str
    entry: StatementEntry

    @property
    def kind(self) -> MovementKind:
        """What the movement was."""
        return movement_kind(self.entry)


class WalletService:
    """Deposits, withdrawals and corrections by ops; balances and statements for readers."""

    def __init__(
        self,
        store: EventStore,
        clock: Callable[[], datetime],
        *,
        wallets: WalletCache | None = None,
        patience: Patience = DEFAULT_PATIENCE,
    ) -> None:
        self._store = store
        self._clock = clock
        self._wallets = wallets if wallets is not None else WalletCache()
        self._patience = patience

    def deposit(
        self,
        player_id: str,
        amount: int,
        reason: str,
        actor: Actor,
        reference: str | None = None,
    ) -> Receipt:
        """Pay money into a wallet, with the payment's reference if it has one."""
        return self._run(player_id, Deposit(amount, reason, reference), actor)

    def withdraw(self, player_id: str, amount: int, reason: str, actor: Actor) -> Receipt:
        """Pay money out of a wallet, never more than is available."""
        return self._run(player_id, Withdraw(amount, reason), actor)

    def correct(self, player_id: str, amount: int, reason: str, actor: Actor) -> Receipt:
        """Correct a wallet by a signed amount."""
        return self._run(player_id, Correct(amount, reason), actor)

    def balance(self, player_id: str) -> Balance:
        """A wallet's balances now, exactly: its newest snapshot and the events after it.

        Reads only (a snapshot is written by appends, never here), and folds at most about
        SNAPSHOT_EVERY events however old the wallet is.
        """
        version, wallet = self._wallets.wallet(self._store, player_id)
        return Balance(player_id, wallet.available, wallet.reserved, version)

    def balances_after(self, outcome: Outcome | Receipt) -> dict[str, Balance]:
        """Each wallet the command moved, by player, as it stood just after the command.

        From the plan itself before the append (a MoneyOutcome); after it, from the wallet
        cache, which holds that very version once this process has appended it, else from the
        wallet's snapshot at or before that version and the events up to it (a replayed
        command): never the wallet now, which a later bet may have moved on.
        """
        if isinstance(outcome, MoneyOutcome):
            return dict(outcome.balances)
        balances: dict[str, Balance] = {}
        for stream_id, version in outcome.versions.items():
            if not stream_id.startswith(f"{WALLET}:"):
                continue
            wallet = self._wallets.state_at(self._store, stream_id, version)
            balances[wallet.player_id] = Balance(
                wallet.player_id, wallet.available, wallet.reserved, version
            )
        return balances

    def statement(
        self, player_id: str, limit: int = 50, before: int | None = None
    ) -> list[StatementEntry]:
        """Up to `limit` movements before version `before` (all if None), newest first."""
        if limit < 1:
            raise ValueError("limit must be at least 1")
        wallet = Wallet(player_id)
        entries: list[StatementEntry] = []
        for recorded in self._store.read_stream(wallet_stream(player_id)):
            event = from_recorded_as(recorded, WALLET_EVENT_TYPES)
            after = evolve_wallet(wallet, event)
            entries.append(
                _entry(
                    recorded.version, recorded.position, recorded.recorded_at, event, wallet, after
                )
            )
            wallet = after
        if before is not None:
            entries = [entry for entry in entries if entry.version < before]
        return entries[::-1][:limit]

    def _run(self, player_id: str, command: WalletCommand, actor: Actor) -> Receipt:
        stream = wallet_stream(player_id)

        def prepare() -> Prepared:
            version, wallet = self._wallets.wallet(self._store, player_id)
            events = decide_wallet(wallet, command)
            after = wallet
            for event in events:
                after = evolve_wallet(after, event)

            def recorded(result: AppendResult) -> None:
                self._wallets.put(stream, result.versions[stream], after)

            return Prepared(
                [StreamAppend(stream, version, [to_new_event(e) for e in events])],
                tuple(events),
                recorded,
            )

        return run_command(self._store, actor, prepare, self._patience)


def _entry(
    version: int,
    position: int,
    recorded_at: datetime,
    event: WalletEvent,
    before: Wallet,
    after: Wallet,
) -> StatementEntry:
    reason: str | None = None
    table_id = round_id = spot = None
    stake = payout = commission = None
    match event:
        case Deposited() | Withdrawn() | Corrected():
            reason = event.reason
        case StakeReserved():
            table_id, round_id, spot, stake = (
                event.table_id,
                event.round_id,
                event.spot,
                event.stake,
            )
        case StakeReturned():
            table_id, round_id, spot, stake = (
                event.table_id,
                event.round_id,
                event.spot,
                event.stake,
            )
            reason = event.reason
        case PayoutCredited() | SettlementReversed():
            table_id, round_id, spot, stake = (
                event.table_id,
                event.round_id,
                event.spot,
                event.stake,
            )
            payout, commission = event.payout, event.commission
    return StatementEntry(
        version=version,
        position=position,
        recorded_at=recorded_at,
        type=event.type,
        amount=after.available - before.available,
        reserved_change=after.reserved - before.reserved,
        available_after=after.available,
        reserved_after=after.reserved,
        reason=reason,
        table_id=table_id,
        round_id=round_id,
        spot=str(spot) if spot is not None else None,
        stake=stake,
        payout=payout,
        commission=commission,
    )
