"""The tableau: Atlantic City drawing rules, with a reason for every decision, and the coup."""

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from enum import StrEnum

from domain.cards import CARD_VALUES, Card
from domain.errors import NotEnoughCards
from domain.outcome import Outcome
from domain.shoe import ShuffledShoe, coup_can_start


class Hand(StrEnum):
    """One of the two hands dealt in a coup."""

    PLAYER = "player"
    BANKER = "banker"


@dataclass(frozen=True, slots=True)
class Decision:
    """Whether a hand draws a third card, and the rule that says so, in words."""

    hand: Hand
    draws: bool
    reason: str


@dataclass(frozen=True, slots=True)
class DrawnCard:
    """A card dealt to a hand, with its position in the shoe and why it was dealt."""

    hand: Hand
    position: int
    card: Card
    reason: str


@dataclass(frozen=True, slots=True)
class Coup:
    """One deal of the tableau: its cards in dealing order, its decisions and its result."""

    cards: tuple[DrawnCard, ...]
    decisions: tuple[Decision, ...]
    player_total: int
    banker_total: int
    outcome: Outcome
    next_position: int

    @property
    def player_cards(self) -> tuple[Card, ...]:
        """The Player's cards in the order dealt."""
        return tuple(drawn.card for drawn in self.cards if drawn.hand is Hand.PLAYER)

    @property
    def banker_cards(self) -> tuple[Card, ...]:
        """The Banker's cards in the order dealt."""
        return tuple(drawn.card for drawn in self.cards if drawn.hand is Hand.BANKER)

    @property
    def natural(self) -> bool:
        """Whether either hand's first two cards made 8 or 9."""
        player = (CARD_VALUES[self.cards[0].card] + CARD_VALUES[self.cards[2].card]) % 10
        banker = (CARD_VALUES[self.cards[1].card] + CARD_VALUES[self.cards[3].card]) % 10
        return player >= 8 or banker >= 8


# A frozen dataclass's __init__ sets each field through object.__setattr__, which costs
# nearly twice as much as storing into the slots directly. deal_coup builds five or six of these
# objects per coup and the table's throughput depends on it, so it stores into the slots
# itself; the values come straight from the shoe and the tables below, so the checks a
# constructor could make have nothing to catch.
_Store = Callable[[object, object], None]


def _slot_stores(cls: type, *fields: str) -> tuple[_Store, ...]:
    return tuple(vars(cls)[field].__set__ for field in fields)


_new = object.__new__
_STORE_HAND, _STORE_POSITION, _STORE_CARD, _STORE_REASON = _slot_stores(
    DrawnCard, "hand", "position", "card", "reason"
)
(
    _STORE_CARDS,
    _STORE_DECISIONS,
    _STORE_PLAYER_TOTAL,
    _STORE_BANKER_TOTAL,
    _STORE_OUTCOME,
    _STORE_NEXT_POSITION,
) = _slot_stores(
    Coup, "cards", "decisions", "player_total", "banker_total", "outcome", "next_position"
)


def _drawn_card(hand: Hand, position: int, card: Card, reason: str) -> DrawnCard:
    drawn: DrawnCard = _new(DrawnCard)
    _STORE_HAND(drawn, hand)
    _STORE_POSITION(drawn, position)
    _STORE_CARD(drawn, card)
    _STORE_REASON(drawn, reason)
    return drawn


# Every decision the tableau can make is built once, here, from the rules as the seed
# texts state them. Dealing then only looks decisions up, which keeps a coup cheap and
# makes every reason for the same situation the very same string.


def _player_rule(player_total: int, banker_total: int) -> Decision:
    if player_total >= 8 and banker_total >= 8:
        reason = f"Player {player_total} and Banker {banker_total} are naturals: both stand"
        return Decision(Hand.PLAYER, False, reason)
    if player_total >= 8:
        return Decision(Hand.PLAYER, False, f"Player {player_total} is a natural: both stand")
    if banker_total >= 8:
        return Decision(Hand.PLAYER, False, f"Banker {banker_total} is a natural: both stand")
    if player_total <= 5:
        return Decision(Hand.PLAYER, True, f"Player {player_total} draws: Player draws on 0-5")
    return Decision(Hand.PLAYER, False, f"Player {player_total} stands: Player stands on 6-7")


