"""Seamless operators after a restore: the wallets hold calls the restored log does not.

A restore (or a failover that lost the log's tail) brings back the log and `seamless_calls`
as of one moment, but each seamless operator's wallet kept every call Shoebox made after it:
debits of bets the restored log never placed, wins of settlements it never made. So after
`record_restore`, each seamless operator's wallet is reconciled with the log over the period
from the restore point to now, and every difference reported by transaction id. Then:

- a debit the wallet applied that the log does not know, with no win at the wallet settling
  it, is the stake of a bet the restore lost: its rollback is owed (a `WalletCallOwed` with
  reason `lost-by-restore`, a compensating call like an orphan debit's, never an edit of the
  log), and the worker sends it until the wallet confirms;
- a win the log does not know (a settlement the restore lost) is flagged for the operator,
  never rolled back on Shoebox's own: the player was paid for a round the log no longer holds,
  and whether to take it back is the operator's and the regulator's decision. A debit such a
  win settles is flagged with it, not rolled back (the round played out at the wallet);
- anything else the reconciliation reports is flagged as it stands.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

from events.postgres import Pool
from service.application.actor import Actor
from service.application.operators import player_key
from service.application.seamless_bets import SeamlessService
from service.application.seamless_calls import SeamlessCalls, shoebox_calls
from service.application.wallet_reconciliation import (
    Difference,
    Problem,
    WalletEntry,
    reconcile,
)

LIST_MARGIN: Final = timedelta(minutes=10)
"""The wallet is listed this much either side of the period, as `shoebox wallet reconcile`."""

Listing = Callable[[datetime, datetime], Iterable[Mapping[str, Any]]]
"""The wallet's transaction list over [since, until) (SeamlessWalletClient.transactions)."""


@dataclass(frozen=True, slots=True)
class WalletAfterRestore:
    """One seamless operator's wallet against the restored log."""

    operator: str
    since: datetime
    until: datetime
    compared: int
    differences: tuple[Difference, ...]
    rolled_back: tuple[tuple[str, str], ...]
    """(lost debit, the rollback now owed of it), in the differences' order."""
    flagged: tuple[str, ...]
    """One line each for the operator: what Shoebox did not settle on its own."""

    def lines(self) -> list[str]:
        """The report, every difference by transaction id."""
        out = [
            f"{self.operator}: {self.compared} transaction(s) compared from"
            f" {self.since.isoformat()} to {self.until.isoformat()},"
            f" {len(self.differences)} difference(s)"
        ]
        out += [f"{d.transaction_uuid} {d.problem} {d.detail}" for d in self.differences]
        out += [
            f"{debit}: rollback {rollback} owed (a debit the restore lost)"
            for debit, rollback in self.rolled_back
        ]
        out += [f"FLAGGED {line}" for line in self.flagged]
        return out


def reconcile_after_restore(
    calls: SeamlessCalls,
    seamless: SeamlessService,
    pool: Pool,
    operator: str,
    listing: Listing,
    since: datetime,
    until: datetime,
    actor: Actor,
) -> WalletAfterRestore:
    """Reconcile `operator`'s wallet with the restored log over [since, until), owe the
    rollback of each lost debit, and flag the rest; run after `record_restore`, before play."""
    wallet = seamless.wallet(operator)
    if wallet is None:
        raise ValueError(f"operator {operator} has no seamless wallet")
    config, _ = wallet
    # The restore's own voids owe rollbacks: projected first, so they are Shoebox's calls.
    calls.catch_up()
    rows = list(listing(since - LIST_MARGIN, until + LIST_MARGIN))
    listed = [WalletEntry.from_document(row) for row in rows]
    ours = shoebox_calls(pool, operator, config.currency, since - LIST_MARGIN, until + LIST_MARGIN)
    result = reconcile(ours, listed, (since, until))
    entries = {entry.transaction_uuid: entry for entry in listed}
    documents = {str(row["transaction_uuid"]): row for row in rows}
    settled_by = {
        debit: entry.transaction_uuid
        for entry in listed
        if entry.kind == "win" and entry.moved >= 0 and entry.rolled_back_by is None
        for debit in entry.reference
    }
    rolled_back: list[tuple[str, str]] = []
    flagged: list[str] = []
    for difference in result.differences:
        entry = entries.get(difference.transaction_uuid)
        if difference.problem is not Problem.UNKNOWN_TO_SHOEBOX or entry is None:
            flagged.append(
                f"{difference.transaction_uuid} {difference.problem}: {difference.detail}"
            )
            continue
        if entry.kind == "bet" and entry.moved < 0 and entry.rolled_back_by is None:
            win = settled_by.get(entry.transaction_uuid)
            if win is not None:
                flagged.append(
                    f"{entry.transaction_uuid}: a debit of {entry.amount} of {entry.player_id}"
                    f" settled at the wallet by win {win}; the restored log holds neither"
                )
                continue
            document = documents[entry.transaction_uuid]
            rollback = seamless.owe_rollback_of_lost_debit(
                player_key(operator, entry.player_id),
                entry.transaction_uuid,
                str(document.get("table_id") or ""),
                str(document.get("round_id") or ""),
                entry.amount,
                actor,
            )
            rolled_back.append((entry.transaction_uuid, rollback))
        elif entry.kind == "win" and entry.moved > 0 and entry.rolled_back_by is None:
            flagged.append(
                f"{entry.transaction_uuid}: a win of {entry.amount} paid to {entry.player_id}"
                f" for debit(s) {', '.join(entry.reference)}, a settlement the restored log"
                " does not hold"
            )
        elif entry.moved != 0 and entry.rolled_back_by is None:
            flagged.append(
                f"{entry.transaction_uuid}: a {entry.kind} of {entry.amount} of"
                f" {entry.player_id} the restored log does not hold"
            )
        # Otherwise it moved nothing, or is undone already: reported, nothing owed.
    if rolled_back:
        calls.catch_up()
    compared = len({c.transaction_uuid for c in ours} | set(entries))
    return WalletAfterRestore(
        operator, since, until, compared, result.differences, tuple(rolled_back), tuple(flagged)
    )
