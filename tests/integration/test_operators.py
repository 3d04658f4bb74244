"""Operators: two casinos share one Shoebox and one table, and each sees only its own players.

The matrix of endpoints is read from the live OpenAPI document: every operation that names a
player (in its path, or by the `operator` parameter that such operations document) is called
by each operator's keys for the other operator's player, and must answer exactly as it does
for a player that nobody has, with nothing appended and no balance moved.
"""

import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from werkzeug.test import TestResponse

from domain.outcome import Outcome
from events.postgres import Pool, PostgresEventStore
from service.application.keys import Role, create_key
from service.application.read_models import projector
from service.application.read_models.queries import ProjectionService
from tests.api_harness import OPERATOR, Api, seed_dealing

A, B = "casino-a", "casino-b"
TABLE = "T1"


class Casinos:
    """One Shoebox, its default keys, and a frontend and a limited ops key for each casino."""

    def __init__(self, pool: Pool) -> None:
        seeds = (seed_dealing((Outcome.BANKER, Outcome.PLAYER, Outcome.BANKER)),)
        self.api = Api(
            store=PostgresEventStore(pool),
            seeds=seeds,
            projections=lambda clock: ProjectionService(pool, clock),
        )
        self.pool = pool
        self.keys: dict[tuple[str, Role], str] = {}
        for operator in (A, B):
            for role in (Role.FRONTEND, Role.OPS):
                issued = create_key(
                    self.api.store, f"{operator} {role.value}", role, OPERATOR, operator
                )
                self.keys[operator, role] = issued.secret
        self.sent: dict[str, list[TestResponse]] = {A: [], B: []}

    def call(
        self, operator: str, method: str, path: str, body: object = None, role: Role = Role.FRONTEND
    ) -> TestResponse:
        headers = {"Authorization": f"Bearer {self.keys[operator, role]}"}
        response = self.api.client.open(path, method=method, json=body, headers=headers)
        self.sent[operator].append(response)
        return response

    def ok(
        self,
        operator: str,
        method: str,
        path: str,
        body: object = None,
        status: int = 200,
        role: Role = Role.FRONTEND,
    ) -> Any:
        response = self.call(operator, method, path, body, role)
        assert response.status_code == status, (path, response.get_json(force=True))
        return response.get_json()

    def fund(self, operator: str, player_id: str, pence: int) -> None:
        body = {"amount_pence": pence, "reason": "float"}
        path = f"/v1/wallets/{player_id}/deposits?operator={operator}"
        self.api.ok("POST", path, body, role=Role.OPS, status=201)

    def sit(self, operator: str, player_id: str, seat: int) -> None:
        body = {"player_id": player_id, "seat": seat}
        self.ok(operator, "POST", f"/v1/tables/{TABLE}/seats", body, 201)

    def bet(self, operator: str, player_id: str, spot: str, pence: int) -> None:
        bet = {"player_id": player_id, "spot": spot, "stake_pence": pence}
        self.ok(operator, "POST", f"/v1/tables/{TABLE}/bets", bet, 201)

    def head(self) -> int:
        with self.pool.connection() as conn:
            row = conn.execute("SELECT coalesce(max(position), 0) FROM events").fetchone()
        assert row is not None
        return int(row[0])

    def balances(self) -> dict[str, tuple[int, int]]:
        projector.catch_up(self.pool)
        with self.pool.connection() as conn:
            rows = conn.execute("SELECT player_id, available, reserved FROM proj_wallets")
            return {str(p): (int(a), int(r)) for p, a, r in rows}


@pytest.fixture
def casinos(app_pool: Pool) -> Casinos:
    world = Casinos(app_pool)
    world.api.create_table(TABLE)
    world.fund(A, "alice", 10_000)
    world.fund(B, "alice", 20_000)
    world.fund(B, "bob", 30_000)
    return world


def test_two_casinos_each_play_their_own_alice_at_one_table(casinos: Casinos) -> None:
    casinos.sit(A, "alice", 1)
    casinos.sit(B, "alice", 2)
    casinos.bet(A, "alice", "banker", 1_000)
    casinos.bet(B, "alice", "player", 2_000)
    casinos.ok(A, "POST", f"/v1/tables/{TABLE}/deal", {"player_id": "alice"})
    last = casinos.ok(B, "POST", f"/v1/tables/{TABLE}/deal", {"player_id": "alice"})
    assert last["coup"]["outcome"] == "banker"
    # B's alice is B's own: shown by id. A's alice is another operator's: an alias.
    names = {s["player_id"] for s in last["settlements"]}
    assert "alice" in names
    (other,) = names - {"alice"}
    assert other.startswith("guest-")
    projector.catch_up(casinos.pool)
    a = casinos.ok(A, "GET", "/v1/wallets/alice")
    b = casinos.ok(B, "GET", "/v1/wallets/alice")
    assert (a["available_pence"], b["available_pence"]) == (10_000 + 950, 20_000 - 2_000)
    # Ops see every operator, and name the one they mean.
    seen = casinos.api.ok("GET", f"/v1/wallets/alice?operator={B}", role=Role.OPS)
    assert seen["available_pence"] == 18_000


