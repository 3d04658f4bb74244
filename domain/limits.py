"""A table's betting limits (table settings, not constants) and the checks a stake must pass."""

from dataclasses import dataclass

from domain.errors import (
    BetAbovePlayerLimit,
    BetAboveTableMaximum,
    BetBelowMinimum,
    BetNotPayableInChips,
    BetNotWholePounds,
    InvalidTableLimits,
)

PENCE_PER_POUND = 100


def pounds(pence: int) -> str:
    """An amount of pence as players read it: 250000 -> "£2,500", 1050 -> "£10.50"."""
    sign = "-" if pence < 0 else ""
    whole, part = divmod(abs(pence), PENCE_PER_POUND)
    return f"{sign}£{whole:,}" if part == 0 else f"{sign}£{whole:,}.{part:02d}"


@dataclass(frozen=True, slots=True)
class TableLimits:
    """A table's minimum bet, its maximum per player per round, and its chips, in pence."""

    minimum: int = 100
    maximum: int = 250_000
    chips: tuple[int, ...] = (100, 500, 2_500, 10_000, 50_000)

    def __post_init__(self) -> None:
        if not self.chips:
            raise InvalidTableLimits("a table has at least one chip")
        if any(chip <= 0 or chip % PENCE_PER_POUND for chip in self.chips):
            raise InvalidTableLimits(f"chips are whole pounds: {self.chips}")
        if list(self.chips) != sorted(set(self.chips)):
            raise InvalidTableLimits(f"chips are listed smallest first, once each: {self.chips}")
        smallest = self.chips[0]
        # With every chip a multiple of the smallest, a stake is payable exactly when it is
        # a multiple of the smallest chip, and the greedy breakdown of chips_for() is exact.
        if any(chip % smallest for chip in self.chips):
            raise InvalidTableLimits(
                f"every chip is a multiple of the smallest ({pounds(smallest)}): {self.chips}"
            )
        if self.minimum <= 0 or self.minimum % smallest:
            raise InvalidTableLimits(
                f"the minimum is a positive number of {pounds(smallest)} chips, "
                f"not {pounds(self.minimum)}"
            )
        if self.maximum < self.minimum:
            raise InvalidTableLimits(
                f"the maximum {pounds(self.maximum)} is below the minimum {pounds(self.minimum)}"
            )


def check_stake(
    limits: TableLimits, stake: int, staked_this_round: int, player_limit: int | None
) -> None:
    """Raise the typed error for the first betting rule a new stake breaks, if any.

    `staked_this_round` is what the player already has on this round's spots; the table
    maximum, lowered by the player's own limit when set, caps that plus `stake`.
    """
    if staked_this_round < 0:
        raise ValueError(f"a player cannot have staked less than nothing: {staked_this_round}")
    if player_limit is not None and player_limit < 0:
        raise ValueError(f"a player's own limit is not negative: {player_limit}")
    if stake % PENCE_PER_POUND:
        raise BetNotWholePounds(f"bets are whole pounds, and {pounds(stake)} is not")
    if stake % limits.chips[0]:
        raise BetNotPayableInChips(
            f"a bet is made of the table's chips ({', '.join(map(pounds, limits.chips))}), "
            f"and {pounds(stake)} is not"
        )
    if stake < limits.minimum:
        raise BetBelowMinimum(
            f"the table minimum is {pounds(limits.minimum)} a bet, and this one is {pounds(stake)}"
        )
    total = staked_this_round + stake
    if player_limit is not None and player_limit < limits.maximum and total > player_limit:
        raise BetAbovePlayerLimit(
            f"the player's own limit is {pounds(player_limit)} a round, and this bet would "
            f"bring their bets to {pounds(total)}"
        )
    if total > limits.maximum:
        raise BetAboveTableMaximum(
            f"the table maximum is {pounds(limits.maximum)} a player a round, and this bet "
            f"would bring their bets to {pounds(total)}"
        )


def chips_for(stake: int, chips: tuple[int, ...]) -> tuple[int, ...]:
    """The fewest chips that make up a stake, largest first, for tables whose chips divide up."""
    if stake < 0:
        raise ValueError(f"a stake is not negative: {stake}")
    breakdown: list[int] = []
    remaining = stake
    for chip in sorted(chips, reverse=True):
        count, remaining = divmod(remaining, chip)
        breakdown.extend([chip] * count)
    if remaining:
        raise BetNotPayableInChips(
            f"a bet is made of the table's chips ({', '.join(map(pounds, sorted(chips)))}), "
            f"and {pounds(stake)} is not"
        )
    return tuple(breakdown)
