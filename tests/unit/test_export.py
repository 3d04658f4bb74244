"""What a regulator's export holds: a contiguous slice that keeps every round's money whole."""

from __future__ import annotations

from datetime import timedelta

from domain.outcome import Outcome
from domain.seamless import SessionOpened
from domain.wallet import PayoutCredited
from events.store import EventMetadata, StreamAppend
from service.application.streams import to_new_event
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


def test_an_export_states_version_2_only_when_it_holds_seamless_money() -> None:
    api = Api(seeds=(seed_dealing((Outcome.BANKER, Outcome.PLAYER)),))
    api.create_table("T1")
    api.fund("alice")
    api.sit("T1", "alice", 1)
    api.bet("T1", "alice", "banker", 1_000)
    api.act("T1", "deal", "alice")
    period = (T0, T0 + timedelta(days=1))

    internal = list(build_export(api.store, "T1", *period))
    assert internal[0]["format"] == "shoebox-export/1"

    # Any event of a seamless stream inside the slice makes it version 2.
    session = SessionOpened("acme", "0" * 64, 10_000, T0.isoformat())
    api.store.append(
        [StreamAppend("seamless:acme/bob", 0, [to_new_event(session)])],
        EventMetadata(actor="test", role="system"),
    )
    api.bet("T1", "alice", "banker", 1_000)
    seamless = list(build_export(api.store, "T1", *period))
    assert seamless[0]["format"] == "shoebox-export/2"
    assert any(line.get("category") == "seamless" for line in seamless)
    report = verify_export(seamless)
    assert report.ok, report.discrepancies
