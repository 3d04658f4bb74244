"""A player's wallet as a pure aggregate: what they can stake now, and what is on a layout.

`available` is what the player may stake or withdraw; `reserved` is the sum of stakes on a
layout that are neither returned nor settled. A bet moves its stake from available to reserved
(`StakeReserved`); each reserved stake leaves exactly once, by `StakeReturned` (back to
available) or `PayoutCredited` (the payout, stake included, to available; 0 for a lost bet).

Ops move money with deposits, withdrawals and signed corrections, each with a reason. Only
a player's own actions can never overdraw: a withdrawal or a stake needs the money available.
`SettlementReversed`, the wallet's side of a voided settled round, takes back the payout and
returns the stake even if the player has spent the winnings since, so it may leave the balance
negative: it is the house correcting its own error, not the player borrowing, and the debt
shows on the statement until the next deposit covers it.
"""

# ruff: noqa: N818 -- each refusal is named after the rule it enforces, as in domain/errors.py.

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar, TypeAlias

from domain.errors import DomainError
from domain.limits import pounds
from domain.outcome import Spot

MAX_AMOUNT = 1_000_000_000_00
"""The largest single movement, £1bn: anything larger is a typing error, not a deposit."""


class WalletError(DomainError):
    """A command breaks one of the wallet's rules."""

    rule = "wallet.rule_broken"


class AmountNotPositive(WalletError):
    """Deposits, withdrawals and stakes move a positive number of pence."""

    rule = "wallet.amount_not_positive"


class AmountTooLarge(WalletError):
    """A single movement of money is at most £1bn."""

    rule = "wallet.amount_too_large"


class CorrectionIsZero(WalletError):
    """A correction changes the balance: zero pence corrects nothing."""

    rule = "wallet.correction_zero"


class ReasonRequired(WalletError):
    """Every deposit, withdrawal and correction by ops records why."""

    rule = "wallet.reason_required"


class InsufficientFunds(WalletError):
    """A stake or withdrawal needs that much money available; the wallet never overdraws."""

    rule = "wallet.insufficient_funds"

    def __init__(self, message: str, available: int, needed: int) -> None:
        super().__init__(message)
        self.available = available
        self.needed = needed


class StakeNotReserved(WalletError):
    """A stake is returned or settled once, and only if it was reserved for that bet."""

    rule = "wallet.stake_not_reserved"


# Events.


@dataclass(frozen=True, slots=True)
class Deposited:
    """Ops paid money into the wallet.

    Schema 2 added `reference`: the payment's reference at the cashier or payment provider,
    None when there was none. A schema 1 payload has no such key; it is read as None (the
    service's upcaster lifts it, service/application/upcasters.py).
    """

    type: ClassVar[str] = "Deposited"
    schema_version: ClassVar[int] = 2
    amount: int
    reason: str
    reference: str | None


@dataclass(frozen=True, slots=True)
class Withdrawn:
    """Ops paid money out of the wallet."""

    type: ClassVar[str] = "Withdrawn"
    amount: int
    reason: str


@dataclass(frozen=True, slots=True)
class Corrected:
    """Ops corrected the balance by a signed amount."""

    type: ClassVar[str] = "Corrected"
    amount: int
    reason: str


@dataclass(frozen=True, slots=True)
class StakeReserved:
    """A bet's stake left the available balance for a layout."""

    type: ClassVar[str] = "StakeReserved"
    table_id: str
    round_id: str
    spot: Spot
    stake: int


@dataclass(frozen=True, slots=True)
class StakeReturned:
    """A reserved stake came back unplayed; `reason` is the round's ReturnReason."""

    type: ClassVar[str] = "StakeReturned"
    table_id: str
    round_id: str
    spot: Spot
    stake: int
    reason: str


@dataclass(frozen=True, slots=True)
class PayoutCredited:
    """A reserved stake was settled: `payout` (stake included, 0 if lost) became available."""

    type: ClassVar[str] = "PayoutCredited"
    table_id: str
    round_id: str
    spot: Spot
    stake: int
    payout: int
    commission: int


