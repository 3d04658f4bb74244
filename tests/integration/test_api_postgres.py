"""The API over the real PostgreSQL store: a played round, and concurrent bets and deals."""

import threading
from dataclasses import replace
from typing import Any

from werkzeug.test import TestResponse

from domain.outcome import Outcome
from events.postgres import Pool, PostgresEventStore
from service.application.keys import Role
from service.application.read_models import projector
from service.application.read_models.queries import ProjectionService
from service.runtime.container import Container
from service.web.api import EXTENSION
from tests.api_harness import FLOAT, Api, seed_dealing

THREADS = 8


def test_a_round_over_postgres_settles_and_pays_by_the_rules(app_pool: Pool) -> None:
    api = Api(store=PostgresEventStore(app_pool), seeds=(seed_dealing((Outcome.BANKER,)),))
    api.create_table("T1")
    for seat, player in enumerate(("alice", "bob"), start=1):
        api.fund(player)
        api.sit("T1", player, seat)
    api.bet("T1", "alice", "banker", 1_000)
    api.bet("T1", "bob", "tie", 500)
    api.act("T1", "deal", "alice")
    last = api.act("T1", "deal", "bob")
    assert last["coup"]["outcome"] == "banker"
    assert sorted(
        (s["player_id"], s["payout_pence"], s["commission_pence"]) for s in last["settlements"]
    ) == [
        ("alice", 1_950, 50),  # Banker £10: £19.50 back, 50p commission
        ("bob", 0, 0),  # Tie £5 loses
    ]
    assert api.available("alice") == FLOAT + 950
    assert api.available("bob") == FLOAT - 500


def in_threads(api: Api, requests: list[tuple[str, str, dict[str, Any]]]) -> list[TestResponse]:
    """Send the requests at once, one thread and one client each, as the front end."""
    responses: list[TestResponse] = []
    lock = threading.Lock()
    start = threading.Barrier(len(requests))
    headers = {"Authorization": f"Bearer {api.keys[Role.FRONTEND]}"}

    def send(method: str, path: str, body: dict[str, Any]) -> None:
        client = api.app.test_client()
        start.wait()
        response = client.open(path, method=method, json=body, headers=headers)
        with lock:
            responses.append(response)

    threads = [threading.Thread(target=send, args=request) for request in requests]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return responses


def test_concurrent_bets_never_overdraw_and_none_is_lost(app_pool: Pool) -> None:
    store = PostgresEventStore(app_pool)
    api = Api(store=store)
    api.create_table("T1")
    api.fund("alice", 5_000)
    api.sit("T1", "alice", 1)
    bet = {"player_id": "alice", "spot": "player", "stake_pence": 1_000}
    responses = in_threads(api, [("POST", "/v1/tables/T1/bets", bet)] * (THREADS + 2))
    statuses = [response.status_code for response in responses]
    assert set(statuses) <= {201, 409}, statuses
    placed = statuses.count(201)
    assert 1 <= placed <= 5  # £50 buys at most five £10 bets
    balance = api.ok("GET", "/v1/wallets/alice")
    assert balance["reserved_pence"] == 1_000 * placed
    assert balance["available_pence"] == 5_000 - 1_000 * placed
    bets = [e for e in store.read_stream("table:T1") if e.type == "BetPlaced"]
    assert len(bets) == placed
    assert api.state()["seats"][0]["bets"] == [{"spot": "player", "stake_pence": 1_000 * placed}]


def test_concurrent_deal_presses_deal_the_coup_exactly_once(app_pool: Pool) -> None:
    store = PostgresEventStore(app_pool)
    api = Api(store=store)
    api.create_table("T1")
    players = [f"p{number}" for number in range(1, 8)]
    for seat, player in enumerate(players, start=1):
        api.fund(player)
        api.sit("T1", player, seat)
    for player in players:
        api.bet("T1", player, "banker", 1_000)
    requests = [("POST", "/v1/tables/T1/deal", {"player_id": p}) for p in players]
    responses = in_threads(api, requests)
    assert [r.status_code for r in responses] == [200] * len(players)
    dealt = [r.get_json()["coup"] for r in responses if r.get_json()["coup"] is not None]
    assert len(dealt) == 1
    types = [e.type for e in store.read_stream("table:T1")]
    assert types.count("CoupCompleted") == 1
    assert types.count("BetSettled") == len(players)
    assert types.count("DealPressed") == len(players)


