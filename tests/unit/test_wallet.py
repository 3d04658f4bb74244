"""The wallet aggregate: deposits, withdrawals, corrections, and each stake leaving once."""

import pytest

from domain.outcome import Spot
from domain.wallet import (
    AmountNotPositive,
    AmountTooLarge,
    Correct,
    CorrectionIsZero,
    CreditPayout,
    Deposit,
    InsufficientFunds,
    ReasonRequired,
    ReserveStake,
    ReturnStake,
    ReverseSettlement,
    StakeNotReserved,
    Wallet,
    WalletCommand,
    Withdraw,
    decide_wallet,
    evolve_wallet,
)


def run(wallet: Wallet, *commands: WalletCommand) -> Wallet:
    for command in commands:
        for event in decide_wallet(wallet, command):
            wallet = evolve_wallet(wallet, event)
    return wallet


def funded(pence: int = 10_000) -> Wallet:
    return run(Wallet("alice"), Deposit(pence, "card deposit"))


def test_a_deposit_adds_to_the_available_balance() -> None:
    assert funded(2_500).available == 2_500


@pytest.mark.parametrize("amount", [0, -100])
def test_deposits_and_withdrawals_move_a_positive_amount(amount: int) -> None:
    with pytest.raises(AmountNotPositive):
        decide_wallet(funded(), Deposit(amount, "x"))
    with pytest.raises(AmountNotPositive):
        decide_wallet(funded(), Withdraw(amount, "x"))


def test_a_single_movement_above_a_billion_pounds_is_refused() -> None:
    with pytest.raises(AmountTooLarge):
        decide_wallet(funded(), Deposit(100_000_000_001, "typo"))


def test_money_moved_by_ops_needs_a_reason() -> None:
    with pytest.raises(ReasonRequired):
        decide_wallet(funded(), Deposit(100, "  "))


def test_a_withdrawal_never_overdraws() -> None:
    with pytest.raises(InsufficientFunds) as refusal:
        decide_wallet(funded(1_000), Withdraw(1_001, "cash out"))
    assert (refusal.value.available, refusal.value.needed) == (1_000, 1_001)
    assert run(funded(1_000), Withdraw(1_000, "cash out")).available == 0


def test_corrections_are_signed_and_never_zero() -> None:
    assert run(funded(1_000), Correct(-300, "double credit")).available == 700
    assert run(funded(1_000), Correct(300, "missed credit")).available == 1_300
    with pytest.raises(CorrectionIsZero):
        decide_wallet(funded(), Correct(0, "nothing"))


def test_a_stake_moves_from_available_to_reserved() -> None:
    wallet = run(funded(), ReserveStake("T1", "T1-1", Spot.BANKER, 1_000))
    assert (wallet.available, wallet.reserved, wallet.total) == (9_000, 1_000, 10_000)


def test_a_stake_beyond_the_available_balance_names_available_and_needed() -> None:
    wallet = run(funded(1_500), ReserveStake("T1", "T1-1", Spot.BANKER, 1_000))
    with pytest.raises(InsufficientFunds, match="£5 is available") as refusal:
        decide_wallet(wallet, ReserveStake("T1", "T1-1", Spot.PLAYER, 1_000))
    assert (refusal.value.available, refusal.value.needed) == (500, 1_000)


def test_placements_on_one_spot_add_up_to_one_reserved_bet() -> None:
    wallet = run(
        funded(),
        ReserveStake("T1", "T1-1", Spot.TIE, 500),
        ReserveStake("T1", "T1-1", Spot.TIE, 500),
    )
    wallet = run(wallet, ReturnStake("T1", "T1-1", Spot.TIE, 1_000, "removed"))
    assert (wallet.available, wallet.reserved) == (10_000, 0)


def test_a_stake_is_returned_once() -> None:
    wallet = run(
        funded(),
        ReserveStake("T1", "T1-1", Spot.TIE, 500),
        ReturnStake("T1", "T1-1", Spot.TIE, 500, "passed"),
    )
    with pytest.raises(StakeNotReserved):
        decide_wallet(wallet, ReturnStake("T1", "T1-1", Spot.TIE, 500, "passed"))


def test_a_payout_settles_the_reserved_stake_once() -> None:
    wallet = run(
        funded(),
        ReserveStake("T1", "T1-1", Spot.BANKER, 1_000),
        CreditPayout("T1", "T1-1", Spot.BANKER, 1_000, 1_950, 50),
    )
    assert (wallet.available, wallet.reserved) == (10_950, 0)
    with pytest.raises(StakeNotReserved):
        decide_wallet(wallet, CreditPayout("T1", "T1-1", Spot.BANKER, 1_000, 1_950, 50))


def test_a_lost_bet_is_settled_with_a_payout_of_nothing() -> None:
    wallet = run(
        funded(),
        ReserveStake("T1", "T1-1", Spot.PLAYER, 1_000),
        CreditPayout("T1", "T1-1", Spot.PLAYER, 1_000, 0, 0),
    )
    assert (wallet.available, wallet.reserved) == (9_000, 0)


def test_a_reversed_settlement_may_take_the_balance_below_zero() -> None:
    wallet = run(
        funded(1_000),
        ReserveStake("T1", "T1-1", Spot.TIE, 1_000),
        CreditPayout("T1", "T1-1", Spot.TIE, 1_000, 9_000, 0),
        Withdraw(9_000, "cash out"),
        ReverseSettlement("T1", "T1-1", Spot.TIE, 1_000, 9_000, 0),
    )
    # The winnings are gone, but the house's void still takes them back: -£80.
    assert wallet.available == -8_000
    with pytest.raises(InsufficientFunds):
        decide_wallet(wallet, ReserveStake("T1", "T1-2", Spot.TIE, 100))
