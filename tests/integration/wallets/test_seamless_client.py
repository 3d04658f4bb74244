"""Shoebox's wallet client against the reference wallet over HTTP: each answer's class."""

from __future__ import annotations

import logging
import socket
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from operator_wallet import WalletServer
from service.application.seamless import (
    Outcome,
    SeamlessWalletConfig,
    Secret,
    WalletCall,
    balance_call,
)
from service.runtime.seamless_wallet import SeamlessWalletClient

from .conftest import SECRET_1, SECRET_2, Admin, MovableClock, Round, client_config

RoundStarter = Callable[..., Round]


@pytest.fixture
def round_of(wallet: WalletServer, admin: Admin) -> RoundStarter:
    """Start a round for a new player with `deposit` pence and the wallet's settings."""

    def start(deposit: int = 10_000, **settings: Any) -> Round:
        player, token = admin.player(deposit=deposit, **settings)
        return Round(client_config(wallet), player, token)

    return start


def test_every_call_is_ok_and_states_the_balance(
    client: SeamlessWalletClient,
    round_of: RoundStarter,
    admin: Admin,
) -> None:
    game = round_of(1000)
    assert (
        client.send(
            balance_call(game.config, game.player_id, game.token, str(uuid.uuid4()))
        ).balance
        == 1000
    )
    bet = game.bet(300)
    placed = client.send(bet)
    assert (placed.outcome, placed.balance) == (Outcome.OK, 700)
    paid = client.send(game.win(600, bet))
    assert (paid.outcome, paid.balance) == (Outcome.OK, 1300)
    second = game.bet(100)
    client.send(second)
    back = client.send(game.rollback(second))
    assert (back.outcome, back.balance) == (Outcome.OK, 1300)
    assert admin.balance(game.player_id) == 1300


@pytest.mark.parametrize(
    ("settings", "deposit", "stake", "status"),
    [
        ({}, 100, 101, "INSUFFICIENT_FUNDS"),
        ({"wager_limit": 50}, 1000, 51, "LIMIT_REACHED"),
        ({"blocked": True}, 1000, 10, "PLAYER_BLOCKED"),
    ],
)
def test_the_wallets_no_to_a_bet_is_refused(
    client: SeamlessWalletClient,
    round_of: RoundStarter,
    admin: Admin,
    settings: dict[str, object],
    deposit: int,
    stake: int,
    status: str,
) -> None:
    game = round_of(deposit, **settings)
    result = client.send(game.bet(stake))
    assert (result.outcome, result.reason) == (Outcome.REFUSED, status)
    assert admin.balance(game.player_id) == deposit


def test_an_expired_session_is_refused(
    client: SeamlessWalletClient,
    round_of: RoundStarter,
    admin: Admin,
) -> None:
    game = round_of(1000)
    admin.request("POST", "/admin/sessions/expire", {"session_token": game.token})
    result = client.send(game.bet(10))
    assert (result.outcome, result.reason) == (Outcome.REFUSED, "SESSION_EXPIRED")
    check = client.send(balance_call(game.config, game.player_id, game.token, str(uuid.uuid4())))
    assert check.outcome is Outcome.REFUSED


@pytest.mark.parametrize(
    ("action", "rule", "applied"),
    [
        ("timeout", {"delay_ms": 1500}, False),
        ("error_5xx", {}, False),
        ("lose_answer", {}, True),
        ("delay", {"delay_ms": 1500}, True),  # answered after the client gave up
    ],
)
def test_no_answer_or_a_5xx_is_uncertain_and_the_rollback_settles_it(
    wallet: WalletServer,
    admin: Admin,
    wallet_clock: MovableClock,
    action: str,
    rule: dict[str, object],
    applied: bool,
) -> None:
    impatient = SeamlessWalletClient(client_config(wallet, read_timeout=0.5), wallet_clock)
    player, token = admin.player(deposit=1000)
    game = Round(client_config(wallet), player, token)
    bet = game.bet(400)
    admin.fault(action, "bet", **rule)
    result = impatient.send(bet)
    assert result.outcome is Outcome.UNCERTAIN
    # The rule for an uncertain bet: refuse it, and roll it back until confirmed.
    if action == "delay":
        deadline = time.monotonic() + 10
        while admin.balance(player) == 1000 and time.monotonic() < deadline:
            time.sleep(0.05)  # the late debit lands after the client gave up
    assert admin.balance(player) == (600 if applied else 1000)
    rolled_back = impatient.send(game.rollback(bet))
    assert rolled_back.outcome is Outcome.OK
    assert rolled_back.reason == ("OK" if applied else "UNKNOWN_TRANSACTION")
    assert admin.balance(player) == 1000
    # A late copy of the bet, after its rollback, is never applied.
    # A late copy of the bet, after its rollback, moves nothing: a replay of a cancelled
    # debit, or a debit refused because its rollback is remembered.
    impatient.send(bet)
    assert admin.balance(player) == 1000


def test_a_wallet_that_is_down_is_uncertain(wallet_clock: MovableClock) -> None:
    with socket.socket() as probe:  # a port nobody listens on once the probe closes
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = SeamlessWalletConfig(
        "acme", f"http://127.0.0.1:{port}/wallet", "k1", Secret(SECRET_1), "GBP"
    )
    result = SeamlessWalletClient(config, wallet_clock).send(Round(config, "p", "t").bet(1))
    assert (result.outcome, result.reason) == (Outcome.UNCERTAIN, "no-answer")


