import pytest
from hypothesis import given
from hypothesis import strategies as st

from domain.errors import StakeNotPositive
from domain.outcome import Outcome, Spot
from domain.payouts import COMMISSION_PERCENT, Settlement, settle


def test_player_bet_pays_one_to_one_with_the_stake_returned() -> None:
    assert settle(Spot.PLAYER, 1_000, Outcome.PLAYER) == Settlement(Spot.PLAYER, 1_000, 2_000, 0)


def test_banker_bet_pays_one_to_one_less_five_percent_of_the_win() -> None:
    settlement = settle(Spot.BANKER, 1_000, Outcome.BANKER)
    assert settlement == Settlement(Spot.BANKER, 1_000, 1_950, 50)
    assert settlement.house_net == -950


def test_tie_bet_pays_eight_to_one_with_the_stake_returned() -> None:
    assert settle(Spot.TIE, 500, Outcome.TIE) == Settlement(Spot.TIE, 500, 4_500, 0)


@pytest.mark.parametrize("spot", [Spot.PLAYER, Spot.BANKER])
def test_player_and_banker_bets_push_on_a_tie(spot: Spot) -> None:
    settlement = settle(spot, 2_500, Outcome.TIE)
    assert (settlement.payout, settlement.commission, settlement.house_net) == (2_500, 0, 0)


@pytest.mark.parametrize(
    ("spot", "outcome"),
    [
        (Spot.PLAYER, Outcome.BANKER),
        (Spot.BANKER, Outcome.PLAYER),
        (Spot.TIE, Outcome.PLAYER),
        (Spot.TIE, Outcome.BANKER),
    ],
)
def test_losing_bets_pay_nothing_and_the_house_keeps_the_stake(
    spot: Spot, outcome: Outcome
) -> None:
    settlement = settle(spot, 700, outcome)
    assert (settlement.payout, settlement.commission, settlement.house_net) == (0, 0, 700)


def test_commission_is_exact_on_whole_pounds() -> None:
    assert settle(Spot.BANKER, 250_000, Outcome.BANKER).commission == 12_500
    assert settle(Spot.BANKER, 100, Outcome.BANKER).commission == 5


def test_commission_rounds_down_in_the_players_favour_below_20p_multiples() -> None:
    settlement = settle(Spot.BANKER, 110, Outcome.BANKER)  # 5% of 110p is 5.5p
    assert settlement.commission == 5
    assert settlement.payout == 215


@pytest.mark.parametrize("stake", [0, -100])
def test_only_positive_stakes_are_settled(stake: int) -> None:
    with pytest.raises(StakeNotPositive) as raised:
        settle(Spot.PLAYER, stake, Outcome.PLAYER)
    assert raised.value.rule == "settlement.stake_not_positive"


def test_unknown_spots_and_outcomes_are_refused_not_settled_as_losses() -> None:
    with pytest.raises(ValueError, match="spot"):
        settle("dragon", 100, Outcome.PLAYER)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="outcome"):
        settle(Spot.PLAYER, 100, "void")  # type: ignore[arg-type]


bets = st.lists(
    st.tuples(st.sampled_from(Spot), st.integers(min_value=1, max_value=10**9)),
    min_size=1,
    max_size=21,
)


@given(bets, st.sampled_from(Outcome))
def test_money_is_conserved_in_every_round(bets: list[tuple[Spot, int]], outcome: Outcome) -> None:
    settlements = [settle(spot, stake, outcome) for spot, stake in bets]
    stakes_in = sum(stake for _, stake in bets)
    payouts_out = sum(settlement.payout for settlement in settlements)
    house_net = sum(settlement.house_net for settlement in settlements)
    assert stakes_in == payouts_out + house_net
    assert all(settlement.payout >= 0 for settlement in settlements)


@given(st.sampled_from(Spot), st.integers(min_value=1, max_value=10**9), st.sampled_from(Outcome))
def test_commission_is_taken_only_on_winning_banker_bets(
    spot: Spot, stake: int, outcome: Outcome
) -> None:
    settlement = settle(spot, stake, outcome)
    if spot is Spot.BANKER and outcome is Outcome.BANKER:
        assert settlement.commission == stake * COMMISSION_PERCENT // 100
        assert settlement.payout == 2 * stake - settlement.commission
    else:
        assert settlement.commission == 0


@given(st.integers(min_value=1, max_value=10**7))
def test_commission_on_whole_pounds_is_exactly_five_percent(pounds: int) -> None:
    settlement = settle(Spot.BANKER, pounds * 100, Outcome.BANKER)
    assert settlement.commission * 20 == pounds * 100
