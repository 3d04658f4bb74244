"""A malfunction on PostgreSQL: one atomic append of compensating events; the chain still holds."""

from __future__ import annotations

from datetime import UTC, datetime

from domain.outcome import Outcome
from events.canonical import verify_chain
from events.postgres import Pool, PostgresEventStore
from service.application.keys import Role
from service.regulator.export import build_export
from service.regulator.verification import verify_export
from tests.api_harness import FLOAT, Api, seed_dealing

EARLY = datetime(2000, 1, 1, tzinfo=UTC)
LATE = datetime(2100, 1, 1, tzinfo=UTC)


def test_voiding_a_settled_round_appends_reversals_and_leaves_every_row_intact(
    app_pool: Pool,
) -> None:
    store = PostgresEventStore(app_pool)
    api = Api(store=store, seeds=(seed_dealing((Outcome.BANKER,)),))
    api.create_table("T1")
    api.fund("alice")
    api.sit("T1", "alice", 1)
    api.bet("T1", "alice", "banker", 2_000)
    api.act("T1", "deal", "alice")
    assert api.available("alice") == FLOAT + 1_900
    before = store.read_all(0, 100_000, upcast=False)

    declared = api.ok(
        "POST",
        "/v1/tables/T1/malfunctions",
        {"reason": "shoe reader misread", "scope": "rounds", "round_ids": ["T1-1"]},
        role=Role.OPS,
        status=201,
    )

    after = store.read_all(0, 100_000, upcast=False)
    assert after[: len(before)] == before  # nothing updated or deleted
    appended = after[len(before) :]
    assert len({event.recorded_at for event in appended}) == 1  # one atomic append
    assert {event.stream_id for event in appended} == {"table:T1", "wallet:alice"}
    assert declared["shoe_revealed"] is not None
    assert api.available("alice") == FLOAT
    assert verify_chain(after) is None
    report = verify_export(build_export(store, "T1", EARLY, LATE))
    assert report.ok, report.discrepancies