def test_read_endpoints_answer_from_the_read_models(app_pool: Pool) -> None:
    api = Api(store=PostgresEventStore(app_pool), seeds=(seed_dealing((Outcome.BANKER,)),))
    wiring = api.app.extensions[EXTENSION]
    assert isinstance(wiring, Container)
    api.app.extensions[EXTENSION] = replace(
        wiring, projections=ProjectionService(app_pool, wiring.clock)
    )
    api.create_table("T1")
    api.fund("alice")
    api.sit("T1", "alice", 1)
    api.bet("T1", "alice", "banker", 1_000)
    api.act("T1", "deal", "alice")
    # Nothing is projected yet: a read model lags the log until the projector applies it, but
    # a wallet read is the wallet's own stream, exact at once.
    assert api.ok("GET", "/v1/wallets/alice")["version"] == 3
    lag = api.ok("GET", "/v1/ops/projections", role=Role.OPS)
    assert {p["name"] for p in lag["projections"]} == set(projector.NAMES)
    assert all(p["lag_events"] == lag["head"] for p in lag["projections"])
    projector.catch_up(app_pool)

    assert api.available("alice") == FLOAT + 950
    statement = api.ok("GET", "/v1/wallets/alice/statement")["entries"]
    assert [e["type"] for e in statement] == ["PayoutCredited", "StakeReserved", "Deposited"]
    assert statement[0]["available_after_pence"] == FLOAT + 950
    (played,) = api.ok("GET", "/v1/players/alice/rounds")["rounds"]
    assert (played["outcome"], played["payout_pence"], played["voided"]) == ("banker", 1_950, False)
    assert api.ok("GET", "/v1/players/alice/history") == {
        "player_id": "alice",
        "rounds_played": 1,
        "wagered_pence": 1_000,
        "won_pence": 1_950,
        "commission_pence": 50,
        "net_pence": 950,
    }
    statistics = api.ok("GET", "/v1/tables/T1/statistics")
    assert statistics["roads"]["counts"] == {"banker": 1, "player": 0, "ties": 0, "hands": 1}
    assert api.ok("GET", "/v1/tables/T1/statistics?scope=all")["roads"]["big_road"]
    round_1 = api.ok("GET", "/v1/rounds/T1-1")
    assert (round_1["wagered_pence"], round_1["paid_out_pence"]) == (1_000, 1_950)
    assert [r["round_id"] for r in api.ok("GET", "/v1/tables/T1/rounds")["rounds"]] == [
        "T1-2",
        "T1-1",
    ]
    # The ledger's days are those the log recorded the settlements on, by the store's clock.
    day = PostgresEventStore(app_pool).read_all(types=["BetSettled"])[0].recorded_at.date()
    ledger = api.ok(
        "GET",
        f"/v1/tables/T1/ledger?from={day.isoformat()}&to={day.isoformat()}",
        role=Role.REGULATOR,
    )
    (banker,) = ledger["lines"]
    assert (banker["spot"], banker["hold_pence"], banker["observed_rtp"]) == ("banker", -950, 1.95)
    assert 0.98 < banker["theoretical_rtp"] < 0.99
    assert api.call("GET", "/v1/tables/T1/ledger").status_code == 403  # not for front ends
    assert api.call("GET", "/v1/rounds/T9-1").status_code == 404
    assert api.ok("GET", "/v1/ops/invariants", role=Role.OPS)["ok"]
    rebuilt = api.ok(
        "POST", "/v1/ops/projections/rebuild", {"names": ["wallets"], "wait": True}, role=Role.OPS
    )
    assert rebuilt["position"] == lag["head"]
    assert api.available("alice") == FLOAT + 950
