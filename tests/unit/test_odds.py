"""Exact odds against published figures and brute force, and the `shoebox odds` command."""

import itertools
import json
from fractions import Fraction
from math import perm

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from domain.cards import CARDS_PER_DECK, RANKS, card_code, card_value, unshuffled_shoe
from domain.odds import (
    Odds,
    banker_draws,
    counts_by_value,
    exact_odds,
    fresh_shoe_counts,
    player_draws,
)
from domain.outcome import Outcome, Spot
from domain.tableau import banker_decision, player_decision
from service.cli import main

# Banker draws (H) or stands (S) by Banker total (rows 0-7) and the Player's third card
# value (columns 0-9, then "-" for a Player who stood), as in the Atlantic City tableau.
TABLEAU = """
0 HHHHHHHHHH H
1 HHHHHHHHHH H
2 HHHHHHHHHH H
3 HHHHHHHHSH H
4 SSHHHHHHSS H
5 SSSSHHHHSS H
6 SSSSSSHHSS S
7 SSSSSSSSSS S
"""

# Exact counts of ordered six-card sequences, as published (e.g. casinoexploit.com,
# Wizard of Odds), over perm(52·decks, 6).
PUBLISHED_SEQUENCES = {
    8: (2_292_252_566_437_888, 2_230_518_282_592_256, 475_627_426_473_216),
    6: (403_095_751_234_560, 392_220_492_728_832, 83_552_962_932_288),
}


def _brute_force_outcome(cards: tuple[int, ...]) -> Outcome:
    """Deal one coup from card values in shoe order, reading the rules straight from the issue."""
    player = [cards[0], cards[2]]
    banker = [cards[1], cards[3]]
    position = 4
    player_total = sum(player) % 10
    banker_total = sum(banker) % 10
    if player_total < 8 and banker_total < 8:
        third: int | None = None
        if player_total <= 5:
            third = cards[position]
            position += 1
            player.append(third)
        if third is None:
            banker_hits = banker_total <= 5
        else:
            banker_hits = (
                banker_total <= 2
                or (banker_total == 3 and third != 8)
                or (banker_total == 4 and 2 <= third <= 7)
                or (banker_total == 5 and 4 <= third <= 7)
                or (banker_total == 6 and 6 <= third <= 7)
            )
        if banker_hits:
            banker.append(cards[position])
    player_total = sum(player) % 10
    banker_total = sum(banker) % 10
    if banker_total > player_total:
        return Outcome.BANKER
    if player_total > banker_total:
        return Outcome.PLAYER
    return Outcome.TIE


def _brute_force_odds(counts: tuple[int, ...]) -> Odds:
    """Odds from every ordering of every physical card in a tiny shoe, each equally likely."""
    cards = [value for value, count in enumerate(counts) for _ in range(count)]
    wins = dict.fromkeys(Outcome, 0)
    orderings = 0
    for ordering in itertools.permutations(cards):
        wins[_brute_force_outcome(ordering)] += 1
        orderings += 1
    return Odds(
        banker=Fraction(wins[Outcome.BANKER], orderings),
        player=Fraction(wins[Outcome.PLAYER], orderings),
        tie=Fraction(wins[Outcome.TIE], orderings),
    )


def test_fresh_deck_holds_sixteen_zeros_and_four_of_each_other_value() -> None:
    assert fresh_shoe_counts(1) == (16, 4, 4, 4, 4, 4, 4, 4, 4, 4)


@pytest.mark.parametrize("decks", [1, 6, 8])
def test_fresh_shoe_holds_fifty_two_cards_a_deck(decks: int) -> None:
    assert sum(fresh_shoe_counts(decks)) == 52 * decks


def test_fresh_shoe_needs_at_least_one_deck() -> None:
    with pytest.raises(ValueError, match="at least one deck"):
        fresh_shoe_counts(0)


def test_full_deck_by_rank_folds_into_a_fresh_deck_by_value() -> None:
    assert counts_by_value([4] * 13) == fresh_shoe_counts(1)


def test_unshuffled_shoe_by_rank_folds_into_a_fresh_shoe_by_value() -> None:
    by_rank = [0] * len(RANKS)
    for card in unshuffled_shoe(8):
        by_rank[RANKS.index(card_code(card)[0])] += 1
    assert counts_by_value(by_rank) == fresh_shoe_counts(8)


def test_ten_and_court_ranks_count_as_zero_and_ace_as_one() -> None:
    #                    A  2  3  4  5  6  7  8  9  T  J  Q  K
    by_rank = (1, 0, 0, 0, 0, 0, 0, 0, 9, 2, 3, 5, 7)
    assert counts_by_value(by_rank) == (17, 1, 0, 0, 0, 0, 0, 0, 0, 9)


