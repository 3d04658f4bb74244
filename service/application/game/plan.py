"""One command's plan: the table's decisions on a scratch copy, and the money they move.

A plan runs domain commands on a scratch table, follows every stake, payout and return into
the wallets it touches, and turns the lot into one multi-stream append that names the version
of every stream it read. The shoes' cards are kept per process, since a shuffle is pure.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from domain.cards import Card
from domain.round import BetPlaced, BetSettled, StakeReturned
from domain.round import SettlementReversed as RoundSettlementReversed
from domain.shoe import ServerSeed
from domain.table import Command, Table, TableEvent, decide, evolve
from domain.wallet import (
    CreditPayout,
    ReserveStake,
    ReturnStake,
    ReverseSettlement,
    StakeNotReserved,
    Wallet,
    WalletCommand,
    WalletEvent,
    decide_wallet,
    evolve_wallet,
)
from events.store import ConcurrencyConflict, EventStoreError, StreamAppend
from service.application.streams import DomainEvent, table_stream, to_new_event, wallet_stream


class ShoeCards:
    """Per process, LRU-bounded: the shuffled cards of open shoes, kept in memory only."""

    def __init__(self, capacity: int = 256) -> None:
        self._capacity = capacity
        self._lock = threading.Lock()
        self._cards: OrderedDict[str, tuple[Card, ...]] = OrderedDict()

    def get(self, shoe_id: str) -> tuple[Card, ...] | None:
        """A shoe's cards if this process has them."""
        with self._lock:
            cards = self._cards.get(shoe_id)
            if cards is not None:
                self._cards.move_to_end(shoe_id)
            return cards

    def put(self, shoe_id: str, cards: tuple[Card, ...]) -> None:
        """Keep a shoe's cards."""
        with self._lock:
            self._cards[shoe_id] = cards
            self._cards.move_to_end(shoe_id)
            while len(self._cards) > self._capacity:
                self._cards.popitem(last=False)

    def forget(self, shoe_id: str) -> None:
        """Drop a retired shoe's cards."""
        with self._lock:
            self._cards.pop(shoe_id, None)


class StaleTableRead(ConcurrencyConflict):
    """A wallet read after the table was moved on by another append: plan again from both."""

    def __init__(self, stream_id: str, version: int, player_id: str) -> None:
        EventStoreError.__init__(
            self,
            f"stream {stream_id!r} was read at version {version}, before the wallet of"
            f" {player_id!r} moved on",
        )
        self.stream_id = stream_id
        self.expected = version
        self.actual = version


class NothingDue(Exception):  # noqa: N818 -- control flow, never seen outside this module
    """A catch-up found the table already caught up."""


@dataclass(slots=True)
class NewShoe:
    """A shoe planned by this command but not yet in the log; its seed is already stored."""

    shoe_id: str
    seed: ServerSeed
    nonce: int


