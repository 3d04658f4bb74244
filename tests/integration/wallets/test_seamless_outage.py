"""The operator's wallet down for 30 s of real time mid-shoe.

A reference wallet of its own (on the session's wallet database) is stopped, so that its port
refuses every connection, for 30 s while play goes on: a round settled just before owes wins
the worker cannot deliver, and every bet sent meanwhile is uncertain, so refused, with its
rollback owed. The wallet then starts again on the same port; the owed calls drain, play
resumes, and the wallet's money matches the log's, with nothing lost or paid twice and
reconciliation clean.
"""

from __future__ import annotations

import contextlib
import random
import secrets
import socket
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

import pytest

from domain.errors import DomainError
from domain.outcome import Spot
from domain.table import TableSettings
from events.postgres import Pool
from operator_wallet import WalletServer, running_wallet
from service.application.seamless_bets import WalletRefused, WalletUnavailable
from service.application.streams import table_stream
from service.runtime.seamless_wallet import SeamlessWalletClient

from .conftest import ADMIN_TOKEN, KEYS, Admin, MovableClock, client_config
from .figures import figures, reconciled
from .test_seamless_bets import FRONTEND, OPS, Shoebox, build

OUTAGE_SECONDS = 30.0
SPOTS = (Spot.PLAYER, Spot.BANKER, Spot.TIE)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def _wallet_on(database_url: str, port: int, clock: MovableClock) -> Iterator[WalletServer]:
    with running_wallet(
        database_url, KEYS, port=port, admin_token=ADMIN_TOKEN, clock=clock, pool_size=4
    ) as server:
        yield server


@pytest.mark.slow
def test_the_wallet_down_30_s_mid_shoe_loses_nothing_and_pays_nothing_twice(
    app_pool: Pool, wallet_database_url: str, wallet_clock: MovableClock
) -> None:
    draw = random.Random(30)
    wallet_clock.offset = timedelta()
    port = _free_port()
    tally: Counter[str] = Counter()
    players: dict[str, str] = {}
    # The fourth player can afford little: the wallet refuses some of their bets (a refusal,
    # not a fault), which must place nothing and move nothing either.
    deposits = {1: 20_000, 2: 20_000, 3: 20_000, 4: 700}
    funded: dict[str, int] = {}
    since = wallet_clock() - timedelta(minutes=1)
    with contextlib.ExitStack() as up:
        wallet = up.enter_context(_wallet_on(wallet_database_url, port, wallet_clock))
        admin = Admin(wallet)
        config = client_config(wallet)
        shoebox: Shoebox = build(
            app_pool, wallet_clock, config, SeamlessWalletClient(config, wallet_clock)
        )
        table = "T" + secrets.token_hex(4)
        shoebox.games.create_table(table, TableSettings(), OPS)
        for seat, deposit in deposits.items():
            wallet_id, token = admin.player(deposit=deposit)
            key = f"acme/{wallet_id}"
            shoebox.seamless.open_session(key, token, FRONTEND)
            shoebox.games.sit(table, key, seat, FRONTEND)
            players[key] = wallet_id
            funded[key] = deposit

        def bet_all() -> list[str]:
            betting = []
            for key in players:
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
            return betting

        def deal(betting: list[str]) -> None:
            for key in betting:
                # Dealt already by another's Deal: a refusal is fine.
                with contextlib.suppress(DomainError):
                    shoebox.games.press_deal(table, key, FRONTEND)

        # Two rounds with the wallet up, then the bets of a third, all accepted.
        for _ in range(2):
            deal(bet_all())
            shoebox.calls.deliver_due()
        betting = bet_all()
        assert tally["uncertain"] == 0
        # The wallet goes down between the debits and the round's settlement.
        up.close()
        deal(betting)
        owed_wins = [row for row in shoebox.owed() if row[1] == "win"]
        assert owed_wins  # settled in the log, not yet paid at the wallet
        down_since = time.monotonic()
        during = tally["uncertain"]
        while time.monotonic() - down_since < OUTAGE_SECONDS:
            # Play goes on: each bet is refused, its rollback owed; the worker keeps trying.
            bet_all()
            shoebox.calls.deliver_due()
            shoebox.games.catch_up(table)
            time.sleep(3.0)
        during = tally["uncertain"] - during
        assert during >= 4 * 5, tally  # bets sent while it was down, all uncertain
        assert tally["sent"] - tally["accepted"] - tally["refused"] == during
        still_owed = {row[1] for row in shoebox.owed()}
        assert {"win", "rollback"} <= still_owed
        # Back on the same address, with the same books.
        wallet = up.enter_context(_wallet_on(wallet_database_url, port, wallet_clock))
        admin = Admin(wallet)
        shoebox.drain(wallet_clock)
        # The rest of the shoe, with the wallet up.
        for _ in range(2):
            wallet_clock.offset += timedelta(seconds=61)
            shoebox.games.catch_up(table)
            deal(bet_all())
            shoebox.drain(wallet_clock)
        # A seat that bet nothing (a refused bet) holds the deal until the window lapses.
        wallet_clock.offset += timedelta(seconds=61)
        shoebox.games.catch_up(table)
        shoebox.drain(wallet_clock)
        current = shoebox.games.table(table).round
        assert current is None or not any(p.bets for p in current.participants)
        shoebox.calls.catch_up()
        listed, result = reconciled(
            app_pool, config, wallet_clock, players, since, wallet_clock() + timedelta(minutes=1)
        )
        assert result.clean, result.differences
        events = shoebox.store.read_stream(table_stream(table))
        measured = figures("wallet down 30 s mid-shoe", tally, events, players, listed, result)
        measured.record()
        for key, wallet_id in players.items():
            mine = {key: wallet_id}
            balance = funded[key] + figures("", tally, events, mine, listed, result).log_moved
            assert admin.balance(wallet_id) == balance, key
    wallet_clock.offset = timedelta()
