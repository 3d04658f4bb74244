import pytest

from domain.cards import (
    CARD_VALUES,
    RANKS,
    SUITS,
    card_code,
    card_value,
    hand_total,
    parse_card,
    unshuffled_shoe,
)


def test_cards_are_numbered_by_suit_then_rank() -> None:
    assert card_code(0) == "AC"
    assert card_code(12) == "KC"
    assert card_code(13) == "AD"
    assert card_code(16) == "4D"
    assert card_code(51) == "KS"


def test_every_card_code_parses_back_to_its_card() -> None:
    for card in range(52):
        assert parse_card(card_code(card)) == card


def test_codes_are_rank_then_suit_in_spec_order() -> None:
    assert [card_code(card) for card in range(52)] == [
        rank + suit for suit in SUITS for rank in RANKS
    ]


@pytest.mark.parametrize("code", ["", "4", "D4", "10D", "4d", "1C", "XS", "4DD", " 4D"])
def test_parse_card_rejects_anything_but_a_code(code: str) -> None:
    with pytest.raises(ValueError, match="not a card code"):
        parse_card(code)


@pytest.mark.parametrize("card", [-1, 52, 1000])
def test_cards_outside_one_deck_are_rejected(card: int) -> None:
    with pytest.raises(ValueError, match=r"a card is 0\.\.51"):
        card_code(card)
    with pytest.raises(ValueError, match=r"a card is 0\.\.51"):
        card_value(card)


@pytest.mark.parametrize(
    ("code", "value"),
    [
        ("AC", 1),
        ("2D", 2),
        ("5H", 5),
        ("9S", 9),
        ("TC", 0),
        ("JD", 0),
        ("QH", 0),
        ("KS", 0),
    ],
)
def test_aces_count_one_pips_face_value_tens_and_pictures_zero(code: str, value: int) -> None:
    assert card_value(parse_card(code)) == value


def test_value_table_agrees_with_card_value() -> None:
    assert tuple(card_value(card) for card in range(52)) == CARD_VALUES


@pytest.mark.parametrize(
    ("codes", "total"),
    [
        # The seed text's own examples: 9+7=16 is 6, 5+5+5=15 is 5, 10+9=19 is a natural 9.
        ("9C 7D", 6),
        ("5C 5D 5H", 5),
        ("TS 9H", 9),
        ("4H 6S", 0),
        ("AC 8D", 9),
        ("KC QD", 0),
    ],
)
def test_hand_total_is_the_sum_of_values_mod_ten(codes: str, total: int) -> None:
    assert hand_total(parse_card(code) for code in codes.split()) == total


def test_unshuffled_shoe_lists_deck_after_deck_in_spec_order() -> None:
    shoe = unshuffled_shoe(8)
    assert len(shoe) == 416
    assert [card_code(card) for card in shoe[:3]] == ["AC", "2C", "3C"]
    assert card_code(shoe[51]) == "KS"
    assert card_code(shoe[52]) == "AC"
    assert shoe == list(range(52)) * 8


def test_unshuffled_shoe_needs_a_deck() -> None:
    with pytest.raises(ValueError, match="at least one deck"):
        unshuffled_shoe(0)
