"""A seamless player's money, from the export alone: every win and rollback owed, and confirmed.

A seamless operator keeps its players' money in its own wallet, so there is no wallet stream to
balance. What the log holds instead (docs/wallets.md, docs/verification.md) is each debit
(`StakeDebited`) and each call owed to the wallet and its outcome. The calls owed are not all
written as events: a win or rollback asked for by a table event (`BetSettled`,
`StakeReturned`, `SettlementReversed`) is derived from it, under a transaction id made of that
event's stream and version. This file derives them the same way, independently, and holds each
`WalletCallConfirmed` to the call it names:

- each settled bet of a seamless player owes one `win` of its payout (0 when lost), naming
  every debit on its spot;
- each `StakeReturned` of a debited stake owes one `rollback` of each debit on the spot;
- each `SettlementReversed` owes a `rollback` of the spot's win and of each of its debits;
- each `WalletCallOwed` (an uncertain or orphan debit) owes the `rollback` it names;
- each `WalletCallRefused` (a refused bet) owes one `rollback` of the refused bet, under the
  id made of that event's stream and version: every refused or uncertain bet has exactly one.

A call confirmed twice, confirmed for another amount or other debits, or confirmed without
being owed is a finding. A call still owed (or parked) when the slice ends is a note: it is
retried until the wallet confirms it, possibly after the slice.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from shoebox_verify.export import Fields

TRANSACTION_NAMESPACE: Final = uuid.UUID("5b0e6a43-6f1c-4b47-9c2a-8f3c1d2e7a10")
"""docs/wallets.md: a transaction id is uuid5(this, "{kind}|{stream_id}|{version}|{reference}")."""

_PENDING_LISTED: Final = 100
"""Pending calls named one by one in notes; the rest are counted."""

BET: Final = "bet"
WIN: Final = "win"
ROLLBACK: Final = "rollback"

Add = Callable[[str, str, str], None]
"""report.add(check, where, detail)"""


def transaction_id(kind: str, stream_id: str, version: int, reference: str = "") -> str:
    """The id of the call that event `version` of `stream_id` asks for (docs/wallets.md)."""
    return str(uuid.uuid5(TRANSACTION_NAMESPACE, f"{kind}|{stream_id}|{version}|{reference}"))


@dataclass(slots=True)
class _Call:
    """A win or rollback the slice owes a wallet."""

    kind: str
    player_id: str
    amount: int
    reference: tuple[str, ...]
    where: str
    parked: bool = False


@dataclass(slots=True)
class _Debit:
    transaction: str
    amount: int


@dataclass(slots=True)
class SeamlessMoney:
    """The calls owed to seamless wallets in the slice, and their confirmations."""

    add: Add
    players: set[str] = field(default_factory=set)
    # Open debits and wins by (table_id, round_id, player_id, spot), in log order.
    _debits: dict[tuple[str, str, str, str], list[_Debit]] = field(default_factory=dict)
    _wins: dict[tuple[str, str, str, str], list[tuple[str, int, list[_Debit]]]] = field(
        default_factory=dict
    )
    _owed: dict[str, _Call] = field(default_factory=dict)
    """The calls owed and not yet confirmed."""
    _done: set[str] = field(default_factory=set)
    """The calls owed and confirmed: only their ids are kept, to catch a second confirmation."""
    # Confirmations of calls owed before the slice: counted, to catch a second one.
    _earlier: dict[str, int] = field(default_factory=dict)
    _whole: set[str] = field(default_factory=set)
    """Players whose stream starts in the slice."""
    _unseen_settlements: int = 0
    wins: int = 0
    rollbacks: int = 0
    confirmed: int = 0

    def seamless_event(
        self, stream_id: str, version: int, type_: str, body: Fields, where: str
    ) -> None:
        """One event of a `seamless:{player}` stream."""
        player = stream_id.partition(":")[2]
        self.players.add(player)
        if version == 1:
            # Every call this player is owed is then owed in the slice (its debits are here,
            # and what owes a win or rollback comes after a debit).
            self._whole.add(player)
        if type_ == "StakeDebited":
            transaction = body.text("transaction_uuid")
            if transaction != transaction_id(BET, stream_id, version):
                self.add("seamless", where, f"debit {transaction} is not this event's bet id")
            key = (
                body.text("table_id"),
                body.text("round_id"),
                player,
                body.text("spot"),
            )
            self._debits.setdefault(key, []).append(_Debit(transaction, body.integer("amount")))
        elif type_ == "WalletCallOwed":
            bet = body.text("reference_transaction_uuid")
            transaction = body.text("transaction_uuid")
            if body.text("kind") != ROLLBACK or transaction != transaction_id(
                ROLLBACK, stream_id, version, bet
            ):
                self.add("seamless", where, f"owes {transaction}, not the rollback of {bet}")
            self._owe(transaction, ROLLBACK, player, body.integer("amount"), (bet,), where)
        elif type_ == "WalletCallRefused":
            bet = body.text("transaction_uuid")
            if bet != transaction_id(BET, stream_id, version):
                self.add("seamless", where, f"refused bet {bet} is not this event's bet id")
            rollback = transaction_id(ROLLBACK, stream_id, version, bet)
            self._owe(rollback, ROLLBACK, player, body.integer("amount"), (bet,), where)
        elif type_ == "WalletCallConfirmed":
            self._confirmed(player, body, where)
        elif type_ == "WalletCallParked":
            call = self._owed.get(body.text("transaction_uuid"))
            if call is not None:
                call.parked = True
        # SessionOpened moves no money and owes nothing.

    def table_event(
        self, stream_id: str, version: int, type_: str, body: Fields, where: str
    ) -> None:
        """A BetSettled, StakeReturned or SettlementReversed of a table stream."""
        player = body.text("player_id")
        key = (stream_id.partition(":")[2], body.text("round_id"), player, body.text("spot"))
        if type_ == "SettlementReversed":
            # "All pays and play void": the win is taken back and each of its debits returned.
            for win, amount, debits in self._wins.pop(key, []):
                rollback = transaction_id(ROLLBACK, stream_id, version, win)
                self._owe(rollback, ROLLBACK, player, amount, (win,), where)
                for debit in debits:
                    returned = transaction_id(ROLLBACK, stream_id, version, debit.transaction)
                    self._owe(returned, ROLLBACK, player, debit.amount, (debit.transaction,), where)
            return
        debits = self._debits.pop(key, [])
        if not debits:
            if player in self.players and type_ == "BetSettled":
                # Its debits were recorded before the slice: its win cannot be checked here.
                self._unseen_settlements += 1
            return  # an internal wallet's bet
        if type_ == "StakeReturned":
            for debit in debits:
                rollback = transaction_id(ROLLBACK, stream_id, version, debit.transaction)
                self._owe(rollback, ROLLBACK, player, debit.amount, (debit.transaction,), where)
            return
        win = transaction_id(WIN, stream_id, version)
        payout = body.integer("payout")
        self._owe(win, WIN, player, payout, tuple(d.transaction for d in debits), where)
        self._wins.setdefault(key, []).append((win, payout, debits))

    def finish(self, notes: list[str]) -> None:
        """What is still owed when the slice ends: notes, never findings."""
        pending = list(self._owed.items())
        for transaction, call in pending[:_PENDING_LISTED]:
            state = "parked for an operator" if call.parked else "still owed"
            notes.append(
                f"{call.where}: {call.kind} {transaction} of {call.amount}p to {call.player_id}"
                f" is {state} at the end of the slice: retried until the wallet confirms it"
            )
        if len(pending) > _PENDING_LISTED:
            notes.append(f"... and {len(pending) - _PENDING_LISTED} more call(s) still owed")
        if self._unseen_settlements:
            notes.append(
                f"{self._unseen_settlements} seamless settlement(s) whose debits precede the"
                " slice: their wins are not checked"
            )
        if self.players:
            notes.append(
                f"{len(self.players)} seamless player(s): {self.wins} win(s) and"
                f" {self.rollbacks} rollback(s) owed in the slice, {self.confirmed} confirmed"
                f" here, {len(pending)} pending"
            )

    def _owe(
        self,
        transaction: str,
        kind: str,
        player: str,
        amount: int,
        reference: tuple[str, ...],
        where: str,
    ) -> None:
        if transaction in self._owed or transaction in self._done:
            self.add("seamless", where, f"{kind} {transaction} is owed twice")
            return
        self._owed[transaction] = _Call(kind, player, amount, reference, where)
        if kind == WIN:
            self.wins += 1
        else:
            self.rollbacks += 1

    def _confirmed(self, player: str, body: Fields, where: str) -> None:
        transaction = body.text("transaction_uuid")
        kind = body.text("kind")
        if transaction in self._done:
            self.add("seamless", where, f"{kind} {transaction} is confirmed again")
            return
        call = self._owed.pop(transaction, None)
        if call is None:
            # Owed before the slice (its owing event is not here), or never owed at all: the
            # slice cannot tell, but it can tell a second confirmation.
            seen = self._earlier[transaction] = self._earlier.get(transaction, 0) + 1
            if player in self._whole:
                self.add("seamless", where, f"confirms {kind} {transaction}, which nothing owes")
            elif seen > 1:
                self.add("seamless", where, f"{kind} {transaction} is confirmed again")
            return
        self._done.add(transaction)
        self.confirmed += 1
        if kind != call.kind:
            self.add("seamless", where, f"confirms a {kind}; {transaction} is a {call.kind}")
        amount = body.document.get("amount")
        if amount is not None and amount != call.amount:
            self.add(
                "seamless",
                where,
                f"{call.kind} {transaction} is confirmed for {amount}p; {call.where} owes"
                f" {call.amount}p",
            )
        reference = body.document.get("reference_transaction_uuid")
        if reference is not None and tuple(reference) and tuple(reference) != call.reference:
            self.add(
                "seamless",
                where,
                f"{call.kind} {transaction} is confirmed naming {list(reference)}; it settles"
                f" {list(call.reference)}",
            )
