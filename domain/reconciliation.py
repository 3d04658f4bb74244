"""The daily reconciliation of a seamless operator's wallet: the stream `reconciliation:{operator}`.

Once a day the worker compares the seamless calls Shoebox made for the operator on the day
before (UTC) with the wallet's own transaction list (docs/wallets.md, "Reconciliation") and
records what it found, once per operator and day. A day with a difference is a significant
event for the regulator. The event names transactions by id only: never a session token, a
secret or a player's balance.
"""

from dataclasses import dataclass
from typing import ClassVar


@dataclass(frozen=True, slots=True)
class WalletReconciled:
    """One operator's day, [day 00:00, next day 00:00) UTC, compared with its wallet."""

    type: ClassVar[str] = "WalletReconciled"
    operator: str
    day: str
    """The UTC day reconciled, as an ISO date (2026-12-06)."""
    compared: int
    """Transactions compared: those Shoebox sent, with those the wallet lists, by id."""
    differences: int
    notes: int
    """Calls still being settled by retries: not differences (docs/wallets.md)."""
    first_differences: tuple[str, ...]
    """The transaction ids of the first differences, in id order (at most FIRST_DIFFERENCES)."""


FIRST_DIFFERENCES = 20
"""How many differing transaction ids one event names; `shoebox wallet reconcile` lists all."""

RECONCILIATION_EVENT_TYPES: tuple[type[WalletReconciled], ...] = (WalletReconciled,)
