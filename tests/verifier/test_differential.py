"""The verifier's own rules against the server's domain, coup by coup and shoe by shoe.

The verifier was written from the published rules, not from domain/; these tests deal the
same cards through both and require every field to agree: cards and positions, each hand's
draw decision, totals, outcome, and for every spot and a spread of stakes the payout and the
commission. Tests may import domain/; the verifier never does.
"""

from __future__ import annotations

import random
import secrets

import pytest
import shoebox_verify.rules as rules
from shoebox_verify.shoe import commitment, shuffle

from domain.cards import CARD_CODES, unshuffled_shoe
from domain.outcome import Outcome, Spot
from domain.payouts import settle
from domain.shoe import commitment as domain_commitment
from domain.shoe import shuffle_shoe
from domain.tableau import Hand, deal_coup

STAKES = (1, 19, 20, 21, 99, 100, 101, 500, 1999, 2500, 10_000, 123_457)


def _compare_coup(cards: list[int], position: int, stake: int = 100) -> None:
    codes = [CARD_CODES[card] for card in cards]
    theirs = deal_coup(cards, position)
    ours = rules.deal(lambda p: codes[p] if 0 <= p < len(codes) else None, position)
    assert ours.complete
    assert [s[1:] for s in ours.steps if s[0] == "card"] == [
        (str(d.hand), d.position, CARD_CODES[d.card]) for d in theirs.cards
    ]
    draws = {d.hand: d.draws for d in theirs.decisions}
    assert ours.player_draws == draws[Hand.PLAYER]
    assert ours.banker_draws == draws[Hand.BANKER]
    stands = [s[1] for s in ours.steps if s[0] == "stand"]
    assert stands == [str(d.hand) for d in theirs.decisions if not d.draws]
    assert (ours.player_total, ours.banker_total) == (theirs.player_total, theirs.banker_total)
    assert ours.outcome == str(theirs.outcome)
    assert ours.steps[-1] == (
        "complete",
        theirs.player_total,
        theirs.banker_total,
        str(theirs.outcome),
    )
    for spot in Spot:
        settled = settle(spot, stake, theirs.outcome)
        assert rules.settle(str(spot), stake, ours.outcome) == (settled.payout, settled.commission)


@pytest.mark.slow
def test_100000_random_coups_agree_with_the_domain() -> None:
    rng = random.Random(20261130)
    shoe = unshuffled_shoe(8)
    for _ in range(100_000):
        position = rng.randrange(0, 8)
        cards = [rng.choice(shoe) for _ in range(position + 6)]
        _compare_coup(cards, position, rng.choice(STAKES))


def test_every_two_card_start_and_third_card_agrees_with_the_domain() -> None:
    # All 10 x 10 x 10 x 10 point combinations of the first four cards, with every third card
    # for each hand: the whole tableau, exhaustively, by points (suit is irrelevant).
    by_points = {
        points: next(c for c in range(52) if min(c % 13 + 1, 10) % 10 == points)
        for points in range(10)
    }
    for p1 in range(10):
        for b1 in range(10):
            for p2 in range(10):
                for b2 in range(10):
                    for third in (0, 4, 6, 8):
                        for fourth in (0, 5, 9):
                            cards = [by_points[v] for v in (p1, b1, p2, b2, third, fourth)]
                            _compare_coup(cards, 0)


@pytest.mark.parametrize("outcome", list(Outcome))
@pytest.mark.parametrize("spot", list(Spot))
def test_payouts_and_commission_agree_with_the_domain(spot: Spot, outcome: Outcome) -> None:
    for stake in (*STAKES, *random.Random(7).sample(range(1, 10**9), 200)):
        theirs = settle(spot, stake, outcome)
        assert rules.settle(str(spot), stake, str(outcome)) == (theirs.payout, theirs.commission)


@pytest.mark.slow
def test_random_shoes_agree_with_the_domain() -> None:
    rng = random.Random(42)
    for index in range(60):
        server_seed = secrets.token_hex(32)
        client_seed = "".join(chr(rng.randrange(0x20, 0x7F)) for _ in range(rng.randrange(1, 65)))
        nonce = rng.randrange(0, 10**6) if index else 0
        decks = rng.randrange(1, 9)
        theirs = shuffle_shoe(server_seed, client_seed, nonce, decks)
        ours = shuffle(server_seed, client_seed, nonce, decks)
        assert ours.cards == tuple(CARD_CODES[c] for c in theirs.cards)
        assert ours.hands == theirs.hands
        assert commitment(server_seed) == domain_commitment(server_seed)


def test_a_few_shoes_agree_with_the_domain() -> None:
    for nonce in range(3):
        seed = secrets.token_hex(32)
        theirs = shuffle_shoe(seed, "table-1", nonce)
        ours = shuffle(seed, "table-1", nonce)
        assert ours.cards == tuple(CARD_CODES[c] for c in theirs.cards)
        assert ours.hands == theirs.hands
