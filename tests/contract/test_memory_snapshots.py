"""The in-memory snapshot store passes the snapshot store contract."""

import pytest

from events.memory import InMemoryEventStore
from events.snapshots import InMemorySnapshotStore, SnapshotStore
from events.store import EventStore
from service.application.upcasters import upcasters
from tests.contract.snapshot_store import SnapshotStoreContract, StoresFactory
from tests.histories import HandClock


class TestInMemorySnapshotStore(SnapshotStoreContract):
    @pytest.fixture
    def make_stores(self) -> StoresFactory:
        def make(clock: HandClock | None = None) -> tuple[EventStore, SnapshotStore]:
            store = InMemoryEventStore(clock or HandClock(), upcasters())
            return store, InMemorySnapshotStore()

        return make