# Player third-card values on which a Banker total of 3 to 6 draws. Banker 3 draws on a
# third card of 0: seed 000's table lists 1-2-3-4-5-6-7-9 and leaves 0 out, but it also
# says Banker 3 stands only on 8, and every other seed text draws on 0 (004 as "ace, 9,
# 10 or face-card: draws on 0-3"), so we follow them.
_BANKER_DRAWS_ON: dict[int, tuple[frozenset[int], str]] = {
    3: (frozenset({0, 1, 2, 3, 4, 5, 6, 7, 9}), "any but 8"),
    4: (frozenset(range(2, 8)), "in 2-7"),
    5: (frozenset(range(4, 8)), "in 4-7"),
    6: (frozenset({6, 7}), "in 6-7"),
}


def _banker_rule(banker_total: int, player_third_value: int | None) -> Decision:
    if banker_total >= 8:
        # Reachable only when the Player stood on 6-7: a natural Banker never faces a third card.
        return Decision(Hand.BANKER, False, f"Banker {banker_total} is a natural: both stand")
    if player_third_value is None:
        if banker_total <= 5:
            reason = f"Banker {banker_total} draws: Player stood, and Banker draws on 0-5"
            return Decision(Hand.BANKER, True, reason)
        reason = f"Banker {banker_total} stands: Player stood, and Banker stands on 6-7"
        return Decision(Hand.BANKER, False, reason)
    if banker_total <= 2:
        return Decision(Hand.BANKER, True, f"Banker {banker_total} draws: Banker 0-2 always draws")
    if banker_total == 7:
        return Decision(Hand.BANKER, False, "Banker 7 stands: Banker 7 always stands")
    values, words = _BANKER_DRAWS_ON[banker_total]
    if player_third_value in values:
        reason = f"Banker {banker_total} draws: Player's third card {player_third_value} is {words}"
        return Decision(Hand.BANKER, True, reason)
    negated = "is 8" if banker_total == 3 else "is not " + words
    reason = f"Banker {banker_total} stands: Player's third card {player_third_value} {negated}"
    return Decision(Hand.BANKER, False, reason)


_PLAYER_STOOD = 10  # the banker table's column for "the Player did not draw"

# Indexed [player_total * 10 + banker_total].
_PLAYER_TABLE: tuple[Decision, ...] = tuple(
    _player_rule(player, banker) for player in range(10) for banker in range(10)
)
# Indexed [banker_total * 11 + column], column = the Player's third card value or 10.
_BANKER_TABLE: tuple[Decision | None, ...] = tuple(
    _banker_rule(banker, None)
    if column == _PLAYER_STOOD
    else None
    if banker >= 8
    else _banker_rule(banker, column)
    for banker in range(10)
    for column in range(11)
)
# After a natural both hands stand for the same reason, so the Banker's decision repeats it.
_NATURAL_DECISIONS: dict[int, tuple[Decision, Decision]] = {
    player * 10 + banker: (
        _PLAYER_TABLE[player * 10 + banker],
        Decision(Hand.BANKER, False, _PLAYER_TABLE[player * 10 + banker].reason),
    )
    for player in range(10)
    for banker in range(10)
    if player >= 8 or banker >= 8
}

_PLAYER_FIRST = "initial deal: Player's first card"
_BANKER_FIRST = "initial deal: Banker's first card"
_PLAYER_SECOND = "initial deal: Player's second card"
_BANKER_SECOND = "initial deal: Banker's second card"


def player_decision(player_total: int, banker_total: int) -> Decision:
    """The Player's decision on two cards against the Banker's two cards, naturals included."""
    if not (0 <= player_total <= 9 and 0 <= banker_total <= 9):
        raise ValueError(f"totals are 0-9, not Player {player_total}, Banker {banker_total}")
    return _PLAYER_TABLE[player_total * 10 + banker_total]


