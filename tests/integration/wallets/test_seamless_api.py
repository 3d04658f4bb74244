"""The seamless wallet through the API: sessions, bets and their problems, and the settings."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from events.postgres import app_conninfo
from events.store import EventMetadata
from operator_wallet import WalletServer
from service.application.keys import Role, create_key
from service.runtime.container import Container
from service.runtime.settings import Settings, SettingsError
from service.web.api import EXTENSION
from service.web.app import create_app

from .conftest import SECRET_1, Admin, client_config

CLI = EventMetadata(actor="cli:test", role="cli")


class Casino:
    def __init__(self, app: Flask) -> None:
        wiring = app.extensions[EXTENSION]
        assert isinstance(wiring, Container)
        self.wiring = wiring
        self.client: FlaskClient = app.test_client()
        store = wiring.store
        self.keys = {
            "acme": create_key(store, "acme web", Role.FRONTEND, CLI, operator="acme").secret,
            "default": create_key(store, "lobby", Role.FRONTEND, CLI).secret,
            "ops": create_key(store, "ops", Role.OPS, CLI).secret,
        }

    def call(self, key: str, method: str, path: str, body: Any = None) -> tuple[int, Any, Any]:
        response = self.client.open(
            path, method=method, json=body, headers={"Authorization": f"Bearer {self.keys[key]}"}
        )
        return response.status_code, response.get_json(force=True), response.headers


@pytest.fixture
def casino(fresh_database: str, wallet: WalletServer) -> Iterator[Casino]:
    settings = Settings(
        database_url=fresh_database,
        app_database_url=app_conninfo(fresh_database, environ={}),
        seamless_wallets=(client_config(wallet),),
    )
    app = create_app(settings, pool_size=6)
    try:
        yield Casino(app)
    finally:
        wiring = app.extensions[EXTENSION]
        assert isinstance(wiring, Container)
        wiring.close()


def test_a_session_then_a_bet_through_the_api(casino: Casino, admin: Admin) -> None:
    table = "T" + secrets.token_hex(4)
    body = {"table_id": table, "seats": 7, "decks": 8, "minimum_pence": 100}
    assert casino.call("ops", "POST", "/v1/tables", body)[0] == 201
    player, token = admin.player(deposit=1_000)
    status, session, _ = casino.call(
        "acme", "POST", "/v1/sessions", {"player_id": player, "token": token}
    )
    assert status == 201, session
    assert session["balance_pence"] == 1_000
    assert "token" not in session
    status, wallet, _ = casino.call("acme", "GET", f"/v1/wallets/{player}")
    assert status == 200
    assert (wallet["seamless"]["balance_pence"], wallet["seamless"]["call"]) == (1_000, "balance")
    seat = {"player_id": player, "seat": 1}
    assert casino.call("acme", "POST", f"/v1/tables/{table}/seats", seat)[0] == 201
    bet = {"player_id": player, "spot": "banker", "stake_pence": 600}
    status, placed, _ = casino.call("acme", "POST", f"/v1/tables/{table}/bets", bet)
    assert status == 201, placed
    assert admin.balance(player) == 400
    # The answer's balance is the wallet's, as it answered the debit.
    assert placed["balance_after"]["available_pence"] == 400
    wallet = casino.call("acme", "GET", f"/v1/wallets/{player}")[1]
    assert (wallet["seamless"]["balance_pence"], wallet["seamless"]["call"]) == (400, "bet")
    deposit = {"amount_pence": 100, "reason": "float"}
    assert casino.call("ops", "POST", "/v1/wallets/alice/deposits", deposit)[0] == 201
    internal = casino.call("default", "GET", "/v1/wallets/alice")[1]
    assert internal["available_pence"] == 100
    assert "seamless" not in internal
    status, problem, _ = casino.call("acme", "POST", f"/v1/tables/{table}/bets", bet)
    assert (status, problem["type"].rsplit("/", 1)[1]) == (409, "wallet-refused")
    assert problem["reason"] == "INSUFFICIENT_FUNDS"
    admin.fault("error_5xx", "bet")
    small = {**bet, "stake_pence": 100}
    status, problem, headers = casino.call("acme", "POST", f"/v1/tables/{table}/bets", small)
    assert (status, problem["type"].rsplit("/", 1)[1]) == (503, "wallet-unavailable")
    assert headers["Retry-After"]
    # A rebet with no round played before is the game's refusal, before any wallet call.
    status, problem, _ = casino.call(
        "acme", "POST", f"/v1/tables/{table}/rebet", {"player_id": player}
    )
    assert status == 409, problem
    assert problem["rule"] == "rebet.no_previous_bets"
    assert admin.balance(player) == 400


def test_a_seamless_rebet_through_the_api(casino: Casino, admin: Admin) -> None:
    """Rebet debits each stake from the operator's wallet, one `bet` call per bet, and
    answers with the balance the wallet stated at the last debit; a rebet the wallet refuses
    in part is the wallet's problem, and places nothing."""
    table = "T" + secrets.token_hex(4)
    body = {"table_id": table, "seats": 7, "decks": 8, "minimum_pence": 100}
    assert casino.call("ops", "POST", "/v1/tables", body)[0] == 201
    player, token = admin.player(deposit=1_000)
    casino.call("acme", "POST", "/v1/sessions", {"player_id": player, "token": token})
    casino.call("acme", "POST", f"/v1/tables/{table}/seats", {"player_id": player, "seat": 1})
    for spot in ("banker", "player"):
        bet = {"player_id": player, "spot": spot, "stake_pence": 200}
        assert casino.call("acme", "POST", f"/v1/tables/{table}/bets", bet)[0] == 201
    acting = {"player_id": player}
    assert casino.call("acme", "POST", f"/v1/tables/{table}/deal", acting)[0] == 200
    # No worker here: the round's wins are owed, not yet paid. The wallet holds 600.
    assert admin.balance(player) == 600
    # Queued by the deal's own append, as the API wires it (no projection runs here).
    pool = casino.wiring.pool
    assert pool is not None
    with pool.connection() as conn:
        owed = conn.execute(
            "SELECT count(*) FROM seamless_calls WHERE kind = 'win' AND state = 'owed'"
            " AND table_id = %s",
            [table],
        ).fetchone()
    assert owed == (2,)
    status, rebet, _ = casino.call("acme", "POST", f"/v1/tables/{table}/rebet", acting)
    assert status == 201, rebet
    assert sorted((b["spot"], b["stake_pence"]) for b in rebet["bets"]) == [
        ("banker", 200),
        ("player", 200),
    ]
    assert rebet["balance_after"]["available_pence"] == 200
    assert admin.balance(player) == 200
    assert casino.call("acme", "POST", f"/v1/tables/{table}/deal", acting)[0] == 200
    # 200 left: the first stake is debited, the second refused; the first is rolled back.
    status, problem, _ = casino.call("acme", "POST", f"/v1/tables/{table}/rebet", acting)
    assert (status, problem["type"].rsplit("/", 1)[1]) == (409, "wallet-refused"), problem
    assert problem["reason"] == "INSUFFICIENT_FUNDS"
    state = casino.call("acme", "GET", f"/v1/tables/{table}/state")[1]
    assert all(seat["bets"] == [] for seat in state["seats"] if seat["player_id"] == player)


