"""An operator's wallet mode cannot change while its players hold money in the other mode.

The mode is the wallets file's, read at startup; `shoebox serve`, `shoebox worker` and
`shoebox wallet check-mode` refuse when it would strand money (service/application/wallet_modes.py).
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner
from flask import Flask

from events.postgres import app_conninfo
from events.store import EventMetadata
from operator_wallet import WalletServer
from service.application.keys import Role, create_key
from service.application.read_models import projector
from service.cli.wallet import wallet as wallet_cli
from service.runtime.container import Container
from service.runtime.seamless_wiring import refuse_wallet_mode_changes
from service.runtime.settings import Settings, SettingsError
from service.web.api import EXTENSION
from service.web.app import create_app

from .conftest import Admin, client_config

CLI = EventMetadata(actor="cli:test", role="cli")


class Shoebox:
    def __init__(self, app: Flask) -> None:
        wiring = app.extensions[EXTENSION]
        assert isinstance(wiring, Container)
        self.wiring = wiring
        self.client = app.test_client()
        store = wiring.store
        self.keys = {
            "acme": create_key(store, "acme web", Role.FRONTEND, CLI, operator="acme").secret,
            "ops": create_key(store, "ops", Role.OPS, CLI).secret,
        }

    def call(self, key: str, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        response = self.client.open(
            path, method=method, json=body, headers={"Authorization": f"Bearer {self.keys[key]}"}
        )
        return response.status_code, response.get_json(force=True)


def settings(database: str, wallet: WalletServer | None) -> Settings:
    return Settings(
        database_url=database,
        app_database_url=app_conninfo(database, environ={}),
        seamless_wallets=() if wallet is None else (client_config(wallet),),
    )


@pytest.fixture
def started(fresh_database: str, wallet: WalletServer) -> Iterator[tuple[Shoebox, Shoebox]]:
    """The same database served twice: acme on Shoebox's own wallet, and acme seamless."""
    apps = [create_app(settings(fresh_database, w), pool_size=3) for w in (None, wallet)]
    try:
        yield Shoebox(apps[0]), Shoebox(apps[1])
    finally:
        for app in apps:
            wiring = app.extensions[EXTENSION]
            assert isinstance(wiring, Container)
            wiring.close()


def test_an_internal_balance_refuses_seamless_until_it_is_withdrawn(
    fresh_database: str, wallet: WalletServer, started: tuple[Shoebox, Shoebox]
) -> None:
    internal, _ = started
    money = {"amount_pence": 1_000, "reason": "float"}
    path = "/v1/wallets/dora/{}?operator=acme"
    assert internal.call("ops", "POST", path.format("deposits"), money)[0] == 201
    projector.catch_up(internal.wiring.pool)  # type: ignore[arg-type]

    refuse_wallet_mode_changes(settings(fresh_database, None), fresh_database)
    with pytest.raises(SettingsError) as refused:
        refuse_wallet_mode_changes(settings(fresh_database, wallet), fresh_database)
    assert "operator 'acme' is configured seamless" in str(refused.value)
    assert "'dora' holds 1000 pence available and 0 pence reserved" in str(refused.value)

    assert internal.call("ops", "POST", path.format("withdrawals"), money)[0] == 201
    # Confirmed from the wallet's stream: the read model need not have caught up.
    refuse_wallet_mode_changes(settings(fresh_database, wallet), fresh_database)


def test_an_open_seamless_bet_refuses_the_internal_wallet(
    fresh_database: str, wallet: WalletServer, admin: Admin, started: tuple[Shoebox, Shoebox]
) -> None:
    _, seamless = started
    table = "T" + secrets.token_hex(4)
    body = {"table_id": table, "seats": 7, "decks": 8, "minimum_pence": 100}
    assert seamless.call("ops", "POST", "/v1/tables", body)[0] == 201
    player, token = admin.player(deposit=1_000)
    session = {"player_id": player, "token": token}
    assert seamless.call("acme", "POST", "/v1/sessions", session)[0] == 201
    refuse_wallet_mode_changes(settings(fresh_database, None), fresh_database)  # no bet yet
    seat = {"player_id": player, "seat": 1}
    assert seamless.call("acme", "POST", f"/v1/tables/{table}/seats", seat)[0] == 201
    bet = {"player_id": player, "spot": "banker", "stake_pence": 600}
    status, placed = seamless.call("acme", "POST", f"/v1/tables/{table}/bets", bet)
    assert status == 201, placed

    refuse_wallet_mode_changes(settings(fresh_database, wallet), fresh_database)
    with pytest.raises(SettingsError) as refused:
        refuse_wallet_mode_changes(settings(fresh_database, None), fresh_database)
    assert "operator 'acme' is configured internal" in str(refused.value)
    assert f"{player!r} has 1 seamless call(s) still open" in str(refused.value)

    # The same check from the command line, with no wallets file: acme is internal.
    result = CliRunner().invoke(
        wallet_cli,
        ["check-mode"],
        env={"DATABASE_URL": fresh_database, "SHOEBOX_SEAMLESS_WALLETS_FILE": None},
    )
    assert result.exit_code == 1, result.output
    assert "configured internal" in result.output
