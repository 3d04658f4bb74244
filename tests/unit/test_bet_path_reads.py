"""What a bet reads: cached state trusted under the append's versions, and key lookups."""

from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import pytest

from domain.errors import BetAbovePlayerLimit
from domain.outcome import Spot
from domain.table import TableSettings
from domain.wallet import InsufficientFunds
from events.memory import InMemoryEventStore
from events.store import (
    AppendResult,
    EventMetadata,
    Idempotency,
    IdempotencyRecord,
    OutboxRow,
    RecordedEvent,
    StreamAppend,
)
from service.application.actor import Actor
from service.application.appends import note_looked_up
from service.application.game.tables import GameService
from service.application.players import PlayerService
from service.application.wallets import WalletService

T0 = datetime(2024, 5, 3, 20, 0, tzinfo=UTC)
OPS = Actor("ops-1", "ops")
FRONTEND = Actor("frontend-1", "frontend")


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


class CountingStore(InMemoryEventStore):
    """The in-memory store, counting the reads of each stream and the key lookups."""

    def __init__(self, clock: Clock) -> None:
        super().__init__(clock=clock)
        self.stream_reads: Counter[str] = Counter()
        self.key_lookups = 0
        self.appends = 0

    def append(
        self,
        streams: Sequence[StreamAppend],
        metadata: EventMetadata,
        idempotency: Idempotency | None = None,
        outbox: Sequence[OutboxRow] = (),
    ) -> AppendResult:
        self.appends += 1
        return super().append(streams, metadata, idempotency, outbox)

    def read_stream(
        self, stream_id: str, from_version: int = 1, *, upcast: bool = True
    ) -> list[RecordedEvent]:
        self.stream_reads[stream_id] += 1
        return super().read_stream(stream_id, from_version, upcast=upcast)

    def idempotency_record(self, key: str) -> IdempotencyRecord | None:
        self.key_lookups += 1
        return super().idempotency_record(key)


class Casino:
    """A table with alice seated and funded; the player service stands for another process."""

    def __init__(self) -> None:
        self.clock = Clock()
        self.store = CountingStore(self.clock)
        self.game = GameService(self.store, self.clock, client_seeds=lambda: "reads")
        # Its own caches: a limit it sets is news to the game service, as from another worker.
        self.players = PlayerService(self.store, self.clock)
        WalletService(self.store, self.clock).deposit("alice", 1_000_000, "float", OPS)
        self.game.create_table("T1", TableSettings(), OPS)
        self.game.sit("T1", "alice", 1, FRONTEND)

    def bet(self, stake: int, actor: Actor = FRONTEND) -> None:
        self.game.place_bet("T1", "alice", Spot.BANKER, stake, actor)


def test_a_bet_after_this_process_s_own_append_reads_nothing_and_appends_once() -> None:
    casino = Casino()
    casino.bet(1_000)
    casino.store.stream_reads.clear()
    appends = casino.store.appends
    casino.bet(1_000)
    casino.bet(1_000)
    assert casino.store.stream_reads == Counter()
    assert casino.store.appends == appends + 2


def test_a_table_moved_on_by_another_process_conflicts_once_and_the_retry_reads_it() -> None:
    casino = Casino()
    casino.bet(1_000)
    elsewhere = GameService(casino.store, casino.clock, client_seeds=lambda: "reads")
    elsewhere.place_bet("T1", "alice", Spot.PLAYER, 1_000, FRONTEND)
    casino.store.stream_reads.clear()
    appends = casino.store.appends
    casino.bet(1_000)
    assert casino.store.appends == appends + 2  # the stale one refused, then the bet
    assert casino.store.stream_reads["table:T1"] == 1
    bets = [e for e in casino.store.read_all(0, 1000) if e.type == "BetPlaced"]
    assert len(bets) == 3


def test_a_wallet_drained_by_another_process_is_never_overdrawn_from_the_cache() -> None:
    casino = Casino()
    casino.bet(1_000)  # the game service now caches alice's wallet with plenty in it
    wallets = WalletService(casino.store, casino.clock)
    available = wallets.balance("alice").available
    wallets.withdraw("alice", available - 500, "cash out", OPS)
    head = casino.store.head()
    with pytest.raises(InsufficientFunds):
        casino.bet(1_000)
    assert casino.store.head() == head
    assert wallets.balance("alice").available == 500


def test_a_refusal_on_a_stale_cached_wallet_is_decided_again_on_the_log() -> None:
    casino = Casino()
    wallets = WalletService(casino.store, casino.clock)
    wallets.withdraw("alice", wallets.balance("alice").available, "cash out", OPS)
    with pytest.raises(InsufficientFunds):
        casino.bet(1_000)  # the game service now caches an empty wallet
    wallets.deposit("alice", 5_000, "top up", OPS)
    casino.bet(1_000)
    assert wallets.balance("alice").available == 4_000


def test_a_limit_lowered_elsewhere_still_refuses_a_bet_over_it() -> None:
    casino = Casino()
    casino.bet(1_000)  # the game service now caches "no limit"
    casino.players.set_limit("alice", 2_000, FRONTEND)
    head = casino.store.head()
    with pytest.raises(BetAbovePlayerLimit):
        casino.bet(1_500)
    assert casino.store.head() == head


def test_a_limit_raised_elsewhere_is_not_refused_on_the_stale_cached_one() -> None:
    casino = Casino()
    casino.players.set_limit("alice", 2_000, FRONTEND)
    casino.bet(2_000)  # the game service now caches the £20 limit
    casino.clock.now += timedelta(days=8)
    casino.players.set_limit("alice", None, FRONTEND)
    casino.bet(5_000)
    assert casino.store.stream_reads["player:alice"] >= 2


def test_a_key_the_caller_has_looked_up_is_not_looked_up_again() -> None:
    casino = Casino()
    idempotency = Idempotency("frontend-1:k1", "bet alice")
    note_looked_up(idempotency)
    casino.bet(1_000, Actor("frontend-1", "frontend", "req-1", idempotency))
    assert casino.store.key_lookups == 0


def test_a_key_not_looked_up_by_the_caller_is_still_replayed() -> None:
    casino = Casino()
    noted = Idempotency("frontend-1:k1", "bet alice")
    note_looked_up(noted)
    # An equal key in a new object is another request's: it must be looked up and replayed.
    actor = Actor("frontend-1", "frontend", "req-1", Idempotency("frontend-1:k1", "bet alice"))
    casino.bet(1_000, actor)
    head = casino.store.head()
    casino.bet(1_000, actor)
    assert casino.store.head() == head
    assert casino.store.key_lookups == 2
