"""Punto Banco as the published rules state it: the Atlantic City tableau and the payouts.

A coup is dealt Player, Banker, Player, Banker; if either two-card total is 8 or 9 (a natural)
both hands stand. Otherwise the Player draws on 0-5 and stands on 6-7; then the Banker, if the
Player stood, draws on 0-5 and stands on 6-7, and if the Player drew, acts on its own total
and the points of the Player's third card:

| Banker | draws when the Player's third card is |
|---|---|
| 0-2 | anything |
| 3 | anything but 8 |
| 4 | 2-7 |
| 5 | 4-7 |
| 6 | 6-7 |
| 7 | never (stands) |

Payouts include the stake: Player 1:1, Banker 1:1 less a 5% commission on the win (rounded
down, in the player's favour), Tie 8:1; Player and Banker bets push (stake back) on a tie.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from shoebox_verify.shoe import POINTS

PLAYER = "player"
BANKER = "banker"
TIE = "tie"
SPOTS = (PLAYER, BANKER, TIE)
COMMISSION_PERCENT = 5


def player_draws(player_total: int) -> bool:
    """Whether the Player draws a third card (no natural on the table)."""
    return player_total <= 5


def banker_draws(banker_total: int, player_third_points: int | None) -> bool:
    """Whether the Banker draws (no natural), given the Player's third card's points or None."""
    if player_third_points is None:
        return banker_total <= 5
    if banker_total <= 2:
        return True
    if banker_total == 3:
        return player_third_points != 8
    if banker_total == 4:
        return 2 <= player_third_points <= 7
    if banker_total == 5:
        return 4 <= player_third_points <= 7
    if banker_total == 6:
        return player_third_points in (6, 7)
    return False


@dataclass(frozen=True, slots=True)
class Coup:
    """A coup as the tableau deals it.

    `steps` is the sequence the log records: ("card", hand, position, code) for each card in
    dealing order, ("stand", hand) where a hand does not draw, then
    ("complete", player_total, banker_total, outcome). `steps` stops early, without the
    "complete" step, if the shoe has no card where the tableau needs one.
    """

    steps: tuple[tuple[object, ...], ...]
    player_draws: bool
    banker_draws: bool
    player_total: int
    banker_total: int
    outcome: str
    complete: bool


def deal(card_at: Callable[[int], str | None], position: int) -> Coup:
    """Deal one coup from `position`, `card_at(p)` giving the card at p (None if there is none)."""
    steps: list[tuple[object, ...]] = []
    hands = (PLAYER, BANKER, PLAYER, BANKER)
    initial: list[str] = []
    for offset, hand in enumerate(hands):
        card = card_at(position + offset)
        if card is None:
            return Coup(tuple(steps), False, False, 0, 0, "", False)
        steps.append(("card", hand, position + offset, card))
        initial.append(card)
    player = (POINTS[initial[0]] + POINTS[initial[2]]) % 10
    banker = (POINTS[initial[1]] + POINTS[initial[3]]) % 10
    next_position = position + 4
    player_drew = banker_drew = False
    if player >= 8 or banker >= 8:
        steps.append(("stand", PLAYER))
        steps.append(("stand", BANKER))
    else:
        third_points: int | None = None
        if player_draws(player):
            card = card_at(next_position)
            if card is None:
                return Coup(tuple(steps), True, False, player, banker, "", False)
            steps.append(("card", PLAYER, next_position, card))
            next_position += 1
            third_points = POINTS[card]
            player = (player + third_points) % 10
            player_drew = True
        else:
            steps.append(("stand", PLAYER))
        if banker_draws(banker, third_points):
            card = card_at(next_position)
            if card is None:
                return Coup(tuple(steps), player_drew, True, player, banker, "", False)
            steps.append(("card", BANKER, next_position, card))
            banker = (banker + POINTS[card]) % 10
            banker_drew = True
        else:
            steps.append(("stand", BANKER))
    outcome = PLAYER if player > banker else BANKER if banker > player else TIE
    steps.append(("complete", player, banker, outcome))
    return Coup(tuple(steps), player_drew, banker_drew, player, banker, outcome, True)


def settle(spot: str, stake: int, outcome: str) -> tuple[int, int]:
    """(payout, commission) of a positive stake on a spot; the payout includes the stake."""
    if stake <= 0:
        raise ValueError(f"a settled stake is positive, not {stake}")
    if spot not in SPOTS:
        raise ValueError(f"not a betting spot: {spot!r}")
    if outcome not in SPOTS:
        raise ValueError(f"not an outcome: {outcome!r}")
    if spot == TIE:
        return (stake * 9 if outcome == TIE else 0), 0
    if outcome == TIE:
        return stake, 0  # Player and Banker bets push on a tie
    if spot != outcome:
        return 0, 0
    commission = stake * COMMISSION_PERCENT // 100 if spot == BANKER else 0
    return 2 * stake - commission, commission
