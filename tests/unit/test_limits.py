import pytest

from domain.errors import (
    BetAbovePlayerLimit,
    BetAboveTableMaximum,
    BetBelowMinimum,
    BetError,
    BetNotPayableInChips,
    BetNotWholePounds,
    InvalidTableLimits,
)
from domain.limits import TableLimits, check_stake, chips_for, pounds

TABLE = TableLimits()


def test_default_limits_are_the_seed_tables() -> None:
    assert TABLE.minimum == 100
    assert TABLE.maximum == 250_000
    assert TABLE.chips == (100, 500, 2_500, 10_000, 50_000)


@pytest.mark.parametrize(
    ("stake", "staked_this_round"),
    [(100, 0), (2_500, 0), (250_000, 0), (1_000, 249_000)],
    ids=["minimum", "a chip", "maximum", "up to the maximum"],
)
def test_a_whole_pound_bet_within_limits_is_accepted(stake: int, staked_this_round: int) -> None:
    # check_stake returns nothing; accepting a bet means raising no BetError.
    try:
        check_stake(TABLE, stake, staked_this_round, None)
    except BetError as refusal:
        pytest.fail(f"a bet of {stake} pence after {staked_this_round} was refused: {refusal}")


def test_bets_are_whole_pounds() -> None:
    with pytest.raises(BetNotWholePounds) as raised:
        check_stake(TABLE, 1_050, 0, None)
    assert raised.value.rule == "bet.not_whole_pounds"
    assert "whole pounds" in str(raised.value)
    assert "£10.50" in str(raised.value)


def test_bets_are_made_of_the_tables_chips() -> None:
    table = TableLimits(minimum=500, chips=(500, 2_500))
    with pytest.raises(BetNotPayableInChips) as raised:
        check_stake(table, 700, 0, None)
    assert raised.value.rule == "bet.not_payable_in_chips"


def test_the_table_minimum_is_a_pound_a_bet() -> None:
    check_stake(TABLE, 100, 0, None)
    with pytest.raises(BetBelowMinimum) as raised:
        check_stake(TABLE, 0, 0, None)
    assert raised.value.rule == "bet.below_table_minimum"
    assert "£1" in str(raised.value)


def test_the_minimum_applies_to_each_bet_not_the_round() -> None:
    table = TableLimits(minimum=500)
    with pytest.raises(BetBelowMinimum):
        check_stake(table, 100, 10_000, None)


def test_the_table_maximum_caps_a_players_bets_summed_over_the_round() -> None:
    check_stake(TABLE, 100_000, 150_000, None)
    with pytest.raises(BetAboveTableMaximum) as raised:
        check_stake(TABLE, 100, 250_000, None)
    assert raised.value.rule == "bet.above_table_maximum"
    assert "£2,500" in str(raised.value)


def test_a_players_own_limit_lowers_the_maximum() -> None:
    check_stake(TABLE, 5_000, 0, 5_000)
    with pytest.raises(BetAbovePlayerLimit) as raised:
        check_stake(TABLE, 500, 5_000, 5_000)
    assert raised.value.rule == "bet.above_player_limit"


def test_a_players_own_limit_never_raises_the_table_maximum() -> None:
    with pytest.raises(BetAboveTableMaximum):
        check_stake(TABLE, 260_000, 0, 1_000_000)


def test_limits_are_table_settings() -> None:
    high_roller = TableLimits(minimum=2_500, maximum=1_000_000)
    check_stake(high_roller, 500_000, 0, None)
    with pytest.raises(BetBelowMinimum):
        check_stake(high_roller, 500, 0, None)


def test_every_bet_rule_error_is_a_bet_error() -> None:
    for error in (
        BetNotWholePounds,
        BetNotPayableInChips,
        BetBelowMinimum,
        BetAboveTableMaximum,
        BetAbovePlayerLimit,
    ):
        assert issubclass(error, BetError)
        assert error.rule.startswith("bet.")


def test_staked_this_round_and_player_limit_cannot_be_negative() -> None:
    with pytest.raises(ValueError, match="less than nothing"):
        check_stake(TABLE, 100, -1, None)
    with pytest.raises(ValueError, match="not negative"):
        check_stake(TABLE, 100, 0, -100)


@pytest.mark.parametrize(
    ("minimum", "maximum", "chips"),
    [
        (100, 250_000, ()),
        (100, 250_000, (50, 100)),
        (100, 250_000, (500, 100)),
        (100, 250_000, (100, 100)),
        (100, 250_000, (200, 500)),
        (0, 250_000, (100,)),
        (150, 250_000, (100,)),
        (500, 400, (100,)),
        (100, 250_000, (-100, 100)),
    ],
)
def test_contradictory_limits_are_refused(
    minimum: int, maximum: int, chips: tuple[int, ...]
) -> None:
    with pytest.raises(InvalidTableLimits):
        TableLimits(minimum=minimum, maximum=maximum, chips=chips)


def test_chips_for_breaks_a_stake_into_the_fewest_chips_largest_first() -> None:
    assert chips_for(63_100, TABLE.chips) == (50_000, 10_000, 2_500, 500, 100)
    assert chips_for(1_200, TABLE.chips) == (500, 500, 100, 100)
    assert chips_for(0, TABLE.chips) == ()


def test_chips_for_refuses_stakes_the_chips_cannot_make() -> None:
    with pytest.raises(BetNotPayableInChips):
        chips_for(150, TABLE.chips)


@pytest.mark.parametrize(
    ("pence", "text"),
    [(250_000, "£2,500"), (1_050, "£10.50"), (5, "£0.05"), (0, "£0"), (-100, "-£1")],
)
def test_amounts_read_as_pounds(pence: int, text: str) -> None:
    assert pounds(pence) == text