class Plan:
    """One command's decisions: table events on a scratch table, and each wallet's side."""

    def __init__(
        self,
        table_id: str,
        version: int,
        table: Table,
        load_wallet: Callable[[str], tuple[int, Wallet]],
        seamless: Callable[[str], bool] = lambda player_id: False,
    ) -> None:
        self.table_id = table_id
        # A seamless player's money is in the operator's wallet: the plan moves no wallet of
        # theirs, and their debits ride along as events of their seamless stream (`record`).
        self._seamless = seamless
        self.recorded: dict[str, tuple[int, list[DomainEvent]]] = {}
        self.version = version
        self.table = table
        self.table_events: list[TableEvent] = []
        self._load_wallet = load_wallet
        self.wallets: dict[str, tuple[int, Wallet, list[WalletEvent]]] = {}
        self.guards: dict[str, int] = {}
        self.new_shoe: NewShoe | None = None
        self.trust_cached_limits = False

    def run(self, command: Command, now: datetime) -> list[TableEvent]:
        """Decide a table command on the scratch table and follow its money into wallets."""
        events = decide(self.table, command, now)
        for event in events:
            self.table = evolve(self.table, event)
            self._follow_money(event)
        self.table_events.extend(events)
        return events

    def guard(self, stream_id: str, version: int) -> None:
        """Append nothing to this stream, but only if it is still at the version read."""
        self.guards[stream_id] = version

    def _follow_money(self, event: TableEvent) -> None:
        # The table events that move a wallet: keep in step with `whose_money_moved`.
        command: WalletCommand
        table_id = self.table_id
        match event:
            case BetPlaced(round_id=round_id, player_id=player_id, spot=spot, stake=stake):
                command = ReserveStake(table_id, round_id, spot, stake)
            case StakeReturned(round_id=round_id, player_id=player_id, spot=spot, stake=stake):
                command = ReturnStake(table_id, round_id, spot, stake, str(event.reason))
            case BetSettled(round_id=round_id, player_id=player_id, spot=spot, stake=stake):
                command = CreditPayout(
                    table_id, round_id, spot, stake, event.payout, event.commission
                )
            case RoundSettlementReversed(round_id=round_id, player_id=player_id, spot=spot):
                command = ReverseSettlement(
                    table_id, round_id, spot, event.stake, event.payout, event.commission
                )
            case _:
                return
        if self._seamless(player_id):
            # Its stakes, wins and returns are calls to the operator's wallet: the debit is
            # made before the bet is placed, the rest are owed calls that the log's
            # projection queues (service/application/seamless_calls.py).
            return
        if player_id not in self.wallets:
            version, wallet = self._load_wallet(player_id)
            self.wallets[player_id] = (version, wallet, [])
        version, wallet, events = self.wallets[player_id]
        try:
            decided = decide_wallet(wallet, command)
        except StakeNotReserved as error:
            # The table and the wallet agree by construction (one append writes both), so a
            # stake the table holds but the wallet does not means the wallet was read after
            # another append moved it on: this table read is stale. Re-plan, never refuse.
            raise StaleTableRead(table_stream(table_id), self.version, player_id) from error
        for wallet_event in decided:
            wallet = evolve_wallet(wallet, wallet_event)
            events.append(wallet_event)
        self.wallets[player_id] = (version, wallet, events)

    def record(self, stream_id: str, version: int, event: DomainEvent) -> None:
        """Append `event` to `stream_id` (read at `version`) with the table's events."""
        known, events = self.recorded.get(stream_id, (version, []))
        self.recorded[stream_id] = (known, [*events, event])

    def appends(self) -> list[StreamAppend]:
        """The table's events, each wallet's in player order, recorded streams', the guards."""
        appends = [
            StreamAppend(
                table_stream(self.table_id),
                self.version,
                [to_new_event(event) for event in self.table_events],
            )
        ]
        for player_id in sorted(self.wallets):
            version, _, events = self.wallets[player_id]
            appends.append(
                StreamAppend(
                    wallet_stream(player_id), version, [to_new_event(event) for event in events]
                )
            )
        # A seamless debit follows its BetPlaced, as a wallet's StakeReserved does.
        for stream_id, (version, recorded) in sorted(self.recorded.items()):
            appends.append(
                StreamAppend(stream_id, version, [to_new_event(event) for event in recorded])
            )
        for stream_id, version in sorted(self.guards.items()):
            appends.append(StreamAppend(stream_id, version, []))
        return appends

    def events(self) -> tuple[DomainEvent, ...]:
        """Every event of the plan, in append order."""
        recorded: list[DomainEvent] = []
        for stream_id in sorted(self.recorded):
            recorded.extend(self.recorded[stream_id][1])
        wallet_events: list[DomainEvent] = []
        for player_id in sorted(self.wallets):
            wallet_events.extend(self.wallets[player_id][2])
        return (*self.table_events, *wallet_events, *recorded)


def whose_money_moved(event: object) -> str | None:
    """The player whose money a table event moves (`Plan._follow_money`), None if none's."""
    match event:
        case BetPlaced() | StakeReturned() | BetSettled() | RoundSettlementReversed():
            return event.player_id
        case _:
            return None
