"""Exact Banker, Player and Tie probabilities for any shoe, by enumeration without replacement.

A shoe is described by how many cards of each baccarat point value remain: a
10-tuple indexed 0..9, where value 0 holds the tens and court cards. Deals are
enumerated by value, not by card, with integer weights that count the card
sequences behind each branch; the totals become `Fraction`s only at the end.

Every branch is weighed over a common denominator, the number of ordered
six-card sequences `N·(N-1)·…·(N-5)`: a coup that ends after four or five cards
stands for every way the unused fifth and sixth cards could follow. This is
why a shoe must hold at least six cards, which is also the shoe's own rule: a
coup never starts with fewer than six cards left.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

from domain.cards import CARD_VALUES, RANKS
from domain.outcome import Spot

POINT_VALUES = 10
MIN_CARDS = 6

# Point values of the ranks in the spec's order, A 2 3 4 5 6 7 8 9 T J Q K: the
# first suit of an unshuffled deck holds each rank once, in that order.
RANK_VALUES: tuple[int, ...] = CARD_VALUES[: len(RANKS)]

# Player third-card values on which a Banker holding each two-card total draws.
# A Banker 3 draws on a Player third card of 0: one seed table leaves the 0 out,
# every other seed has the Banker draw, and the issue says to follow them.
_BANKER_DRAWS_ON: tuple[frozenset[int], ...] = (
    frozenset(range(10)),
    frozenset(range(10)),
    frozenset(range(10)),
    frozenset(range(10)) - {8},
    frozenset(range(2, 8)),
    frozenset(range(4, 8)),
    frozenset(range(6, 8)),
    frozenset(),
)

# The Banker's net win per unit staked once the 5% commission is taken.
_BANKER_WIN = Fraction(19, 20)
_PLAYER_WIN = Fraction(1)
_TIE_WIN = Fraction(8)


def player_draws(player_total: int) -> bool:
    """Whether a Player without a natural (against a Banker without one) draws a third card."""
    return player_total <= 5


def banker_draws(banker_total: int, player_third_value: int | None) -> bool:
    """Whether a Banker without a natural draws, given the Player's third card value or None."""
    if banker_total >= 7:
        return False
    if player_third_value is None:
        return banker_total <= 5
    return player_third_value in _BANKER_DRAWS_ON[banker_total]


def fresh_shoe_counts(decks: int) -> tuple[int, ...]:
    """Cards by point value 0..9 in a full shoe of `decks` 52-card decks."""
    if decks < 1:
        raise ValueError(f"a shoe holds at least one deck, not {decks}")
    return (16 * decks,) + (4 * decks,) * 9


def counts_by_value(by_rank: Sequence[int]) -> tuple[int, ...]:
    """Fold 13 counts by rank (A, 2-9, T, J, Q, K, as in the spec) into 10 counts by point value."""
    if len(by_rank) != len(RANKS):
        raise ValueError(f"expected {len(RANKS)} counts by rank, got {len(by_rank)}")
    if any(count < 0 for count in by_rank):
        raise ValueError("a count by rank cannot be negative")
    by_value = [0] * POINT_VALUES
    for value, count in zip(RANK_VALUES, by_rank, strict=True):
        by_value[value] += count
    return tuple(by_value)


@dataclass(frozen=True, slots=True)
class Odds:
    """Exact probabilities of each outcome of one coup dealt from a given shoe."""

    banker: Fraction
    player: Fraction
    tie: Fraction

    def expected_return(self, spot: Spot) -> Fraction:
        """What a unit stake on `spot` returns on average, stake included; a push returns it."""
        if spot is Spot.BANKER:
            return 1 + _BANKER_WIN * self.banker - self.player
        if spot is Spot.PLAYER:
            return 1 + _PLAYER_WIN * self.player - self.banker
        return 1 + _TIE_WIN * self.tie - (self.banker + self.player)

    def house_edge(self, spot: Spot) -> Fraction:
        """The house's expected gain per unit staked on `spot`, pushes counted among the bets."""
        return 1 - self.expected_return(spot)

    def to_dict(self) -> dict[str, float | dict[str, float]]:
        """Probabilities and house edges as floats, for JSON output."""
        return {
            "banker": float(self.banker),
            "player": float(self.player),
            "tie": float(self.tie),
            "house_edge": {
                "banker": float(self.house_edge(Spot.BANKER)),
                "player": float(self.house_edge(Spot.PLAYER)),
                "tie": float(self.house_edge(Spot.TIE)),
            },
        }


