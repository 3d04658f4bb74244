"""The snapshot store contract, written once and run against every backend.

Subclasses override `make_stores`; each call returns an event store over an empty log and a
snapshot store with no snapshots, on the same backend.
"""

import random
from typing import Protocol

import pytest

from domain.table import Table
from events.snapshots import Snapshot, SnapshotStore
from events.store import EventStore
from service.application.snapshots import SnapshotCodec
from service.application.streams import StreamCache, TableCache, table_stream
from service.application.wallets import WalletCache, WalletService
from tests.histories import OPS, PLAYERS, HandClock, play_history


class StoresFactory(Protocol):
    def __call__(self, clock: HandClock | None = None) -> tuple[EventStore, SnapshotStore]: ...


def codec_of(cache: StreamCache[Table | None]) -> SnapshotCodec[Table | None]:
    assert cache.codec is not None
    return cache.codec


def snap(version: int, schema: str = "s1", stream_id: str = "table:T1") -> Snapshot:
    return Snapshot(stream_id, version, schema, {"state": {"version": version, "n": [1, "x"]}})


class SnapshotStoreContract:
    @pytest.fixture
    def make_stores(self) -> StoresFactory:
        raise NotImplementedError

    def test_a_stream_without_snapshots_has_none(self, make_stores: StoresFactory) -> None:
        _, snapshots = make_stores()
        assert snapshots.latest("table:T1", "s1") is None

    def test_the_latest_snapshot_of_the_schema_comes_back_as_saved(
        self, make_stores: StoresFactory
    ) -> None:
        _, snapshots = make_stores()
        for version in (100, 300, 200):
            snapshots.save(snap(version))
        snapshots.save(snap(400, schema="s0"))
        assert snapshots.latest("table:T1", "s1") == snap(300)
        assert snapshots.latest("table:T1", "s0") == snap(400, schema="s0")
        assert snapshots.latest("table:T2", "s1") is None

    def test_a_twin_at_the_same_version_leaves_the_first(self, make_stores: StoresFactory) -> None:
        _, snapshots = make_stores()
        snapshots.save(snap(100))
        twin = Snapshot("table:T1", 100, "s1", {"state": "other"})
        snapshots.save(twin)
        assert snapshots.latest("table:T1", "s1") == snap(100)

    def test_a_new_snapshot_drops_those_before_the_one_it_replaces(
        self, make_stores: StoresFactory
    ) -> None:
        _, snapshots = make_stores()
        snapshots.save(snap(100))
        snapshots.save(snap(200), replacing=100)
        snapshots.save(snap(300), replacing=200)
        snapshots.save(snap(50, stream_id="table:T2"))
        assert snapshots.latest("table:T1", "s1") == snap(300)
        # The one replaced is kept, so a reader that has just found it still can.
        snapshots.save(snap(400, schema="s0"), replacing=300)
        assert snapshots.latest("table:T1", "s1") == snap(300)
        assert snapshots.latest("table:T2", "s1") == snap(50, stream_id="table:T2")

    def test_with_a_block_size_the_last_snapshot_of_each_block_stays(
        self, make_stores: StoresFactory
    ) -> None:
        _, snapshots = make_stores()
        taken = 0
        for version in range(30, 1000, 30):  # every 30 versions, blocks of 100
            snapshots.save(snap(version), replacing=taken, keep_every=100)
            taken = version
        kept = [
            found.version
            for found in (snapshots.at_or_before("table:T1", "s1", v) for v in range(1, 1000))
            if found is not None
        ]
        # The last of each block, and the newest two.
        assert sorted(set(kept)) == [90, 180, 270, 390, 480, 570, 690, 780, 870, 960, 990]
        assert snapshots.latest("table:T1", "s1") == snap(990)

    def test_the_snapshot_at_or_before_a_version_is_of_the_schema_asked(
        self, make_stores: StoresFactory
    ) -> None:
        _, snapshots = make_stores()
        for version in (100, 200, 300):
            snapshots.save(snap(version))
        snapshots.save(snap(250, schema="s0"))
        assert snapshots.at_or_before("table:T1", "s1", 299) == snap(200)
        assert snapshots.at_or_before("table:T1", "s1", 300) == snap(300)
        assert snapshots.at_or_before("table:T1", "s0", 299) == snap(250, schema="s0")
        assert snapshots.at_or_before("table:T1", "s1", 99) is None
        with pytest.raises(ValueError, match="keep_every"):
            snapshots.save(snap(400), keep_every=0)

    def test_a_snapshot_needs_an_event_before_it(self, make_stores: StoresFactory) -> None:
        _, snapshots = make_stores()
        with pytest.raises(ValueError, match="at least one event"):
            snapshots.save(snap(0))

    @pytest.mark.parametrize("seed", [1, 2, 3])
    def test_a_cold_load_from_snapshot_and_tail_equals_a_full_replay(
        self, make_stores: StoresFactory, seed: int
    ) -> None:
        clock = HandClock()
        store, snapshots = make_stores(clock)
        play_history(
            store,
            clock,
            random.Random(seed),
            120,
            tables=TableCache(snapshots=snapshots, snapshot_every=9),
            wallets=WalletCache(snapshots=snapshots, snapshot_every=4),
        )
        cold = TableCache(snapshots=snapshots, snapshot_every=9).table(store, "T1")
        replayed = TableCache().table(store, "T1")
        assert cold == replayed
        assert snapshots.latest(
            table_stream("T1"), codec_of(TableCache(snapshots=snapshots)).schema
        )
        for player in PLAYERS:
            assert WalletCache(snapshots=snapshots).wallet(store, player) == (
                WalletCache().wallet(store, player)
            )

    def test_a_snapshot_beyond_the_stream_is_ignored(self, make_stores: StoresFactory) -> None:
        clock = HandClock()
        store, snapshots = make_stores(clock)
        play_history(store, clock, random.Random(5), 40)
        version, table = TableCache().table(store, "T1")
        assert isinstance(table, Table)
        tables = TableCache(snapshots=snapshots)
        codec = codec_of(tables)
        # A snapshot of a longer stream (another database's, say) that claims no seats.
        lie = codec.encode(Table(table.table_id, table.settings, ()))
        snapshots.save(Snapshot(table_stream("T1"), version + 5, codec.schema, lie))
        assert tables.table(store, "T1") == (version, table)

    def test_an_undecodable_snapshot_or_one_of_another_schema_is_ignored(
        self, make_stores: StoresFactory
    ) -> None:
        clock = HandClock()
        store, snapshots = make_stores(clock)
        play_history(store, clock, random.Random(6), 40)
        expected = TableCache().table(store, "T1")
        tables = TableCache(snapshots=snapshots)
        schema = codec_of(tables).schema
        snapshots.save(Snapshot(table_stream("T1"), 2, schema, {"state": {"table_id": 7}}))
        snapshots.save(Snapshot(table_stream("T1"), 3, "an-older-domain", {"state": {}}))
        assert tables.table(store, "T1") == expected

    def test_appends_take_a_snapshot_every_n_events(self, make_stores: StoresFactory) -> None:
        store, snapshots = make_stores()
        wallets = WalletCache(snapshots=snapshots, snapshot_every=3)
        assert wallets.codec is not None
        schema = wallets.codec.schema
        service = WalletService(store, HandClock(), wallets=wallets)
        found = []
        for _ in range(7):
            service.deposit("alice", 1, "r", OPS)
            latest = snapshots.latest("wallet:alice", schema)
            found.append(None if latest is None else latest.version)
        assert found == [None, None, 3, 3, 3, 6, 6]
