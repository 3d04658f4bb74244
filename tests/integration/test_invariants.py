"""GET /v1/ops/invariants over the read models after a random session with voids."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from psycopg.types.json import Jsonb

from events.postgres import Pool, PostgresEventStore
from service.application.keys import Role
from service.application.read_models import projector
from service.application.read_models.queries import ProjectionService
from service.runtime.container import Container
from service.web.api import EXTENSION
from tests.api_harness import Api
from tests.integration.test_projections import SteppingClock, play_session, void_settled_round


def api_with_read_models(pool: Pool) -> Api:
    """The API test harness over PostgreSQL, reading from the projection tables."""
    api = Api(store=PostgresEventStore(pool))
    wiring = api.app.extensions[EXTENSION]
    assert isinstance(wiring, Container)
    api.app.extensions[EXTENSION] = replace(
        wiring, projections=ProjectionService(pool, wiring.clock)
    )
    return api


@pytest.mark.slow
def test_invariants_hold_after_a_random_session_with_voids(app_pool: Pool) -> None:
    play_session(app_pool, rounds=80, seed=7, voids=5)
    projector.catch_up(app_pool)
    report = api_with_read_models(app_pool).ok("GET", "/v1/ops/invariants", role=Role.REGULATOR)
    assert report["violations"] == []
    assert report["ok"]
    assert report["comparable"]
    assert report["rounds_checked"] == 80
    assert (
        report["wallets_total_pence"] + report["house_net_pence"]
        == report["credits_pence"] - report["debits_pence"]
    )
    with app_pool.connection() as conn:
        voided = conn.execute("SELECT count(*) FROM proj_rounds WHERE voided").fetchone()
        days = conn.execute("SELECT count(DISTINCT day) FROM proj_ledger").fetchone()
    assert voided == (5,)
    assert days == (2,)  # the session crosses midnight: the ledger is per day


def test_invariants_name_a_round_paid_against_the_rules(app_pool: Pool) -> None:
    play_session(app_pool, rounds=10, seed=3, voids=0)
    projector.catch_up(app_pool)
    with app_pool.connection() as conn:
        row = conn.execute(
            "SELECT round_id, bets, table_id FROM proj_rounds WHERE outcome IS NOT NULL"
            " AND bets::text LIKE '%%\"payout\": 0%%' ORDER BY position LIMIT 1"
        ).fetchone()
        assert row is not None
        round_id, bets, table_id = row
        tampered: list[dict[str, Any]] = [
            {**bet, "payout": bet["stake"] * 2} if bet["payout"] == 0 else bet for bet in bets
        ]
        conn.execute(
            "UPDATE proj_rounds SET bets = %s WHERE round_id = %s", [Jsonb(tampered), round_id]
        )
    # The projector checks a round as it applies the round's events (the check is incremental):
    # the tampered row is judged at the round's next event, here a void.
    void_settled_round(PostgresEventStore(app_pool), table_id, round_id)
    projector.catch_up(app_pool)
    report = api_with_read_models(app_pool).ok("GET", "/v1/ops/invariants", role=Role.OPS)
    assert not report["ok"]
    assert {(v["check"], v["subject"]) for v in report["violations"]} >= {("payout", round_id)}


def test_money_conservation_is_not_judged_between_positions(app_pool: Pool) -> None:
    play_session(app_pool, rounds=6, seed=1, voids=0)
    projector.catch_up(app_pool, ["wallets", "rounds"])
    report = ProjectionService(app_pool, SteppingClock()).invariants()
    assert not report.comparable
    assert not report.ok
