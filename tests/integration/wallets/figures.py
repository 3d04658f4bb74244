"""The figures every seamless fault test records: bets sent, accepted, refused, uncertain;
money moved at the wallet against the money in Shoebox's log; lost, paid twice, reconciled.

Set SHOEBOX_WALLET_FIGURES to a file to collect them as JSON lines (the table in
docs/wallets.md, "Faults, measured", comes from such a run).
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from events.postgres import Pool
from events.store import RecordedEvent
from service.application.seamless import SeamlessWalletConfig
from service.application.seamless_calls import shoebox_calls
from service.application.wallet_reconciliation import Reconciliation, WalletEntry, reconcile
from service.runtime.seamless_wallet import SeamlessWalletClient

FIGURES_FILE = "SHOEBOX_WALLET_FIGURES"


@dataclass(frozen=True, slots=True)
class WalletFigures:
    """One fault run, in pence where it is money."""

    fault: str
    sent: int
    accepted: int
    refused: int
    uncertain: int
    wallet_moved: int
    """What the wallet's transactions (deposits aside) moved, over the test's players."""
    log_moved: int
    """What the log's settlements (less those a void reversed) say those players won or lost."""
    duplicate_transactions: int
    """Transaction ids the wallet lists more than once (never: its key is unique)."""
    differences: int
    """What `reconcile` reports between Shoebox's calls and the wallet's list."""
    fired: dict[str, int] = field(default_factory=dict)
    """How many times the wallet made each fault, by action and call (`timeout/bet`)."""

    @property
    def lost(self) -> int:
        """Pence the log says a player has that the wallet does not (a stake kept, a win unpaid)."""
        return max(0, self.log_moved - self.wallet_moved)

    @property
    def paid_twice(self) -> int:
        """Pence the wallet moved beyond the log (a win paid twice, a refund too many)."""
        return max(0, self.wallet_moved - self.log_moved) + self.duplicate_transactions

    def record(self) -> None:
        """Append to SHOEBOX_WALLET_FIGURES if set; then require 0 lost, 0 twice, clean."""
        target = os.environ.get(FIGURES_FILE)
        if target:
            row = {**asdict(self), "lost": self.lost, "paid_twice": self.paid_twice}
            with Path(target).open("a") as out:
                out.write(json.dumps(row) + "\n")
        assert self.sent == self.accepted + self.refused + self.uncertain, self
        assert self.lost == 0, self
        assert self.paid_twice == 0, self
        assert self.differences == 0, self


def log_moved(events: Iterable[RecordedEvent], players: Iterable[str]) -> int:
    """The money the log says these players won (less lost), voids taken back."""
    mine = set(players)
    moved = 0
    for event in events:
        payload: Any = event.payload
        if payload.get("player_id") not in mine:
            continue
        if event.type == "BetSettled":
            moved += payload["payout"] - payload["stake"]
        elif event.type == "SettlementReversed":
            moved -= payload["payout"] - payload["stake"]
    return moved


def figures(
    fault: str,
    tally: Counter[str],
    events: Iterable[RecordedEvent],
    players: dict[str, str],
    listed: Sequence[WalletEntry],
    result: Reconciliation,
    fired: Iterable[tuple[str, str]] = (),
) -> WalletFigures:
    """The figures of one run: `players` maps Shoebox's player id to the wallet's."""
    mine = set(players.values())
    rows = [entry for entry in listed if entry.player_id in mine]
    ids = Counter(entry.transaction_uuid for entry in rows)
    return WalletFigures(
        fault=fault,
        sent=tally["sent"],
        accepted=tally["accepted"],
        refused=tally["refused"],
        uncertain=tally["uncertain"],
        wallet_moved=sum(entry.moved for entry in rows if entry.kind != "deposit"),
        log_moved=log_moved(events, players),
        duplicate_transactions=sum(count - 1 for count in ids.values()),
        differences=len(result.differences),
        fired=dict(sorted(Counter(f"{action}/{call}" for action, call in fired).items())),
    )


def reconciled(
    pool: Pool,
    config: SeamlessWalletConfig,
    clock: Callable[[], datetime],
    players: dict[str, str],
    since: datetime,
    until: datetime,
) -> tuple[list[WalletEntry], Reconciliation]:
    """The wallet's list for these players, and its reconciliation with Shoebox's calls.

    The wallet is shared with the session's other tests: only these players are compared.
    """
    mine = set(players.values())
    ours = [
        call
        for call in shoebox_calls(pool, config.operator, config.currency, since, until)
        if call.player_id in mine
    ]
    listed = [
        WalletEntry.from_document(row)
        for row in SeamlessWalletClient(config, clock).transactions(since, until)
        if row["player_id"] in mine
    ]
    return listed, reconcile(ours, listed, (since, until))
