from dataclasses import FrozenInstanceError

import pytest
from hypothesis import given
from hypothesis import strategies as st

from domain.cards import Card, card_value, hand_total, parse_card
from domain.errors import NotEnoughCards
from domain.outcome import Outcome
from domain.tableau import DrawnCard, Hand, banker_decision, deal_coup, player_decision

# The drawing rules as the seed texts state them (shared/seeds/000, 001, 003, 004), written
# here apart from domain.tableau so that each cell below is checked against the text.
PLAYER_DRAWS_ON = "012345"  # "0-5 Player's hand must draw; 6-7 must stand"
BANKER_DRAWS_WHEN_PLAYER_STOOD = "012345"  # "Banker draws if he has 0-5, stands if 6-7"
# Banker two-card total -> the Player third-card values on which the Banker draws.
# Banker 3 on a third card of 0 draws: seed 000 leaves 0 out of its list, but seed 001
# lists "0 - 1 - 2 - 3 - 4 - 5 - 6 - 7 - 9", seed 003 says "unless the Player's third
# card was an 8" and seed 004 "ace, 9, 10 or face-card: draws on 0-3".
BANKER_DRAWS_WHEN_PLAYER_DREW = {
    0: "0123456789",
    1: "0123456789",
    2: "0123456789",
    3: "012345679",
    4: "234567",
    5: "4567",
    6: "67",
    7: "",
}

RANK_OF_VALUE = "TA23456789"
BANKER_THIRD = parse_card("5H")


def card_of_value(value: int, suit: str = "C") -> Card:
    return parse_card(RANK_OF_VALUE[value] + suit)


def codes(text: str) -> list[Card]:
    return [parse_card(code) for code in text.split()]


def tableau_cells() -> list[object]:
    cells: list[object] = []
    for player in range(10):
        for banker in range(10):
            natural = player >= 8 or banker >= 8
            if not natural and str(player) in PLAYER_DRAWS_ON:
                for third in range(10):
                    cells.append(
                        pytest.param(player, banker, third, id=f"P{player}-B{banker}-third{third}")
                    )
            else:
                label = "natural" if natural else "stood"
                cells.append(pytest.param(player, banker, None, id=f"P{player}-B{banker}-{label}"))
    return cells


@pytest.mark.parametrize(("player", "banker", "third"), tableau_cells())
def test_tableau_cell(player: int, banker: int, third: int | None) -> None:
    player_third = None if third is None else card_of_value(third, "S")
    # Player's cards make `player` with a ten-value second card, Banker's likewise.
    shoe = [card_of_value(player), card_of_value(banker, "D"), parse_card("KC"), parse_card("QD")]
    if player_third is not None:
        shoe.append(player_third)
    shoe.append(BANKER_THIRD)
    shoe.append(parse_card("9H"))  # never dealt: no hand takes a fourth card

    coup = deal_coup(shoe, 0)

    natural = player >= 8 or banker >= 8
    player_draws = not natural and str(player) in PLAYER_DRAWS_ON
    assert (player_third is not None) is player_draws
    if natural:
        banker_draws = False
    elif third is None:
        banker_draws = str(banker) in BANKER_DRAWS_WHEN_PLAYER_STOOD
    else:
        banker_draws = str(third) in BANKER_DRAWS_WHEN_PLAYER_DREW[banker]

    assert [decision.draws for decision in coup.decisions] == [player_draws, banker_draws]
    assert [decision.hand for decision in coup.decisions] == [Hand.PLAYER, Hand.BANKER]
    assert coup.decisions[0] == player_decision(player, banker)
    if not natural:
        assert coup.decisions[1] == banker_decision(banker, player_third)
    expected_player = (player + (third or 0)) % 10
    expected_banker = (banker + 5) % 10 if banker_draws else banker
    assert (coup.player_total, coup.banker_total) == (expected_player, expected_banker)
    assert len(coup.player_cards) == 2 + player_draws
    assert len(coup.banker_cards) == 2 + banker_draws
    assert coup.next_position == 4 + player_draws + banker_draws
    assert coup.natural is natural
    if expected_player > expected_banker:
        assert coup.outcome is Outcome.PLAYER
    elif expected_banker > expected_player:
        assert coup.outcome is Outcome.BANKER
    else:
        assert coup.outcome is Outcome.TIE


