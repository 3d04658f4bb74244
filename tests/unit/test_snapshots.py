"""The snapshot codec is exact and strict, its schema follows the domain's shape, and a table
loaded cold from a snapshot and its tail is the table a full replay gives, for any history."""

import json
import random
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from domain.outcome import Spot
from domain.round import Round
from domain.table import Table, TableSettings, evolve
from domain.wallet import Wallet, evolve_wallet
from events.memory import InMemoryEventStore
from events.snapshots import InMemorySnapshotStore
from events.store import JsonObject
from service.application.snapshots import (
    CODEC_REVISION,
    SnapshotCodec,
    UnreadableSnapshot,
    decode,
    describe,
    encode,
    fingerprint,
)
from service.application.streams import TableCache, from_recorded, table_stream
from service.application.upcasters import upcasters
from service.application.wallets import WalletCache
from tests.histories import PLAYERS, HandClock, play_history


def _fold(state: object, event: object) -> object:
    return state


class Colour(StrEnum):
    RED = "red"
    BLACK = "black"


@dataclass(frozen=True, slots=True)
class Inner:
    colour: Colour
    at: datetime


@dataclass(frozen=True, slots=True)
class Chip:
    value: int


@dataclass(frozen=True, slots=True)
class Plaque:
    value: int
    serial: str


@dataclass(frozen=True, slots=True)
class Outer:
    name: str
    count: int
    flag: bool
    window: timedelta
    inner: Inner | None
    items: tuple[Inner, ...]
    pair: tuple[str, int]
    names: frozenset[str]
    stakes: dict[tuple[str, Spot], int] = field(default_factory=dict)
    token: Chip | Plaque | None = None


@dataclass(frozen=True, slots=True)
class OuterWithAnotherField:
    name: str
    count: int
    flag: bool
    window: timedelta
    inner: Inner | None
    items: tuple[Inner, ...]
    pair: tuple[str, int]
    names: frozenset[str]
    stakes: dict[tuple[str, Spot], int] = field(default_factory=dict)
    tokens: Chip | Plaque | None = None  # renamed


AT = datetime(2024, 5, 3, 20, 0, 0, 123456, tzinfo=UTC)
SAMPLE = Outer(
    name="é😀",
    count=-(2**62),
    flag=True,
    window=timedelta(days=1, seconds=3, microseconds=7),
    inner=Inner(Colour.RED, AT),
    items=(Inner(Colour.BLACK, AT), Inner(Colour.RED, AT + timedelta(hours=1))),
    pair=("a", 2),
    names=frozenset({"b", "a"}),
    stakes={("T1-1", Spot.BANKER): 500, ("T1-1", Spot.TIE): 100},
    token=Plaque(100_000, "P-1"),
)


def test_a_dataclass_tree_comes_back_exactly_with_its_types() -> None:
    document = encode(SAMPLE, Outer)
    back = decode(document, Outer)
    assert back == SAMPLE
    assert type(back.items) is tuple
    assert type(back.names) is frozenset
    assert back.inner is not None
    assert type(back.inner.colour) is Colour
    assert back.inner.at.tzinfo is not None
    assert type(back.token) is Plaque


# SAMPLE's document as revision 1 of the codec wrote it, before the codec was rebuilt from one
# class per kind of hint: every kind is in it, so a codec that still writes exactly this reads
# every snapshot already stored. Changing the encoding means bumping CODEC_REVISION (which
# retires every stored snapshot through the schema) and this document with it.
SAMPLE_DOCUMENT_REVISION_1: JsonObject = {
    "name": "é😀",
    "count": -(2**62),
    "flag": True,
    "window": [1, 3, 7],
    "inner": {"colour": "red", "at": "2024-05-03T20:00:00.123456+00:00"},
    "items": [
        {"colour": "black", "at": "2024-05-03T20:00:00.123456+00:00"},
        {"colour": "red", "at": "2024-05-03T21:00:00.123456+00:00"},
    ],
    "pair": ["a", 2],
    "names": ["a", "b"],
    "stakes": [[["T1-1", "banker"], 500], [["T1-1", "tie"], 100]],
    "token": ["Plaque", {"value": 100000, "serial": "P-1"}],
}


def test_the_encoding_is_the_one_stored_snapshots_were_written_in() -> None:
    assert CODEC_REVISION == 1
    assert encode(SAMPLE, Outer) == SAMPLE_DOCUMENT_REVISION_1
    assert decode(SAMPLE_DOCUMENT_REVISION_1, Outer) == SAMPLE


def test_the_encoding_is_the_same_whatever_the_order_of_sets_and_mappings() -> None:
    reordered = Outer(
        **{
            **{f: getattr(SAMPLE, f) for f in Outer.__dataclass_fields__},
            "names": frozenset({"a", "b"}),
            "stakes": dict(reversed(list(SAMPLE.stakes.items()))),
        }
    )
    assert encode(reordered, Outer) == encode(SAMPLE, Outer)


