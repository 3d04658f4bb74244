"""The event codec and the state caches of service/streams.py."""

import typing
from dataclasses import fields
from datetime import UTC, datetime
from typing import Any

import pytest

from domain.outcome import Outcome, Spot
from domain.round import ExclusionReason, ReturnReason
from domain.table import TableSettings, replay
from domain.tableau import Hand
from events.canonical import normalise
from events.memory import InMemoryEventStore
from events.store import EventMetadata, RecordedEvent, StreamAppend
from service.application.actor import Actor
from service.application.game.tables import GameService
from service.application.streams import (
    EVENT_REGISTRY,
    TableCache,
    decode,
    from_recorded,
    table_stream,
    to_new_event,
)
from service.application.wallets import WalletCache, WalletService

NOW = datetime(2024, 5, 3, 20, 0, tzinfo=UTC)

SAMPLES: dict[Any, Any] = {
    str: "x-1",
    int: 7,
    bool: True,
    Spot: Spot.BANKER,
    Outcome: Outcome.TIE,
    Hand: Hand.PLAYER,
    ReturnReason: ReturnReason.PASSED,
    ExclusionReason: ExclusionReason.REMOVED,
}


def sample_value(hint: Any) -> Any:
    """A plausible value of a field's type."""
    if hint in SAMPLES:
        return SAMPLES[hint]
    arguments = typing.get_args(hint)
    if typing.get_origin(hint) is tuple:
        return (sample_value(arguments[0]), sample_value(arguments[0]))
    if type(None) in arguments:
        return sample_value(next(a for a in arguments if a is not type(None)))
    raise AssertionError(f"no sample for {hint}")


def sample(cls: type[Any]) -> Any:
    """An instance of an event class with a plausible value in every field."""
    hints = typing.get_type_hints(cls)
    return cls(**{f.name: sample_value(hints[f.name]) for f in fields(cls)})


@pytest.mark.parametrize(
    ("category", "cls"),
    [(category, cls) for (category, _), cls in EVENT_REGISTRY.items()],
    ids=[f"{category}:{name}" for category, name in EVENT_REGISTRY],
)
def test_every_event_type_survives_a_trip_through_the_store_format(
    category: str, cls: type[Any]
) -> None:
    event = sample(cls)
    stored = to_new_event(event)
    assert stored.type == cls.type
    payload = normalise(stored.payload)  # as the store canonicalises it
    assert isinstance(payload, dict)
    assert decode(category, stored.type, payload) == event


def test_the_registry_covers_table_wallet_player_and_chat_streams() -> None:
    categories = {category for category, _ in EVENT_REGISTRY}
    assert categories == {"table", "wallet", "player", "chat", "seamless"}
    # Same name, different facts: told apart by the stream they are in.
    assert EVENT_REGISTRY["table", "StakeReturned"] is not EVENT_REGISTRY["wallet", "StakeReturned"]


def test_an_unknown_event_type_is_an_error_not_a_guess() -> None:
    with pytest.raises(KeyError):
        decode("wallet", "BetPlaced", {})


def test_the_table_cache_reads_only_events_after_its_version() -> None:
    store = InMemoryEventStore(clock=lambda: NOW)
    game = GameService(store, lambda: NOW)
    actor = Actor("ops", "ops")
    game.create_table("T1", TableSettings(), actor)
    game.sit("T1", "alice", 1, actor)
    cache = TableCache(capacity=2)
    version, table = cache.table(store, "T1")
    assert version == 2
    reads: list[int] = []
    original = store.read_stream

    def counting(
        stream_id: str, from_version: int = 1, *, upcast: bool = True
    ) -> list[RecordedEvent]:
        reads.append(from_version)
        return original(stream_id, from_version, upcast=upcast)

    game.sit("T1", "bob", 2, actor)
    store.read_stream = counting  # type: ignore[method-assign]
    version, table = cache.table(store, "T1")
    assert reads == [3]
    assert version == 3
    assert table is not None
    assert table.seat_of("bob") is not None
    rebuilt = replay(from_recorded(e) for e in original(table_stream("T1")))  # type: ignore[misc]
    assert rebuilt == table


def test_the_table_cache_forgets_the_least_recently_used_table() -> None:
    store = InMemoryEventStore(clock=lambda: NOW)
    game = GameService(store, lambda: NOW)
    for table_id in ("A", "B", "C"):
        game.create_table(table_id, TableSettings(), Actor("ops", "ops"))
    cache = TableCache(capacity=2)
    for table_id in ("A", "B", "C"):
        cache.table(store, table_id)
    reads: list[str] = []
    original = store.read_stream

    def counting(
        stream_id: str, from_version: int = 1, *, upcast: bool = True
    ) -> list[RecordedEvent]:
        reads.append(f"{stream_id}@{from_version}")
        return original(stream_id, from_version, upcast=upcast)

    store.read_stream = counting  # type: ignore[method-assign]
    cache.table(store, "A")
    cache.table(store, "C")
    assert reads == ["table:A@1", "table:C@2"]


