"""Typed refusals of the table and round state machine, each naming the rule it enforces."""

# ruff: noqa: N818 -- each class is named after the rule it enforces ("SeatTaken"), as in
# domain/errors.py; an "Error" suffix on every one would only add noise to the rule's name.

from domain.errors import DomainError


class TableError(DomainError):
    """A command breaks one of the table's rules."""

    rule = "table.rule_broken"


class TableNotFound(TableError):
    """A command was sent to a table that has not been created."""

    rule = "table.not_found"


class TableAlreadyExists(TableError):
    """A table is created once."""

    rule = "table.already_exists"


class InvalidTableSettings(TableError):
    """A table has 1 to 7 seats, 1 to 8 decks and a betting window of at least a second."""

    rule = "table.invalid_settings"


class SeatError(DomainError):
    """A command breaks one of the seating rules."""

    rule = "seat.rule_broken"


class SeatOutOfRange(SeatError):
    """Seats are numbered from 1 to the table's seat count."""

    rule = "seat.out_of_range"


class SeatTaken(SeatError):
    """A player sits only at a free seat."""

    rule = "seat.taken"


class PlayerAlreadySeated(SeatError):
    """A player holds at most one seat at a table."""

    rule = "seat.player_already_seated"


class PlayerNotSeated(SeatError):
    """Only a seated player can leave the table or play at it."""

    rule = "seat.player_not_seated"


class PlayerHasBetsInRound(SeatError):
    """A player changes seat between hands: not while their bets are on the current round."""

    rule = "seat.bets_in_play"


class RoundError(DomainError):
    """A command breaks one of the round's rules."""

    rule = "round.rule_broken"


class RoundAlreadyUnderWay(RoundError):
    """A new betting window opens only after the previous round is over."""

    rule = "round.already_under_way"


class NoPlayersSeated(RoundError):
    """A betting window opens only when someone is seated to bet in it."""

    rule = "round.no_players_seated"


class NoRoundUnderWay(RoundError):
    """Bets, Deal, Pass and exclusions need a round whose betting window has opened."""

    rule = "round.none_under_way"


class RoundNotFound(RoundError):
    """A command named a round that is not this table's current round."""

    rule = "round.not_found"


class NotAParticipant(RoundError):
    """Only players seated when the betting window opened play in the round."""

    rule = "round.not_a_participant"


class AlreadyPressedDeal(RoundError):
    """After pressing Deal a player's bets are final until the coup is settled."""

    rule = "round.already_pressed_deal"


class AlreadyPassed(RoundError):
    """A player who passed sits this coup out."""

    rule = "round.already_passed"


class ParticipantExcluded(RoundError):
    """A player excluded from the round sits this coup out."""

    rule = "round.participant_excluded"


class BettingWindowClosed(RoundError):
    """Bets, Deal and Pass are accepted only before the betting window's deadline."""

    rule = "round.betting_window_closed"


class BettingWindowStillOpen(RoundError):
    """Players who have not acted are excluded only once the deadline has passed."""

    rule = "round.betting_window_still_open"


class NobodyToExclude(RoundError):
    """Exclusion applies only to participants who have neither pressed Deal nor passed."""

    rule = "round.nobody_to_exclude"


class CoupAlreadyDealt(RoundError):
    """A round's coup is dealt once, and nothing about its bets changes after that."""

    rule = "round.coup_already_dealt"


class RoundAlreadyVoided(RoundError):
    """A voided round is over; it cannot be voided again or played on."""

    rule = "round.already_voided"


class BetRuleBroken(RoundError):
    """A command about bets breaks one of the round's betting rules."""

    rule = "bet.rule_broken"


class NoBetsToRemove(BetRuleBroken):
    """Only bets that are on the layout can be removed."""

    rule = "bet.none_to_remove"


class NoPreviousBets(BetRuleBroken):
    """Rebet repeats the bets of the player's last round at this seat, so there must be one."""

    rule = "rebet.no_previous_bets"


