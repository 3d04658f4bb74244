"""Seamless play end to end: Shoebox's bet path and owed calls against the reference wallet.

Real HTTP on loopback to the reference wallet (on its own database), and Shoebox on a fresh
PostgreSQL database of its own; no mocks. Each test plays with a new wallet player.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner
from rq import Queue

from domain.errors import DomainError
from domain.outcome import Spot
from domain.round_errors import BettingWindowClosed
from domain.table import MalfunctionScope, TableSettings
from events.postgres import Pool, PostgresEventStore, app_conninfo, open_pool
from events.store import RecordedEvent
from operator_wallet import WalletServer
from service.application.actor import Actor
from service.application.game.tables import GameService
from service.application.malfunctions import MalfunctionService, Scope
from service.application.operators import operator_of
from service.application.restores import record_restore
from service.application.seamless import SeamlessWalletConfig, Secret
from service.application.seamless_bets import (
    WINDOW_MARGIN,
    SeamlessService,
    SessionRequired,
    WalletNotSeamless,
    WalletRefused,
    WalletSender,
    WalletUnavailable,
)
from service.application.seamless_calls import SeamlessCalls
from service.application.seamless_owed import OwedCalls
from service.application.streams import seamless_stream, table_stream
from service.application.upcasters import upcasters
from service.cli import main
from service.runtime import jobs
from service.runtime.seamless_wallet import SeamlessWalletClient
from service.runtime.settings import Settings
from tests.integration.test_jobs import burst, queue, redis_url  # noqa: F401 -- fixtures

from .conftest import SECRET_1, Admin, MovableClock, client_config

OPS = Actor("ops-1", "ops")
FRONTEND = Actor("frontend-1", "frontend")


@dataclass
class Shoebox:
    """One Shoebox 'process': its store, game, seamless service and owed calls."""

    store: PostgresEventStore
    games: GameService
    seamless: SeamlessService
    calls: SeamlessCalls

    def seamless_events(self, player: str) -> list[RecordedEvent]:
        return self.store.read_stream(seamless_stream(player))

    def types(self, player: str) -> list[str]:
        return [event.type for event in self.seamless_events(player)]

    def drain(self, clock: MovableClock, rounds: int = 20) -> None:
        """Deliver owed calls until none is owed, moving the clock past each backoff."""
        for _ in range(rounds):
            self.calls.deliver_due()
            if not self.owed():
                return
            clock.offset += timedelta(seconds=61)
        raise AssertionError(f"calls still owed: {self.owed()}")

    def owed(self) -> list[tuple[Any, ...]]:
        with self.calls._pool.connection() as conn:
            return conn.execute(
                "SELECT transaction_uuid, kind, state FROM seamless_calls"
                " WHERE state IN ('owed', 'in_flight')"
            ).fetchall()

    def rows(self, kind: str | None = None) -> list[tuple[Any, ...]]:
        with self.calls._pool.connection() as conn:
            return conn.execute(
                "SELECT kind, state, amount, reference, transaction_uuid FROM seamless_calls"
                " WHERE kind = coalesce(%s, kind) ORDER BY created_at, transaction_uuid",
                [kind],
            ).fetchall()


def build(
    pool: Pool,
    clock: Callable[[], datetime],
    config: SeamlessWalletConfig,
    sender: WalletSender,
    *,
    in_transaction: bool = True,
) -> Shoebox:
    """A Shoebox over `pool`; `in_transaction` False leaves the owed calls to the projection
    alone, as before they were written with the events that owe them (a log of before)."""
    store = PostgresEventStore(pool, clock, upcasters())

    def seamless_player(player: str) -> bool:
        return operator_of(player) == config.operator

    owed = OwedCalls(pool, clock, seamless_player) if in_transaction else None
    games = GameService(store, clock, seamless=seamless_player, owed=owed)
    seamless = SeamlessService(
        store, clock, pool, games, {config.operator: (config, sender)}, owed=owed
    )
    return Shoebox(store, games, seamless, SeamlessCalls(pool, clock, seamless))


@pytest.fixture
def shoebox(app_pool: Pool, wallet: WalletServer, wallet_clock: MovableClock) -> Shoebox:
    config = client_config(wallet)
    return build(app_pool, wallet_clock, config, SeamlessWalletClient(config, wallet_clock))


@pytest.fixture
def table(shoebox: Shoebox) -> str:
    # Transaction ids derive from a stream and version, unique within one log; every test
    # has a log of its own but shares the wallet, so each plays at a table of its own name.
    table_id = "T" + secrets.token_hex(4)
    shoebox.games.create_table(table_id, TableSettings(), OPS)
    return table_id


Seated = Callable[..., tuple[str, str]]


@pytest.fixture
def seated(shoebox: Shoebox, admin: Admin, table: str) -> Seated:
    """A new wallet player with `deposit`, a session opened in Shoebox, seated at `seat`."""

    def seat(deposit: int = 10_000, seat: int = 1, **settings: Any) -> tuple[str, str]:
        wallet_id, token = admin.player(deposit=deposit, **settings)
        player = f"acme/{wallet_id}"
        session = shoebox.seamless.open_session(player, token, FRONTEND)
        assert session.balance == deposit
        shoebox.games.sit(table, player, seat, FRONTEND)
        return player, wallet_id

    return seat


def settled(shoebox: Shoebox, table: str, player: str) -> list[dict[str, Any]]:
    return [
        dict(event.payload)
        for event in shoebox.store.read_stream(table_stream(table))
        if event.type == "BetSettled" and event.payload["player_id"] == player
    ]


def test_a_session_is_checked_with_the_wallet_and_its_token_never_logged(
    shoebox: Shoebox, admin: Admin, app_pool: Pool
) -> None:
    wallet_id, token = admin.player(deposit=2_500)
    session = shoebox.seamless.open_session(f"acme/{wallet_id}", token, FRONTEND)
    assert session.balance == 2_500
    with pytest.raises(WalletRefused):
        shoebox.seamless.open_session(f"acme/{wallet_id}", "not-the-token", FRONTEND)
    with pytest.raises(WalletNotSeamless):
        shoebox.seamless.open_session("other/bob", token, FRONTEND)
    with app_pool.connection() as conn:
        logged = conn.execute(
            "SELECT count(*) FROM events WHERE payload::text LIKE %s", [f"%{token}%"]
        ).fetchone()
    assert logged == (0,)
    assert shoebox.types(f"acme/{wallet_id}") == ["SessionOpened"]


def test_an_ok_bet_is_placed_with_its_debit_and_its_win_is_paid_once(
    shoebox: Shoebox, seated: Seated, admin: Admin, table: str, wallet_clock: MovableClock
) -> None:
    player, wallet_id = seated(10_000)
    receipt = shoebox.seamless.place_bet(table, player, Spot.BANKER, 500, FRONTEND)
    types = [e.type for e in receipt.events]
    assert types[-1] == "StakeDebited"  # recorded with its BetPlaced, after it
    assert "BetPlaced" in types
    assert admin.balance(wallet_id) == 9_500
    shoebox.games.press_deal(table, player, FRONTEND)
    (settlement,) = settled(shoebox, table, player)
    shoebox.drain(wallet_clock)
    shoebox.drain(wallet_clock)  # a second run pays nothing again
    assert admin.balance(wallet_id) == 9_500 + settlement["payout"]
    (win,) = shoebox.rows("win")
    assert win[:3] == ("win", "confirmed", settlement["payout"])
    assert shoebox.types(player) == ["SessionOpened", "StakeDebited", "WalletCallConfirmed"]


def test_a_bet_without_a_session_is_refused(shoebox: Shoebox, table: str) -> None:
    shoebox.games.sit(table, "acme/nobody", 2, FRONTEND)
    with pytest.raises(SessionRequired):
        shoebox.seamless.place_bet(table, "acme/nobody", Spot.BANKER, 500, FRONTEND)


def test_a_refused_bet_places_nothing_and_is_rolled_back_once(
    shoebox: Shoebox, seated: Seated, admin: Admin, table: str, wallet_clock: MovableClock
) -> None:
    player, wallet_id = seated(300)
    with pytest.raises(WalletRefused) as refused:
        shoebox.seamless.place_bet(table, player, Spot.BANKER, 500, FRONTEND)
    assert refused.value.reason == "INSUFFICIENT_FUNDS"
    assert admin.balance(wallet_id) == 300
    assert shoebox.types(player) == ["SessionOpened", "WalletCallRefused"]
    assert not [e for e in shoebox.store.read_stream(table_stream(table)) if e.type == "BetPlaced"]
    # Every refused bet has one rollback (issue 24): it moves nothing, and the wallet
    # remembers the id, so a refused bet can never be applied later.
    (bet,) = shoebox.rows("bet")
    (rollback,) = shoebox.rows("rollback")
    assert (bet[1], rollback[1:4]) == ("refused", ("owed", 500, [bet[4]]))
    shoebox.drain(wallet_clock)
    assert admin.balance(wallet_id) == 300
    assert shoebox.types(player)[-1] == "WalletCallConfirmed"
    assert shoebox.seamless_events(player)[-1].payload["status"] == "UNKNOWN_TRANSACTION"


@pytest.mark.parametrize("fault", ["error_5xx", "lose_answer", "timeout"])
def test_an_uncertain_bet_is_refused_and_rolled_back_until_confirmed(
    shoebox: Shoebox,
    seated: Seated,
    admin: Admin,
    table: str,
    wallet_clock: MovableClock,
    fault: str,
) -> None:
    player, wallet_id = seated(10_000)
    admin.fault(fault, "bet", delay_ms=2_500)
    # The rollback's first attempt fails too: it is retried with the same ids.
    admin.fault("error_5xx", "rollback")
    with pytest.raises(WalletUnavailable):
        shoebox.seamless.place_bet(table, player, Spot.BANKER, 500, FRONTEND)
    assert shoebox.types(player) == ["SessionOpened", "WalletCallOwed"]
    shoebox.drain(wallet_clock)
    assert admin.balance(wallet_id) == 10_000
    (rollback,) = shoebox.rows("rollback")
    assert rollback[1] == "confirmed"
    assert shoebox.types(player)[-1] == "WalletCallConfirmed"
    # The player can bet again: a new transaction id, at the stream's next version.
    shoebox.seamless.place_bet(table, player, Spot.BANKER, 500, FRONTEND)
    assert admin.balance(wallet_id) == 9_500


def test_a_fatal_answer_parks_the_rollback_until_resumed(
    app_pool: Pool,
    wallet: WalletServer,
    shoebox: Shoebox,
    seated: Seated,
    admin: Admin,
    table: str,
    wallet_clock: MovableClock,
) -> None:
    player, wallet_id = seated(10_000)
    # A Shoebox whose key the wallet does not know: every answer is a 401, fatal.
    wrong = SeamlessWalletConfig(
        operator="acme",
        base_url=wallet.url,
        key_id="k9",
        secret=Secret("a-secret-the-wallet-never-saw"),
        currency="GBP",
    )
    broken = build(app_pool, wallet_clock, wrong, SeamlessWalletClient(wrong, wallet_clock))
    with pytest.raises(WalletUnavailable) as unavailable:
        broken.seamless.place_bet(table, player, Spot.BANKER, 500, FRONTEND)
    assert unavailable.value.reason == "BAD_SIGNATURE"
    assert shoebox.types(player)[-2:] == ["WalletCallOwed", "WalletCallParked"]
    shoebox.calls.deliver_due()
    (rollback,) = shoebox.rows("rollback")
    assert rollback[1] == "parked"  # never sent while parked
    assert shoebox.calls.resume(rollback[4])
    shoebox.drain(wallet_clock)
    assert shoebox.rows("rollback")[0][1] == "confirmed"
    assert admin.balance(wallet_id) == 10_000


def test_two_racing_bets_by_one_player_never_overdraw(
    app_pool: Pool,
    wallet: WalletServer,
    shoebox: Shoebox,
    seated: Seated,
    admin: Admin,
    table: str,
    wallet_clock: MovableClock,
) -> None:
    player, wallet_id = seated(1_000)
    second = table + "b"
    shoebox.games.create_table(second, TableSettings(), OPS)
    shoebox.games.sit(second, player, 1, FRONTEND)
    config = client_config(wallet)
    # Two 'processes', each with its own caches and client, betting at two tables at once.
    other = build(app_pool, wallet_clock, config, SeamlessWalletClient(config, wallet_clock))
    admin.fault("delay", "bet", delay_ms=200)  # the first debit is slow: the second waits
    outcomes: list[str] = []
    start = threading.Barrier(2)

    def bet(side: Shoebox, table_id: str) -> None:
        start.wait()
        try:
            side.seamless.place_bet(table_id, player, Spot.BANKER, 600, FRONTEND)
            outcomes.append("placed")
        except WalletRefused:
            outcomes.append("refused")

    threads = [
        threading.Thread(target=bet, args=(shoebox, table)),
        threading.Thread(target=bet, args=(other, second)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["placed", "refused"]
    assert admin.balance(wallet_id) == 400
    events = shoebox.seamless_events(player)
    assert [e.type for e in events] == ["SessionOpened", "StakeDebited", "WalletCallRefused"]
    ids = {e.payload["transaction_uuid"] for e in events[1:]}
    assert len(ids) == 2  # each bet had its own transaction: the lock kept them apart


def test_a_win_is_retried_through_5xx_until_it_lands_once(
    shoebox: Shoebox, seated: Seated, admin: Admin, table: str, wallet_clock: MovableClock
) -> None:
    player, wallet_id = seated(10_000)
    shoebox.seamless.place_bet(table, player, Spot.PLAYER, 1_000, FRONTEND)
    shoebox.games.press_deal(table, player, FRONTEND)
    (settlement,) = settled(shoebox, table, player)
    admin.fault("error_5xx", "win", times=3)
    admin.fault("lose_answer", "win")  # then applied, but the answer is lost
    for _ in range(3):
        shoebox.calls.deliver_due()
        wallet_clock.offset += timedelta(seconds=61)
    (win,) = shoebox.rows("win")
    assert win[1] == "owed"
    shoebox.drain(wallet_clock)
    assert admin.balance(wallet_id) == 9_000 + settlement["payout"]
    assert [row[1] for row in shoebox.rows("win")] == ["confirmed"]
    assert shoebox.types(player).count("WalletCallConfirmed") == 1


def test_a_void_after_settlement_rolls_back_the_win_and_the_bet(
    shoebox: Shoebox, seated: Seated, admin: Admin, table: str, wallet_clock: MovableClock
) -> None:
    player, wallet_id = seated(10_000)
    shoebox.seamless.place_bet(table, player, Spot.BANKER, 700, FRONTEND)
    shoebox.games.press_deal(table, player, FRONTEND)
    (settlement,) = settled(shoebox, table, player)
    shoebox.drain(wallet_clock)
    round_id = settlement["round_id"]
    MalfunctionService(
        shoebox.store, wallet_clock, shoebox.games.is_seamless, shoebox.games.owed
    ).declare(table, "dealer error", Scope(MalfunctionScope.ROUNDS, (round_id,)), OPS)
    shoebox.drain(wallet_clock)
    rollbacks = shoebox.rows("rollback")
    assert sorted(row[2] for row in rollbacks) == sorted([700, settlement["payout"]])
    assert {row[1] for row in rollbacks} == {"confirmed"}
    # All pays and play void: the player is where they started.
    assert admin.balance(wallet_id) == 10_000


def test_a_removed_bet_is_rolled_back(
    shoebox: Shoebox, seated: Seated, admin: Admin, table: str, wallet_clock: MovableClock
) -> None:
    player, wallet_id = seated(10_000)
    shoebox.seamless.place_bet(table, player, Spot.BANKER, 300, FRONTEND)
    shoebox.seamless.place_bet(table, player, Spot.BANKER, 200, FRONTEND)
    assert admin.balance(wallet_id) == 9_500
    shoebox.games.remove_bets(table, player, FRONTEND)
    shoebox.drain(wallet_clock)
    assert admin.balance(wallet_id) == 10_000
    assert sorted(row[2] for row in shoebox.rows("rollback")) == [200, 300]


def _bets_of(shoebox: Shoebox, table: str, player: str) -> list[tuple[str, int]]:
    """Every BetPlaced of `player` at the table, in log order: (spot, stake)."""
    return [
        (str(event.payload["spot"]), int(str(event.payload["stake"])))
        for event in shoebox.store.read_stream(table_stream(table))
        if event.type == "BetPlaced" and event.payload["player_id"] == player
    ]


def _paid(shoebox: Shoebox, table: str, player: str) -> int:
    return sum(int(s["payout"]) for s in settled(shoebox, table, player))


def test_a_rebet_debits_each_bet_on_its_own_and_they_settle_as_single_bets(
    shoebox: Shoebox, seated: Seated, admin: Admin, table: str, wallet_clock: MovableClock
) -> None:
    player, wallet_id = seated(10_000)
    shoebox.seamless.place_bet(table, player, Spot.BANKER, 500, FRONTEND)
    shoebox.seamless.place_bet(table, player, Spot.PLAYER, 300, FRONTEND)
    shoebox.games.press_deal(table, player, FRONTEND)
    receipt = shoebox.seamless.rebet(table, player, FRONTEND)
    types = [event.type for event in receipt.events]
    assert types.count("BetPlaced") == 2
    assert types.count("StakeDebited") == 2
    assert admin.balance(wallet_id) == 10_000 - 1_600  # the first round's wins still owed
    assert sorted(_bets_of(shoebox, table, player)[2:]) == [("banker", 500), ("player", 300)]
    shoebox.games.press_deal(table, player, FRONTEND)
    shoebox.drain(wallet_clock)
    assert admin.balance(wallet_id) == 10_000 - 1_600 + _paid(shoebox, table, player)
    wins = shoebox.rows("win")
    assert len(wins) == 4
    assert {row[1] for row in wins} == {"confirmed"}
    # Each debit is its own transaction, settled by its spot's win alone.
    debits = [row[4] for row in shoebox.rows("bet")]
    assert len(set(debits)) == 4
    assert sorted(ref for row in wins for ref in row[3]) == sorted(debits)


def test_a_rebet_the_wallet_refuses_in_part_places_nothing_and_rolls_back_what_it_took(
    shoebox: Shoebox, seated: Seated, admin: Admin, table: str, wallet_clock: MovableClock
) -> None:
    player, wallet_id = seated(900)
    shoebox.seamless.place_bet(table, player, Spot.BANKER, 300, FRONTEND)
    shoebox.seamless.place_bet(table, player, Spot.PLAYER, 300, FRONTEND)
    shoebox.games.press_deal(table, player, FRONTEND)
    # 300 left at the wallet (the wins are owed, not paid): one stake, not two.
    with pytest.raises(WalletRefused) as refused:
        shoebox.seamless.rebet(table, player, FRONTEND)
    assert refused.value.reason == "INSUFFICIENT_FUNDS"
    assert len(_bets_of(shoebox, table, player)) == 2  # nothing placed
    assert admin.balance(wallet_id) == 0  # the first debit, taken before the refusal
    assert shoebox.types(player)[-2:] == ["WalletCallOwed", "WalletCallRefused"]
    shoebox.drain(wallet_clock)
    assert admin.balance(wallet_id) == 300 + _paid(shoebox, table, player)
    # The debit taken given back; the refused one's rollback moved nothing.
    assert [row[1:3] for row in shoebox.rows("rollback")] == [("confirmed", 300)] * 2
    assert [row[1] for row in shoebox.rows("bet")][-2:] == ["uncertain", "refused"]


def test_a_rebet_with_an_uncertain_debit_is_refused_and_every_debit_rolled_back(
    shoebox: Shoebox, seated: Seated, admin: Admin, table: str, wallet_clock: MovableClock
) -> None:
    player, wallet_id = seated(10_000)
    shoebox.seamless.place_bet(table, player, Spot.BANKER, 500, FRONTEND)
    shoebox.seamless.place_bet(table, player, Spot.PLAYER, 300, FRONTEND)
    shoebox.games.press_deal(table, player, FRONTEND)
    shoebox.drain(wallet_clock)
    before = admin.balance(wallet_id)
    admin.fault("delay", "bet", delay_ms=0)  # the first debit: answered ok
    admin.fault("lose_answer", "bet")  # the second: applied, but no answer
    with pytest.raises(WalletUnavailable):
        shoebox.seamless.rebet(table, player, FRONTEND)
    assert len(_bets_of(shoebox, table, player)) == 2
    assert admin.balance(wallet_id) == before - 800  # both applied at the wallet
    assert shoebox.types(player)[-2:] == ["WalletCallOwed", "WalletCallOwed"]
    shoebox.drain(wallet_clock)
    assert admin.balance(wallet_id) == before
    assert sorted(row[2] for row in shoebox.rows("rollback")) == [300, 500]


def test_a_restore_voids_a_seamless_bet_through_its_wallet(
    shoebox: Shoebox, seated: Seated, admin: Admin, table: str, wallet_clock: MovableClock
) -> None:
    """Recording a restore voids the open rounds: a seamless player's stake is rolled back at
    the operator's wallet (queued with the void), never moved in a Shoebox wallet."""
    player, wallet_id = seated(10_000)
    shoebox.seamless.place_bet(table, player, Spot.BANKER, 400, FRONTEND)
    record_restore(
        shoebox.store,
        wallet_clock,
        OPS,
        last_position_kept=shoebox.store.head(),
        recovery_target="xid 1",
        reason="drill",
        seamless=shoebox.games.is_seamless,
        owed=shoebox.games.owed,
    )
    (rollback,) = shoebox.rows("rollback")
    assert rollback[1:3] == ("owed", 400)
    assert shoebox.store.read_stream(f"wallet:{player}") == []
    shoebox.drain(wallet_clock)
    assert admin.balance(wallet_id) == 10_000