def test_a_guard_stream_with_no_events_only_checks_its_version() -> None:
    store = InMemoryEventStore(clock=lambda: NOW)
    event = to_new_event(sample(EVENT_REGISTRY["chat", "MessagePosted"]))
    result = store.append(
        [StreamAppend("chat:T1", 0, [event]), StreamAppend("table:T1", 0, [])],
        EventMetadata("alice", "frontend"),
    )
    assert result.versions == {"chat:T1": 1, "table:T1": 0}


def test_a_doubted_stream_is_not_vouched_for_until_read_or_appended_again() -> None:
    store = InMemoryEventStore(clock=lambda: NOW)
    game = GameService(store, lambda: NOW)
    actor = Actor("ops", "ops")
    game.create_table("T1", TableSettings(), actor)
    cache = TableCache(capacity=2)
    stream = table_stream("T1")
    version, table = cache.table(store, "T1")
    assert cache.cached(stream) == (version, table)

    cache.doubt(stream)
    assert cache.cached(stream) is None
    assert cache.table(store, "T1") == (version, table)  # read again: nothing new, and current
    assert cache.cached(stream) == (version, table)

    # This process's own append does not settle it: the doubt may be about a write after it.
    cache.doubt(stream)
    cache.put(stream, version + 1, table)
    assert cache.cached(stream) is None

    cache.doubt("table:never-cached")  # nothing to doubt: no entry, and no doubt kept
    cache.put("table:never-cached", 1, None)
    assert cache.cached("table:never-cached") == (1, None)


def test_a_doubt_cast_while_a_read_is_under_way_outlives_that_read() -> None:
    """The read may have missed the write the doubt is about (another thread read the table
    that named it meanwhile): only a read that began after the doubt settles it."""
    store = InMemoryEventStore(clock=lambda: NOW)
    GameService(store, lambda: NOW).create_table("T1", TableSettings(), Actor("ops", "ops"))
    cache = TableCache()
    stream = table_stream("T1")
    cache.table(store, "T1")
    original = store.read_stream

    def doubted_meanwhile(
        stream_id: str, from_version: int = 1, *, upcast: bool = True
    ) -> list[RecordedEvent]:
        found = original(stream_id, from_version, upcast=upcast)
        cache.doubt(stream_id)
        return found

    cache.doubt(stream)
    store.read_stream = doubted_meanwhile  # type: ignore[method-assign]
    cache.table(store, "T1")
    assert cache.cached(stream) is None
    store.read_stream = original  # type: ignore[method-assign]
    cache.table(store, "T1")
    assert cache.cached(stream) is not None


def test_a_doubt_goes_with_the_entry_the_cache_forgets() -> None:
    store = InMemoryEventStore(clock=lambda: NOW)
    cache = TableCache(capacity=1)
    cache.put("table:A", 1, None)
    cache.doubt("table:A")
    cache.put("table:B", 1, None)  # evicts A, and its doubt with it
    assert cache.cached("table:A") is None
    assert cache._doubted == {}  # bounded by the entries: the private map is what's tested
    assert store.head() == 0


def test_readers_hear_of_events_read_from_the_log_not_of_own_appends() -> None:
    store = InMemoryEventStore(clock=lambda: NOW)
    game = GameService(store, lambda: NOW)
    actor = Actor("ops", "ops")
    game.create_table("T1", TableSettings(), actor)
    cache = TableCache()
    heard: list[tuple[str, list[str]]] = []
    cache.on_read(
        lambda stream_id, events: heard.append((stream_id, [type(e).__name__ for e in events]))
    )
    cache.table(store, "T1")  # cold: the table's first event read
    cache.table(store, "T1")  # nothing new: nothing heard
    game.sit("T1", "alice", 1, actor)
    version, table = cache.table(store, "T1")
    cache.put(table_stream("T1"), version + 1, table)
    assert heard == [("table:T1", ["TableCreated"]), ("table:T1", ["PlayerSat"])]


def test_a_table_read_from_the_log_casts_doubt_on_the_wallets_its_events_moved() -> None:
    """Another process moved them in the same append (a round settled by the worker, a bet
    from another web process): a bet that trusted them as cached would lose its race to that
    append, so they are read first. The other players' wallets are still trusted."""
    store = InMemoryEventStore(clock=lambda: NOW)
    actor = Actor("ops", "ops")
    elsewhere = GameService(store, lambda: NOW)
    elsewhere.create_table("T1", TableSettings(), actor)
    money = WalletService(store, lambda: NOW)
    for seat, player in enumerate(["alice", "bob"], start=1):
        money.deposit(player, 10_000, "float", actor)
        elsewhere.sit("T1", player, seat, actor)
    tables, wallets = TableCache(), WalletCache()
    here = GameService(store, lambda: NOW, tables=tables, wallets=wallets)
    here.table("T1")
    for player in ("alice", "bob"):
        wallets.wallet(store, player)
    elsewhere.place_bet("T1", "alice", Spot.BANKER, 100, actor)

    tables.table(store, "T1")  # alice's bet, written elsewhere, read now

    assert wallets.cached("wallet:alice") is None
    assert wallets.cached("wallet:bob") is not None
    version, wallet = wallets.wallet(store, "alice")  # read again, and vouched for
    assert wallets.cached("wallet:alice") == (version, wallet)
    assert wallet.reserved == 100