def banker_decision(banker_total: int, player_third: Card | None) -> Decision:
    """The Banker's decision on two cards, given the Player's third card (None if it stood)."""
    if not 0 <= banker_total <= 9:
        raise ValueError(f"a two-card total is 0-9, not {banker_total}")
    if player_third is not None and not 0 <= player_third < len(CARD_VALUES):
        raise ValueError(f"a card is 0..{len(CARD_VALUES) - 1}, not {player_third}")
    column = _PLAYER_STOOD if player_third is None else CARD_VALUES[player_third]
    decision = _BANKER_TABLE[banker_total * 11 + column]
    if decision is None:
        raise ValueError(f"a natural Banker {banker_total} never faces a Player's third card")
    return decision


_PLAYER = Hand.PLAYER
_BANKER = Hand.BANKER
# Indexed [player_total * 10 + banker_total] once both hands are complete.
_OUTCOMES: tuple[Outcome, ...] = tuple(
    Outcome.PLAYER if player > banker else Outcome.BANKER if banker > player else Outcome.TIE
    for player in range(10)
    for banker in range(10)
)


def deal_coup(cards: Sequence[Card], position: int) -> Coup:
    """Deal one coup from cards[position:], P B P B then any third cards, by the tableau."""
    if position < 0:
        raise ValueError(f"a shoe position is >= 0, not {position}")
    try:
        player_first, banker_first, player_second, banker_second = cards[position : position + 4]
    except ValueError:
        raise NotEnoughCards(
            f"a coup needs at least 4 cards and the shoe has {max(len(cards) - position, 0)} "
            f"left at position {position}"
        ) from None
    values = CARD_VALUES
    player_total = (values[player_first] + values[player_second]) % 10
    banker_total = (values[banker_first] + values[banker_second]) % 10
    initial = (
        _drawn_card(_PLAYER, position, player_first, _PLAYER_FIRST),
        _drawn_card(_BANKER, position + 1, banker_first, _BANKER_FIRST),
        _drawn_card(_PLAYER, position + 2, player_second, _PLAYER_SECOND),
        _drawn_card(_BANKER, position + 3, banker_second, _BANKER_SECOND),
    )
    next_position = position + 4
    dealt: tuple[DrawnCard, ...]
    decisions: tuple[Decision, ...]
    if player_total >= 8 or banker_total >= 8:
        dealt = initial
        decisions = _NATURAL_DECISIONS[player_total * 10 + banker_total]
    else:
        player = _PLAYER_TABLE[player_total * 10 + banker_total]
        if player.draws:
            third = _draw(cards, next_position)
            dealt = (*initial, _drawn_card(_PLAYER, next_position, third, player.reason))
            next_position += 1
            third_value = values[third]
            banker = _BANKER_TABLE[banker_total * 11 + third_value]
            player_total = (player_total + third_value) % 10
        else:
            dealt = initial
            banker = _BANKER_TABLE[banker_total * 11 + _PLAYER_STOOD]
        assert banker is not None  # only natural Banker totals lack entries, handled above
        if banker.draws:
            third = _draw(cards, next_position)
            dealt = (*dealt, _drawn_card(_BANKER, next_position, third, banker.reason))
            next_position += 1
            banker_total = (banker_total + values[third]) % 10
        decisions = (player, banker)
    coup: Coup = _new(Coup)
    _STORE_CARDS(coup, dealt)
    _STORE_DECISIONS(coup, decisions)
    _STORE_PLAYER_TOTAL(coup, player_total)
    _STORE_BANKER_TOTAL(coup, banker_total)
    _STORE_OUTCOME(coup, _OUTCOMES[player_total * 10 + banker_total])
    _STORE_NEXT_POSITION(coup, next_position)
    return coup


def _draw(cards: Sequence[Card], position: int) -> Card:
    try:
        return cards[position]
    except IndexError:
        raise NotEnoughCards(
            f"the tableau needs a third card at position {position} and the shoe has none left"
        ) from None


def deal_shoe(shoe: ShuffledShoe) -> Iterator[Coup]:
    """Every coup of a shoe, from position 0 until the shoe retires."""
    position = 0
    coups = 0
    while coup_can_start(len(shoe.cards) - position, coups, shoe.hands):
        coup = deal_coup(shoe.cards, position)
        position = coup.next_position
        coups += 1
        yield coup