class RebetOverBets(BetRuleBroken):
    """Rebet repeats the last round's bets onto an empty layout, never on top of new bets."""

    rule = "rebet.bets_already_placed"


class DealNeedsABet(BetRuleBroken):
    """Deal plays the player's bets, so at least one must be on the layout; Pass skips the coup."""

    rule = "deal.requires_a_bet"


class PlayersStillToAct(RoundError):
    """The coup is dealt only once every participant has pressed Deal, passed or been excluded."""

    rule = "deal.players_still_to_act"


class RecordedDealDiffers(RoundError):
    """An interrupted deal is completed only from the shoe position that produced its cards."""

    rule = "deal.recorded_cards_differ"


class VoidNeedsAReason(RoundError):
    """A void records why the round was voided, for players and regulators."""

    rule = "void.reason_required"


class ShoeError(DomainError):
    """A command breaks one of the rules of the table's shoe."""

    rule = "shoe.rule_broken"


class ShoeAlreadyOpen(ShoeError):
    """A table deals from one shoe at a time; a new one opens after the last is revealed."""

    rule = "shoe.already_open"


class NoShoeOpen(ShoeError):
    """A coup is dealt, and a shoe retired, only from a shoe the table has opened."""

    rule = "shoe.none_open"


class ShoeNonceOutOfOrder(ShoeError):
    """A table's shoes take the nonces 1, 2, 3, ... in order, so no two share a card stream."""

    rule = "shoe.nonce_out_of_order"


class ShoeCountsInvalid(ShoeError):
    """A shoe deals 70 to 75 hands from the table's own number of decks."""

    rule = "shoe.counts_invalid"


class WrongShoe(ShoeError):
    """A coup is dealt from the open shoe, at the next undealt position."""

    rule = "shoe.wrong_shoe_or_position"


class ShoeStillDealing(ShoeError):
    """A shoe retires only once it can start no further coup."""

    rule = "shoe.still_dealing"


class ShoeNotRetired(ShoeError):
    """A shoe's server seed is revealed only after the shoe has retired."""

    rule = "shoe.not_retired"


class RevealedSeedDiffers(ShoeError):
    """A revealed server seed must hash to the commitment published when the shoe opened."""

    rule = "shoe.revealed_seed_differs"


class ModerationError(DomainError):
    """A moderation command breaks one of its rules."""

    rule = "moderation.rule_broken"


class PlayerAlreadyMuted(ModerationError):
    """A muted player is muted once, until unmuted."""

    rule = "moderation.already_muted"


class PlayerNotMuted(ModerationError):
    """Only a muted player can be unmuted."""

    rule = "moderation.not_muted"


class PlayerAlreadyRemoved(ModerationError):
    """A player is removed from a table once; the removal stands."""

    rule = "moderation.already_removed"


class RemovalNeedsAReason(ModerationError):
    """A removal records why, for the player and for regulators."""

    rule = "moderation.reason_required"


class PlayerBarred(SeatError):
    """A player removed from a table by ops may not sit at it again."""

    rule = "seat.player_removed_from_table"


class TableIsSuspended(RoundError):
    """A table suspended after a malfunction refuses play until ops reopen it."""

    rule = "round.table_suspended"


class TableNotSuspended(RoundError):
    """Only a suspended table can be reopened."""

    rule = "round.table_not_suspended"


class MalfunctionNeedsAReason(RoundError):
    """A malfunction records why, for players and regulators."""

    rule = "void.reason_required"


class MalfunctionScopeInvalid(RoundError):
    """A malfunction names the current round, some rounds, or a time range, and nothing else."""

    rule = "void.scope_invalid"


class MalfunctionVoidsNothing(RoundError):
    """A malfunction voids at least one round that holds a stake or a card."""

    rule = "void.scope_voids_nothing"


class ClientSeedNotRotated(ShoeError):
    """After ops rotate the next shoe's client seed, that shoe opens with it."""

    rule = "shoe.client_seed_not_the_rotated_one"