def _projected(pool: Pool) -> Any:
    """How far the owed calls' projection has read the log (None: it never ran)."""
    with pool.connection() as conn:
        found = conn.execute(
            "SELECT position FROM checkpoints WHERE subscription = 'seamless-calls'"
        ).fetchone()
    return None if found is None else found[0]


def test_every_owed_call_is_queued_by_the_append_that_owes_it(
    app_pool: Pool,
    shoebox: Shoebox,
    seated: Seated,
    admin: Admin,
    table: str,
    wallet_clock: MovableClock,
) -> None:
    """Issue 24: the owed calls are written in the same transaction as the events that owe
    them. Each is in the queue as soon as its append returns, with no projection run."""
    player, wallet_id = seated(10_000)
    shoebox.seamless.place_bet(table, player, Spot.BANKER, 300, FRONTEND)
    shoebox.seamless.place_bet(table, player, Spot.BANKER, 200, FRONTEND)
    debits = [row[4] for row in shoebox.rows("bet")]
    assert [row[:3] for row in shoebox.rows("bet")] == [
        ("bet", "confirmed", 300),
        ("bet", "confirmed", 200),
    ]
    shoebox.games.remove_bets(table, player, FRONTEND)  # StakeReturned: a rollback of each
    assert sorted((row[1], row[2], row[3]) for row in shoebox.rows("rollback")) == [
        ("owed", 200, [debits[1]]),
        ("owed", 300, [debits[0]]),
    ]
    admin.fault("error_5xx", "bet")  # uncertain: refused, and its rollback owed at once
    with pytest.raises(WalletUnavailable):
        shoebox.seamless.place_bet(table, player, Spot.TIE, 100, FRONTEND)
    assert sorted(row[2] for row in shoebox.rows("rollback")) == [100, 200, 300]
    # On the spot of the returned bets: a projection reading the return after this debit is
    # confirmed must not take it for one of the returned.
    shoebox.seamless.place_bet(table, player, Spot.BANKER, 700, FRONTEND)
    shoebox.games.press_deal(table, player, FRONTEND)  # BetSettled: its win
    (settlement,) = settled(shoebox, table, player)
    (win,) = shoebox.rows("win")
    assert win[1:3] == ("owed", settlement["payout"])
    (settled_debit,) = win[3]
    assert settled_debit not in debits
    MalfunctionService(
        shoebox.store, wallet_clock, shoebox.games.is_seamless, shoebox.games.owed
    ).declare(table, "dealer error", Scope(MalfunctionScope.ROUNDS, (settlement["round_id"],)), OPS)
    # SettlementReversed: the win taken back, and its debit returned.
    amounts = sorted(row[2] for row in shoebox.rows("rollback"))
    assert amounts == sorted([100, 200, 300, 700, settlement["payout"]])
    assert _projected(app_pool) is None  # all of it with no projection run
    queued = sorted(row[4] for row in shoebox.rows())
    shoebox.drain(wallet_clock)  # the projection reads it all now: nothing owed twice
    assert _projected(app_pool) is not None
    assert sorted(row[4] for row in shoebox.rows()) == queued
    assert admin.balance(wallet_id) == 10_000  # all pays and play void, each stake returned
    assert shoebox.types(player).count("WalletCallConfirmed") == 6


