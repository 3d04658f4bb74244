"""A seamless player's money story: the events of the stream `seamless:{player}`.

A seamless operator keeps its players' money in its own wallet (docs/wallets.md), so Shoebox
holds no balance for them. What the log holds instead is every call to that wallet that moved
money, or may have, and its outcome: a session opened, each stake debited, each bet the wallet
refused or left uncertain, and each owed call (a win, a rollback) confirmed or parked. The
stream's events never carry a session token or a secret: a session is named by a hash.

Amounts are integer minor units of the operator's currency (GBP, exponent 2).
"""

from dataclasses import dataclass
from typing import ClassVar, TypeAlias


@dataclass(frozen=True, slots=True)
class SessionOpened:
    """The operator's wallet accepted a session token for the player (its `balance` call)."""

    type: ClassVar[str] = "SessionOpened"
    operator: str
    token_sha256: str
    """The token's SHA-256, so that two sessions can be told apart without holding either."""
    balance: int
    opened_at: str


@dataclass(frozen=True, slots=True)
class StakeDebited:
    """The wallet debited a stake (`bet` answered ok); recorded with its BetPlaced."""

    type: ClassVar[str] = "StakeDebited"
    transaction_uuid: str
    table_id: str
    round_id: str
    spot: str
    amount: int
    balance: int


@dataclass(frozen=True, slots=True)
class WalletCallRefused:
    """The wallet refused a bet and moved nothing: no bet was placed."""

    type: ClassVar[str] = "WalletCallRefused"
    kind: str
    transaction_uuid: str
    table_id: str
    round_id: str
    spot: str
    amount: int
    reason: str


@dataclass(frozen=True, slots=True)
class WalletCallOwed:
    """A call Shoebox owes the wallet: the rollback of a bet whose fate is unknown.

    Written when a bet's answer was uncertain, or its debit was answered ok but the bet could
    not be placed (an orphan debit). The bet was not placed; the rollback is sent until the
    wallet confirms it.
    """

    type: ClassVar[str] = "WalletCallOwed"
    kind: str
    transaction_uuid: str
    reference_transaction_uuid: str
    table_id: str
    round_id: str
    spot: str
    amount: int
    reason: str


@dataclass(frozen=True, slots=True)
class WalletCallConfirmed:
    """The wallet confirmed an owed call (a win or a rollback).

    `amount` and `reference_transaction_uuid` repeat what the confirmed call carried, so that
    `shoebox-verify` can check each confirmation against the event that owed it from the
    export alone. Confirmations recorded before they were added lack them (None and ()).
    """

    type: ClassVar[str] = "WalletCallConfirmed"
    kind: str
    transaction_uuid: str
    status: str
    balance: int | None
    amount: int | None = None
    reference_transaction_uuid: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class WalletCallParked:
    """A call answered fatally: kept for an operator, never dropped, resumed once fixed.

    A parked bet was not placed; what is parked is the rollback that settles its fate.
    """

    type: ClassVar[str] = "WalletCallParked"
    kind: str
    transaction_uuid: str
    reason: str
    detail: str


SeamlessEvent: TypeAlias = (
    SessionOpened
    | StakeDebited
    | WalletCallRefused
    | WalletCallOwed
    | WalletCallConfirmed
    | WalletCallParked
)
SEAMLESS_EVENT_TYPES: tuple[type[SeamlessEvent], ...] = (
    SessionOpened,
    StakeDebited,
    WalletCallRefused,
    WalletCallOwed,
    WalletCallConfirmed,
    WalletCallParked,
)