def test_a_retry_after_a_lost_answer_is_ok_with_one_debit(
    client: SeamlessWalletClient,
    round_of: RoundStarter,
    admin: Admin,
) -> None:
    game = round_of(1000)
    win_bet = game.bet(250)
    admin.fault("lose_answer", "bet")
    assert client.send(win_bet).outcome is Outcome.UNCERTAIN
    retried = client.send(win_bet)
    assert (retried.outcome, retried.balance) == (Outcome.OK, 750)
    win = game.win(500, win_bet)
    admin.fault("error_5xx", "win", times=2)
    outcomes = [client.send(win).outcome for _ in range(3)]
    assert outcomes == [Outcome.UNCERTAIN, Outcome.UNCERTAIN, Outcome.OK]
    assert client.send(win).balance == 1250
    assert admin.balance(game.player_id) == 1250


def test_an_answer_twice_is_ok_once(
    client: SeamlessWalletClient,
    round_of: RoundStarter,
    admin: Admin,
) -> None:
    game = round_of(1000)
    admin.fault("duplicate", "bet")
    result = client.send(game.bet(100))
    assert (result.outcome, result.balance) == (Outcome.OK, 900)
    assert admin.balance(game.player_id) == 900


def test_a_call_signed_with_a_key_the_wallet_does_not_hold_is_fatal(
    wallet: WalletServer,
    round_of: RoundStarter,
    admin: Admin,
    wallet_clock: MovableClock,
) -> None:
    game = round_of(1000)
    stranger = SeamlessWalletClient(client_config(wallet, secret="x" * 40), wallet_clock)
    result = stranger.send(game.bet(100))
    assert (result.outcome, result.reason) == (Outcome.FATAL, "BAD_SIGNATURE")
    assert admin.balance(game.player_id) == 1000


def test_a_rotated_key_is_accepted_and_its_answers_check_out(
    wallet: WalletServer,
    round_of: RoundStarter,
    wallet_clock: MovableClock,
) -> None:
    game = round_of(1000)
    rotated = SeamlessWalletClient(client_config(wallet, "k2", SECRET_2), wallet_clock)
    assert rotated.send(game.bet(100)).outcome is Outcome.OK


def test_a_wrong_currency_and_a_reused_id_are_fatal(
    client: SeamlessWalletClient,
    round_of: RoundStarter,
    admin: Admin,
) -> None:
    euro = round_of(1000, currency="EUR")
    wrong = client.send(euro.bet(100))
    assert (wrong.outcome, wrong.reason) == (Outcome.FATAL, "WRONG_CURRENCY")
    game = round_of(1000)
    bet = game.bet(100)
    client.send(bet)
    reused = WalletCall(
        bet.kind,
        str(uuid.uuid4()),
        bet.player_id,
        bet.session_token,
        bet.currency,
        bet.exponent,
        bet.transaction_uuid,
        bet.table_id,
        bet.round_id,
        200,
    )
    conflict = client.send(reused)
    assert (conflict.outcome, conflict.reason) == (Outcome.FATAL, "TRANSACTION_CONFLICT")
    assert admin.balance(game.player_id) == 900


def test_a_win_the_wallet_will_not_pay_is_fatal_never_refused(
    client: SeamlessWalletClient,
    round_of: RoundStarter,
    admin: Admin,
) -> None:
    game = round_of(1000)
    bet = game.bet(100)
    client.send(bet)
    client.send(game.rollback(bet))
    result = client.send(game.win(200, bet))
    assert (result.outcome, result.reason) == (Outcome.FATAL, "TRANSACTION_ROLLED_BACK")


def test_a_bet_whose_rollback_came_first_is_refused(
    client: SeamlessWalletClient,
    round_of: RoundStarter,
    admin: Admin,
) -> None:
    game = round_of(1000)
    bet = game.bet(100)
    assert client.send(game.rollback(bet)).reason == "UNKNOWN_TRANSACTION"
    result = client.send(bet)
    assert (result.outcome, result.reason) == (Outcome.REFUSED, "TRANSACTION_ROLLED_BACK")
    assert admin.balance(game.player_id) == 1000


def test_the_transaction_list_is_read_page_by_page_and_signed(
    client: SeamlessWalletClient,
    round_of: RoundStarter,
) -> None:
    since = datetime.now(UTC) - timedelta(seconds=1)
    game = round_of(100_000)
    bets = [game.bet(amount) for amount in range(1, 8)]
    for bet in bets:
        client.send(bet)
    listed = [
        row["transaction_uuid"]
        for row in client.transactions(since, datetime.now(UTC) + timedelta(seconds=1))
        if row["player_id"] == game.player_id and row["kind"] == "bet"
    ]
    assert listed == [bet.transaction_uuid for bet in bets]


def test_no_secret_or_session_token_reaches_a_log_line_or_a_repr(
    wallet: WalletServer,
    round_of: RoundStarter,
    admin: Admin,
    wallet_clock: MovableClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    game = round_of(1000)
    config = client_config(wallet, read_timeout=0.5)
    client = SeamlessWalletClient(config, wallet_clock)
    bet = game.bet(100)
    client.send(bet)
    admin.fault("timeout", "bet", delay_ms=1000)
    client.send(game.bet(100))
    admin.fault("error_5xx", "win")
    client.send(game.win(0, bet))
    SeamlessWalletClient(client_config(wallet, secret="y" * 40), wallet_clock).send(game.bet(5))
    shown = "\n".join(
        [record.getMessage() + repr(record.__dict__) for record in caplog.records]
        + [repr(config), str(config), repr(client), repr(bet), str(bet)]
    )
    assert caplog.records, "the client logs each call"
    for secret in (SECRET_1, game.token, "y" * 40):
        assert secret not in shown
    with pytest.raises(ValueError, match="currency") as refused:
        SeamlessWalletConfig("acme", wallet.url, "k1", config.secret, "EUR")
    assert SECRET_1 not in str(refused.value) + repr(refused.value)
