"""The books the stateful tests keep (tests/stateful.py) hold the game's own rules on a spot.

Found by CI: a player who removed a bet and then rebet in the same round was reported as
"a stake after it was settled" — the model, not the game, was wrong. A stake given back leaves
the spot open; a settled one closes it.
"""

import pytest

from tests.stateful import DEPOSITED, PAID, RESERVED, RETURNED, Books

WALLET = "wallet:alice"
STAKE = {"table_id": "T1", "round_id": "T1-3", "spot": "player", "stake": 600}


def funded() -> Books:
    books = Books()
    books._fold(WALLET, DEPOSITED, {"amount": 10_000})
    return books


def test_a_stake_given_back_leaves_the_spot_open_to_a_new_bet_in_the_same_round() -> None:
    books = funded()
    books._fold(WALLET, RESERVED, STAKE)
    books._fold(WALLET, RETURNED, STAKE)
    books._fold(WALLET, RESERVED, STAKE)
    assert books.reserved[WALLET] == 600
    assert books.available[WALLET] == 9_400


def test_a_stake_on_a_spot_already_settled_in_the_round_is_caught() -> None:
    books = funded()
    books._fold(WALLET, RESERVED, STAKE)
    books._fold(WALLET, PAID, {**STAKE, "payout": 1_200})
    with pytest.raises(AssertionError, match="after it was settled"):
        books._fold(WALLET, RESERVED, STAKE)