def test_a_bet_without_a_session_and_an_internal_operators_session(
    casino: Casino, admin: Admin
) -> None:
    table = "T" + secrets.token_hex(4)
    body = {"table_id": table, "seats": 7, "decks": 8, "minimum_pence": 100}
    casino.call("ops", "POST", "/v1/tables", body)
    # A seamless player exists once its session is opened: before, it is nobody (issue 24).
    seat = {"player_id": "carol", "seat": 2}
    status, problem, _ = casino.call("acme", "POST", f"/v1/tables/{table}/seats", seat)
    assert (status, problem["type"].rsplit("/", 1)[1]) == (404, "player-not-found")
    bet = {"player_id": "carol", "spot": "banker", "stake_pence": 100}
    status, problem, _ = casino.call("acme", "POST", f"/v1/tables/{table}/bets", bet)
    assert (status, problem["type"].rsplit("/", 1)[1]) == (404, "player-not-found")
    status, problem, _ = casino.call("acme", "GET", "/v1/wallets/carol")
    assert (status, problem["type"].rsplit("/", 1)[1]) == (404, "player-not-found")
    status, problem, _ = casino.call(
        "default", "POST", "/v1/sessions", {"player_id": "alice", "token": "x"}
    )
    assert (status, problem["type"].rsplit("/", 1)[1]) == (409, "wallet-not-seamless")
    player, token = admin.player(deposit=100)
    status, problem, _ = casino.call(
        "acme", "POST", "/v1/sessions", {"player_id": player, "token": token + "x"}
    )
    assert (status, problem["type"].rsplit("/", 1)[1]) == (409, "wallet-refused")