def test_banker_four_reason_names_the_rule() -> None:
    assert (
        banker_decision(4, parse_card("6C")).reason
        == "Banker 4 draws: Player's third card 6 is in 2-7"
    )


def test_banker_three_stands_on_player_third_eight() -> None:
    decision = banker_decision(3, parse_card("8S"))
    assert not decision.draws
    assert decision.reason == "Banker 3 stands: Player's third card 8 is 8"


def test_banker_three_draws_on_player_third_zero_as_most_seed_texts_say() -> None:
    decision = banker_decision(3, parse_card("KS"))
    assert decision.draws
    assert decision.reason == "Banker 3 draws: Player's third card 0 is any but 8"


def test_banker_six_stands_when_the_player_stood() -> None:
    decision = banker_decision(6, None)
    assert not decision.draws
    assert decision.reason == "Banker 6 stands: Player stood, and Banker stands on 6-7"


def test_player_natural_is_reported_for_both_hands() -> None:
    coup = deal_coup(codes("8C 5D KH KS"), 0)
    assert [decision.reason for decision in coup.decisions] == [
        "Player 8 is a natural: both stand",
        "Player 8 is a natural: both stand",
    ]
    assert [decision.hand for decision in coup.decisions] == [Hand.PLAYER, Hand.BANKER]


def test_banker_natural_stops_a_player_on_zero_from_drawing() -> None:
    coup = deal_coup(codes("TC 9D KH KS 5C"), 0)
    assert coup.player_cards == (parse_card("TC"), parse_card("KH"))
    assert coup.decisions[0].reason == "Banker 9 is a natural: both stand"
    assert coup.outcome is Outcome.BANKER


def test_two_naturals_are_named_together() -> None:
    coup = deal_coup(codes("9C 8D KH KS"), 0)
    assert coup.decisions[0].reason == "Player 9 and Banker 8 are naturals: both stand"
    assert coup.outcome is Outcome.PLAYER


def test_player_decision_reasons_name_the_rule() -> None:
    assert player_decision(3, 4).reason == "Player 3 draws: Player draws on 0-5"
    assert player_decision(7, 2).reason == "Player 7 stands: Player stands on 6-7"


@pytest.mark.parametrize(("player", "banker"), [(-1, 0), (10, 0), (0, 10)])
def test_player_decision_takes_two_card_totals(player: int, banker: int) -> None:
    with pytest.raises(ValueError, match="totals are 0-9"):
        player_decision(player, banker)


def test_a_natural_banker_never_faces_a_player_third_card() -> None:
    with pytest.raises(ValueError, match="natural"):
        banker_decision(8, parse_card("5C"))


def test_deal_order_is_player_banker_player_banker_then_thirds() -> None:
    coup = deal_coup(codes("2C 2D 2H 2S 4C 6D"), 0)
    assert [(drawn.hand, drawn.position) for drawn in coup.cards] == [
        (Hand.PLAYER, 0),
        (Hand.BANKER, 1),
        (Hand.PLAYER, 2),
        (Hand.BANKER, 3),
        (Hand.PLAYER, 4),
        (Hand.BANKER, 5),
    ]
    assert [drawn.reason for drawn in coup.cards] == [
        "initial deal: Player's first card",
        "initial deal: Banker's first card",
        "initial deal: Player's second card",
        "initial deal: Banker's second card",
        "Player 4 draws: Player draws on 0-5",
        "Banker 4 draws: Player's third card 4 is in 2-7",
    ]
    assert coup.player_cards == tuple(codes("2C 2H 4C"))
    assert coup.banker_cards == tuple(codes("2D 2S 6D"))
    assert (coup.player_total, coup.banker_total, coup.outcome) == (8, 0, Outcome.PLAYER)


def test_banker_third_card_follows_the_player_standing() -> None:
    coup = deal_coup(codes("7C 2D KH 2S 9C 4D"), 0)
    assert coup.player_cards == tuple(codes("7C KH"))
    assert coup.banker_cards == tuple(codes("2D 2S 9C"))
    assert coup.cards[4].position == 4
    assert coup.next_position == 5
    assert (coup.player_total, coup.banker_total, coup.outcome) == (7, 3, Outcome.PLAYER)