def test_another_operators_player_is_shown_by_seat_and_alias_never_by_id(
    casinos: Casinos,
) -> None:
    casinos.sit(A, "alice", 1)
    casinos.sit(B, "bob", 2)
    casinos.bet(A, "alice", "banker", 1_000)
    casinos.bet(B, "bob", "tie", 500)
    casinos.ok(B, "POST", f"/v1/tables/{TABLE}/chat", {"player_id": "bob", "text": "hello"}, 201)
    casinos.ok(A, "POST", f"/v1/tables/{TABLE}/deal", {"player_id": "alice"})
    casinos.ok(B, "POST", f"/v1/tables/{TABLE}/deal", {"player_id": "bob"})
    projector.catch_up(casinos.pool)
    for path in (
        f"/v1/tables/{TABLE}/state",
        f"/v1/tables/{TABLE}/rounds",
        f"/v1/tables/{TABLE}/chat",
        f"/v1/tables/{TABLE}/statistics",
        f"/v1/tables/{TABLE}",
        "/v1/players/alice/rounds",
        "/v1/players/alice/history",
        "/v1/wallets/alice/statement",
    ):
        casinos.ok(A, "GET", path)
    state = casinos.ok(A, "GET", f"/v1/tables/{TABLE}/state")
    seated = {s["seat"]: s["player_id"] for s in state["seats"] if s["player_id"]}
    assert seated[1] == "alice"
    assert seated[2].startswith("guest-")
    # The alias is stable at the table, so a front end can follow a rival's bets by it.
    again = casinos.ok(A, "GET", f"/v1/tables/{TABLE}/state")
    assert {s["seat"]: s["player_id"] for s in again["seats"] if s["player_id"]} == seated
    for response in casinos.sent[A]:
        text = response.get_data(as_text=True)
        assert "bob" not in text, (response.request.path, text)
        assert B not in text, (response.request.path, text)
        assert f"{A}/" not in text, (response.request.path, text)


# Bodies for the operations that name a player in theirs; the matrix fails for one missing.
BODIES: dict[tuple[str, str], dict[str, Any]] = {
    ("POST", "/v1/tables/{table_id}/bets"): {"spot": "player", "stake_pence": 100},
    ("POST", "/v1/tables/{table_id}/seats"): {"seat": 5},
    ("PUT", "/v1/tables/{table_id}/seats/{player_id}"): {"seat": 6},
    ("POST", "/v1/tables/{table_id}/deal"): {},
    ("POST", "/v1/tables/{table_id}/pass"): {},
    ("POST", "/v1/tables/{table_id}/rebet"): {},
    ("POST", "/v1/tables/{table_id}/chat"): {"text": "hi"},
    ("POST", "/v1/tables/{table_id}/mutes"): {"reason": "test"},
    ("POST", "/v1/tables/{table_id}/removals"): {"reason": "test"},
    ("POST", "/v1/wallets/{player_id}/deposits"): {"amount_pence": 100, "reason": "x"},
    ("POST", "/v1/wallets/{player_id}/withdrawals"): {"amount_pence": 100, "reason": "x"},
    ("POST", "/v1/wallets/{player_id}/corrections"): {"amount_pence": 100, "reason": "x"},
    ("PUT", "/v1/players/{player_id}/limit"): {"limit_pence": 10_000},
}


def _operations_naming_a_player(spec: dict[str, Any]) -> Iterator[tuple[str, str, bool]]:
    for path, item in spec["paths"].items():
        for method, operation in item.items():
            if method not in {"get", "post", "put", "delete", "patch"}:
                continue
            names = [p["name"] for p in operation.get("parameters", [])]
            names += [p["name"] for p in item.get("parameters", [])]
            in_path = "{player_id}" in path
            if in_path or "operator" in names:
                yield method.upper(), path, in_path


def _send(
    casinos: Casinos, operator: str, role: Role, method: str, path: str, player: str, in_path: bool
) -> TestResponse:
    url = path.replace("{table_id}", TABLE).replace("{player_id}", player)
    body = BODIES.get((method, path))
    if body is not None and not in_path:
        body = {**body, "player_id": player}
    return casinos.call(operator, method, url, body, role)


def _comparable(response: TestResponse) -> tuple[int, Any]:
    document = response.get_json(force=True, silent=True)
    if isinstance(document, dict):
        document.pop("request_id", None)
        for key in ("detail",):
            if isinstance(document.get(key), str):
                document[key] = re.sub(r"nobody-here|bob", "PLAYER", document[key])
    return response.status_code, document


