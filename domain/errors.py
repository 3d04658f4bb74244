"""Typed domain errors: each names the rule it enforces, in words and as a stable id."""

# The class names read as the broken rule (BetBelowMinimum), which is how the service's
# error table and the tests refer to them; an Error suffix on each would add nothing.
# ruff: noqa: N818

from typing import ClassVar


class DomainError(Exception):
    """A broken game rule; `rule` is a stable machine-readable id such as "bet.below_minimum"."""

    rule: ClassVar[str] = "domain.rule_broken"

    def __init__(self, message: str) -> None:
        # The message names its rule once, at its end, whoever shows it (an HTTP problem, the
        # command line): most messages end with "(rule ...)" already, the rest gain it here.
        named = f"(rule {self.rule})"
        if not message.endswith(named):
            message = f"{message} {named}"
        super().__init__(message)
        self.message = message


class InvalidShoeParameters(DomainError):
    """A shoe cannot be opened with these seeds, nonce or deck count."""

    rule = "shoe.invalid_parameters"


class DeckCountOutOfRange(InvalidShoeParameters):
    """A shoe holds 1 to 8 decks."""

    rule = "shoe.decks_out_of_range"


class InvalidServerSeed(InvalidShoeParameters):
    """A server seed is 64 lowercase hex characters."""

    rule = "shoe.server_seed_invalid"


class InvalidClientSeed(InvalidShoeParameters):
    """A client seed is 1 to 64 printable ASCII characters."""

    rule = "shoe.client_seed_invalid"


class NegativeNonce(InvalidShoeParameters):
    """A nonce is a non-negative integer."""

    rule = "shoe.nonce_negative"


class NotEnoughCards(DomainError):
    """The shoe ran out of cards in the middle of a coup."""

    rule = "shoe.not_enough_cards"


class InvalidTableLimits(DomainError):
    """A table's limits contradict each other or the chip rules."""

    rule = "table.invalid_limits"


class StakeNotPositive(DomainError):
    """Only a positive stake can be settled."""

    rule = "settlement.stake_not_positive"


class BetError(DomainError):
    """A bet breaks one of the table's betting rules."""

    rule = "bet.invalid"


class BetNotWholePounds(BetError):
    """Bets are whole pounds."""

    rule = "bet.not_whole_pounds"


class BetNotPayableInChips(BetError):
    """A bet must be made up of the table's chips."""

    rule = "bet.not_payable_in_chips"


class BetBelowMinimum(BetError):
    """Every bet is at least the table minimum."""

    rule = "bet.below_table_minimum"


class BetAboveTableMaximum(BetError):
    """A player's bets on one round, summed, stay within the table maximum."""

    rule = "bet.above_table_maximum"


class BetAbovePlayerLimit(BetError):
    """A player's bets on one round, summed, stay within the limit the player set."""

    rule = "bet.above_player_limit"