def test_the_wallets_file_is_read_at_startup_and_a_wrong_currency_refused(
    tmp_path: Path, wallet: WalletServer
) -> None:
    path = tmp_path / "wallets.toml"
    secret_file = tmp_path / "acme-secret"
    secret_file.write_text(SECRET_1)
    path.write_text(
        "[operators.acme]\n"
        f'base_url = "{wallet.url}"\n'
        'key_id = "k1"\n'
        f'secret_file = "{secret_file}"\n'
        'currency = "GBP"\n'
        "flag_after_seconds = 120\n"
        "[operators.acme.previous_keys]\n"
        'k0 = "an-older-secret-of-16-bytes"\n'
    )
    settings = Settings.from_env({"SHOEBOX_SEAMLESS_WALLETS_FILE": str(path)})
    (config,) = settings.seamless_wallets
    assert settings.seamless_wallet("acme") == config
    assert config.flag_after_seconds == 120
    assert config.secret_of("k0") is not None
    assert SECRET_1 not in repr(settings)
    path.write_text(path.read_text().replace('"GBP"', '"EUR"'))
    with pytest.raises(SettingsError, match="EUR") as refused:
        Settings.from_env({"SHOEBOX_SEAMLESS_WALLETS_FILE": str(path)})
    assert SECRET_1 not in str(refused.value)


def test_a_keyed_bet_sent_twice_is_debited_once(casino: Casino, admin: Admin) -> None:
    table = "T" + secrets.token_hex(4)
    body = {"table_id": table, "seats": 7, "decks": 8, "minimum_pence": 100}
    casino.call("ops", "POST", "/v1/tables", body)
    player, token = admin.player(deposit=1_000)
    casino.call("acme", "POST", "/v1/sessions", {"player_id": player, "token": token})
    casino.call("acme", "POST", f"/v1/tables/{table}/seats", {"player_id": player, "seat": 1})
    bet = {"player_id": player, "spot": "banker", "stake_pence": 300}
    headers = {"Authorization": f"Bearer {casino.keys['acme']}", "Idempotency-Key": "bet-1"}
    first = casino.client.post(f"/v1/tables/{table}/bets", json=bet, headers=headers)
    second = casino.client.post(f"/v1/tables/{table}/bets", json=bet, headers=headers)
    assert (first.status_code, second.status_code) == (201, 201)
    assert second.headers.get("Idempotent-Replayed") == "true"
    assert first.get_json() == second.get_json()
    assert admin.balance(player) == 700
    (debited,) = casino.wiring.store.read_all(types=["StakeDebited"])
    pool = casino.wiring.pool
    assert pool is not None
    with pool.connection() as conn:
        # The retry reached no wallet: no second transaction was ever begun.
        stray = conn.execute(
            "SELECT count(*) FROM seamless_calls WHERE transaction_uuid <> %s",
            [debited.payload["transaction_uuid"]],
        ).fetchone()
    assert stray == (0,)


def test_remove_and_deal_answer_with_the_wallets_last_word(casino: Casino, admin: Admin) -> None:
    """A seamless player's Deal, Pass and remove answers carry the balance the operator's
    wallet last stated, as the bet's does, never Shoebox's empty wallet for them."""
    table = "T" + secrets.token_hex(4)
    body = {"table_id": table, "seats": 7, "decks": 8, "minimum_pence": 100}
    assert casino.call("ops", "POST", "/v1/tables", body)[0] == 201
    player, token = admin.player(deposit=1_000)
    session = {"player_id": player, "token": token}
    assert casino.call("acme", "POST", "/v1/sessions", session)[0] == 201
    seat = {"player_id": player, "seat": 1}
    assert casino.call("acme", "POST", f"/v1/tables/{table}/seats", seat)[0] == 201
    bet = {"player_id": player, "spot": "banker", "stake_pence": 600}
    assert casino.call("acme", "POST", f"/v1/tables/{table}/bets", bet)[0] == 201

    status, removed, _ = casino.call("acme", "DELETE", f"/v1/tables/{table}/bets/{player}")
    assert status == 200, removed
    wallet = casino.call("acme", "GET", f"/v1/wallets/{player}")[1]
    # The rollback is owed, not yet sent: the wallet's last word is still its debit's.
    assert (wallet["seamless"]["balance_pence"], wallet["seamless"]["call"]) == (400, "bet")
    assert removed["balance_after"]["available_pence"] == 400
    assert removed["balance_after"]["reserved_pence"] == 0
    assert removed["balance_after"]["version"] >= 2  # the seamless stream's, not a wallet's

    small = {**bet, "stake_pence": 100}
    placed = casino.call("acme", "POST", f"/v1/tables/{table}/bets", small)[1]
    status, dealt, _ = casino.call(
        "acme", "POST", f"/v1/tables/{table}/deal", {"player_id": player}
    )
    assert status == 200, dealt
    # The win (or the lost bet's zero win) is the worker's to send: still the debit's word.
    after = dealt["balance_after"]
    assert (after["available_pence"], after["reserved_pence"]) == (300, 0)
    assert placed["balance_after"]["available_pence"] == 300