def test_a_log_of_before_still_has_its_calls_owed_by_the_projection(
    app_pool: Pool,
    wallet: WalletServer,
    seated: Seated,
    admin: Admin,
    table: str,
    wallet_clock: MovableClock,
) -> None:
    """Events appended without their owed calls (a log written before they were queued in
    the append) are still owed them: the projection derives them from the log."""
    config = client_config(wallet)
    before = build(
        app_pool, wallet_clock, config, SeamlessWalletClient(config, wallet_clock),
        in_transaction=False,
    )  # fmt: skip
    player, wallet_id = seated(10_000)
    before.seamless.place_bet(table, player, Spot.BANKER, 500, FRONTEND)
    before.games.press_deal(table, player, FRONTEND)
    assert before.rows("win") == []
    (settlement,) = settled(before, table, player)
    before.drain(wallet_clock)
    assert admin.balance(wallet_id) == 9_500 + settlement["payout"]
    assert [row[:3] for row in before.rows("win")] == [("win", "confirmed", settlement["payout"])]


def test_a_settlement_killed_right_after_its_append_still_owes_its_win(
    fresh_database: str,
    app_pool: Pool,
    wallet: WalletServer,
    shoebox: Shoebox,
    seated: Seated,
    admin: Admin,
    table: str,
    wallet_clock: MovableClock,
) -> None:
    """A process SIGKILLed the moment its settling append has committed, before anything
    else could run: the win is in the queue, and is paid once."""
    player, wallet_id = seated(10_000)
    shoebox.seamless.place_bet(table, player, Spot.BANKER, 400, FRONTEND)
    environment = {
        **os.environ,
        "BETTOR_DATABASE_URL": app_conninfo(fresh_database, environ={}),
        "BETTOR_WALLET_URL": wallet.url,
        "BETTOR_SECRET": SECRET_1,
        "BETTOR_TABLE": table,
        "BETTOR_PLAYER": player,
        "BETTOR_ACTION": "deal",
    }
    dealer = subprocess.run(
        [sys.executable, "-m", "tests.integration.wallets.seamless_bettor"],
        env=environment,
        cwd=Path(__file__).resolve().parents[3],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert dealer.returncode == -9, dealer.stderr
    assert dealer.stdout.split() == ["dealt"]
    (settlement,) = settled(shoebox, table, player)
    assert _projected(app_pool) is None
    (win,) = shoebox.rows("win")
    assert win[1:3] == ("owed", settlement["payout"])
    shoebox.drain(wallet_clock)
    assert admin.balance(wallet_id) == 9_600 + settlement["payout"]
    assert [row[:3] for row in shoebox.rows("win")] == [("win", "confirmed", settlement["payout"])]


class Crashing(SeamlessService):
    """A process that dies between the wallet's ok and recording the bet."""

    def _record_failed_debits(self, *args: Any) -> None:
        pass


@pytest.fixture
def second_pool(fresh_database: str) -> Iterator[Pool]:
    """Another pool on the same database: a worker that starts after the first one died."""
    pool = open_pool(app_conninfo(fresh_database, environ={}), max_size=4)
    try:
        yield pool
    finally:
        pool.close()


def test_owed_calls_and_orphan_debits_survive_a_worker_kill(
    app_pool: Pool,
    second_pool: Pool,
    wallet: WalletServer,
    shoebox: Shoebox,
    seated: Seated,
    admin: Admin,
    table: str,
    wallet_clock: MovableClock,
) -> None:
    player, wallet_id = seated(10_000)
    config = client_config(wallet)
    client = SeamlessWalletClient(config, wallet_clock)
    dying = build(app_pool, wallet_clock, config, client)
    crashing = Crashing(
        dying.store, wallet_clock, app_pool, dying.games, {"acme": (config, client)}
    )

    class Killed(BaseException):
        pass

    def die(*args: Any, **kwargs: Any) -> Any:
        raise Killed

    # The debit is ok'd, then the append never happens: the process is gone.
    dying.store.append = die  # type: ignore[method-assign]
    with pytest.raises(Killed):
        crashing.place_bet(table, player, Spot.BANKER, 800, FRONTEND)
    assert admin.balance(wallet_id) == 9_200
    # A win owed meanwhile, and the wallet down when the first worker tries it.
    shoebox.seamless.place_bet(table, player, Spot.PLAYER, 100, FRONTEND)
    shoebox.games.press_deal(table, player, FRONTEND)
    (settlement,) = settled(shoebox, table, player)
    admin.fault("error_5xx", "*", times=5)
    shoebox.calls.deliver_due()
    assert any(row[1] == "win" for row in shoebox.owed())
    # A new worker, on connections of its own, knows only the database.
    wallet.faults.clear()
    wallet_clock.offset += timedelta(seconds=61)
    restarted = build(second_pool, wallet_clock, config, SeamlessWalletClient(config, wallet_clock))
    restarted.drain(wallet_clock)
    # The orphan debit of 800 was rolled back; the bet of 100 was paid its settlement.
    assert admin.balance(wallet_id) == 10_000 - 100 + settlement["payout"]
    kinds = [row[:2] for row in restarted.rows()]
    assert ("bet", "uncertain") in kinds
    assert psycopg  # the real driver underneath, no mocks


def test_a_log_with_seamless_play_passes_audit_and_the_export_verifier(
    fresh_database: str,
    shoebox: Shoebox,
    seated: Seated,
    table: str,
    wallet_clock: MovableClock,
    tmp_path: Path,
) -> None:
    player, _ = seated(10_000)
    shoebox.seamless.place_bet(table, player, Spot.BANKER, 500, FRONTEND)
    shoebox.seamless.place_bet(table, player, Spot.TIE, 100, FRONTEND)
    shoebox.games.press_deal(table, player, FRONTEND)
    shoebox.drain(wallet_clock)
    env = {"DATABASE_URL": fresh_database}
    audited = CliRunner().invoke(main, ["audit", "verify"], env=env)
    assert audited.exit_code == 0, audited.output
    path = tmp_path / "export.jsonl"
    day = wallet_clock().date()
    exported = CliRunner().invoke(
        main,
        [
            "export",
            "--table",
            table,
            "--from",
            (day - timedelta(days=1)).isoformat(),
            "--to",
            (day + timedelta(days=1)).isoformat(),
            "-o",
            str(path),
        ],
        env=env,
    )
    assert exported.exit_code == 0, exported.output
    verified = CliRunner().invoke(main, ["verify", str(path)], env={"DATABASE_URL": ""})
    assert verified.exit_code == 0, verified.output
    assert "\nOK: " in verified.output, verified.output
    header = json.loads(path.read_text().partition("\n")[0])
    assert header["format"] == "shoebox-export/2"
    # Each stake is held to its debit, and each settled bet owes one win (0 if lost), named
    # by the id the verifier derives on its own: the very ids the wallet was paid under.
    assert "1 seamless player(s): 2 win(s) and 0 rollback(s) owed in the slice" in verified.output
    paid = [
        event.payload["transaction_uuid"]
        for event in shoebox.seamless_events(player)
        if event.type == "WalletCallConfirmed"
    ]
    assert len(paid) == 2
    # The slice ends with the table's last event, before the delivery job's confirmations:
    # so both wins read as pending, a note, not a failure (the slice does not yet run on to
    # the confirmations of its rounds' calls).
    for win in paid:
        assert f"win {win} of " in verified.output
    assert "0 confirmed here, 2 pending" in verified.output


def test_the_periodic_delivery_job_pays_the_win_and_schedules_its_next_run(
    fresh_database: str,
    wallet: WalletServer,
    shoebox: Shoebox,
    seated: Seated,
    admin: Admin,
    table: str,
    queue: Queue,  # noqa: F811 -- test_jobs's fixture, imported above
    redis_url: str,  # noqa: F811
) -> None:
    player, wallet_id = seated(10_000)
    shoebox.seamless.place_bet(table, player, Spot.BANKER, 500, FRONTEND)
    shoebox.games.press_deal(table, player, FRONTEND)
    (settlement,) = settled(shoebox, table, player)
    jobs.reset()
    settings = Settings(
        database_url=fresh_database,
        redis_url=redis_url,
        seamless_wallets=(client_config(wallet),),
    )
    jobs.configure(settings, queue.name)
    try:
        jobs.schedule_delivery(queue, timedelta(0))
        burst(queue)
    finally:
        jobs.reset()
    assert admin.balance(wallet_id) == 9_500 + settlement["payout"]
    scheduled = queue.scheduled_job_registry.get_job_ids()
    assert [job for job in scheduled if job.startswith(jobs.DELIVERY_JOB_PREFIX)], scheduled


def test_a_call_failing_past_flag_after_is_flagged_and_still_retried(
    app_pool: Pool,
    wallet: WalletServer,
    seated: Seated,
    admin: Admin,
    table: str,
    wallet_clock: MovableClock,
) -> None:
    config = replace(client_config(wallet), flag_after_seconds=30.0)
    patient = build(app_pool, wallet_clock, config, SeamlessWalletClient(config, wallet_clock))
    player, wallet_id = seated(10_000)
    admin.fault("error_5xx", "bet")
    with pytest.raises(WalletUnavailable):
        patient.seamless.place_bet(table, player, Spot.BANKER, 500, FRONTEND)
    admin.fault("error_5xx", "rollback", times=3)
    first = patient.calls.deliver_due()
    assert first.retrying
    assert not first.flagged
    wallet_clock.offset += timedelta(seconds=31)
    second = patient.calls.deliver_due()
    assert [operator for operator, _ in second.flagged] == ["acme"]
    wallet_clock.offset += timedelta(seconds=61)
    third = patient.calls.deliver_due()
    assert third.retrying  # flagged once, retried still
    assert not third.flagged
    patient.drain(wallet_clock)
    (rollback,) = patient.rows("rollback")
    assert rollback[1] == "confirmed"
    assert admin.balance(wallet_id) == 10_000


def test_a_bet_the_rules_refuse_never_reaches_the_wallet(
    shoebox: Shoebox, seated: Seated, admin: Admin, table: str
) -> None:
    player, wallet_id = seated(10_000)
    shoebox.seamless.place_bet(table, player, Spot.BANKER, 500, FRONTEND)  # opens the round
    with pytest.raises(DomainError):
        shoebox.seamless.place_bet(table, player, Spot.BANKER, 50, FRONTEND)  # below the minimum
    assert admin.balance(wallet_id) == 9_500
    shoebox.calls.catch_up()
    assert [row[:2] for row in shoebox.rows("bet")] == [("bet", "confirmed")]
    assert shoebox.types(player) == ["SessionOpened", "StakeDebited"]


def test_a_bet_naming_a_round_past_betting_never_reaches_the_wallet(
    shoebox: Shoebox, seated: Seated, table: str, wallet_clock: MovableClock
) -> None:
    player, _ = seated(10_000)
    other, _ = seated(10_000, seat=2)
    shoebox.seamless.place_bet(table, player, Spot.BANKER, 500, FRONTEND)
    round_1 = f"{table}-1"
    shoebox.seamless.place_bet(table, player, Spot.PLAYER, 100, FRONTEND, round_1)
    shoebox.games.press_deal(table, player, FRONTEND, round_1)
    shoebox.games.pass_turn(table, other, FRONTEND, round_1)  # the last to act: the deal
    # Round 1 is settled and round 2 opened for both: a bet meant for round 1 is late, both
    # through the preview (a round is betting) and, once none is, inside the command.
    with pytest.raises(BettingWindowClosed):
        shoebox.seamless.place_bet(table, player, Spot.BANKER, 500, FRONTEND, round_1)
    with pytest.raises(BettingWindowClosed):
        shoebox.seamless.rebet(table, player, FRONTEND, round_1)
    wallet_clock.offset += timedelta(seconds=16)
    with pytest.raises(BettingWindowClosed):
        shoebox.seamless.place_bet(table, player, Spot.BANKER, 500, FRONTEND, f"{table}-2")
    shoebox.calls.catch_up()
    assert [row[:2] for row in shoebox.rows("bet")] == [("bet", "confirmed")] * 2
    assert [t for t in shoebox.types(player) if t == "StakeDebited"] == ["StakeDebited"] * 2


def _wait_for(condition: Callable[[], bool], what: str, seconds: float = 20.0) -> None:
    """Poll until `condition` holds; fail naming `what` if it never does."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"never happened: {what}")
        time.sleep(0.05)


def test_a_process_killed_while_its_debit_is_in_flight_has_the_debit_rolled_back(
    fresh_database: str,
    wallet: WalletServer,
    shoebox: Shoebox,
    seated: Seated,
    admin: Admin,
    table: str,
    wallet_clock: MovableClock,
) -> None:
    player, wallet_id = seated(10_000)
    shoebox.seamless.place_bet(table, player, Spot.PLAYER, 100, FRONTEND)  # the round is open
    # The wallet takes its time, then applies the debit: the bettor is dead by then.
    admin.fault("delay", "bet", delay_ms=4_000)
    environment = {
        **os.environ,
        "BETTOR_DATABASE_URL": app_conninfo(fresh_database, environ={}),
        "BETTOR_WALLET_URL": wallet.url,
        "BETTOR_SECRET": SECRET_1,
        "BETTOR_TABLE": table,
        "BETTOR_PLAYER": player,
    }
    bettor = subprocess.Popen(
        [sys.executable, "-m", "tests.integration.wallets.seamless_bettor"],
        env=environment,
        cwd=Path(__file__).resolve().parents[3],
        stdout=subprocess.PIPE,
    )
    try:
        # Its in-flight row is committed before the call, so the call at the wallet means both.
        _wait_for(lambda: bool(wallet.faults.fired), "the bettor's debit at the wallet", 120.0)
        with psycopg.connect(fresh_database, autocommit=True) as probe:
            assert not _player_lock_free(probe, player)  # the wait below can tell it go
        bettor.kill()
    finally:
        bettor.kill()
        bettor.wait()
        assert bettor.stdout is not None
        bettor.stdout.close()
    _wait_for(lambda: admin.balance(wallet_id) == 10_000 - 100 - 700, "the wallet's debit", 60.0)
    with shoebox.calls._pool.connection() as conn:
        conn.autocommit = True
        _wait_for(lambda: _player_lock_free(conn, player), "the dead bettor's lock let go")
    assert shoebox.types(player)[-1] == "StakeDebited"  # the first bet's; nothing of the killed
    wallet_clock.offset += timedelta(seconds=31)
    shoebox.drain(wallet_clock)
    assert admin.balance(wallet_id) == 10_000 - 100
    assert shoebox.types(player)[-2:] == ["WalletCallOwed", "WalletCallConfirmed"]


def _player_lock_free(conn: psycopg.Connection[Any], player: str) -> bool:
    """Whether the player's money lock is free, taking it for a moment to know. This player's
    only: the server's other advisory locks (a sequencer's role, other tests' players under
    xdist) are none of the test's business."""
    key = "seamless-money:" + player  # as service/application/seamless_bets.py keys it
    row = conn.execute("SELECT pg_try_advisory_lock(hashtextextended(%s, 24))", [key]).fetchone()
    if row is not None and row[0]:
        conn.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 24))", [key])
        return True
    return False