def test_counts_by_rank_need_thirteen_ranks() -> None:
    with pytest.raises(ValueError, match="13 counts by rank"):
        counts_by_value([4] * 10)


def test_counts_by_rank_cannot_be_negative() -> None:
    with pytest.raises(ValueError, match="negative"):
        counts_by_value([4] * 12 + [-1])


@pytest.mark.parametrize(("banker_total", "row"), list(enumerate(TABLEAU.split()[1::3])))
def test_banker_draws_by_value_follow_every_cell_of_the_tableau(
    banker_total: int, row: str
) -> None:
    expected = [cell == "H" for cell in row]
    actual = [banker_draws(banker_total, third) for third in range(10)]
    assert actual == expected


@pytest.mark.parametrize(("banker_total", "cell"), list(enumerate(TABLEAU.split()[2::3])))
def test_banker_facing_a_standing_player_draws_on_zero_to_five(
    banker_total: int, cell: str
) -> None:
    assert banker_draws(banker_total, None) is (cell == "H")


def test_draws_by_value_agree_with_the_tableau_in_every_cell() -> None:
    disagreements = [
        ("player", player_total, banker_total)
        for player_total in range(8)
        for banker_total in range(8)
        if player_decision(player_total, banker_total).draws is not player_draws(player_total)
    ]
    disagreements += [
        ("banker", banker_total, third)
        for banker_total in range(8)
        for third in [None, *range(CARDS_PER_DECK)]
        if banker_decision(banker_total, third).draws
        is not banker_draws(banker_total, None if third is None else card_value(third))
    ]
    assert disagreements == []


def test_banker_three_draws_on_player_third_zero() -> None:
    assert banker_draws(3, 0)


def test_banker_three_stands_on_player_third_eight() -> None:
    assert not banker_draws(3, 8)


@pytest.mark.parametrize("player_total", range(8))
def test_player_draws_on_zero_to_five_and_stands_on_six_or_seven(player_total: int) -> None:
    assert player_draws(player_total) is (player_total <= 5)


@pytest.mark.parametrize("decks", sorted(PUBLISHED_SEQUENCES))
def test_fresh_shoe_odds_match_the_published_sequence_counts(decks: int) -> None:
    banker, player, tie = PUBLISHED_SEQUENCES[decks]
    sequences = perm(52 * decks, 6)
    assert exact_odds(fresh_shoe_counts(decks)) == Odds(
        banker=Fraction(banker, sequences),
        player=Fraction(player, sequences),
        tie=Fraction(tie, sequences),
    )


@pytest.mark.parametrize(
    ("decks", "banker", "player", "tie"),
    [
        (8, 0.458597, 0.446247, 0.095156),
        (6, 0.458653, 0.446279, 0.095069),
        (1, 0.459624, 0.446760, 0.093615),
    ],
)
def test_fresh_shoe_probabilities_match_published_figures(
    decks: int, banker: float, player: float, tie: float
) -> None:
    odds = exact_odds(fresh_shoe_counts(decks))
    assert round(float(odds.banker), 6) == banker
    assert round(float(odds.player), 6) == player
    assert round(float(odds.tie), 6) == tie


@pytest.mark.parametrize(
    ("decks", "spot", "percent"),
    [
        (8, Spot.BANKER, 1.0579),
        (8, Spot.PLAYER, 1.2351),
        (8, Spot.TIE, 14.3596),
        (6, Spot.BANKER, 1.0558),
        (6, Spot.PLAYER, 1.2374),
        (6, Spot.TIE, 14.4382),
    ],
)
def test_fresh_shoe_house_edges_match_published_figures(
    decks: int, spot: Spot, percent: float
) -> None:
    edge = exact_odds(fresh_shoe_counts(decks)).house_edge(spot)
    assert round(float(edge) * 100, 4) == percent


def test_banker_edge_is_player_wins_less_banker_wins_after_commission() -> None:
    odds = Odds(banker=Fraction(1, 2), player=Fraction(2, 5), tie=Fraction(1, 10))
    assert odds.house_edge(Spot.BANKER) == Fraction(2, 5) - Fraction(19, 20) * Fraction(1, 2)
    assert odds.house_edge(Spot.PLAYER) == Fraction(1, 2) - Fraction(2, 5)
    assert odds.house_edge(Spot.TIE) == 1 - 9 * Fraction(1, 10)