@pytest.mark.parametrize(
    "damage",
    [
        lambda d: d.pop("flag"),
        lambda d: d.update(extra=1),
        lambda d: d.update(count="1"),
        lambda d: d.update(count=True),
        lambda d: d.update(flag=1),
        lambda d: d.update(window=[1, 2]),
        lambda d: d.update(pair=["a"]),
        lambda d: d.update(inner={"colour": "green", "at": AT.isoformat()}),
        lambda d: d.update(inner={"colour": "red", "at": "2024-05-03T20:00:00"}),
        lambda d: d.update(token=["Coin", {"value": 1}]),
    ],
)
def test_a_damaged_document_is_unreadable_never_half_read(damage: object) -> None:
    document = encode(SAMPLE, Outer)
    assert isinstance(document, dict)
    damage(document)  # type: ignore[operator]
    with pytest.raises(UnreadableSnapshot):
        decode(document, Outer)


def test_changing_a_field_changes_the_schema() -> None:
    assert describe(Outer) != describe(OuterWithAnotherField)
    assert fingerprint(Outer, _fold) != fingerprint(OuterWithAnotherField, _fold)
    assert fingerprint(Outer, _fold) == fingerprint(Outer, _fold)


def test_changing_a_nested_type_or_an_enum_value_changes_the_shape() -> None:
    @dataclass(frozen=True)
    class Shallow:
        inner: Inner

    class Colour(StrEnum):
        RED = "red"
        BLACK = "noir"

    @dataclass(frozen=True)
    class OtherInner:
        colour: Colour
        at: datetime

    @dataclass(frozen=True)
    class Shallow2:
        inner: OtherInner

    assert describe(Shallow).replace("Shallow", "S") != describe(Shallow2).replace("Shallow2", "S")
    assert "'noir'" in describe(Shallow2)


def test_the_tables_schema_differs_from_the_wallets_and_is_stable() -> None:
    table, wallet = (
        SnapshotCodec[Table](Table, evolve),
        SnapshotCodec[Wallet](Wallet, evolve_wallet),
    )
    assert table.schema != wallet.schema
    assert table.schema == SnapshotCodec[Table](Table, evolve).schema


def test_a_snapshot_document_is_only_ever_the_state() -> None:
    codec = SnapshotCodec[Wallet](Wallet, evolve_wallet)
    with pytest.raises(UnreadableSnapshot):
        codec.decode({"state": {}, "more": 1})


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), steps=st.integers(1, 150), every=st.integers(1, 25))
def test_snapshot_and_tail_equal_a_full_replay_for_any_history(
    seed: int, steps: int, every: int
) -> None:
    clock = HandClock()
    store = InMemoryEventStore(clock, upcasters())
    snapshots = InMemorySnapshotStore()
    play_history(
        store,
        clock,
        random.Random(seed),
        steps,
        tables=TableCache(snapshots=snapshots, snapshot_every=every),
        wallets=WalletCache(snapshots=snapshots, snapshot_every=every),
    )
    assert TableCache(snapshots=snapshots).table(store, "T1") == TableCache().table(store, "T1")
    for player in PLAYERS:
        cold = WalletCache(snapshots=snapshots).wallet(store, player)
        assert cold == WalletCache().wallet(store, player)


def _round_trips(state: object, root: type[object]) -> None:
    document = encode(state, root)
    # Through JSON text and back, as a stored snapshot goes (the stdlib's json here: orjson,
    # which the store uses, refuses integers beyond 64 bits, which no count or sum of pence
    # reaches but hypothesis builds).
    back = decode(json.loads(json.dumps(document)), root)
    assert back == state
    assert encode(back, root) == document


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), steps=st.integers(1, 200))
def test_every_state_a_played_history_reaches_comes_back_from_its_document(
    seed: int, steps: int
) -> None:
    clock = HandClock()
    store = InMemoryEventStore(clock, upcasters())
    play_history(store, clock, random.Random(seed), steps)
    table: Table | None = None
    for recorded in store.read_stream(table_stream("T1")):
        table = evolve(table, from_recorded(recorded))  # type: ignore[arg-type]
        _round_trips(table, Table)
    for player in PLAYERS:
        _, wallet = WalletCache().wallet(store, player)
        _round_trips(wallet, Wallet)


# Hypothesis keeps type strategies for the whole session; these only narrow what it builds
# to what the domain can hold: aware instants (a snapshot refuses naive ones, as the domain
# never makes them) and settings their own checks accept.
st.register_type_strategy(datetime, st.datetimes(timezones=st.just(UTC)))
st.register_type_strategy(
    TableSettings, st.builds(TableSettings, seats=st.integers(1, 7), decks=st.integers(1, 8))
)


@pytest.mark.parametrize("root", [Table, Round, Wallet])
def test_any_built_state_comes_back_from_its_document(root: type[object]) -> None:
    # Built field by field from the type hints, so every field of every nested class and
    # every member of every union is filled in, including states no history has reached yet.
    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(state=st.from_type(root))
    def round_trip(state: object) -> None:
        _round_trips(state, root)

    round_trip()


def test_the_codec_bench_checks_that_both_codecs_write_one_document() -> None:
    from bench import snapshot_codec
    from service.application import snapshots

    table, wallets = snapshot_codec.played(3)
    # Today's codec as its own baseline: the bench runs, and compares documents before timing.
    figures = snapshot_codec.measure(table, Table, snapshots, repeats=1)
    assert figures["bytes"] > 0
    assert snapshot_codec.measure(wallets[0], Wallet, snapshots, repeats=1)["encode"] > 0