def exact_odds(counts: Sequence[int]) -> Odds:
    """Exact Banker, Player and Tie probabilities for a coup dealt from `counts` by point value."""
    if len(counts) != POINT_VALUES:
        raise ValueError(f"expected {POINT_VALUES} counts by point value, got {len(counts)}")
    if any(count < 0 for count in counts):
        raise ValueError("a count by point value cannot be negative")
    shoe = list(counts)
    cards = sum(shoe)
    if cards < MIN_CARDS:
        raise ValueError(f"a coup needs at least {MIN_CARDS} cards in the shoe, not {cards}")

    # Weights for a coup that ends after four or five cards, scaled to six-card sequences.
    after_four = (cards - 4) * (cards - 5)
    after_five = cards - 5
    banker = player = tie = 0

    values = range(POINT_VALUES)
    for p1 in values:
        if not shoe[p1]:
            continue
        for p2 in range(p1, POINT_VALUES):
            # The Player's two cards as an unordered pair: an unequal pair arrives in two orders.
            player_pair = shoe[p1] * (shoe[p2] - (p1 == p2)) * (1 if p1 == p2 else 2)
            if player_pair <= 0:
                continue
            shoe[p1] -= 1
            shoe[p2] -= 1
            player_total = (p1 + p2) % 10
            for b1 in values:
                if not shoe[b1]:
                    continue
                for b2 in range(b1, POINT_VALUES):
                    banker_pair = shoe[b1] * (shoe[b2] - (b1 == b2)) * (1 if b1 == b2 else 2)
                    if banker_pair <= 0:
                        continue
                    shoe[b1] -= 1
                    shoe[b2] -= 1
                    b, p, t = _third_cards(
                        shoe, player_total, (b1 + b2) % 10, after_four, after_five
                    )
                    shoe[b1] += 1
                    shoe[b2] += 1
                    weight = player_pair * banker_pair
                    banker += weight * b
                    player += weight * p
                    tie += weight * t
            shoe[p1] += 1
            shoe[p2] += 1

    sequences = banker + player + tie
    return Odds(
        banker=Fraction(banker, sequences),
        player=Fraction(player, sequences),
        tie=Fraction(tie, sequences),
    )


def _third_cards(
    shoe: list[int], player_total: int, banker_total: int, after_four: int, after_five: int
) -> tuple[int, int, int]:
    """Weighted Banker, Player and Tie counts once four cards are out, over the last two draws."""
    if player_total >= 8 or banker_total >= 8 or (player_total >= 6 and banker_total >= 6):
        return _compare(banker_total, player_total, after_four)

    # by_banker_final[f]: cards left that would bring the Banker to a final total f.
    by_banker_final = [shoe[(final - banker_total) % 10] for final in range(POINT_VALUES)]
    below = [0] * (POINT_VALUES + 1)
    for final, count in enumerate(by_banker_final):
        below[final + 1] = below[final] + count
    left = below[POINT_VALUES]

    if not player_draws(player_total):
        # Player stands on 6 or 7, so the Banker (0-5 here) draws.
        beaten = below[player_total]
        level = by_banker_final[player_total]
        return (
            (left - beaten - level) * after_five,
            beaten * after_five,
            level * after_five,
        )

    banker = player = tie = 0
    draws_on = _BANKER_DRAWS_ON[banker_total]
    for third in range(POINT_VALUES):
        count = shoe[third]
        if not count:
            continue
        player_final = (player_total + third) % 10
        if third not in draws_on:
            b, p, t = _compare(banker_total, player_final, after_five)
            banker += count * b
            player += count * p
            tie += count * t
            continue
        beaten = below[player_final]
        level = by_banker_final[player_final]
        wins = left - beaten - level
        # The Player's third card is no longer in the shoe for the Banker to draw.
        taken = (banker_total + third) % 10
        if taken < player_final:
            beaten -= 1
        elif taken == player_final:
            level -= 1
        else:
            wins -= 1
        banker += count * wins
        player += count * beaten
        tie += count * level
    return banker, player, tie


def _compare(banker_total: int, player_total: int, weight: int) -> tuple[int, int, int]:
    """Put `weight` on whichever of Banker, Player or Tie the final totals give."""
    if banker_total > player_total:
        return weight, 0, 0
    if player_total > banker_total:
        return 0, weight, 0
    return 0, 0, weight
