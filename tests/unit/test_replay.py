"""Replays of rounds and the published record and re-check of shoes."""

from __future__ import annotations

from dataclasses import replace

from bench.verify import Simulation
from domain.outcome import Outcome
from domain.shoe import ServerSeed, commitment
from events.memory import InMemoryEventStore
from events.store import EventMetadata
from service.application.keys import Role
from service.regulator.replay import find_shoe, shoe_view, verify_shoe
from service.regulator.verification import Check
from tests.api_harness import FLOAT, Api, expected_cards, seed_dealing


def _played_round() -> tuple[Api, str]:
    seed = seed_dealing((Outcome.BANKER,))
    api = Api(seeds=(seed,))
    api.create_table("T1")
    api.fund("alice")
    api.sit("T1", "alice", 1)
    api.bet("T1", "alice", "banker", 1_000)
    api.act("T1", "deal", "alice")
    return api, seed


def test_a_settled_round_replays_its_cards_reasons_payouts_and_balances() -> None:
    api, seed = _played_round()

    replay = api.ok("GET", "/v1/rounds/T1-1/replay", role=Role.REGULATOR)

    assert replay["replay"] is True
    assert replay["notice"].startswith("REPLAY")
    assert replay["status"] == "complete"
    assert replay["outcome"] == "banker"
    assert replay["seats"] == [
        {
            "seat": 1,
            "player_id": "alice",
            "action": "DealPressed",
            "bets": [{"spot": "banker", "stake": 1_000}],
        }
    ]
    for card in expected_cards(seed, 0):
        step = f"{card['hand']} draws {card['card']} from shoe position {card['position']}"
        assert any(step in line and card["reason"] in line for line in replay["steps"])
    assert any("banker wins" in line for line in replay["steps"])
    assert replay["settlements"] == [
        {
            "seat": 1,
            "player_id": "alice",
            "spot": "banker",
            "stake": 1_000,
            "payout": 1_950,
            "commission": 50,
            "reversed": False,
        }
    ]
    assert replay["wallets"] == [
        {
            "player_id": "alice",
            "before": {"available": FLOAT, "reserved": 0},
            "after": {"available": FLOAT + 950, "reserved": 0},
        }
    ]
    types = [event["type"] for event in replay["events"]]
    assert types[0] == "RoundOpened"
    assert "StakeReserved" in types
    assert "PayoutCredited" in types
    positions = [event["position"] for event in replay["events"]]
    assert positions == sorted(positions)


def test_a_replay_balances_start_at_the_rounds_first_stake_not_at_its_opening() -> None:
    # The append that settles round 1 opens round 2 on the table stream before it credits
    # round 1's payout to the wallet, so round 2's RoundOpened precedes that credit.
    seed = seed_dealing((Outcome.BANKER, Outcome.PLAYER))
    api = Api(seeds=(seed,))
    api.create_table("T1")
    api.fund("alice")
    api.sit("T1", "alice", 1)
    api.bet("T1", "alice", "banker", 1_000)
    api.act("T1", "deal", "alice")
    after_first = api.available("alice")
    api.bet("T1", "alice", "player", 500)
    api.act("T1", "deal", "alice")

    replay = api.ok("GET", "/v1/rounds/T1-2/replay", role=Role.REGULATOR)

    assert after_first == FLOAT + 950
    assert replay["wallets"] == [
        {
            "player_id": "alice",
            "before": {"available": after_first, "reserved": 0},
            "after": {"available": api.available("alice"), "reserved": 0},
        }
    ]
    assert api.available("alice") == after_first + 500


def test_a_round_still_betting_replays_as_in_progress() -> None:
    api = Api()
    api.create_table("T1")
    api.fund("alice")
    api.sit("T1", "alice", 1)
    api.bet("T1", "alice", "player", 500)

    replay = api.ok("GET", "/v1/rounds/T1-1/replay", role=Role.OPS)

    assert replay["status"] == "in_progress"
    assert replay["outcome"] is None
    assert replay["wallets"][0]["after"] == {"available": FLOAT - 500, "reserved": 500}


def test_players_cannot_read_replays() -> None:
    api, _ = _played_round()

    status, _ = api.refused("GET", "/v1/rounds/T1-1/replay", role=Role.FRONTEND)

    assert status == 403


def test_an_unknown_round_is_not_found() -> None:
    api, _ = _played_round()

    status, _ = api.refused("GET", "/v1/rounds/T1-99/replay", role=Role.REGULATOR)

    assert status == 404


def test_an_open_shoe_shows_its_commitment_but_not_its_seed() -> None:
    api, seed = _played_round()
    shoe_id = api.state()["shoe"]["shoe_id"]

    shoe = api.ok("GET", f"/v1/shoes/{shoe_id}", role=Role.REGULATOR)
    checked = api.ok("GET", f"/v1/shoes/{shoe_id}/verify", role=Role.REGULATOR)

    assert shoe["server_seed_hash"] == ServerSeed(seed).commitment
    assert shoe["server_seed"] is None
    assert shoe["retired"] is False
    assert shoe["hands_dealt"] == 1
    assert shoe["nonce"] == 1
    assert checked["revealed"] is False
    assert checked["verified"] is False
    assert checked["mismatches"] == []


def _dealt_store() -> InMemoryEventStore:
    store = InMemoryEventStore()
    for append in Simulation("T9", players=2).appends(1):
        store.append(append.streams, EventMetadata(actor="dealer", role="ops"))
    return store


def test_a_retired_shoe_reveals_its_seed_and_re_deals_every_coup_as_logged() -> None:
    record = find_shoe(_dealt_store(), "T9-shoe-1")

    view = shoe_view(record)
    report = verify_shoe(record)

    assert view["retired"] is True
    assert view["server_seed"] is not None
    assert commitment(view["server_seed"]) == view["server_seed_hash"]
    assert view["hands_dealt"] == view["hands"]
    assert report.ok, report.discrepancies
    assert report.rounds == view["hands"]


def test_shoe_verification_reports_a_card_the_seed_did_not_deal() -> None:
    record = find_shoe(_dealt_store(), "T9-shoe-1")
    index, card = next((i, e) for i, e in enumerate(record.events) if e.type == "CardDrawn")
    forged = replace(
        card, payload={**card.payload, "card": "AS" if card.payload["card"] != "AS" else "KS"}
    )
    events = [*record.events[:index], forged, *record.events[index + 1 :]]

    report = verify_shoe(replace(record, events=events))

    assert Check.CARD in {d.check for d in report.discrepancies}
    assert Check.TABLEAU in {d.check for d in report.discrepancies}
