"""The round on its own: interrupted deals, voids of earlier rounds, and the events' stored form."""

import json

import pytest

from domain.outcome import Spot
from domain.round import (
    BetSettled,
    CoupCompleted,
    DealResumed,
    ReturnReason,
    RoundEvent,
    RoundOpened,
    RoundSettled,
    RoundVoided,
    SettlementReversed,
    StakeReturned,
    replay_round,
    void_round,
)
from domain.round_errors import CoupAlreadyDealt, RecordedDealDiffers
from domain.table import (
    DealCoup,
    PlayerSat,
    TableEvent,
    VoidRound,
    decide,
    event_from_payload,
    event_payload,
    evolve,
    replay,
)
from tests.unit.test_table import (
    BANKER_NATURAL,
    PLAYER_DRAWS_BANKER_STANDS,
    Game,
    played_round,
    ready_round,
)


def interrupted_after(recorded: int) -> tuple[Game, list[TableEvent]]:
    """A round whose deal was cut off after `recorded` events, and the deal it should have had."""
    game = ready_round()
    deal = decide(game.table, DealCoup("shoe-1", PLAYER_DRAWS_BANKER_STANDS, 0), game.now)
    assert 0 < recorded < len(deal)
    for event in deal[:recorded]:
        game.table = evolve(game.table, event)
    game.events.extend(deal[:recorded])
    return game, deal


@pytest.mark.parametrize("recorded", range(1, 11))
def test_an_interrupted_deal_is_completed_with_only_the_missing_events(recorded: int) -> None:
    game, deal = interrupted_after(recorded)
    assert game.state.round is not None
    assert game.state.round.deal_interrupted
    resumed = game.run(DealCoup("shoe-1", PLAYER_DRAWS_BANKER_STANDS, 0))
    assert resumed[0] == DealResumed("round-1", recorded)
    assert resumed[1:] == deal[recorded:]
    assert game.events[-1] == RoundSettled("round-1")
    assert game.state == replay(game.events)


def test_an_interrupted_deal_is_not_completed_from_another_position() -> None:
    game, _ = interrupted_after(3)
    error = game.refused(DealCoup("shoe-1", (0, *PLAYER_DRAWS_BANKER_STANDS), 1))
    assert isinstance(error, RecordedDealDiffers)
    assert error.rule == "deal.recorded_cards_differ"


def test_an_interrupted_deal_is_not_completed_from_other_cards() -> None:
    game, _ = interrupted_after(3)
    assert isinstance(game.refused(DealCoup("shoe-1", BANKER_NATURAL, 0)), RecordedDealDiffers)


def test_an_interrupted_deal_is_not_completed_from_another_shoe() -> None:
    game, _ = interrupted_after(3)
    error = game.refused(DealCoup("shoe-2", PLAYER_DRAWS_BANKER_STANDS, 0))
    assert isinstance(error, RecordedDealDiffers)


def test_a_completed_deal_is_not_resumed() -> None:
    game, _ = interrupted_after(10)
    game.run(DealCoup("shoe-1", PLAYER_DRAWS_BANKER_STANDS, 0))
    error = game.refused(DealCoup("shoe-1", PLAYER_DRAWS_BANKER_STANDS, 0))
    assert isinstance(error, CoupAlreadyDealt)


def test_a_void_in_the_middle_of_the_cards_returns_every_stake() -> None:
    game, _ = interrupted_after(3)
    assert game.run(VoidRound("round-1", "shoe jammed")) == [
        StakeReturned("round-1", 1, "alice", Spot.PLAYER, 1_000, ReturnReason.VOIDED),
        StakeReturned("round-1", 1, "alice", Spot.BANKER, 500, ReturnReason.VOIDED),
        StakeReturned("round-1", 2, "bob", Spot.TIE, 2_000, ReturnReason.VOIDED),
        RoundVoided("round-1", "shoe jammed"),
    ]


def test_a_void_in_the_middle_of_settlement_reverses_settled_bets_and_returns_the_rest() -> None:
    # 5 cards, 1 stand and the outcome, then Alice's Player bet pushed on the tie at 7.
    game, deal = interrupted_after(8)
    assert isinstance(deal[6], CoupCompleted)
    assert deal[7] == BetSettled("round-1", 1, "alice", Spot.PLAYER, 1_000, 1_000, 0)
    assert game.run(VoidRound("round-1", "power cut")) == [
        SettlementReversed("round-1", 1, "alice", Spot.PLAYER, 1_000, 1_000, 0),
        StakeReturned("round-1", 1, "alice", Spot.BANKER, 500, ReturnReason.VOIDED),
        StakeReturned("round-1", 2, "bob", Spot.TIE, 2_000, ReturnReason.VOIDED),
        RoundVoided("round-1", "power cut"),
    ]


def test_an_earlier_round_is_voided_from_its_own_events() -> None:
    game = played_round(BANKER_NATURAL)
    first_round = [e for e in game.events if getattr(e, "round_id", None) == "round-1"]
    game.open()
    earlier = replay_round(first_round)  # type: ignore[arg-type]
    reversal = void_round(earlier, "malfunction found in audit")
    assert [type(e) for e in reversal] == [
        SettlementReversed,
        SettlementReversed,
        SettlementReversed,
        RoundVoided,
    ]
    # Appended to the table's stream, the void moves money but not the table's current round.
    before = game.state
    for event in reversal:
        game.table = evolve(game.table, event)
    assert game.state == before
    assert replay_round([*first_round, *reversal]).phase == "voided"  # type: ignore[list-item]


def test_a_round_starts_with_its_opening() -> None:
    with pytest.raises(ValueError, match="RoundOpened"):
        replay_round([RoundSettled("round-1")])


def test_a_table_starts_with_its_creation() -> None:
    with pytest.raises(ValueError, match="TableCreated"):
        replay([PlayerSat(1, "alice")])


def test_round_events_are_stored_as_plain_json_and_read_back_equal() -> None:
    game = played_round(PLAYER_DRAWS_BANKER_STANDS)
    game.run(VoidRound("round-1", "malfunction"))
    for event in game.events:
        payload = json.loads(json.dumps(event_payload(event)))
        assert event_from_payload(event.type, payload) == event


def test_stored_enums_read_back_as_enums() -> None:
    opened: RoundEvent = RoundOpened("r", 1, "2024-05-03T20:00:00+00:00", "x", ((1, "alice"),))
    payload = json.loads(json.dumps(event_payload(opened)))
    assert payload["participants"] == [[1, "alice"]]
    assert event_from_payload("RoundOpened", payload) == opened
    returned = event_from_payload(
        "StakeReturned",
        {
            "round_id": "r",
            "seat": 1,
            "player_id": "alice",
            "spot": "tie",
            "stake": 100,
            "reason": "passed",
        },
    )
    assert isinstance(returned, StakeReturned)
    assert returned.spot is Spot.TIE
    assert returned.reason is ReturnReason.PASSED


def test_every_event_type_has_a_distinct_stable_name() -> None:
    from domain.table import EVENT_TYPES

    assert all(name == cls.type == cls.__name__ for name, cls in EVENT_TYPES.items())
    assert len(EVENT_TYPES) == 29
