"""Rounds of seamless money with faults at random points, drained, then reconciled clean.

The bet path does not use the wallet yet, so this test plays its part by hand with the
protocol's rules: an uncertain bet is refused and rolled back until the wallet confirms, a win
is retried with the same ids until it is ok. What it shows is that those rules, with the
reference wallet and the client, lose nothing and pay nothing twice whatever fault strikes,
and that reconciliation then finds no difference.
"""

from __future__ import annotations

import random
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from operator_wallet import WalletServer
from service.application.seamless import Outcome, WalletCall
from service.application.wallet_reconciliation import (
    CallState,
    ShoeboxCall,
    WalletEntry,
    reconcile,
)
from service.runtime.seamless_wallet import SeamlessWalletClient

from .conftest import Admin, MovableClock, Round, client_config

FAULTS: list[tuple[str, dict[str, Any]]] = [
    ("none", {}),
    ("delay", {"delay_ms": 30}),
    ("delay", {"delay_ms": 600}),  # past the client's read timeout: applied after it gave up
    ("timeout", {"delay_ms": 600}),
    ("error_5xx", {}),
    ("duplicate", {}),
    ("lose_answer", {}),
]


def _record(call: WalletCall, state: CallState) -> ShoeboxCall:
    assert call.transaction_uuid is not None
    assert call.amount is not None
    return ShoeboxCall(
        call.transaction_uuid,
        call.kind,
        call.player_id,
        call.amount,
        call.currency,
        call.reference,
        state,
    )


@pytest.mark.parametrize("seed", range(8))
def test_faults_at_random_points_lose_nothing_and_reconcile_clean(
    wallet: WalletServer, admin: Admin, wallet_clock: MovableClock, seed: int
) -> None:
    chance = random.Random(seed)
    client = SeamlessWalletClient(client_config(wallet, read_timeout=0.3), wallet_clock)
    since = datetime.now(UTC) - timedelta(seconds=1)
    player, token = admin.player(deposit=3000)
    game = Round(client_config(wallet), player, token)
    calls: list[ShoeboxCall] = []
    expected = 3000
    counts = {"sent": 0, "accepted": 0, "refused": 0, "uncertain": 0}

    def send_with_fault(call: WalletCall) -> Outcome:
        action, rule = chance.choice(FAULTS)
        if action != "none":
            admin.fault(action, call.kind, **rule)
        outcome = client.send(call).outcome
        wallet.faults.clear()  # a fault that did not fire must not strike the retry
        return outcome

    def until_ok(call: WalletCall) -> None:
        # The owed-calls queue's rule, by hand: the same call, until the wallet confirms.
        outcome = send_with_fault(call)
        while outcome is not Outcome.OK:
            assert outcome is Outcome.UNCERTAIN, f"a {call.kind} was answered {outcome}"
            outcome = client.send(call).outcome

    for _ in range(8):
        placed: list[WalletCall] = []
        for _ in range(chance.randint(1, 2)):
            bet = game.bet(chance.randint(100, 4000))
            counts["sent"] += 1
            outcome = send_with_fault(bet)
            if outcome is Outcome.OK:
                counts["accepted"] += 1
                assert bet.amount is not None
                expected -= bet.amount
                placed.append(bet)
                calls.append(_record(bet, CallState.CONFIRMED))
            elif outcome is Outcome.REFUSED:
                counts["refused"] += 1
                calls.append(_record(bet, CallState.REFUSED))
            else:
                assert outcome is Outcome.UNCERTAIN
                counts["uncertain"] += 1
                calls.append(_record(bet, CallState.UNCERTAIN))
                rollback = game.rollback(bet)
                until_ok(rollback)
                calls.append(_record(rollback, CallState.CONFIRMED))
        if placed:
            stakes = sum(bet.amount or 0 for bet in placed)
            win = game.win(chance.choice([0, stakes, 2 * stakes]), *placed)
            until_ok(win)
            expected += win.amount or 0
            calls.append(_record(win, CallState.CONFIRMED))

    # Every late, delayed call has landed (or been refused) before the books are read.
    time.sleep(0.7)
    assert counts["sent"] == counts["accepted"] + counts["refused"] + counts["uncertain"]
    assert admin.balance(player) == expected, f"money lost or paid twice: {counts}"
    # Read with the default timeout: the 0.3 s one is for the faults above, and the list is
    # the books, not a call under test (on a loaded CI machine it once took longer).
    books = SeamlessWalletClient(client_config(wallet), wallet_clock)
    listed = [
        WalletEntry.from_document(row)
        for row in books.transactions(since, datetime.now(UTC) + timedelta(seconds=1))
        if row["player_id"] == player
    ]
    report = reconcile(calls, listed)
    assert report.clean, report.differences
    assert sum(entry.moved for entry in listed if entry.kind != "deposit") == expected - 3000
