"""The PostgreSQL snapshot store passes the same contract as the in-memory one."""

import pytest

from events.postgres import Pool, PostgresEventStore
from events.snapshots import PostgresSnapshotStore, SnapshotStore
from events.store import EventStore
from service.application.upcasters import upcasters
from tests.contract.snapshot_store import SnapshotStoreContract, StoresFactory
from tests.histories import HandClock


class TestPostgresSnapshotStore(SnapshotStoreContract):
    @pytest.fixture
    def make_stores(self, app_pool: Pool) -> StoresFactory:
        def make(clock: HandClock | None = None) -> tuple[EventStore, SnapshotStore]:
            clock = clock or HandClock()
            store = PostgresEventStore(app_pool, clock, upcasters())
            return store, PostgresSnapshotStore(app_pool, clock)

        return make
