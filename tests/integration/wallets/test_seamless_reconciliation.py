"""Random rounds with random wallet faults: once the retries drain, Shoebox and the wallet agree.

Shoebox's real bet path and owed-calls delivery play against the reference wallet over HTTP,
with timeouts, 5xx answers, duplicate deliveries and lost answers injected at random points of
each round, a void after settlement now and then, and a removed bet. At the end, after the
retries drain: every player's balance at the wallet is what the log's settlements say (no
stake lost, nothing paid twice), and `shoebox wallet reconcile` reports no difference.
"""

from __future__ import annotations

import contextlib
import random
import secrets
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from domain.errors import DomainError
from domain.outcome import Spot
from domain.round_errors import MalfunctionVoidsNothing
from domain.table import MalfunctionScope, TableSettings
from events.postgres import Pool
from operator_wallet import WalletServer
from service.application.malfunctions import MalfunctionService, Scope
from service.application.seamless_bets import WalletRefused, WalletUnavailable
from service.application.seamless_calls import shoebox_calls
from service.application.streams import table_stream
from service.application.wallet_reconciliation import WalletEntry, reconcile
from service.cli import main
from service.runtime.seamless_wallet import SeamlessWalletClient

from .conftest import SECRET_1, Admin, MovableClock, client_config
from .figures import figures
from .test_seamless_bets import FRONTEND, OPS, Shoebox, build

FAULTS = ("delay", "timeout", "error_5xx", "duplicate", "lose_answer")
SPOTS = (Spot.PLAYER, Spot.BANKER, Spot.TIE)