@pytest.mark.parametrize("spot", list(Spot))
def test_expected_return_is_one_less_the_house_edge(spot: Spot) -> None:
    odds = exact_odds(fresh_shoe_counts(8))
    assert odds.expected_return(spot) == 1 - odds.house_edge(spot)


def test_shoe_of_only_zero_cards_always_ties_and_pushes_even_money_bets() -> None:
    odds = exact_odds((30, 0, 0, 0, 0, 0, 0, 0, 0, 0))
    assert odds == Odds(banker=Fraction(0), player=Fraction(0), tie=Fraction(1))
    assert odds.expected_return(Spot.BANKER) == 1
    assert odds.expected_return(Spot.PLAYER) == 1
    assert odds.expected_return(Spot.TIE) == 9


def test_shoe_of_only_nines_always_ties_on_naturals() -> None:
    assert exact_odds((0,) * 9 + (6,)).tie == 1


@pytest.mark.parametrize(
    "counts",
    [
        (2, 1, 0, 1, 0, 1, 0, 1, 0, 0),
        (1, 0, 1, 1, 1, 0, 1, 0, 1, 1),
        (0, 2, 0, 0, 2, 0, 2, 0, 0, 1),
        (3, 0, 0, 0, 0, 1, 1, 1, 1, 0),
        (1, 1, 1, 1, 1, 1, 1, 1, 0, 0),
    ],
)
def test_exact_odds_match_dealing_every_ordering_of_a_tiny_shoe(counts: tuple[int, ...]) -> None:
    assert exact_odds(counts) == _brute_force_odds(counts)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 9), min_size=6, max_size=7))
def test_exact_odds_match_dealing_every_ordering_of_any_tiny_shoe(values: list[int]) -> None:
    counts = tuple(values.count(value) for value in range(10))
    assert exact_odds(counts) == _brute_force_odds(counts)


# No deadline: an exact enumeration's time is the machine's load, not the code's (one example
# took 274 ms in a full suite on 2 busy cores).
@settings(deadline=None)
@given(st.lists(st.integers(0, 40), min_size=10, max_size=10).filter(lambda c: sum(c) >= 6))
def test_outcome_probabilities_sum_to_exactly_one_for_any_shoe(counts: list[int]) -> None:
    odds = exact_odds(counts)
    assert odds.banker + odds.player + odds.tie == 1
    assert min(odds.banker, odds.player, odds.tie) >= 0


def test_exact_odds_accept_counts_by_rank_through_counts_by_value() -> None:
    by_rank = [4 * 8] * 13
    by_rank[8] -= 5  # five nines gone from an eight-deck shoe
    assert exact_odds(counts_by_value(by_rank)) != exact_odds(fresh_shoe_counts(8))


def test_shoe_with_fewer_than_six_cards_has_no_odds() -> None:
    with pytest.raises(ValueError, match="at least 6 cards"):
        exact_odds((5, 0, 0, 0, 0, 0, 0, 0, 0, 0))


def test_shoe_needs_counts_for_all_ten_point_values() -> None:
    with pytest.raises(ValueError, match="10 counts by point value"):
        exact_odds([4] * 13)


def test_shoe_counts_cannot_be_negative() -> None:
    with pytest.raises(ValueError, match="negative"):
        exact_odds((20, 4, 4, 4, 4, 4, 4, 4, 4, -1))


def test_odds_command_prints_one_json_object_for_eight_decks_by_default() -> None:
    result = CliRunner().invoke(main, ["odds"])
    assert result.exit_code == 0, result.output
    assert result.output.count("\n") == 1
    printed = json.loads(result.output)
    assert list(printed) == ["decks", "banker", "player", "tie", "house_edge"]
    assert list(printed["house_edge"]) == ["banker", "player", "tie"]
    assert printed["decks"] == 8
    assert round(printed["banker"], 6) == 0.458597
    assert round(printed["player"], 6) == 0.446247
    assert round(printed["tie"], 6) == 0.095156
    assert {spot: round(edge * 100, 4) for spot, edge in printed["house_edge"].items()} == {
        "banker": 1.0579,
        "player": 1.2351,
        "tie": 14.3596,
    }


def test_odds_command_takes_the_deck_count() -> None:
    result = CliRunner().invoke(main, ["odds", "--decks", "6"])
    assert result.exit_code == 0, result.output
    printed = json.loads(result.output)
    assert printed["decks"] == 6
    assert round(printed["tie"], 6) == 0.095069


@pytest.mark.parametrize("decks", ["0", "9"])
def test_odds_command_refuses_a_deck_count_the_shoe_cannot_hold(decks: str) -> None:
    result = CliRunner().invoke(main, ["odds", "--decks", decks])
    assert result.exit_code == 2
