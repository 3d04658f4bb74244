"""Measure the domain core: coups dealt and settled per second, shuffles, exact odds.

Run as `.venv/bin/python bench/domain.py`. Each figure is the median of several repeats,
printed beside a baseline measured in the same run: a bare dealer written as a tight
loop over lookup tables, with no objects, reasons or events.
"""

import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

# This script shares its name with the package it measures, and Python puts the script's
# own folder first on the path, so `import domain` would find this file; look in the
# project root instead.
sys.path[0] = str(Path(__file__).resolve().parent.parent)

from domain.cards import CARD_VALUES  # noqa: E402
from domain.odds import exact_odds, fresh_shoe_counts  # noqa: E402
from domain.outcome import Outcome, Spot  # noqa: E402
from domain.payouts import settle  # noqa: E402
from domain.shoe import MIN_CARDS_TO_START_COUP, ShuffledShoe, shuffle_shoe  # noqa: E402
from domain.tableau import deal_coup  # noqa: E402

REPEATS = 9
SHOES = 100
SERVER_SEED = "3f1c9a0b7d2e4f6a8c1b3d5e7f9a0c2e4b6d8f1a3c5e7092b4d6f8a1c3e5f709"
# Three bets a coup, one on each spot, in whole pounds as the table takes them.
BETS: tuple[tuple[Spot, int], ...] = ((Spot.PLAYER, 1_000), (Spot.BANKER, 2_500), (Spot.TIE, 500))


def _bare_banker_draws(banker: int, column: int) -> bool:
    if column == 10:  # the Player stood
        return banker <= 5
    return (
        banker <= 2
        or (banker == 3 and column != 8)
        or (banker == 4 and 2 <= column <= 7)
        or (banker == 5 and 4 <= column <= 7)
        or (banker == 6 and column in (6, 7))
    )


# Baseline table, written apart from domain.tableau: [banker * 11 + column], where the
# column is the Player's third card value, or 10 when the Player stood.
_BASE_BANKER_DRAWS = tuple(
    _bare_banker_draws(banker, column) for banker in range(10) for column in range(11)
)
# House net per coup for BETS, indexed by outcome: 0 player, 1 banker, 2 tie.
_BASE_HOUSE_NET = (
    -1_000 + 2_500 + 500,
    1_000 - 2_500 + 2_500 * 5 // 100 + 500,
    0 + 0 - 500 * 8,
)


def _timed(run: Callable[[], object]) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def _seconds(run: Callable[[], object], repeats: int = REPEATS) -> tuple[float, float]:
    """The median and the best of several timed runs, after one untimed warm-up run."""
    run()
    times = [_timed(run) for _ in range(repeats)]
    # The best run shows the code's own cost on a busy shared machine; the median is
    # the headline figure.
    return statistics.median(times), min(times)


def deal_and_settle(shoes: Sequence[ShuffledShoe]) -> tuple[int, list[int], int]:
    """Deal every coup of the shoes with the domain objects and settle BETS on each."""
    coups = 0
    outcomes = [0, 0, 0]
    staked = 0
    paid = 0
    player_wins = Outcome.PLAYER
    banker_wins = Outcome.BANKER
    (player_spot, player_stake), (banker_spot, banker_stake), (tie_spot, tie_stake) = BETS
    for shoe in shoes:
        cards = shoe.cards
        position = 0
        for _ in range(shoe.hands):
            if len(cards) - position < MIN_CARDS_TO_START_COUP:
                break
            coup = deal_coup(cards, position)
            position = coup.next_position
            outcome = coup.outcome
            # Unrolled over BETS: the harness should cost little next to what it measures.
            paid += (
                settle(player_spot, player_stake, outcome).payout
                + settle(banker_spot, banker_stake, outcome).payout
                + settle(tie_spot, tie_stake, outcome).payout
            )
            staked += player_stake + banker_stake + tie_stake
            outcomes[0 if outcome is player_wins else 1 if outcome is banker_wins else 2] += 1
            coups += 1
    return coups, outcomes, staked - paid


def bare_dealer(shoes: Sequence[ShuffledShoe]) -> tuple[int, list[int], int]:
    """The baseline: the same deal and settlement as a tight loop over lookup tables."""
    values = CARD_VALUES
    banker_draws = _BASE_BANKER_DRAWS
    net = _BASE_HOUSE_NET
    coups = 0
    outcomes = [0, 0, 0]
    house_net = 0
    for shoe in shoes:
        cards = shoe.cards
        left = len(cards)
        position = 0
        for _ in range(shoe.hands):
            if left - position < MIN_CARDS_TO_START_COUP:
                break
            player = (values[cards[position]] + values[cards[position + 2]]) % 10
            banker = (values[cards[position + 1]] + values[cards[position + 3]]) % 10
            position += 4
            if player < 8 and banker < 8:
                if player <= 5:
                    third = values[cards[position]]
                    position += 1
                    player = (player + third) % 10
                else:
                    third = 10
                if banker_draws[banker * 11 + third]:
                    banker = (banker + values[cards[position]]) % 10
                    position += 1
            outcome = 0 if player > banker else 1 if banker > player else 2
            outcomes[outcome] += 1
            house_net += net[outcome]
            coups += 1
    return coups, outcomes, house_net


def main() -> None:
    """Run every measurement and print one line per figure."""
    shoes = [shuffle_shoe(SERVER_SEED, "bench", nonce) for nonce in range(1, SHOES + 1)]
    domain_result = deal_and_settle(shoes)
    baseline_result = bare_dealer(shoes)
    # Both dealers must agree card for card, or the comparison means nothing.
    if domain_result != baseline_result:
        raise SystemExit(f"dealers disagree: {domain_result} != {baseline_result}")
    coups = domain_result[0]

    domain_median, domain_best = _seconds(lambda: deal_and_settle(shoes))
    baseline_median, baseline_best = _seconds(lambda: bare_dealer(shoes))
    print(f"python {sys.version.split()[0]}; median of {REPEATS} repeats (best in brackets)")
    print(
        f"coups dealt and settled, {len(BETS)} bets each: "
        f"{coups / domain_median:>12,.0f}/s ({coups / domain_best:,.0f}/s) over {coups:,} coups"
    )
    print(
        f"baseline bare dealer, same coups and bets: "
        f"{coups / baseline_median:>12,.0f}/s ({coups / baseline_best:,.0f}/s)"
    )
    print(
        f"ratio to the baseline: {baseline_median / domain_median:.3f} "
        f"(the domain takes {domain_median / baseline_median:.1f}x as long)"
    )

    shuffles = 200
    shuffle_median, shuffle_best = _seconds(
        lambda: [shuffle_shoe(SERVER_SEED, "bench", nonce) for nonce in range(shuffles)]
    )
    print(
        f"shuffles of an 8-deck shoe: {shuffles / shuffle_median:,.0f}/s, "
        f"{shuffle_median / shuffles * 1e6:,.0f} µs each ({shuffle_best / shuffles * 1e6:,.0f} µs)"
    )

    counts = fresh_shoe_counts(8)
    odds_median, odds_best = _seconds(lambda: exact_odds(counts), repeats=5)
    print(
        f"exact odds of a fresh 8-deck shoe: {odds_median * 1e3:,.1f} ms "
        f"({odds_best * 1e3:,.1f} ms)"
    )


if __name__ == "__main__":
    main()
