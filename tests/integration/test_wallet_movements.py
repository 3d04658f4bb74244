"""GET /v1/wallet-movements: every wallet movement of an operator's players over a time range.

Over real PostgreSQL and the wallets read model: the kinds and figures of each movement, who may
see whose, keyset pages that neither skip nor repeat, the range's bounds, and bad input.
"""

from datetime import datetime, timedelta
from typing import Any
from urllib.parse import quote

import pytest

from domain.outcome import Outcome
from events.postgres import Pool, PostgresEventStore
from service.application.keys import Role, create_key
from service.application.read_models import projector
from service.application.read_models.queries import ProjectionService
from tests.api_harness import OPERATOR, Api, Clock, seed_dealing

A, B = "casino-a", "casino-b"
TABLE = "T1"
PATH = "/v1/wallet-movements"


class World:
    """One Shoebox over PostgreSQL whose log is stamped by a clock the test moves."""

    def __init__(self, pool: Pool) -> None:
        self.recorded = Clock()
        self.api = Api(
            store=PostgresEventStore(pool, self.recorded),
            seeds=(seed_dealing((Outcome.BANKER,)),),
            projections=lambda clock: ProjectionService(pool, clock),
        )
        self.pool = pool
        self.limited = {
            operator: create_key(self.api.store, operator, Role.OPS, OPERATOR, operator).secret
            for operator in (A, B)
        }

    def move(self, kind: str, player: str, pence: int, operator: str = "default") -> None:
        """An ops movement on a wallet, a minute after the last thing recorded."""
        self.recorded.advance(60)
        body = {"amount_pence": pence, "reason": f"test {kind}"}
        path = f"/v1/wallets/{player}/{kind}?operator={operator}"
        self.api.ok("POST", path, body, role=Role.OPS, status=201)

    def listing(self, query: str, key: str | None = None, role: Role = Role.REGULATOR) -> Any:
        projector.catch_up(self.pool)
        if key is None:
            return self.api.ok("GET", f"{PATH}?{query}", role=role)
        response = self.api.client.get(
            f"{PATH}?{query}", headers={"Authorization": f"Bearer {key}"}
        )
        assert response.status_code == 200, response.get_json(force=True)
        return response.get_json()


def _range(start: datetime, end: datetime) -> str:
    return f"from={quote(start.isoformat())}&to={quote(end.isoformat())}"


@pytest.fixture
def world(app_pool: Pool) -> World:
    return World(app_pool)


def test_each_movement_carries_its_kind_signed_amount_balance_and_place_in_the_log(
    world: World,
) -> None:
    start = world.recorded.now
    world.api.create_table(TABLE)
    world.move("deposits", "dora", 10_000)
    world.move("deposits", "eve", 10_000)
    world.move("withdrawals", "dora", 1_000)
    world.move("corrections", "dora", -500)
    world.recorded.advance(60)
    world.api.sit(TABLE, "dora", 1)
    world.api.sit(TABLE, "eve", 2)
    world.api.bet(TABLE, "dora", "banker", 1_000)
    world.api.bet(TABLE, "eve", "player", 2_000)
    world.api.act(TABLE, "deal", "dora")
    world.api.act(TABLE, "deal", "eve")

    page = world.listing(_range(start, world.recorded.now + timedelta(hours=1)))

    assert page["operator"] is None
    assert page["next_after"] is None
    moves = page["movements"]
    assert [(m["player_id"], m["kind"], m["amount_pence"]) for m in moves] == [
        ("dora", "deposit", 10_000),
        ("eve", "deposit", 10_000),
        ("dora", "withdrawal", -1_000),
        ("dora", "correction", -500),
        ("dora", "stake_reserved", -1_000),
        ("eve", "stake_reserved", -2_000),
        # Banker won: the stake back and 0.95 of it; the Player bet lost.
        ("dora", "settled_win", 1_950),
        ("eve", "settled_loss", 0),
    ]
    positions = [m["position"] for m in moves]
    assert positions == sorted(positions)
    doras = [m for m in moves if m["player_id"] == "dora"]
    assert [m["version"] for m in doras] == [1, 2, 3, 4, 5]
    assert {m["stream_id"] for m in doras} == {"wallet:dora"}
    assert [m["available_after_pence"] for m in doras] == [10_000, 9_000, 8_500, 7_500, 9_450]
    assert [m["reserved_after_pence"] for m in doras] == [0, 0, 0, 1_000, 0]
    settled = doras[-1]
    assert settled["round_id"] == f"{TABLE}-1"
    assert settled["type"] == "PayoutCredited"
    assert (settled["stake_pence"], settled["payout_pence"]) == (1_000, 1_950)
    assert doras[0]["round_id"] is None
    assert doras[0]["reason"] == "test deposits"
    # Each agrees with the player's own statement.
    statement = world.api.ok("GET", "/v1/wallets/dora/statement", role=Role.OPS)
    assert [e["position"] for e in statement["entries"]][::-1] == [m["position"] for m in doras]