def test_a_coup_deals_from_the_given_position_and_reports_shoe_positions() -> None:
    shoe = codes("KC KD KH KS") + codes("7C 6D TH TS")
    coup = deal_coup(shoe, 4)
    assert [drawn.position for drawn in coup.cards] == [4, 5, 6, 7]
    assert coup.player_cards == tuple(codes("7C TH"))
    assert coup.next_position == 8


def test_equal_totals_tie() -> None:
    coup = deal_coup(codes("7C 7D KH KS"), 0)
    assert coup.outcome is Outcome.TIE


def test_a_coup_needs_four_cards() -> None:
    with pytest.raises(NotEnoughCards) as raised:
        deal_coup(codes("2C 3D 4H 5S 6C"), 2)
    assert raised.value.rule == "shoe.not_enough_cards"


def test_a_coup_that_needs_a_missing_third_card_fails() -> None:
    with pytest.raises(NotEnoughCards):
        deal_coup(codes("2C 3D 2H 3S"), 0)


def test_a_coup_that_needs_a_missing_banker_third_card_fails() -> None:
    with pytest.raises(NotEnoughCards):
        deal_coup(codes("2C 2D 2H 2S 4C"), 0)


def test_positions_are_not_negative() -> None:
    with pytest.raises(ValueError, match="position"):
        deal_coup(codes("2C 3D 2H 3S 4C 6D"), -1)


shoes_and_positions = st.lists(st.integers(0, 51), min_size=6, max_size=40).flatmap(
    lambda cards: st.tuples(st.just(cards), st.integers(0, len(cards) - 6))
)


@given(shoes_and_positions)
def test_no_hand_has_more_than_three_cards(shoe_and_position: tuple[list[Card], int]) -> None:
    cards, position = shoe_and_position
    coup = deal_coup(cards, position)
    assert 2 <= len(coup.player_cards) <= 3
    assert 2 <= len(coup.banker_cards) <= 3


@given(shoes_and_positions)
def test_the_cards_dealt_are_exactly_the_shoes_next_cards(
    shoe_and_position: tuple[list[Card], int],
) -> None:
    cards, position = shoe_and_position
    coup = deal_coup(cards, position)
    dealt = len(coup.cards)
    assert [drawn.card for drawn in coup.cards] == cards[position : position + dealt]
    assert [drawn.position for drawn in coup.cards] == list(range(position, position + dealt))
    assert coup.next_position == position + dealt
    assert [drawn.hand for drawn in coup.cards[:4]] == [Hand.PLAYER, Hand.BANKER] * 2


@given(shoes_and_positions)
def test_totals_and_outcome_follow_from_the_cards(
    shoe_and_position: tuple[list[Card], int],
) -> None:
    cards, position = shoe_and_position
    coup = deal_coup(cards, position)
    assert coup.player_total == hand_total(coup.player_cards)
    assert coup.banker_total == hand_total(coup.banker_cards)
    first_two = sum(card_value(card) for card in coup.player_cards[:2]) % 10
    assert coup.natural is (first_two >= 8 or hand_total(coup.banker_cards[:2]) >= 8)
    if coup.natural:
        assert len(coup.cards) == 4
    third_cards = coup.cards[4:]
    assert [drawn.reason for drawn in third_cards] == [
        decision.reason for decision in coup.decisions if decision.draws
    ]


def test_dealt_cards_and_coups_are_ordinary_frozen_values() -> None:
    coup = deal_coup(codes("7C 6D TH TS"), 0)
    first = DrawnCard(Hand.PLAYER, 0, parse_card("7C"), "initial deal: Player's first card")
    assert coup.cards[0] == first
    assert hash(coup.cards[0]) == hash(first)
    assert coup == deal_coup(codes("7C 6D TH TS"), 0)
    assert "position=0" in repr(coup.cards[0])
    with pytest.raises(FrozenInstanceError):
        coup.cards[0].card = 0  # type: ignore[misc]
    with pytest.raises(FrozenInstanceError):
        coup.outcome = Outcome.TIE  # type: ignore[misc]
