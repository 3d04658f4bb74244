"""The Shoebox worker SIGKILLed while an owed call is at the wallet, before its answer.

The worker (the process running the owed calls' delivery, deliver_due) is a real process,
killed with SIGKILL while the reference wallet holds its call: the wallet applies the call
after the worker is dead, so Shoebox never hears the answer. A worker started afterwards
sends the same call again, with the same ids: the wallet answers it as a replay, and the
money moves once. The debit's side (the process placing a bet killed while its debit is at
the wallet) is test_seamless_bets.py's
test_a_process_killed_while_its_debit_is_in_flight_has_the_debit_rolled_back.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from datetime import timedelta
from pathlib import Path

import pytest

from domain.outcome import Spot
from events.postgres import Pool, app_conninfo
from operator_wallet import WalletServer
from service.application.seamless_bets import WalletUnavailable
from service.application.streams import table_stream
from service.runtime.seamless_wallet import SeamlessWalletClient

from .conftest import SECRET_1, Admin, MovableClock, client_config
from .figures import figures, reconciled
from .test_seamless_bets import (
    FRONTEND,
    Seated,
    Shoebox,
    _player_lock_free,
    _wait_for,
    seated,  # noqa: F401 -- fixtures
    shoebox,  # noqa: F401
    table,  # noqa: F401
)


@pytest.mark.parametrize("kind", ["win", "rollback"])
def test_a_worker_killed_while_its_call_is_at_the_wallet_moves_the_money_once(
    fresh_database: str,
    app_pool: Pool,
    wallet: WalletServer,
    shoebox: Shoebox,  # noqa: F811
    seated: Seated,  # noqa: F811
    admin: Admin,
    table: str,  # noqa: F811
    wallet_clock: MovableClock,
    kind: str,
) -> None:
    since = wallet_clock() - timedelta(minutes=1)
    player, wallet_id = seated(10_000)
    tally: Counter[str] = Counter(sent=2, accepted=1)
    if kind == "rollback":
        # An uncertain bet: refused, and its rollback owed.
        admin.fault("error_5xx", "bet")
        with pytest.raises(WalletUnavailable):
            shoebox.seamless.place_bet(table, player, Spot.TIE, 300, FRONTEND)
        tally["uncertain"] += 1
    shoebox.seamless.place_bet(table, player, Spot.BANKER, 500, FRONTEND)
    if kind == "win":
        tally["sent"] -= 1
    shoebox.games.press_deal(table, player, FRONTEND)
    # Every other owed call goes first, so that the worker's only call is the one killed.
    if kind == "rollback":
        shoebox.calls.catch_up()
        with shoebox.calls._pool.connection() as conn:
            conn.execute(
                "UPDATE seamless_calls SET next_attempt_at = now() + interval '1 day'"
                " WHERE kind = 'rollback' AND state = 'owed'"
            )
        shoebox.calls.deliver_due()
        with shoebox.calls._pool.connection() as conn:
            conn.execute(
                "UPDATE seamless_calls SET next_attempt_at = now() - interval '1 s'"
                " WHERE kind = 'rollback' AND state = 'owed'"
            )
    # The wallet holds the call 4 s, then applies it: the worker is dead by then.
    admin.fault("delay", kind, delay_ms=4_000)
    worker = subprocess.Popen(
        [sys.executable, "-m", "tests.integration.wallets.seamless_bettor"],
        env={
            **os.environ,
            "BETTOR_DATABASE_URL": app_conninfo(fresh_database, environ={}),
            "BETTOR_WALLET_URL": wallet.url,
            "BETTOR_SECRET": SECRET_1,
            "BETTOR_ACTION": "deliver",
        },
        cwd=Path(__file__).resolve().parents[3],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_for(lambda: ("delay", kind) in wallet.faults.fired, f"the worker's {kind}", 120.0)
        worker.kill()
    finally:
        worker.kill()
        worker.wait()
        assert worker.stdout is not None
        printed = worker.stdout.read().split()
        worker.stdout.close()
    assert worker.returncode == -9
    assert printed == ["delivering"]  # killed before deliver_due returned
    config = client_config(wallet)
    client = SeamlessWalletClient(config, wallet_clock)

    def applied() -> bool:
        until = wallet_clock() + timedelta(minutes=1)
        rows = client.transactions(since, until)
        return any(row["player_id"] == wallet_id and row["kind"] == kind for row in rows)

    _wait_for(applied, f"the wallet applying the dead worker's {kind}", 60.0)
    with shoebox.calls._pool.connection() as conn:
        conn.autocommit = True
        _wait_for(lambda: _player_lock_free(conn, player), "the dead worker's lock let go")
    # Shoebox still owes it: the dead worker never recorded an answer.
    assert any(row[1] == kind for row in shoebox.owed())
    wallet_clock.offset += timedelta(seconds=61)
    shoebox.drain(wallet_clock)
    shoebox.calls.catch_up()
    players = {player: wallet_id}
    listed, result = reconciled(
        app_pool, config, wallet_clock, players, since, wallet_clock() + timedelta(minutes=1)
    )
    assert result.clean, result.differences
    assert [entry.kind for entry in listed].count(kind) == 1
    events = shoebox.store.read_stream(table_stream(table))
    fired = list(wallet.faults.fired)
    measured = figures(
        f"worker SIGKILLed during a {kind}", tally, events, players, listed, result, fired
    )
    measured.record()
    assert admin.balance(wallet_id) == 10_000 + measured.log_moved