def _stopped_at(moment: datetime) -> Callable[[], datetime]:
    """A clock standing at `moment`: how much of a window is left is then the test's choice."""
    return lambda: moment


def test_a_debit_the_wallet_cannot_answer_before_the_window_closes_is_rolled_back(
    app_pool: Pool,
    wallet: WalletServer,
    shoebox: Shoebox,
    seated: Seated,
    admin: Admin,
    table: str,
    wallet_clock: MovableClock,
) -> None:
    player, wallet_id = seated(10_000)
    shoebox.seamless.place_bet(table, player, Spot.PLAYER, 100, FRONTEND)  # the round is open
    current = shoebox.games.table(table).round
    assert current is not None
    # A Shoebox whose clock stands 1 s (and the margin) before the window closes, talking to a
    # wallet it would wait 5 s for: the window, not the configured timeout, bounds the debit.
    config = client_config(wallet, read_timeout=5.0)
    late = build(
        app_pool,
        _stopped_at(current.deadline - WINDOW_MARGIN - timedelta(seconds=1)),
        config,
        SeamlessWalletClient(config, wallet_clock),
    )
    admin.fault("delay", "bet", delay_ms=3_000)  # longer than the window's 1 s, within the 5 s
    with pytest.raises(WalletUnavailable) as unavailable:
        late.seamless.place_bet(table, player, Spot.BANKER, 500, FRONTEND)
    assert unavailable.value.reason == "no-answer"  # the uncertain class
    assert shoebox.types(player)[-1] == "WalletCallOwed"
    assert not [
        e
        for e in shoebox.store.read_stream(table_stream(table))
        if e.type == "BetPlaced" and e.payload["stake"] == 500
    ]
    # The wallet applies the debit it answered too late; the rollback owed gives it back.
    _wait_for(lambda: admin.balance(wallet_id) == 10_000 - 100 - 500, "the late debit applied")
    shoebox.drain(wallet_clock)
    assert admin.balance(wallet_id) == 10_000 - 100
    assert [row[:2] for row in shoebox.rows("rollback")] == [("rollback", "confirmed")]
    assert shoebox.types(player)[-2:] == ["WalletCallOwed", "WalletCallConfirmed"]


def test_a_bet_with_no_time_left_in_its_window_is_refused_before_the_wallet_hears_of_it(
    app_pool: Pool,
    wallet: WalletServer,
    shoebox: Shoebox,
    seated: Seated,
    admin: Admin,
    table: str,
    wallet_clock: MovableClock,
) -> None:
    player, wallet_id = seated(10_000)
    shoebox.seamless.place_bet(table, player, Spot.PLAYER, 100, FRONTEND)  # the round is open
    current = shoebox.games.table(table).round
    assert current is not None
    config = client_config(wallet)
    # Inside the window still, but within the margin: no debit could land before it closes.
    late = build(
        app_pool,
        _stopped_at(current.deadline - WINDOW_MARGIN / 2),
        config,
        SeamlessWalletClient(config, wallet_clock),
    )
    with pytest.raises(BettingWindowClosed):
        late.seamless.place_bet(table, player, Spot.BANKER, 500, FRONTEND)
    assert admin.balance(wallet_id) == 10_000 - 100
    shoebox.calls.catch_up()
    assert [row[:2] for row in shoebox.rows("bet")] == [("bet", "confirmed")]  # no in_flight
    assert shoebox.types(player) == ["SessionOpened", "StakeDebited"]
