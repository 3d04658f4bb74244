"""The wallet service: ops movements, balances and the statement with its running balance."""

from datetime import UTC, datetime

import pytest

from domain.outcome import Outcome, Spot
from domain.wallet import InsufficientFunds, ReasonRequired
from events.memory import InMemoryEventStore
from events.store import Idempotency
from service.application.actor import Actor
from service.application.wallets import WalletService
from tests.unit.test_game_service import FRONTEND, Casino

NOW = datetime(2024, 5, 3, 20, 0, tzinfo=UTC)
OPS = Actor("ops-1", "ops")


def wallets() -> tuple[InMemoryEventStore, WalletService]:
    store = InMemoryEventStore(clock=lambda: NOW)
    return store, WalletService(store, lambda: NOW)


def test_deposits_withdrawals_and_corrections_move_the_balance() -> None:
    _, service = wallets()
    service.deposit("alice", 10_000, "card", OPS)
    service.withdraw("alice", 2_500, "cash out", OPS)
    service.correct("alice", -500, "duplicate credit", OPS)
    balance = service.balance("alice")
    assert (balance.available, balance.reserved, balance.version) == (7_000, 0, 3)


def test_a_refused_movement_appends_nothing() -> None:
    store, service = wallets()
    service.deposit("alice", 1_000, "card", OPS)
    with pytest.raises(InsufficientFunds):
        service.withdraw("alice", 1_001, "cash out", OPS)
    with pytest.raises(ReasonRequired):
        service.deposit("alice", 1_000, "", OPS)
    assert store.head() == 1


def test_a_repeated_deposit_key_credits_once() -> None:
    _, service = wallets()
    actor = Actor("ops-1", "ops", "r1", Idempotency("dep-1", "alice 100"))
    first = service.deposit("alice", 10_000, "card", actor)
    assert service.deposit("alice", 10_000, "card", actor) == first
    assert service.balance("alice").available == 10_000


def test_an_unused_wallet_is_empty() -> None:
    _, service = wallets()
    balance = service.balance("nobody")
    assert (balance.available, balance.reserved, balance.version) == (0, 0, 0)


def test_the_statement_lists_every_movement_newest_first_with_running_balances() -> None:
    casino = Casino(first_coup=Outcome.BANKER)
    casino.table()
    casino.seat("alice")
    casino.game.place_bet("T1", "alice", Spot.BANKER, 1_000, FRONTEND)
    casino.game.press_deal("T1", "alice", FRONTEND)
    casino.wallets.withdraw("alice", 500, "cash out", OPS)
    entries = casino.wallets.statement("alice")
    assert [(e.type, e.amount, e.reserved_change, e.available_after) for e in entries] == [
        ("Withdrawn", -500, 0, 10_450),
        ("PayoutCredited", 1_950, -1_000, 10_950),
        ("StakeReserved", -1_000, 1_000, 9_000),
        ("Deposited", 10_000, 0, 10_000),
    ]
    assert entries[1].commission == 50
    assert entries[1].round_id == "T1-1"
    page = casino.wallets.statement("alice", limit=2, before=entries[1].version)
    assert [e.type for e in page] == ["StakeReserved", "Deposited"]
