"""What a regulator's export holds: a contiguous slice that keeps every round's money whole."""

from __future__ import annotations

from datetime import timedelta

from domain.outcome import Outcome
from domain.wallet import PayoutCredited
from service.regulator.export import build_export
from service.regulator.verification import verify_export
from tests.api_harness import T0, Api, seed_dealing


def test_an_export_ending_with_a_coup_holds_the_coups_wallet_credits() -> None:
    api = Api(seeds=(seed_dealing((Outcome.BANKER,)),))
    api.create_table("T1")
    api.fund("alice")
    api.sit("T1", "alice", 1)
    api.bet("T1", "alice", "banker", 1_000)
    api.act("T1", "deal", "alice")

    lines = list(build_export(api.store, "T1", T0, T0 + timedelta(days=1)))

    events = [line for line in lines if line["kind"] == "event"]
    credits = [e for e in events if e["type"] == PayoutCredited.type]
    assert [(c["payload"]["round_id"], c["payload"]["payout"]) for c in credits] == [
        ("T1-1", 1_950)
    ]
    assert lines[0]["last_position"] == events[-1]["position"] == api.store.head()
    wallet = next(line for line in lines if line["kind"] == "wallet")
    assert wallet["closing"]["reserved"] == 0
    report = verify_export(lines)
    assert report.ok, report.discrepancies
