"""Replays and shoe checks read from the real PostgreSQL log."""

from __future__ import annotations

from domain.outcome import Outcome
from events.postgres import Pool, PostgresEventStore
from service.application.keys import Role
from tests.api_harness import FLOAT, Api, seed_dealing


def test_a_replayed_round_and_its_revealed_shoe_verify_against_the_log(app_pool: Pool) -> None:
    seed = seed_dealing((Outcome.PLAYER, Outcome.BANKER))
    api = Api(store=PostgresEventStore(app_pool), seeds=(seed,))
    api.create_table("T1")
    api.fund("alice")
    api.sit("T1", "alice", 1)
    api.bet("T1", "alice", "player", 1_000)
    api.act("T1", "deal", "alice")
    shoe_id = api.state()["shoe"]["shoe_id"]
    api.bet("T1", "alice", "player", 1_000)
    api.act("T1", "deal", "alice")

    replay = api.ok("GET", "/v1/rounds/T1-1/replay", role=Role.REGULATOR)
    api.ok(
        "POST",
        "/v1/tables/T1/malfunctions",
        {"reason": "end of test session", "scope": "rounds", "round_ids": ["T1-2"]},
        role=Role.OPS,
        status=201,
    )
    shoe = api.ok("GET", f"/v1/shoes/{shoe_id}", role=Role.REGULATOR)
    checked = api.ok("GET", f"/v1/shoes/{shoe_id}/verify", role=Role.REGULATOR)

    assert replay["status"] == "complete"
    assert replay["wallets"][0]["before"]["available"] == FLOAT
    assert replay["wallets"][0]["after"]["available"] == FLOAT + 1_000
    assert shoe["server_seed"] == seed
    assert checked["verified"] is True
    assert checked["coups"] == 2
    assert checked["mismatches"] == []
