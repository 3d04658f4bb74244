"""The game service over the in-memory store: rounds, the deal, the window, shoes, idempotency."""

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from functools import cache

import pytest

from domain.errors import BetAbovePlayerLimit
from domain.outcome import Outcome, Spot
from domain.round import (
    BetSettled,
    CardDrawn,
    CoupCompleted,
    DealPressed,
    ExclusionReason,
    PlayerExcluded,
    RoundEndedWithoutPlay,
    RoundOpened,
    RoundSettled,
)
from domain.round_errors import AlreadyPressedDeal, PlayerBarred
from domain.shoe import ServerSeed, commitment, shuffle_shoe
from domain.table import (
    PlayerRemoved,
    ShoeOpened,
    ShoeRetired,
    ShoeRevealed,
    TableSettings,
)
from domain.tableau import deal_coup
from domain.wallet import (
    InsufficientFunds,
    PayoutCredited,
    StakeReserved,
    StakeReturned,
    Wallet,
)
from events.memory import InMemoryEventStore
from events.store import (
    AppendResult,
    ConcurrencyConflict,
    EventMetadata,
    Idempotency,
    IdempotencyKeyReused,
    OutboxRow,
    StreamAppend,
)
from service.application.actor import Actor
from service.application.appends import Patience, Receipt
from service.application.chat import ChatService
from service.application.errors import Conflict, TableNotFound
from service.application.game.tables import GameService
from service.application.game.views import IDLE
from service.application.players import PlayerService
from service.application.streams import DomainEvent
from service.application.wallets import WalletService

T0 = datetime(2024, 5, 3, 20, 0, tzinfo=UTC)
CLIENT_SEED = "table-tests"
OPS = Actor("ops-1", "ops")
FRONTEND = Actor("frontend-1", "frontend")


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


