"""The harness the API tests share: create_app over the in-memory store (or any store
handed in), a clock the test moves by hand, one key per role, and shoes dealt from server seeds
chosen so that each test knows its coups' outcomes in advance.
"""

from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from functools import cache
from typing import Any

from flask import Flask
from werkzeug.test import TestResponse

from domain.cards import card_code
from domain.outcome import Outcome
from domain.shoe import ServerSeed, shuffle_shoe
from domain.tableau import deal_coup
from events.memory import InMemoryEventStore
from events.store import EventMetadata, EventStore
from service.application.chat import ChatService
from service.application.game.tables import GameService
from service.application.keys import Role, create_key
from service.application.read_models.queries import ProjectionService
from service.application.streams import WALLET
from service.application.wallets import WalletService
from service.runtime.container import Container
from service.web.api import EXTENSION
from service.web.app import create_app
from service.web.problems import PROBLEM_MIMETYPE

T0 = datetime(2024, 5, 3, 20, 0, tzinfo=UTC)
CLIENT_SEED = "api-tests"
OPERATOR = EventMetadata(actor="cli:test", role="cli")
FLOAT = 10_000  # every player starts with £100


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


@cache
def seed_dealing(outcomes: tuple[Outcome, ...], decks: int = 8) -> str:
    """A server seed whose first shoe (nonce 1) opens with coups of these outcomes, in order."""
    for number in range(1, 20_000):
        seed = f"{number:064x}"
        cards = shuffle_shoe(seed, CLIENT_SEED, 1, decks).cards
        position, dealt = 0, []
        for _ in outcomes:
            coup = deal_coup(cards, position)
            dealt.append(coup.outcome)
            position = coup.next_position
        if tuple(dealt) == outcomes:
            return seed
    raise AssertionError(f"no seed deals {outcomes}")


def expected_cards(seed: str, position: int, decks: int = 8) -> list[dict[str, Any]]:
    """The coup the tableau deals from a known shoe at a position, as the API writes it."""
    coup = deal_coup(shuffle_shoe(seed, CLIENT_SEED, 1, decks).cards, position)
    return [
        {
            "hand": str(c.hand),
            "position": c.position,
            "card": card_code(c.card),
            "reason": c.reason,
        }
        for c in coup.cards
    ]


class Api:
    """The Flask app over one store and one hand-moved clock, with a key for every role."""

    def __init__(
        self,
        store: EventStore | None = None,
        seeds: tuple[str, ...] = (),
        projections: Callable[[Clock], ProjectionService] | None = None,
    ) -> None:
        self.clock = Clock()
        self.store = store if store is not None else InMemoryEventStore(clock=self.clock)
        self.projections = projections(self.clock) if projections is not None else None
        self.app: Flask = create_app(
            store=self.store, clock=self.clock, projections=self.projections
        )
        self.seeds = list(seeds)
        wiring = self.app.extensions[EXTENSION]
        assert isinstance(wiring, Container)
        # The same wiring, but shoes come from the seeds the test chose (then random ones).
        games = GameService(
            wiring.store, wiring.clock, seeds=self.next_seed, client_seeds=lambda: CLIENT_SEED
        )
        self.app.extensions[EXTENSION] = replace(
            wiring, games=games, chat=ChatService(wiring.store, wiring.clock, games)
        )
        self.keys = {
            role: create_key(self.store, f"{role.value} key", role, OPERATOR).secret
            for role in Role
        }
        self.client = self.app.test_client()
        self.responses: list[TestResponse] = []
        self.on_response: Callable[[TestResponse], None] | None = None

    def next_seed(self) -> ServerSeed:
        return ServerSeed(self.seeds.pop(0)) if self.seeds else ServerSeed.generate()

    def call(
        self,
        method: str,
        path: str,
        body: object = None,
        *,
        role: Role = Role.FRONTEND,
        headers: dict[str, str] | None = None,
        **options: Any,
    ) -> TestResponse:
        """Send a request as `role` and keep the response."""
        sent = {"Authorization": f"Bearer {self.keys[role]}", **(headers or {})}
        if body is not None:
            options["json"] = body
        response = self.client.open(path, method=method, headers=sent, **options)
        self.responses.append(response)
        if self.on_response is not None:
            self.on_response(response)
        return response

    def ok(
        self,
        method: str,
        path: str,
        body: object = None,
        *,
        role: Role = Role.FRONTEND,
        status: int = 200,
    ) -> Any:
        """Send a request that must succeed with `status`; its JSON body."""
        response = self.call(method, path, body, role=role)
        assert response.status_code == status, (method, path, response.get_json(force=True))
        return response.get_json()

    def refused(
        self, method: str, path: str, body: object = None, *, role: Role = Role.FRONTEND
    ) -> tuple[int, dict[str, Any]]:
        """Send a request that must be refused with a problem; its status and document."""
        response = self.call(method, path, body, role=role)
        assert 400 <= response.status_code < 500, (method, path, response.get_data(as_text=True))
        assert response.mimetype == PROBLEM_MIMETYPE
        document = response.get_json(force=True)
        assert document["status"] == response.status_code
        return response.status_code, document

    def create_table(self, table_id: str = "T1", **settings: Any) -> dict[str, Any]:
        body = {"table_id": table_id, "seats": 7, "decks": 8, "minimum_pence": 100}
        body |= {"maximum_pence": 250_000, **settings}
        created: dict[str, Any] = self.ok("POST", "/v1/tables", body, role=Role.OPS, status=201)
        return created

    def fund(self, player_id: str, pence: int = FLOAT) -> None:
        body = {"amount_pence": pence, "reason": "test float"}
        self.ok("POST", f"/v1/wallets/{player_id}/deposits", body, role=Role.OPS, status=201)

    def sit(self, table_id: str, player_id: str, seat: int) -> dict[str, Any]:
        body = {"player_id": player_id, "seat": seat}
        sat: dict[str, Any] = self.ok("POST", f"/v1/tables/{table_id}/seats", body, status=201)
        return sat

    def bet(self, table_id: str, player_id: str, spot: str, pence: int) -> dict[str, Any]:
        body = {"player_id": player_id, "spot": spot, "stake_pence": pence}
        placed: dict[str, Any] = self.ok("POST", f"/v1/tables/{table_id}/bets", body, status=201)
        return placed

    def act(self, table_id: str, action: str, player_id: str, status: int = 200) -> Any:
        return self.ok(
            "POST", f"/v1/tables/{table_id}/{action}", {"player_id": player_id}, status=status
        )

    def available(self, player_id: str) -> int:
        balance = self.ok("GET", f"/v1/wallets/{player_id}", role=Role.REGULATOR)
        available: int = balance["available_pence"]
        return available

    def state(self, table_id: str = "T1") -> dict[str, Any]:
        state: dict[str, Any] = self.ok("GET", f"/v1/tables/{table_id}/state")
        return state


def head_and_balances(store: EventStore) -> tuple[int, dict[str, tuple[int, int]]]:
    """The log's head and every wallet in it, (available, reserved), read from the log."""
    wallets = WalletService(store, lambda: T0)
    players: set[str] = set()
    position = 0
    while batch := store.read_all(position, 1000, categories=[WALLET]):
        players.update(event.stream_id.partition(":")[2] for event in batch)
        position = batch[-1].position
    balances = {p: (b.available, b.reserved) for p in players for b in [wallets.balance(p)]}
    return store.head(), balances