@dataclass(frozen=True, slots=True)
class SettlementReversed:
    """A voided round's settlement was undone: the payout taken back, the stake returned."""

    type: ClassVar[str] = "SettlementReversed"
    table_id: str
    round_id: str
    spot: Spot
    stake: int
    payout: int
    commission: int


WalletEvent: TypeAlias = (
    Deposited
    | Withdrawn
    | Corrected
    | StakeReserved
    | StakeReturned
    | PayoutCredited
    | SettlementReversed
)
WALLET_EVENT_TYPES: tuple[type[WalletEvent], ...] = (
    Deposited,
    Withdrawn,
    Corrected,
    StakeReserved,
    StakeReturned,
    PayoutCredited,
    SettlementReversed,
)

BetKey: TypeAlias = tuple[str, str, Spot]
"""A reserved bet: (table_id, round_id, spot); placements on one spot add up to one bet."""


# State.


@dataclass(frozen=True, slots=True)
class Wallet:
    """A wallet's balances in pence and the stakes it has on layouts."""

    player_id: str
    available: int = 0
    reserved: int = 0
    open_stakes: Mapping[BetKey, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        """Available plus reserved: the player's money, counting stakes on a layout."""
        return self.available + self.reserved


# Commands.


@dataclass(frozen=True, slots=True)
class Deposit:
    """Pay money in, saying why, with the payment's reference if it has one."""

    amount: int
    reason: str
    reference: str | None = None


@dataclass(frozen=True, slots=True)
class Withdraw:
    """Pay money out, saying why; never more than is available."""

    amount: int
    reason: str


@dataclass(frozen=True, slots=True)
class Correct:
    """Correct the balance by a signed amount, saying why."""

    amount: int
    reason: str


@dataclass(frozen=True, slots=True)
class ReserveStake:
    """Take a bet's stake from the available balance."""

    table_id: str
    round_id: str
    spot: Spot
    stake: int


@dataclass(frozen=True, slots=True)
class ReturnStake:
    """Give a reserved stake back unplayed."""

    table_id: str
    round_id: str
    spot: Spot
    stake: int
    reason: str


@dataclass(frozen=True, slots=True)
class CreditPayout:
    """Settle a reserved stake with its payout."""

    table_id: str
    round_id: str
    spot: Spot
    stake: int
    payout: int
    commission: int


@dataclass(frozen=True, slots=True)
class ReverseSettlement:
    """Undo a settled bet of a voided round."""

    table_id: str
    round_id: str
    spot: Spot
    stake: int
    payout: int
    commission: int


WalletCommand: TypeAlias = (
    Deposit | Withdraw | Correct | ReserveStake | ReturnStake | CreditPayout | ReverseSettlement
)


def decide_wallet(wallet: Wallet, command: WalletCommand) -> list[WalletEvent]:
    """The events `command` causes, or a WalletError naming the rule that refuses it."""
    match command:
        case Deposit(amount=amount, reason=reason, reference=reference):
            _check_amount(amount)
            _check_reason(reason)
            return [Deposited(amount, reason, reference)]
        case Withdraw(amount=amount, reason=reason):
            _check_amount(amount)
            _check_reason(reason)
            _check_available(wallet, amount, "withdraw")
            return [Withdrawn(amount, reason)]
        case Correct(amount=amount, reason=reason):
            if amount == 0:
                raise CorrectionIsZero(
                    f"a correction of £0 changes nothing (rule {CorrectionIsZero.rule})"
                )
            _check_amount(abs(amount))
            _check_reason(reason)
            return [Corrected(amount, reason)]
        case ReserveStake(table_id=table_id, round_id=round_id, spot=spot, stake=stake):
            _check_amount(stake)
            _check_available(wallet, stake, "stake")
            return [StakeReserved(table_id, round_id, Spot(spot), stake)]
        case ReturnStake(table_id=table_id, round_id=round_id, spot=spot, stake=stake):
            _check_reserved(wallet, (table_id, round_id, Spot(spot)), stake)
            return [StakeReturned(table_id, round_id, Spot(spot), stake, command.reason)]
        case CreditPayout(table_id=table_id, round_id=round_id, spot=spot, stake=stake):
            _check_reserved(wallet, (table_id, round_id, Spot(spot)), stake)
            if command.payout < 0:
                raise ValueError(f"a payout is not negative: {command.payout}")
            return [
                PayoutCredited(
                    table_id, round_id, Spot(spot), stake, command.payout, command.commission
                )
            ]
        case ReverseSettlement():
            # No exactly-once check here: the wallet keeps no history of settled bets, and the
            # table refuses to void a round twice, which is what would reverse a bet twice.
            return [
                SettlementReversed(
                    command.table_id,
                    command.round_id,
                    Spot(command.spot),
                    command.stake,
                    command.payout,
                    command.commission,
                )
            ]
    raise AssertionError(f"unhandled command {command!r}")  # pragma: no cover


def _check_amount(amount: int) -> None:
    if isinstance(amount, bool) or not isinstance(amount, int):
        raise TypeError(f"money is an integer number of pence, not {amount!r}")
    if amount <= 0:
        raise AmountNotPositive(
            f"an amount is a positive number of pence, not {amount} (rule {AmountNotPositive.rule})"
        )
    if amount > MAX_AMOUNT:
        raise AmountTooLarge(
            f"a single movement is at most {pounds(MAX_AMOUNT)}, not {pounds(amount)} "
            f"(rule {AmountTooLarge.rule})"
        )


def _check_reason(reason: str) -> None:
    if not reason.strip():
        raise ReasonRequired(f"ops must say why money moves (rule {ReasonRequired.rule})")


def _check_available(wallet: Wallet, needed: int, what: str) -> None:
    if needed > wallet.available:
        raise InsufficientFunds(
            f"cannot {what} {pounds(needed)}: {pounds(max(wallet.available, 0))} is available "
            f"(rule {InsufficientFunds.rule})",
            available=wallet.available,
            needed=needed,
        )


def _check_reserved(wallet: Wallet, key: BetKey, stake: int) -> None:
    held = wallet.open_stakes.get(key)
    if held != stake:
        table_id, round_id, spot = key
        raise StakeNotReserved(
            f"no reserved stake of {pounds(stake)} on {spot} in round {round_id} at table "
            f"{table_id} (reserved: {pounds(held or 0)}) (rule {StakeNotReserved.rule})"
        )


# Evolving.


def evolve_wallet(wallet: Wallet, event: WalletEvent) -> Wallet:
    """The wallet after `event`."""
    match event:
        case Deposited(amount=amount) | Corrected(amount=amount):
            return _moved(wallet, available=amount)
        case Withdrawn(amount=amount):
            return _moved(wallet, available=-amount)
        case StakeReserved():
            key = (event.table_id, event.round_id, event.spot)
            stakes = dict(wallet.open_stakes)
            stakes[key] = stakes.get(key, 0) + event.stake
            return _moved(wallet, -event.stake, event.stake, stakes)
        case StakeReturned():
            return _released(wallet, event, event.stake)
        case PayoutCredited():
            return _released(wallet, event, event.payout)
        case SettlementReversed():
            return _moved(wallet, available=event.stake - event.payout)
    raise AssertionError(f"unhandled event {event!r}")  # pragma: no cover


def replay_wallet(player_id: str, events: list[WalletEvent]) -> Wallet:
    """A wallet rebuilt from its events; a wallet with none is empty."""
    wallet = Wallet(player_id)
    for event in events:
        wallet = evolve_wallet(wallet, event)
    return wallet


def _moved(
    wallet: Wallet,
    available: int = 0,
    reserved: int = 0,
    open_stakes: Mapping[BetKey, int] | None = None,
) -> Wallet:
    return Wallet(
        wallet.player_id,
        wallet.available + available,
        wallet.reserved + reserved,
        wallet.open_stakes if open_stakes is None else open_stakes,
    )


def _released(wallet: Wallet, event: StakeReturned | PayoutCredited, credit: int) -> Wallet:
    stakes = dict(wallet.open_stakes)
    stakes.pop((event.table_id, event.round_id, event.spot), None)
    return _moved(wallet, credit, -event.stake, stakes)
