"""Settling a bet on a coup's outcome, in integer pence; a payout includes the stake returned."""

from collections.abc import Callable
from dataclasses import dataclass

from domain.errors import StakeNotPositive
from domain.outcome import Outcome, Spot

COMMISSION_PERCENT = 5


@dataclass(frozen=True, slots=True)
class Settlement:
    """What one bet returns: the payout includes the stake; commission is recorded apart."""

    spot: Spot
    stake: int
    payout: int
    commission: int

    @property
    def house_net(self) -> int:
        """What the house keeps (negative when it pays out more than it took)."""
        return self.stake - self.payout


# Compared with == rather than looked up in a dict keyed by enum members: Enum hashes in
# Python code, which made the lookup the slowest step of a settlement. == also keeps a
# plain "player" string working, and anything unknown falls through to a ValueError.
_PLAYER_WINS = Outcome.PLAYER
_BANKER_WINS = Outcome.BANKER
_TIE = Outcome.TIE
_ON_PLAYER = Spot.PLAYER
_ON_BANKER = Spot.BANKER
_ON_TIE = Spot.TIE


# Settlements are built once per bet per coup on the dealing path, so like the tableau's
# coups they store into their slots directly rather than through the frozen __init__
# (twice as slow); settle() has checked every value by then.
_Store = Callable[[object, object], None]
_new = object.__new__
_STORE_SPOT, _STORE_STAKE, _STORE_PAYOUT, _STORE_COMMISSION = (
    vars(Settlement)[field].__set__ for field in ("spot", "stake", "payout", "commission")
)


def settle(spot: Spot, stake: int, outcome: Outcome) -> Settlement:
    """Settle a stake on a spot: Player 1:1, Banker 1:1 less 5% of the win, Tie 8:1, ties push.

    The Banker commission is 5% of the win rounded down, in the player's favour. Stakes
    are whole pounds, so it is exact in play (5p per pound); rounding only ever shows on
    stakes that are not multiples of 20p, which the table's limits refuse anyway.
    """
    if stake <= 0:
        raise StakeNotPositive(f"only a positive stake can be settled, not {stake}p")
    if outcome != _PLAYER_WINS and outcome != _BANKER_WINS and outcome != _TIE:
        raise ValueError(f"not an outcome: {outcome!r}")
    # The payout as a multiple of the stake, the stake included: 2 for a 1 to 1 win,
    # 9 for 8 to 1, 1 for a push, 0 for a loss.
    commission = 0
    if spot == _ON_PLAYER:
        multiple = 2 if outcome == _PLAYER_WINS else 1 if outcome == _TIE else 0
    elif spot == _ON_BANKER:
        multiple = 2 if outcome == _BANKER_WINS else 1 if outcome == _TIE else 0
        if outcome == _BANKER_WINS:
            commission = stake * COMMISSION_PERCENT // 100
    elif spot == _ON_TIE:
        multiple = 9 if outcome == _TIE else 0
    else:
        raise ValueError(f"not a betting spot: {spot!r}")
    settlement: Settlement = _new(Settlement)
    _STORE_SPOT(settlement, spot)
    _STORE_STAKE(settlement, stake)
    _STORE_PAYOUT(settlement, stake * multiple - commission)
    _STORE_COMMISSION(settlement, commission)
    return settlement
