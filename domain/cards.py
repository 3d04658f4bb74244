"""Cards as small integers, their codes ("4D", "TS") and their baccarat values."""

from collections.abc import Iterable

Card = int
"""A card's index in one unshuffled deck, 0..51: suits C, D, H, S, each ranked A23456789TJQK."""

RANKS: str = "A23456789TJQK"
SUITS: str = "CDHS"
CARDS_PER_DECK = len(RANKS) * len(SUITS)

# Indexed by Card: the tableau reads these in its inner loop, so they are looked up, not computed.
CARD_VALUES: tuple[int, ...] = tuple(min(rank + 1, 10) % 10 for _ in SUITS for rank in range(13))
CARD_CODES: tuple[str, ...] = tuple(rank + suit for suit in SUITS for rank in RANKS)
_CARDS_BY_CODE: dict[str, Card] = {code: card for card, code in enumerate(CARD_CODES)}


def _check_card(card: Card) -> None:
    # A negative index would silently read another card from the tables above.
    if not 0 <= card < CARDS_PER_DECK:
        raise ValueError(f"a card is 0..{CARDS_PER_DECK - 1}, not {card!r}")


def card_code(card: Card) -> str:
    """The card's code, rank then suit, as the spec writes it: 0 -> "AC", 16 -> "4D"."""
    _check_card(card)
    return CARD_CODES[card]


def parse_card(code: str) -> Card:
    """The card a code such as "4D" or "TS" names; raises ValueError for anything else."""
    try:
        return _CARDS_BY_CODE[code]
    except KeyError:
        message = f"not a card code (a rank of {RANKS}, then a suit of {SUITS}): {code!r}"
        raise ValueError(message) from None


def card_value(card: Card) -> int:
    """The card's baccarat points: A = 1, 2-9 face value, T/J/Q/K = 0."""
    _check_card(card)
    return CARD_VALUES[card]


def hand_total(cards: Iterable[Card]) -> int:
    """A hand's total: the sum of its cards' values, mod 10."""
    return sum(card_value(card) for card in cards) % 10


def unshuffled_shoe(decks: int) -> list[Card]:
    """The shoe before shuffling, in the spec's order: deck after deck of AC..KC AD..KS."""
    if decks < 1:
        raise ValueError(f"a shoe holds at least one deck, not {decks}")
    return list(range(CARDS_PER_DECK)) * decks