class RecordingScheduler:
    """Remembers every window it was asked to close."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, datetime]] = []

    def schedule_window_close(self, table_id: str, round_id: str, at: datetime) -> None:
        self.calls.append((table_id, round_id, at))


@cache
def seed_whose_first_coup_is(outcome: Outcome) -> str:
    """A server seed whose shoe (nonce 1, 8 decks) opens with a coup of this outcome."""
    for number in range(1, 500):
        seed = f"{number:064x}"
        shoe = shuffle_shoe(seed, CLIENT_SEED, 1, 8)
        if deal_coup(shoe.cards, 0).outcome is outcome:
            return seed
    raise AssertionError(f"no seed found for {outcome}")


class Casino:
    """The services wired over one in-memory store and one hand-moved clock."""

    def __init__(self, first_coup: Outcome = Outcome.BANKER) -> None:
        self.clock = Clock()
        self.store = InMemoryEventStore(clock=self.clock)
        self.scheduler = RecordingScheduler()
        self.seeds = [seed_whose_first_coup_is(first_coup)]
        self.game = GameService(
            self.store,
            self.clock,
            self.scheduler,
            seeds=self.next_seed,
            client_seeds=lambda: CLIENT_SEED,
        )
        self.wallets = WalletService(self.store, self.clock)
        self.players = PlayerService(self.store, self.clock)

    def next_seed(self) -> ServerSeed:
        seed = self.seeds.pop(0) if self.seeds else f"{len(self.store.read_all()):064x}"
        return ServerSeed(seed)

    def table(self, table_id: str = "T1", seats: int = 7) -> None:
        self.game.create_table(table_id, TableSettings(seats=seats), OPS)

    def fund(self, player_id: str, pence: int) -> None:
        self.wallets.deposit(player_id, pence, "test float", OPS)

    def seat(self, *players: str, table_id: str = "T1") -> None:
        for number, player in enumerate(players, start=1):
            self.fund(player, 10_000)
            self.game.sit(table_id, player, number, FRONTEND)

    def available(self, player_id: str) -> int:
        return self.wallets.balance(player_id).available


def of_type(events: Sequence[DomainEvent], kind: type[DomainEvent]) -> list[DomainEvent]:
    return [event for event in events if isinstance(event, kind)]


def test_a_full_round_with_mixed_bets_a_pass_and_a_timeout_settles_by_the_rules() -> None:
    casino = Casino(first_coup=Outcome.BANKER)
    casino.table()
    casino.seat("alice", "bob", "carol", "dave")
    game = casino.game
    opened = game.place_bet("T1", "alice", Spot.BANKER, 1_000, FRONTEND)
    round_id = next(e for e in opened.events if isinstance(e, RoundOpened)).round_id
    game.place_bet("T1", "bob", Spot.PLAYER, 2_000, FRONTEND)
    game.place_bet("T1", "bob", Spot.TIE, 500, FRONTEND)
    game.place_bet("T1", "carol", Spot.BANKER, 1_000, FRONTEND)
    game.place_bet("T1", "dave", Spot.PLAYER, 1_000, FRONTEND)
    game.press_deal("T1", "alice", FRONTEND)
    game.press_deal("T1", "bob", FRONTEND)
    game.pass_turn("T1", "carol", FRONTEND)
    # Dave never acts: his window closes at the deadline and the job deals.
    assert casino.scheduler.calls == [("T1", round_id, T0 + timedelta(seconds=15))]
    casino.clock.advance(15)
    dealt = game.close_window("T1", round_id)
    assert dealt is not None

    excluded = of_type(dealt.events, PlayerExcluded)
    assert excluded == [PlayerExcluded(round_id, 4, "dave", ExclusionReason.TIMED_OUT)]
    (coup,) = of_type(dealt.events, CoupCompleted)
    assert isinstance(coup, CoupCompleted)
    assert coup.outcome is Outcome.BANKER
    cards = of_type(dealt.events, CardDrawn)
    assert [c.position for c in cards if isinstance(c, CardDrawn)] == list(range(len(cards)))
    settled = {
        (e.player_id, e.spot): (e.payout, e.commission)
        for e in dealt.events
        if isinstance(e, BetSettled)
    }
    # Banker £10 wins even money less 5% of the win: £19.50 back, 50p commission; Bob's
    # Player and Tie bets lose everything; Carol passed and Dave timed out, so theirs return.
    assert settled == {
        ("alice", Spot.BANKER): (1_950, 50),
        ("bob", Spot.PLAYER): (0, 0),
        ("bob", Spot.TIE): (0, 0),
    }
    assert casino.available("alice") == 10_000 - 1_000 + 1_950
    assert casino.available("bob") == 10_000 - 2_000 - 500
    assert casino.available("carol") == 10_000
    assert casino.available("dave") == 10_000
    for player in ("alice", "bob", "carol", "dave"):
        assert casino.wallets.balance(player).reserved == 0
    # The round with play is followed at once by the next, in the same append.
    assert of_type(dealt.events, RoundSettled) == [RoundSettled(round_id)]
    (next_round,) = of_type(dealt.events, RoundOpened)
    assert isinstance(next_round, RoundOpened)
    assert next_round.participants == ((1, "alice"), (2, "bob"), (3, "carol"), (4, "dave"))
    assert game.live_state("T1").round_id == next_round.round_id


def test_the_last_deal_press_deals_settles_and_pays_in_one_append() -> None:
    casino = Casino(first_coup=Outcome.PLAYER)
    casino.table()
    casino.seat("alice", "bob")
    casino.game.place_bet("T1", "alice", Spot.PLAYER, 1_000, FRONTEND)
    casino.game.place_bet("T1", "bob", Spot.BANKER, 2_500, FRONTEND)
    casino.game.press_deal("T1", "alice", FRONTEND)
    head = casino.store.head()
    last = casino.game.press_deal("T1", "bob", FRONTEND)
    # One append: every event of the last press follows the head it found, in order.
    assert casino.store.head() == head + len(last.events)
    assert isinstance(last.events[0], DealPressed)
    payouts = {e.round_id: e for e in last.events if isinstance(e, PayoutCredited) and e.payout > 0}
    assert [p.payout for p in payouts.values()] == [2_000]  # Player £10 wins 1:1
    assert casino.available("alice") == 11_000
    assert casino.available("bob") == 7_500
    streams = {stream for stream in last.versions}
    assert streams == {"table:T1", "wallet:alice", "wallet:bob"}


def test_a_lapsed_window_is_closed_and_dealt_before_the_next_command() -> None:
    casino = Casino()
    casino.table()
    casino.seat("alice", "bob")
    casino.game.place_bet("T1", "alice", Spot.BANKER, 1_000, FRONTEND)
    casino.game.press_deal("T1", "alice", FRONTEND)
    casino.clock.advance(20)
    # No worker ran; the next command to the table closes the window and deals first.
    casino.game.sit("T1", "carol", 3, FRONTEND)
    state = casino.game.live_state("T1")
    assert state.round_number == 2
    assert state.phase == "betting"
    assert casino.available("alice") == 10_000 + 950


@pytest.mark.parametrize("request_kind", ["read the table", "read the state", "read the chat"])
def test_reading_a_table_never_closes_a_lapsed_window(request_kind: str) -> None:
    casino = Casino()
    casino.table()
    casino.seat("alice", "bob")
    casino.game.place_bet("T1", "alice", Spot.BANKER, 1_000, FRONTEND)
    casino.game.press_deal("T1", "alice", FRONTEND)
    casino.clock.advance(20)
    head = casino.store.head()
    chat = ChatService(casino.store, casino.clock, casino.game)
    if request_kind == "read the table":
        casino.game.table("T1")
    elif request_kind == "read the state":
        casino.game.live_state("T1")
    else:
        chat.recent("T1")
    assert casino.store.head() == head
    state = casino.game.live_state("T1")
    assert (state.round_number, state.phase) == (1, "closing")


@pytest.mark.parametrize("request_kind", ["post to the chat", "sit down", "window job"])
def test_every_write_to_a_table_enforces_a_lapsed_window(request_kind: str) -> None:
    casino = Casino()
    casino.table()
    casino.seat("alice", "bob")
    casino.game.place_bet("T1", "alice", Spot.BANKER, 1_000, FRONTEND)
    casino.game.press_deal("T1", "alice", FRONTEND)
    casino.clock.advance(20)
    chat = ChatService(casino.store, casino.clock, casino.game)
    if request_kind == "post to the chat":
        chat.post("T1", "bob", "still here?", FRONTEND)
    elif request_kind == "sit down":
        casino.game.sit("T1", "carol", 3, FRONTEND)
    else:
        casino.game.close_window("T1", "T1-1")
    # Bob never acted: he is excluded and Alice's coup is dealt, with no worker involved.
    assert casino.available("alice") == 10_000 + 950
    assert casino.game.live_state("T1").round_number == 2


def test_a_window_job_for_a_round_already_dealt_does_nothing() -> None:
    casino = Casino()
    casino.table()
    casino.seat("alice")
    receipt = casino.game.place_bet("T1", "alice", Spot.BANKER, 1_000, FRONTEND)
    round_id = next(e for e in receipt.events if isinstance(e, RoundOpened)).round_id
    casino.game.press_deal("T1", "alice", FRONTEND)
    head = casino.store.head()
    casino.clock.advance(15)
    assert casino.game.close_window("T1", round_id) is None
    assert casino.store.head() == head


def test_a_round_nobody_plays_leaves_the_table_idle_until_a_bet() -> None:
    casino = Casino()
    casino.table()
    casino.seat("alice")
    casino.game.place_bet("T1", "alice", Spot.BANKER, 1_000, FRONTEND)
    receipt = casino.game.pass_turn("T1", "alice", FRONTEND)
    assert of_type(receipt.events, RoundEndedWithoutPlay) != []
    assert of_type(receipt.events, RoundOpened) == []
    assert casino.game.live_state("T1").phase == IDLE
    casino.clock.advance(600)
    head = casino.store.head()
    casino.game.live_state("T1")
    assert casino.store.head() == head  # an idle table appends nothing as time passes


def test_a_shoe_opens_with_the_first_round_and_publishes_only_its_commitment() -> None:
    casino = Casino()
    seed = casino.seeds[0]
    casino.table()
    casino.seat("alice")
    receipt = casino.game.place_bet("T1", "alice", Spot.BANKER, 1_000, FRONTEND)
    opened = of_type(receipt.events, ShoeOpened)
    assert opened == [
        ShoeOpened(
            shoe_id=opened[0].shoe_id,  # type: ignore[union-attr]
            server_seed_hash=commitment(seed),
            client_seed=CLIENT_SEED,
            nonce=1,
            decks=8,
            hands=shuffle_shoe(seed, CLIENT_SEED, 1, 8).hands,
        )
    ]
    state = casino.game.live_state("T1")
    assert state.server_seed_hash == commitment(seed)
    assert state.hands_left == shuffle_shoe(seed, CLIENT_SEED, 1, 8).hands
    assert state.cards_left == 416
    assert seed not in repr(state)
    assert all(seed not in repr(event.payload) for event in casino.store.read_all())
    assert casino.store.load_shoe_secret(state.shoe_id or "") == seed


def test_a_spent_shoe_is_retired_and_revealed_in_the_append_that_settles_its_last_coup() -> None:
    casino = Casino()
    seed = casino.seeds[0]
    casino.table()
    casino.seat("alice")
    casino.fund("alice", 1_000_000)
    hands = shuffle_shoe(seed, CLIENT_SEED, 1, 8).hands
    receipt: Receipt | None = None
    for _ in range(hands):
        casino.game.place_bet("T1", "alice", Spot.PLAYER, 100, FRONTEND)
        receipt = casino.game.press_deal("T1", "alice", FRONTEND)
        assert of_type(receipt.events, ShoeRetired) == [] or _ == hands - 1
    assert receipt is not None
    first_shoe = casino.store.read_all(types=["ShoeOpened"])[0].payload["shoe_id"]
    assert of_type(receipt.events, ShoeRetired) == [ShoeRetired(str(first_shoe))]
    assert of_type(receipt.events, ShoeRevealed) == [ShoeRevealed(str(first_shoe), seed)]
    # The next round opens on a new shoe, with the next nonce, in the same append.
    (second,) = of_type(receipt.events, ShoeOpened)
    assert isinstance(second, ShoeOpened)
    assert second.nonce == 2
    assert second.shoe_id != first_shoe
    types = [event.type for event in receipt.events]
    assert types.index("ShoeRevealed") < types.index("ShoeOpened") < types.index("RoundOpened")


def test_a_bet_reserves_its_stake_in_the_same_append_as_the_bet() -> None:
    casino = Casino()
    casino.table()
    casino.seat("alice")
    receipt = casino.game.place_bet("T1", "alice", Spot.TIE, 500, FRONTEND)
    (reserved,) = of_type(receipt.events, StakeReserved)
    assert reserved == StakeReserved("T1", "T1-1", Spot.TIE, 500)
    assert casino.wallets.balance("alice").reserved == 500
    assert casino.available("alice") == 9_500


def test_a_bet_beyond_the_wallet_is_refused_and_appends_nothing() -> None:
    casino = Casino()
    casino.table()
    casino.seat("alice")
    casino.wallets.withdraw("alice", 9_500, "cash out", OPS)
    head = casino.store.head()
    with pytest.raises(InsufficientFunds) as refusal:
        casino.game.place_bet("T1", "alice", Spot.BANKER, 1_000, FRONTEND)
    assert (refusal.value.available, refusal.value.needed) == (500, 1_000)
    assert casino.store.head() == head
    assert casino.store.load_shoe_secret("anything") is None


def test_a_players_own_limit_applies_at_every_table() -> None:
    casino = Casino()
    casino.table("T1")
    casino.table("T2")
    casino.seat("alice", table_id="T1")
    casino.game.sit("T2", "alice", 1, FRONTEND)
    casino.players.set_limit("alice", 2_000, FRONTEND)
    for table_id in ("T1", "T2"):
        casino.game.place_bet(table_id, "alice", Spot.BANKER, 2_000, FRONTEND)
        with pytest.raises(BetAbovePlayerLimit):
            casino.game.place_bet(table_id, "alice", Spot.PLAYER, 100, FRONTEND)


def test_a_repeated_idempotency_key_gets_the_first_answer_and_appends_nothing() -> None:
    casino = Casino()
    casino.table()
    casino.seat("alice", "bob")
    actor = Actor("frontend-1", "frontend", "req-1", Idempotency("key-1", "bet alice 10"))
    first = casino.game.place_bet("T1", "alice", Spot.BANKER, 1_000, actor)
    head = casino.store.head()
    again = casino.game.place_bet("T1", "alice", Spot.BANKER, 1_000, actor)
    assert again.replayed
    assert again == first
    assert again.events == first.events
    assert casino.store.head() == head
    assert casino.wallets.balance("alice").reserved == 1_000
    deal_key = Actor("frontend-1", "frontend", "req-2", Idempotency("key-2", "deal alice"))
    pressed = casino.game.press_deal("T1", "alice", deal_key)
    # A retried Deal is answered as the first was, not refused as a second press.
    assert casino.game.press_deal("T1", "alice", deal_key) == pressed
    with pytest.raises(AlreadyPressedDeal):
        casino.game.press_deal("T1", "alice", FRONTEND)


def test_an_idempotency_key_reused_for_another_request_is_refused() -> None:
    casino = Casino()
    casino.table()
    casino.seat("alice")
    casino.game.place_bet(
        "T1", "alice", Spot.BANKER, 1_000, Actor("f", "frontend", None, Idempotency("k", "a"))
    )
    with pytest.raises(IdempotencyKeyReused):
        casino.game.place_bet(
            "T1", "alice", Spot.BANKER, 2_000, Actor("f", "frontend", None, Idempotency("k", "b"))
        )


def test_the_key_goes_only_on_the_append_of_the_command_not_the_tables_own_catch_up() -> None:
    casino = Casino()
    casino.table()
    casino.seat("alice", "bob")
    casino.game.place_bet("T1", "alice", Spot.BANKER, 1_000, FRONTEND)
    casino.clock.advance(15)
    actor = Actor("frontend-1", "frontend", "req-9", Idempotency("key-9", "bet bob"))
    casino.game.place_bet("T1", "bob", Spot.PLAYER, 1_000, actor)
    keyed = [
        e.metadata.actor for e in casino.store.read_all() if e.metadata.idempotency_key == "key-9"
    ]
    system = [e for e in casino.store.read_all() if e.metadata.role == "system"]
    assert set(keyed) == {"frontend-1"}
    assert system
    assert all(e.metadata.idempotency_key is None for e in system)


def test_removing_a_player_returns_unconfirmed_bets_unseats_and_bars_them() -> None:
    casino = Casino()
    casino.table()
    casino.seat("alice", "bob")
    casino.game.place_bet("T1", "bob", Spot.TIE, 500, FRONTEND)
    receipt = casino.game.remove_player("T1", "bob", "abusive chat", OPS)
    assert of_type(receipt.events, PlayerRemoved) == [PlayerRemoved("bob", 2, "abusive chat")]
    (returned,) = of_type(receipt.events, StakeReturned)
    assert returned == StakeReturned("T1", "T1-1", Spot.TIE, 500, "excluded")
    assert casino.available("bob") == 10_000
    assert casino.game.table("T1").seat_of("bob") is None
    with pytest.raises(PlayerBarred):
        casino.game.sit("T1", "bob", 3, FRONTEND)


def test_commands_to_an_unknown_table_are_not_found() -> None:
    casino = Casino()
    with pytest.raises(TableNotFound):
        casino.game.sit("nowhere", "alice", 1, FRONTEND)
    with pytest.raises(TableNotFound):
        casino.game.live_state("nowhere")


def test_tables_are_listed_in_the_order_they_were_created() -> None:
    casino = Casino()
    for table_id in ("b", "a", "c"):
        casino.table(table_id)
    assert [table.table_id for table in casino.game.list_tables()] == ["b", "a", "c"]


def test_live_state_shows_seats_and_who_has_acted() -> None:
    casino = Casino()
    casino.table(seats=3)
    casino.seat("alice", "bob")
    casino.game.place_bet("T1", "alice", Spot.PLAYER, 1_000, FRONTEND)
    casino.game.press_deal("T1", "alice", FRONTEND)
    casino.game.sit("T1", "carol", 3, FRONTEND)
    state = casino.game.live_state("T1")
    assert [(s.player_id, s.in_round, s.action) for s in state.seats] == [
        ("alice", True, "pressed_deal"),
        ("bob", True, "pending"),
        ("carol", False, None),
    ]
    assert state.seats[0].bets[0].stake == 1_000
    assert state.window_closes_at == T0 + timedelta(seconds=15)


class AlwaysStale(InMemoryEventStore):
    """A store where every append loses its race."""

    def append(
        self,
        streams: Sequence[StreamAppend],
        metadata: EventMetadata,
        idempotency: Idempotency | None = None,
        outbox: Sequence[OutboxRow] = (),
    ) -> AppendResult:
        if any(stream.stream_id == "table:T1" for stream in streams) and metadata.role != "ops":
            raise ConcurrencyConflict("table:T1", 1, 2)
        return super().append(streams, metadata, idempotency, outbox)


def test_a_command_that_keeps_losing_races_gives_up_with_a_conflict() -> None:
    clock = Clock()
    store = AlwaysStale(clock=clock)
    game = GameService(store, clock, patience=Patience(attempts=3))
    game.create_table("T1", TableSettings(), OPS)
    with pytest.raises(Conflict) as conflict:
        game.sit("T1", "alice", 1, FRONTEND)
    assert conflict.value.attempts == 3
    assert conflict.value.streams == ["table:T1"]


def test_a_wallet_read_after_another_append_moved_the_table_on_replans_not_refuses() -> None:
    """A deal reads the table, then each wallet; if another append returns a stake between
    those reads, the wallet no longer holds what the stale table settles. That used to be a
    409 wallet.stake_not_reserved; it is a stale read, so the deal plans again."""
    from domain.table import MalfunctionScope, TableSuspended
    from service.application.malfunctions import MalfunctionService, Scope

    casino = Casino()
    casino.table()
    casino.seat("alice", "bob")
    game = casino.game
    game.place_bet("T1", "alice", Spot.BANKER, 1_000, FRONTEND)
    game.place_bet("T1", "bob", Spot.PLAYER, 1_000, FRONTEND)
    game.press_deal("T1", "alice", FRONTEND)
    load_wallet = game._wallet
    interrupted: list[bool] = []

    def wallet_read_late(player_id: str) -> tuple[int, Wallet]:
        if not interrupted:
            interrupted.append(True)
            # Another process voids the round between this deal's table and wallet reads.
            MalfunctionService(casino.store, casino.clock).declare(
                "T1", "card reader fault", Scope(MalfunctionScope.CURRENT_ROUND), OPS
            )
        return load_wallet(player_id)

    # Both loaders: the first attempt trusts the cached wallet, a retry reads it.
    game._wallet = wallet_read_late  # type: ignore[method-assign]
    game._cached_wallet = wallet_read_late  # type: ignore[method-assign]
    with pytest.raises(Exception) as refused:  # noqa: PT011 - any refusal but the stale read's
        game.press_deal("T1", "bob", FRONTEND)
    assert interrupted == [True]
    assert getattr(refused.value, "rule", None) != "wallet.stake_not_reserved"
    assert not isinstance(refused.value, Conflict)
    events = casino.store.read_stream("table:T1")
    assert any(e.type == TableSuspended.type for e in events)
    assert casino.available("alice") == 10_000
    assert casino.available("bob") == 10_000
