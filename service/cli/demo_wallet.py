"""The demo's seamless operator: `shoebox run` starts the reference wallet for it.

`make run` is the demo, and issue 24 wants it to show a casino that keeps its players' money
in its own wallet. Beside the internal wallet's players (every operator but one), the demo
operator `casino` is configured seamless, against the reference operator wallet
(operator_wallet/, started as `shoebox wallet-reference serve` on a loopback port, on a
database of its own in the same PostgreSQL). Its secrets (the signing key, the wallet's admin
token) and the casino's front-end key are kept in the data dir (mode 0600) and reused at the
next start, as the demo keys are; the wallets file Shoebox reads is written beside them.
"""

from __future__ import annotations

import contextlib
import getpass
import json
import os
import secrets
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

DEMO_OPERATOR: Final = "casino"
DEMO_WALLET_DATABASE: Final = "shoebox_demo_wallet"
DEMO_WALLET_FILE: Final = "demo-wallet.json"
DEMO_WALLETS_TOML: Final = "demo-wallets.toml"
KEY_ID: Final = "k1"


@dataclass(frozen=True, slots=True)
class DemoWallet:
    """The demo's reference wallet and the seamless operator that uses it."""

    url: str
    """The wallet's own address (its `/admin/...` is the casino's side)."""
    database_url: str
    secret: str
    admin_token: str
    frontend_key: str
    """A frontend API key of the operator `casino`, to open its players' sessions."""
    wallets_file: Path

    @property
    def port(self) -> int:
        """The loopback port the wallet listens on."""
        return int(self.url.rpartition(":")[2])

    def environment(self) -> dict[str, str]:
        """What `shoebox wallet-reference serve` reads its keys and admin token from."""
        return {
            "OPERATOR_WALLET_KEYS": f"{KEY_ID}:{self.secret}",
            "OPERATOR_WALLET_ADMIN_TOKEN": self.admin_token,
        }

    def arguments(self) -> list[str]:
        """`shoebox`'s arguments that serve this wallet (no secret on the command line)."""
        return [
            "wallet-reference",
            "serve",
            "--database-url",
            self.database_url,
            "--port",
            str(self.port),
        ]


def prepare_demo_wallet(db_url: str, data_dir: Path, port: int = 0) -> DemoWallet:
    """The demo wallet's database, secrets, wallets file and the casino's front-end key.

    `port` 0: a loopback port free now (the wallet binds it a moment later).
    """
    stored = _read(data_dir / DEMO_WALLET_FILE)
    secret = stored.get("secret") or secrets.token_urlsafe(24)
    admin_token = stored.get("admin_token") or secrets.token_urlsafe(24)
    key_id, frontend_key = _frontend_key(db_url, stored)
    port = port or _free_port()
    url = f"http://127.0.0.1:{port}"
    wallets_file = data_dir / DEMO_WALLETS_TOML
    _write_private(
        data_dir / DEMO_WALLET_FILE,
        json.dumps(
            {
                "secret": secret,
                "admin_token": admin_token,
                "frontend_key_id": key_id,
                "frontend_key": frontend_key,
            },
            indent=2,
        ),
    )
    _write_private(
        wallets_file,
        "\n".join(
            [
                "# Written by `shoebox run` at each start: the demo's seamless operator.",
                f"[operators.{DEMO_OPERATOR}]",
                f'base_url = "{url}/wallet"',
                f'key_id = "{KEY_ID}"',
                f'secret = "{secret}"',
                'currency = "GBP"',
                "",
            ]
        ),
    )
    return DemoWallet(
        url,
        _ensure_database(db_url, DEMO_WALLET_DATABASE),
        secret,
        admin_token,
        frontend_key,
        wallets_file,
    )


def _frontend_key(db_url: str, stored: dict[str, str]) -> tuple[str, str]:
    """The casino's front-end key: the stored one if this log knows it live, else a new one."""
    from events.postgres import PostgresEventStore, open_pool
    from events.store import EventMetadata
    from service.application.keys import Role, create_key, hash_key, list_keys
    from service.application.upcasters import upcasters

    with open_pool(db_url, max_size=1) as pool:
        store = PostgresEventStore(pool, upcasters=upcasters())
        key_id, secret = stored.get("frontend_key_id", ""), stored.get("frontend_key", "")
        for key in list_keys(store):
            if (
                key.key_id == key_id
                and not key.revoked
                and key.role is Role.FRONTEND
                and key.key_sha256 == hash_key(secret)
            ):
                return key_id, secret
        issued = create_key(
            store,
            f"demo-{DEMO_OPERATOR}-frontend",
            Role.FRONTEND,
            EventMetadata(actor=f"cli:{getpass.getuser()}", role="cli"),
            operator=DEMO_OPERATOR,
        )
        return issued.key.key_id, issued.secret


def _ensure_database(db_url: str, name: str) -> str:
    """The URL of database `name` on `db_url`'s server, created if it is missing."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        found = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
        if found is None:
            with contextlib.suppress(psycopg.errors.DuplicateDatabase):
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return make_conninfo(db_url, dbname=name)


def _read(path: Path) -> dict[str, str]:
    try:
        document = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(document, dict):
        return {}
    return {str(k): v for k, v in document.items() if isinstance(v, str)}


def _write_private(path: Path, text: str) -> None:
    """Write `text` to `path`, readable by its owner alone from the first byte."""
    path.parent.mkdir(parents=True, exist_ok=True)
    scratch = path.with_name(path.name + ".new")
    scratch.unlink(missing_ok=True)
    descriptor = os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as file:
        file.write(text if text.endswith("\n") else text + "\n")
    os.replace(scratch, path)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port