def test_each_operators_keys_find_the_others_players_exactly_as_players_nobody_has(
    casinos: Casinos,
) -> None:
    casinos.sit(B, "bob", 2)
    casinos.bet(B, "bob", "tie", 500)
    spec = casinos.api.ok("GET", "/v1/openapi.json")
    operations = list(_operations_naming_a_player(spec))
    assert len(operations) >= 15, operations
    missing = [
        (m, p)
        for m, p, in_path in operations
        if m != "GET" and not in_path and (m, p) not in BODIES
    ]
    missing += [
        (m, p) for m, p, in_path in operations if m in {"POST", "PUT"} and (m, p) not in BODIES
    ]
    assert not missing, f"give the matrix a body for {missing}"
    theirs = {p: b for p, b in casinos.balances().items() if p.startswith(f"{B}/")}
    for method, path, in_path in operations:
        for role in (Role.FRONTEND, Role.OPS):
            head = casinos.head()
            other = _send(casinos, A, role, method, path, "bob", in_path)
            if other.status_code < 400:
                # A named its own `bob` (ops may fund or mute a player A has not seen yet):
                # whatever that did, it touched none of B's players.
                assert not _events_naming(casinos, head, f"{B}/"), (role, method, path)
                continue
            assert casinos.head() == head, (role, method, path)
            nobody = _send(casinos, A, role, method, path, "nobody-here", in_path)
            assert _comparable(other) == _comparable(nobody), (role, method, path)
    assert {p: b for p, b in casinos.balances().items() if p.startswith(f"{B}/")} == theirs


def _events_naming(casinos: Casinos, after: int, text: str) -> list[int]:
    with casinos.pool.connection() as conn:
        rows = conn.execute(
            "SELECT position FROM events WHERE position > %s"
            " AND (payload::text LIKE %s OR stream_id LIKE %s)",
            [after, f"%{text}%", f"%{text}%"],
        ).fetchall()
    return [int(row[0]) for row in rows]


def test_an_operators_key_may_not_name_another_operator(casinos: Casinos) -> None:
    response = casinos.call(A, "GET", f"/v1/wallets/bob?operator={B}")
    assert response.status_code == 422
    assert response.mimetype == "application/problem+json"


def test_ops_naming_an_unknown_operator_get_a_problem_not_a_new_casino(casinos: Casinos) -> None:
    head = casinos.head()
    status, problem = casinos.api.refused(
        "POST",
        "/v1/wallets/alice/deposits?operator=casino-typo",
        {"amount_pence": 100, "reason": "float"},
        role=Role.OPS,
    )
    assert status == 404
    assert "casino-typo" in problem["detail"]
    assert casinos.head() == head


def test_the_ledger_cut_by_operator_adds_up_to_the_uncut_ledger(casinos: Casinos) -> None:
    casinos.api.fund("dora", 10_000)  # the default operator's
    casinos.api.sit(TABLE, "dora", 3)
    casinos.sit(A, "alice", 1)
    casinos.sit(B, "bob", 2)
    casinos.api.bet(TABLE, "dora", "player", 300)
    casinos.bet(A, "alice", "banker", 1_000)
    casinos.bet(B, "bob", "player", 2_000)
    casinos.api.act(TABLE, "deal", "dora")
    casinos.ok(A, "POST", f"/v1/tables/{TABLE}/deal", {"player_id": "alice"})
    casinos.ok(B, "POST", f"/v1/tables/{TABLE}/deal", {"player_id": "bob"})
    projector.catch_up(casinos.pool)
    today = datetime.now(UTC).date()
    path = (
        f"/v1/tables/{TABLE}/ledger?from={today - timedelta(days=1)}&to={today + timedelta(days=1)}"
    )

    def lines(query: str = "") -> dict[tuple[str, str], list[int]]:
        ledger = casinos.api.ok("GET", path + query, role=Role.REGULATOR)
        return {
            (line["day"], line["spot"]): [
                line["bets"],
                line["wagered_pence"],
                line["paid_out_pence"],
                line["commission_pence"],
            ]
            for line in ledger["lines"]
        }

    whole = lines()
    summed: dict[tuple[str, str], list[int]] = {}
    for operator in ("default", A, B):
        for key, figures in lines(f"&operator={operator}").items():
            row = summed.setdefault(key, [0, 0, 0, 0])
            for i, figure in enumerate(figures):
                row[i] += figure
    assert summed == whole
    assert sum(figures[0] for figures in whole.values()) == 3
    # An operator's own ops key gets only its cut, whatever it asks.
    limited = casinos.ok(A, "GET", path, role=Role.OPS)
    assert [line["wagered_pence"] for line in limited["lines"]] == [1_000]