def test_an_operators_key_sees_its_own_players_and_a_regulator_sees_every_operators(
    world: World,
) -> None:
    start = world.recorded.now
    world.move("deposits", "alice", 1_000, A)
    world.move("deposits", "alice", 2_000, B)
    world.move("deposits", "bob", 3_000, B)
    world.move("deposits", "dora", 4_000)
    query = _range(start, world.recorded.now + timedelta(minutes=1))

    everyone = world.listing(query)
    theirs = world.listing(f"{query}&operator={B}")
    own = world.listing(query, key=world.limited[A])
    own_ops = world.listing(query, key=world.limited[B])

    assert [(m["operator"], m["player_id"]) for m in everyone["movements"]] == [
        (A, f"{A}/alice"),
        (B, f"{B}/alice"),
        (B, f"{B}/bob"),
        ("default", "dora"),
    ]
    assert theirs["operator"] == B
    assert [m["amount_pence"] for m in theirs["movements"]] == [2_000, 3_000]
    # A key of one operator's gets its own cut only, its players named by their own ids.
    assert own["operator"] == A
    assert [(m["player_id"], m["amount_pence"]) for m in own["movements"]] == [("alice", 1_000)]
    assert [m["amount_pence"] for m in own_ops["movements"]] == [2_000, 3_000]
    response = world.api.client.get(
        f"{PATH}?{query}", headers={"Authorization": f"Bearer {world.limited[A]}"}
    )
    assert B not in response.get_data(as_text=True)
    # A limited key may not ask for another operator, nor a front end for anyone's money.
    refused = world.api.client.get(
        f"{PATH}?{query}&operator={B}", headers={"Authorization": f"Bearer {world.limited[A]}"}
    )
    assert refused.status_code == 422
    assert refused.mimetype == "application/problem+json"
    status, _ = world.api.refused("GET", f"{PATH}?{query}", role=Role.FRONTEND)
    assert status == 403
    status, problem = world.api.refused(
        "GET", f"{PATH}?{query}&operator=casino-typo", role=Role.REGULATOR
    )
    assert status == 404
    assert "casino-typo" in problem["detail"]


def test_pages_follow_the_cursor_without_skipping_or_repeating_a_movement(world: World) -> None:
    start = world.recorded.now
    for pence in range(100, 1_100, 100):
        world.move("deposits", "dora", pence)
        world.move("deposits", "alice", pence, A)
    query = _range(start, world.recorded.now + timedelta(minutes=1))
    whole = world.listing(query)["movements"]

    seen: list[int] = []
    cursor = ""
    for _ in range(10):
        page = world.listing(f"{query}&limit=3{cursor}")
        seen += [m["position"] for m in page["movements"]]
        if page["next_after"] is None:
            break
        assert page["next_after"] == page["movements"][-1]["position"]
        cursor = f"&after={page['next_after']}"

    assert len(whole) == 20
    assert seen == [m["position"] for m in whole]
    # A page that ends exactly on the last movement says so: no empty page after it.
    last = world.listing(f"{query}&limit=2&after={whole[-3]['position']}")
    assert len(last["movements"]) == 2
    assert last["next_after"] is None


def test_the_range_includes_its_start_and_excludes_its_end(world: World) -> None:
    world.move("deposits", "dora", 100)
    first = world.recorded.now
    world.move("deposits", "dora", 200)
    second = world.recorded.now
    world.move("deposits", "dora", 300)
    third = world.recorded.now

    def amounts(start: datetime, end: datetime, extra: str = "") -> list[int]:
        return [m["amount_pence"] for m in world.listing(_range(start, end) + extra)["movements"]]

    assert amounts(first, third) == [100, 200]
    assert amounts(second, third + timedelta(microseconds=1)) == [200, 300]
    assert amounts(first + timedelta(microseconds=1), second) == []
    assert amounts(third + timedelta(seconds=1), third + timedelta(days=1)) == []
    # Without bounds: everything.
    assert [m["amount_pence"] for m in world.listing("")["movements"]] == [100, 200, 300]
    # A cursor from before the range starts the page at the range's start.
    everything = world.listing(_range(first, third + timedelta(seconds=1)))["movements"]
    assert amounts(second, third, f"&after={everything[0]['position']}") == [200]


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("to=1970-01-01T00:00:00Z", "from"),
        ("from=9999-12-30T00:00:00Z", "from"),
        ("from=2026-01-02T00:00:00Z&to=2026-01-01T00:00:00Z", "from"),
        ("from=2026-01-01T00:00:00Z&to=2026-01-01T00:00:00Z", "from"),
        ("from=2026-01-01T00:00:00&to=2026-01-02T00:00:00Z", "from"),
        ("from=yesterday&to=2026-01-02T00:00:00Z", "from"),
        ("from=2026-01-01T00:00:00Z&to=2026-01-02T00:00:00Z&limit=0", "limit"),
        ("from=2026-01-01T00:00:00Z&to=2026-01-02T00:00:00Z&limit=501", "limit"),
        ("from=2026-01-01T00:00:00Z&to=2026-01-02T00:00:00Z&after=0", "after"),
        ("from=2026-01-01T00:00:00Z&to=2026-01-02T00:00:00Z&after=x", "after"),
        ("from=2026-01-01T00:00:00Z&to=2026-01-02T00:00:00Z&after=1", "after"),
        ("from=2026-01-01T00:00:00Z&to=2026-01-02T00:00:00Z&after=999999", "after"),
        ("after=99999999999999999999", "after"),
    ],
)
def test_bad_input_is_a_422_problem_naming_the_parameter(
    world: World, query: str, field: str
) -> None:
    # Position 1 holds an event, but not a wallet's: it is no movement's cursor.
    status, problem = world.api.refused("GET", f"{PATH}?{query}", role=Role.REGULATOR)

    assert status == 422
    assert field in {error["field"] for error in problem["errors"]}
