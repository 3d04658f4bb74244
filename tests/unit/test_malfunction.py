"""Malfunctions void all pays and play: voids, suspension, shoe retirement, reopening."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from domain.outcome import Outcome
from domain.round_errors import ClientSeedNotRotated, TableIsSuspended
from domain.shoe import ServerSeed, commitment
from domain.table import (
    ClientSeedRotated,
    CreateTable,
    OpenShoe,
    PlaceBet,
    ReopenTable,
    RotateClientSeed,
    SitDown,
    TableSuspended,
    decide,
    replay,
)
from service.application.keys import Role
from service.regulator.export import build_export
from service.regulator.verification import verify_export
from tests.api_harness import FLOAT, Api, seed_dealing

NOW = datetime(2024, 5, 3, 20, 0, tzinfo=UTC)
EARLY = datetime(2000, 1, 1, tzinfo=UTC)
LATE = datetime(2100, 1, 1, tzinfo=UTC)


def _table_with_round(outcomes: tuple[Outcome, ...] = (Outcome.PLAYER,)) -> tuple[Api, str]:
    seed = seed_dealing(outcomes)
    api = Api(seeds=(seed,))
    api.create_table("T1")
    api.fund("alice")
    api.sit("T1", "alice", 1)
    api.bet("T1", "alice", "player", 1_000)
    return api, seed


def _declare(api: Api, body: dict[str, Any]) -> dict[str, Any]:
    declared: dict[str, Any] = api.ok(
        "POST", "/v1/tables/T1/malfunctions", body, role=Role.OPS, status=201
    )
    return declared


def test_a_round_in_progress_returns_every_stake_and_pays_nothing() -> None:
    api, _ = _table_with_round()

    declared = _declare(api, {"reason": "card reader fault", "scope": "current_round"})

    assert declared["voided_rounds"] == ["T1-1"]
    assert declared["money"] == [
        {
            "round_id": "T1-1",
            "player_id": "alice",
            "spot": "player",
            "stake_pence": 1_000,
            "payout_taken_back_pence": 0,
        }
    ]
    assert declared["suspended"] is True
    assert api.available("alice") == FLOAT
    replay = api.ok("GET", "/v1/rounds/T1-1/replay", role=Role.REGULATOR)
    assert replay["status"] == "voided"


def test_a_malfunction_retires_the_shoe_and_reveals_its_seed() -> None:
    api, seed = _table_with_round()
    shoe_id = api.state()["shoe"]["shoe_id"]

    declared = _declare(api, {"reason": "shuffler jam", "scope": "current_round"})

    assert declared["shoe_retired"] == shoe_id
    assert declared["shoe_revealed"] == shoe_id
    shoe = api.ok("GET", f"/v1/shoes/{shoe_id}", role=Role.REGULATOR)
    assert shoe["server_seed"] == seed
    assert commitment(seed) == shoe["server_seed_hash"]


def test_a_settled_round_in_scope_is_reversed_by_compensating_events() -> None:
    api, _ = _table_with_round((Outcome.PLAYER,))
    api.act("T1", "deal", "alice")
    assert api.available("alice") == FLOAT + 1_000
    before = len(api.store.read_all(0, 100_000))

    declared = _declare(api, {"reason": "misdeal", "scope": "rounds", "round_ids": ["T1-1"]})

    assert declared["money"][0]["payout_taken_back_pence"] == 2_000
    assert api.available("alice") == FLOAT
    after = api.store.read_all(0, 100_000)
    assert len(after) > before  # appended, never rewritten
    types = [e.type for e in after[before:]]
    assert types.count("SettlementReversed") == 2  # the table's and the wallet's
    replay = api.ok("GET", "/v1/rounds/T1-1/replay", role=Role.REGULATOR)
    assert replay["status"] == "voided"
    assert replay["wallets"][0]["after"]["available"] == FLOAT


def test_a_time_range_voids_the_rounds_opened_in_it() -> None:
    api, _ = _table_with_round()
    api.act("T1", "deal", "alice")

    declared = _declare(
        api,
        {
            "reason": "camera outage",
            "scope": "time_range",
            "from": "2024-05-03T19:00:00+00:00",
            "to": "2024-05-03T21:00:00+00:00",
        },
    )

    # Round 2 opened at once after round 1 settled, inside the range too.
    assert declared["voided_rounds"] == ["T1-1", "T1-2"]
    assert api.available("alice") == FLOAT


def test_current_round_right_after_a_coup_is_refused_as_voiding_nothing() -> None:
    api, _ = _table_with_round()
    api.act("T1", "deal", "alice")
    head = api.store.head()

    status, problem = api.refused(
        "POST",
        "/v1/tables/T1/malfunctions",
        {"reason": "misdeal", "scope": "current_round"},
        role=Role.OPS,
    )

    assert status == 409
    assert problem["rule"] == "void.scope_voids_nothing"
    assert "T1-2" in problem["detail"]
    assert "T1-1" in problem["detail"]  # the coup the operator most likely meant
    assert api.store.head() == head
    assert api.available("alice") == FLOAT + 1_000


def test_a_scope_whose_rounds_are_already_void_is_refused() -> None:
    api, _ = _table_with_round()
    api.act("T1", "deal", "alice")
    _declare(api, {"reason": "misdeal", "scope": "rounds", "round_ids": ["T1-1"]})

    status, problem = api.refused(
        "POST",
        "/v1/tables/T1/malfunctions",
        {"reason": "again", "scope": "rounds", "round_ids": ["T1-1"]},
        role=Role.OPS,
    )

    assert status == 409
    assert problem["rule"] == "void.scope_voids_nothing"


def test_a_suspended_table_refuses_play_until_ops_reopen_it() -> None:
    api, _ = _table_with_round()
    _declare(api, {"reason": "fault", "scope": "current_round"})

    status, problem = api.refused(
        "POST", "/v1/tables/T1/bets", {"player_id": "alice", "spot": "player", "stake_pence": 100}
    )
    assert status == 409
    assert "suspended" in problem["detail"]

    reopened = api.ok(
        "POST", "/v1/tables/T1/reopenings", {"reason": "fixed"}, role=Role.OPS, status=201
    )
    assert reopened["reopened"] is True
    placed = api.bet("T1", "alice", "player", 100)
    assert placed["round_id"] == "T1-2"
    assert placed["shoe_opened"]["nonce"] == 2


def test_every_step_is_in_the_significant_event_log_with_actor_and_reason() -> None:
    api, _ = _table_with_round()
    _declare(api, {"reason": "card reader fault", "scope": "current_round"})

    page = api.ok("GET", "/v1/audit/significant-events?table_id=T1&limit=500", role=Role.REGULATOR)

    by_type = {entry["type"]: entry for entry in page["events"]}
    assert by_type["MalfunctionDeclared"]["why"] == "card reader fault"
    assert by_type["MalfunctionDeclared"]["role"] == "ops"
    assert by_type["MalfunctionDeclared"]["what"]["scope"] == "current_round"
    assert by_type["TableSuspended"]["kind"] == "malfunction"
    assert by_type["RoundVoided"]["kind"] == "void"


def test_players_and_regulators_cannot_declare_malfunctions() -> None:
    api, _ = _table_with_round()
    body = {"reason": "x", "scope": "current_round"}

    for role in (Role.FRONTEND, Role.REGULATOR):
        status, _ = api.refused("POST", "/v1/tables/T1/malfunctions", body, role=role)
        assert status == 403


def test_a_scope_must_name_what_it_covers() -> None:
    api, _ = _table_with_round()

    status, _ = api.refused(
        "POST", "/v1/tables/T1/malfunctions", {"reason": "x", "scope": "rounds"}, role=Role.OPS
    )

    assert status == 422


def test_an_export_across_a_void_still_verifies() -> None:
    api, _ = _table_with_round()
    api.act("T1", "deal", "alice")
    _declare(api, {"reason": "misdeal", "scope": "rounds", "round_ids": ["T1-1"]})

    report = verify_export(build_export(api.store, "T1", EARLY, LATE))

    assert report.ok, report.discrepancies
    assert report.shoes_unrevealed == 0


def test_the_next_shoe_must_open_with_the_rotated_client_seed() -> None:
    table = replay(decide(None, CreateTable("T1"), NOW))
    rotated = decide(table, RotateClientSeed("regulator's pick", "audit request"), NOW)
    assert rotated == [ClientSeedRotated("regulator's pick", "audit request")]
    table = replay([*decide(None, CreateTable("T1"), NOW), *rotated])
    seed = ServerSeed("a" * 64)
    hands = seed.shuffle("other", 1).hands

    with pytest.raises(ClientSeedNotRotated):
        decide(table, OpenShoe("s1", seed.commitment, "other", 1, 8, hands), NOW)
    hands = seed.shuffle("regulator's pick", 1).hands
    opened = decide(table, OpenShoe("s1", seed.commitment, "regulator's pick", 1, 8, hands), NOW)
    assert opened[0].type == "ShoeOpened"


def test_a_suspended_table_refuses_bets_in_the_domain_too() -> None:
    created = decide(None, CreateTable("T1"), NOW)
    table = replay([*created, TableSuspended("m1", "fault")])
    table = replay([*created, *decide(table, SitDown("alice", 1), NOW), TableSuspended("m1", "x")])

    with pytest.raises(TableIsSuspended):
        decide(table, PlaceBet("alice", "player", 100), NOW)  # type: ignore[arg-type]
    reopened = decide(table, ReopenTable("fixed"), NOW)
    assert reopened[0].type == "TableReopened"


def test_ops_rotate_the_next_shoes_client_seed_and_that_shoe_opens_with_it() -> None:
    api = Api()
    api.create_table("T1")
    api.fund("alice")
    api.sit("T1", "alice", 1)

    rotated = api.ok(
        "POST",
        "/v1/tables/T1/client-seed-rotations",
        {"client_seed": "regulator pick 2024", "reason": "audit request"},
        role=Role.OPS,
        status=201,
    )
    placed = api.bet("T1", "alice", "player", 100)

    assert rotated["client_seed"] == "regulator pick 2024"
    assert placed["shoe_opened"]["client_seed"] == "regulator pick 2024"
    shoe = api.ok("GET", f"/v1/shoes/{placed['shoe_opened']['shoe_id']}", role=Role.REGULATOR)
    assert shoe["client_seed"] == "regulator pick 2024"


def test_a_client_seed_outside_the_spec_is_refused() -> None:
    api = Api()
    api.create_table("T1")

    status, _ = api.refused(
        "POST",
        "/v1/tables/T1/client-seed-rotations",
        {"client_seed": "caf\u00e9", "reason": "x"},
        role=Role.OPS,
    )

    assert status == 422
