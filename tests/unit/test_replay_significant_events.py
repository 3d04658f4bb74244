"""The significant-event log: what it lists, how it filters, how it pages."""

from __future__ import annotations

from typing import Any

from domain.api_keys import ApiKeyCreated, ApiKeyRevoked
from domain.events import EVENT_TYPE_NAMES
from domain.player_limits import PlayerLimitSet
from domain.round import DealResumed, RoundVoided, SettlementReversed
from domain.table import (
    ClientSeedRotated,
    MalfunctionDeclared,
    TableCreated,
    TableReopened,
    TableSuspended,
)
from domain.wallet import Corrected, Deposited, Withdrawn
from service.application.keys import Role
from service.regulator.significant import SIGNIFICANT_TYPES
from tests.api_harness import Api


def _casino() -> Api:
    api = Api()
    api.create_table("T1")
    api.create_table("T2")
    api.fund("alice")
    api.sit("T1", "alice", 1)
    api.bet("T1", "alice", "player", 500)
    return api


def test_lists_operator_actions_and_key_creation_with_who_role_and_why() -> None:
    api = _casino()

    page = api.ok("GET", "/v1/audit/significant-events?limit=500", role=Role.REGULATOR)

    kinds = {(entry["type"], entry["kind"]) for entry in page["events"]}
    assert ("ApiKeyCreated", "apikey") in kinds
    assert ("TableCreated", "operator") in kinds
    assert ("Deposited", "operator") in kinds
    deposit = next(e for e in page["events"] if e["type"] == "Deposited")
    assert deposit["why"] == "test float"
    assert deposit["role"] == "ops"
    assert deposit["what"]["amount"] == 10_000
    assert not any(e["type"] in ("BetPlaced", "StakeReserved") for e in page["events"])
    assert page["next_after"] is None


def test_filters_by_type_and_by_table() -> None:
    api = _casino()

    tables = api.ok(
        "GET", "/v1/audit/significant-events?type=TableCreated&table_id=T2", role=Role.OPS
    )

    assert [entry["what"]["table_id"] for entry in tables["events"]] == ["T2"]


def test_pages_follow_the_cursor_without_gaps_or_repeats() -> None:
    api = _casino()
    everything = api.ok("GET", "/v1/audit/significant-events?limit=500", role=Role.REGULATOR)

    seen: list[int] = []
    after = 0
    while True:
        path = f"/v1/audit/significant-events?limit=2&after={after}"
        page = api.ok("GET", path, role=Role.REGULATOR)
        seen += [entry["position"] for entry in page["events"]]
        if page["next_after"] is None:
            break
        after = page["next_after"]

    assert seen == [entry["position"] for entry in everything["events"]]


def test_players_cannot_read_the_significant_event_log() -> None:
    api = _casino()

    status, _ = api.refused("GET", "/v1/audit/significant-events", role=Role.FRONTEND)

    assert status == 403


def test_every_significant_type_is_an_event_the_domain_defines() -> None:
    assert set(SIGNIFICANT_TYPES) <= EVENT_TYPE_NAMES


def test_every_operator_malfunction_void_and_key_type_is_significant() -> None:
    must: set[type[Any]] = {
        TableCreated,
        MalfunctionDeclared,
        TableSuspended,
        TableReopened,
        ClientSeedRotated,
        RoundVoided,
        SettlementReversed,
        DealResumed,
        Deposited,
        Withdrawn,
        Corrected,
        ApiKeyCreated,
        ApiKeyRevoked,
        PlayerLimitSet,
    }

    assert {cls.type for cls in must} <= set(SIGNIFICANT_TYPES)
