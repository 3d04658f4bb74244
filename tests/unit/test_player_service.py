"""A player's round history: their bets, the cards, the outcome and their payout."""

from domain.outcome import Outcome, Spot
from tests.unit.test_game_service import FRONTEND, Casino


def test_a_players_rounds_show_bets_cards_outcome_and_payout_newest_first() -> None:
    casino = Casino(first_coup=Outcome.BANKER)
    casino.table()
    casino.seat("alice", "bob")
    casino.game.place_bet("T1", "alice", Spot.BANKER, 1_000, FRONTEND)
    casino.game.place_bet("T1", "alice", Spot.TIE, 500, FRONTEND)
    casino.game.place_bet("T1", "bob", Spot.PLAYER, 500, FRONTEND)
    casino.game.press_deal("T1", "alice", FRONTEND)
    casino.game.press_deal("T1", "bob", FRONTEND)
    casino.game.place_bet("T1", "alice", Spot.PLAYER, 200, FRONTEND)
    casino.game.pass_turn("T1", "alice", FRONTEND)

    second, first = casino.players.rounds("alice")
    assert first.round_id == "T1-1"
    assert first.outcome == "banker"
    assert len(first.cards) in (4, 5, 6)
    assert [(b.spot, b.stake, b.payout, b.commission) for b in first.bets] == [
        ("banker", 1_000, 1_950, 50),
        ("tie", 500, 0, 0),
    ]
    assert first.payout == 1_950
    assert second.round_id == "T1-2"
    assert [(b.spot, b.stake, b.returned) for b in second.bets] == [("player", 200, "passed")]
    assert second.outcome is None
    assert casino.players.rounds("alice", limit=1) == [second]
    assert [r.round_id for r in casino.players.rounds("bob")] == ["T1-1"]
