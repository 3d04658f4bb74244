"""A reference operator wallet over real HTTP on loopback, on a PostgreSQL database of its own."""

from __future__ import annotations

import json
import secrets
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from operator_wallet import WalletServer, running_wallet
from operator_wallet.signing import SigningKey, sign
from service.application.seamless import (
    SeamlessWalletConfig,
    Secret,
    WalletCall,
    bet_call,
    rollback_call,
    win_call,
)
from service.runtime.seamless_wallet import SeamlessWalletClient
from tests.databases import scratch_database

ADMIN_TOKEN = "admin-" + secrets.token_hex(8)
SECRET_1 = "first-secret-" + secrets.token_hex(16)
SECRET_2 = "second-secret-" + secrets.token_hex(16)
KEYS = {
    "k1": SigningKey("k1", SECRET_1.encode()),
    "k2": SigningKey("k2", SECRET_2.encode()),
}


@dataclass
class MovableClock:
    """The wall clock, shifted by `offset`, so a test can age sessions and signatures."""

    offset: timedelta = field(default_factory=timedelta)

    def __call__(self) -> datetime:
        return datetime.now(UTC) + self.offset


@pytest.fixture(scope="session")
def wallet_database_url(postgres_server_url: str) -> Iterator[str]:
    """A database for the reference wallet alone, dropped at the end of the run."""
    with scratch_database(postgres_server_url, "operator_wallet_test") as url:
        yield url


@pytest.fixture(scope="session")
def wallet_clock() -> MovableClock:
    return MovableClock()


@pytest.fixture(scope="session")
def running_reference(
    wallet_database_url: str, wallet_clock: MovableClock
) -> Iterator[WalletServer]:
    with running_wallet(
        wallet_database_url, KEYS, admin_token=ADMIN_TOKEN, clock=wallet_clock, pool_size=12
    ) as server:
        yield server


@pytest.fixture
def wallet(running_reference: WalletServer, wallet_clock: MovableClock) -> Iterator[WalletServer]:
    """The session's wallet with no fault waiting and the clock on time; players are per test."""
    running_reference.faults.clear()
    running_reference.faults.fired.clear()
    wallet_clock.offset = timedelta()
    yield running_reference
    running_reference.faults.clear()
    wallet_clock.offset = timedelta()


class Admin:
    """The casino's own side of the wallet, over its /admin endpoints."""

    def __init__(self, server: WalletServer) -> None:
        self.base = server.url.removesuffix("/wallet")

    def request(self, method: str, path: str, document: Any = None) -> Any:
        body = None if document is None else json.dumps(document).encode()
        request = urllib.request.Request(
            self.base + path,
            data=body,
            method=method,
            headers={"Authorization": f"Bearer {ADMIN_TOKEN}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read())

    def player(
        self, deposit: int = 10_000, currency: str = "GBP", **settings: Any
    ) -> tuple[str, str]:
        """A new player with `deposit` pence and an open session: (player_id, session token)."""
        player_id = "p-" + secrets.token_hex(6)
        self.request(
            "POST",
            "/admin/players",
            {"player_id": player_id, "currency": currency, "deposit": deposit, **settings},
        )
        token = self.request("POST", "/admin/sessions", {"player_id": player_id})["session_token"]
        return player_id, token

    def update(self, player_id: str, currency: str = "GBP", **settings: Any) -> None:
        self.request(
            "POST", "/admin/players", {"player_id": player_id, "currency": currency, **settings}
        )

    def balance(self, player_id: str) -> int:
        return int(self.request("GET", f"/admin/players/{player_id}")["balance"])

    def fault(self, action: str, call: str = "*", **rule: Any) -> None:
        self.request("POST", "/admin/faults", {"action": action, "call": call, **rule})


@pytest.fixture
def admin(wallet: WalletServer) -> Admin:
    return Admin(wallet)


@dataclass(frozen=True)
class RawAnswer:
    status: int | None
    body: dict[str, Any]
    headers: dict[str, str]


def raw_call(
    server: WalletServer,
    kind: str,
    document: dict[str, Any],
    key: SigningKey | None = KEYS["k1"],
    *,
    timestamp: int | None = None,
    signed_body: bytes | None = None,
) -> RawAnswer:
    """POST a call signed by hand (or not at all, or over other bytes), to test the wallet."""
    raw = json.dumps(document).encode()
    path = f"/wallet/{kind}"
    headers = {"Content-Type": "application/json"}
    if key is not None:
        when = timestamp if timestamp is not None else int(datetime.now(UTC).timestamp())
        signed = raw if signed_body is None else signed_body
        headers["Wallet-Signature"] = sign(key, "POST", path, when, signed)
    request = urllib.request.Request(
        server.url + f"/{kind}", data=raw, method="POST", headers=headers
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return RawAnswer(response.status, json.loads(response.read()), dict(response.headers))
    except urllib.error.HTTPError as error:
        return RawAnswer(error.code, json.loads(error.read()), dict(error.headers))


def bet_document(player_id: str, token: str, amount: int = 500, **overrides: Any) -> dict[str, Any]:
    """A well-formed bet call's body, with fresh ids."""
    return {
        "request_uuid": str(uuid.uuid4()),
        "transaction_uuid": str(uuid.uuid4()),
        "player_id": player_id,
        "session_token": token,
        "table_id": "t1",
        "round_id": "r1",
        "amount": amount,
        "currency": "GBP",
        "exponent": 2,
        **overrides,
    }


def client_config(
    server: WalletServer, key_id: str = "k1", secret: str = SECRET_1, read_timeout: float = 2.0
) -> SeamlessWalletConfig:
    return SeamlessWalletConfig(
        operator="acme",
        base_url=server.url,
        key_id=key_id,
        secret=Secret(secret),
        currency="GBP",
        connect_timeout_seconds=1.0,
        read_timeout_seconds=read_timeout,
    )


@pytest.fixture
def client(wallet: WalletServer, wallet_clock: MovableClock) -> SeamlessWalletClient:
    return SeamlessWalletClient(client_config(wallet), wallet_clock)


class Round:
    """Builds a round's calls the way the bet path will: ids from a stream and its versions."""

    def __init__(self, config: SeamlessWalletConfig, player_id: str, token: str) -> None:
        self.config = config
        self.player_id = player_id
        self.token = token
        self.stream = f"round-{uuid.uuid4()}"
        self.version = 0

    def _next(self) -> int:
        self.version += 1
        return self.version

    def bet(self, amount: int) -> WalletCall:
        return bet_call(
            self.config, self.stream, self._next(), self.player_id, self.token, "t1", "r1", amount
        )

    def win(self, amount: int, *bets: WalletCall) -> WalletCall:
        ids = [str(bet.transaction_uuid) for bet in bets]
        return win_call(
            self.config,
            self.stream,
            self._next(),
            self.player_id,
            self.token,
            "t1",
            "r1",
            amount,
            ids,
        )

    def rollback(self, cancelled: WalletCall) -> WalletCall:
        assert cancelled.transaction_uuid is not None
        assert cancelled.amount is not None
        return rollback_call(
            self.config,
            self.stream,
            self._next(),
            self.player_id,
            self.token,
            "t1",
            "r1",
            cancelled.transaction_uuid,
            cancelled.amount,
        )