@pytest.mark.parametrize(
    ("seed", "outage", "only"),
    [
        (11, False, None),
        (29, False, None),
        (41, True, None),
        # Each fault of item 6 alone, so that its figures are its own.
        *((7, False, fault) for fault in FAULTS),
    ],
    ids=["faults-11", "faults-29", "wallet-down-mid-shoe", *(f"only-{f}" for f in FAULTS)],
)
def test_random_rounds_with_random_faults_agree_with_the_wallet(
    app_pool: Pool,
    fresh_database: str,
    wallet: WalletServer,
    admin: Admin,
    wallet_clock: MovableClock,
    tmp_path: Path,
    seed: int,
    outage: bool,
    only: str | None,
) -> None:
    draw = random.Random(seed)
    faults = FAULTS if only is None else (only,)
    # Alone, a delay outlasts the client's read timeout: the wallet applies a call its client
    # gave up on (uncertain), the hardest case of a delay. Mixed, it is a short one.
    delay_ms = 600 if only == "delay" else 20
    config = client_config(wallet, read_timeout=0.3 if only == "delay" else 2.0)
    shoebox: Shoebox = build(
        app_pool, wallet_clock, config, SeamlessWalletClient(config, wallet_clock)
    )
    table = "T" + secrets.token_hex(4)
    shoebox.games.create_table(table, TableSettings(), OPS)
    deposit = 20_000
    players: dict[str, str] = {}
    for seat in (1, 2, 3):
        wallet_id, token = admin.player(deposit=deposit)
        key = f"acme/{wallet_id}"
        shoebox.seamless.open_session(key, token, FRONTEND)
        shoebox.games.sit(table, key, seat, FRONTEND)
        players[key] = wallet_id
    tally: Counter[str] = Counter()
    for number in range(10):
        # The wallet down mid-shoe: every call answered 503 for rounds 3 to 5 (each round
        # moves the clock a minute on, so it is down for over 30 s of the log's time).
        down = outage and 3 <= number <= 5
        betting = []
        for key in players:
            for _ in range(draw.randint(0, 2)):
                if down:
                    admin.fault("error_5xx", "*", times=100)
                elif draw.random() < 0.35:
                    admin.fault(draw.choice(faults), "bet", delay_ms=delay_ms)
                tally["sent"] += 1
                try:
                    shoebox.seamless.place_bet(
                        table, key, draw.choice(SPOTS), draw.choice((100, 200, 500)), FRONTEND
                    )
                    tally["accepted"] += 1
                    betting.append(key)
                except WalletRefused:
                    tally["refused"] += 1
                except WalletUnavailable:
                    tally["uncertain"] += 1
                wallet.faults.clear()
        if betting and draw.random() < 0.15:
            shoebox.games.remove_bets(table, betting[0], FRONTEND)
            betting = [key for key in betting if key != betting[0]]
        for key in dict.fromkeys(betting):
            # Dealt already, or nothing of theirs left in the round: a refusal is fine.
            with contextlib.suppress(DomainError):
                shoebox.games.press_deal(table, key, FRONTEND)
        # Owed calls go out with faults of their own, some of them retried later.
        for _ in range(draw.randint(0, 2)):
            admin.fault(draw.choice(faults), draw.choice(("win", "rollback")), delay_ms=delay_ms)
        if down:
            admin.fault("error_5xx", "*", times=100)
        shoebox.calls.deliver_due()
        wallet.faults.clear()
        settled = [
            str(e.payload["round_id"])
            for e in shoebox.store.read_stream(table_stream(table))
            if e.type == "RoundSettled"
        ]
        if settled and draw.random() < 0.2:
            try:
                MalfunctionService(shoebox.store, wallet_clock, shoebox.games.is_seamless).declare(
                    table, "dealer error", Scope(MalfunctionScope.ROUNDS, (settled[-1],)), OPS
                )
            except MalfunctionVoidsNothing:
                pass  # a round every bet of which the wallet refused or could not confirm
            else:
                MalfunctionService(shoebox.store, wallet_clock).reopen(table, "fixed", OPS)
                tally["voids"] += 1
        # A seat that bet nothing holds the deal until the window lapses: this deals it.
        wallet_clock.offset += timedelta(seconds=61)
        shoebox.games.catch_up(table)
    shoebox.drain(wallet_clock, rounds=40)
    if only == "delay":
        time.sleep(0.7)  # every delayed call has landed (or been refused) before the books
        shoebox.drain(wallet_clock, rounds=40)
    current = shoebox.games.table(table).round
    assert (
        current is None or not current.participants or not any(p.bets for p in current.participants)
    )

    # What the log says each player's money did: settlements, less those a void took back.
    moved: Counter[str] = Counter()
    for event in shoebox.store.read_stream(table_stream(table)):
        payload: Any = event.payload
        if event.type == "BetSettled":
            moved[payload["player_id"]] += payload["payout"] - payload["stake"]
        elif event.type == "SettlementReversed":
            moved[payload["player_id"]] -= payload["payout"] - payload["stake"]
    for key, wallet_id in players.items():
        assert admin.balance(wallet_id) == deposit + moved[key], (key, tally)
    assert tally["sent"] == tally["accepted"] + tally["refused"] + tally["uncertain"]
    assert tally["accepted"] > 0
    if outage:
        assert tally["uncertain"] >= 3, tally  # the bets sent while it was down

    # Reconciliation, by hand and through the command line.
    start = wallet_clock() - timedelta(days=1)
    end = wallet_clock() + timedelta(minutes=1)
    shoebox.calls.catch_up()
    ours = shoebox_calls(app_pool, "acme", "GBP", start, end)
    # The wallet is shared with the session's other tests: only these players are compared.
    mine = set(players.values())
    listed = [
        WalletEntry.from_document(row)
        for row in SeamlessWalletClient(config, wallet_clock).transactions(start, end)
        if row["player_id"] in mine
    ]
    result = reconcile(ours, listed, (start, end))
    assert result.clean, result.differences
    fired = list(wallet.faults.fired)  # those of this test: the fixture cleared the list
    fault = "503 for 3 rounds mid-shoe" if outage else f"random faults, seed {seed}"
    if only is not None:
        fault = f"{only} alone, at random points"
    figures(
        fault,
        tally,
        shoebox.store.read_stream(table_stream(table)),
        players,
        listed,
        result,
        fired,
    ).record()
    assert not result.notes, result.notes
    assert len({entry.transaction_uuid for entry in listed}) == len(listed)

    # The command signs with the real clock: the wallet's goes back to it.
    wallet_clock.offset = timedelta()
    wallets_file = tmp_path / "wallets.toml"
    wallets_file.write_text(
        f'[operators.acme]\nbase_url = "{wallet.url}"\nkey_id = "k1"\n'
        f'secret = "{SECRET_1}"\ncurrency = "GBP"\n'
    )
    run = CliRunner().invoke(
        main,
        [
            "wallet",
            "reconcile",
            "--operator",
            "acme",
            "--from",
            start.replace(tzinfo=None).isoformat(timespec="seconds"),
            "--to",
            end.replace(tzinfo=None).isoformat(timespec="seconds"),
        ],
        env={
            "DATABASE_URL": fresh_database,
            "SHOEBOX_SEAMLESS_WALLETS_FILE": str(wallets_file),
        },
    )
    assert run.exit_code in (0, 1), run.output
    assert "transaction(s) compared" in run.output
    ids = {call.transaction_uuid for call in ours}
    for line in run.output.splitlines():
        # A difference (or note) only about the other tests' players, never about these.
        assert line.split(" ")[0] not in ids, line
        assert not any(wallet_id in line for wallet_id in mine), line
    assert SECRET_1 not in run.output
