"""The PostgreSQL event store passes the same contract as the in-memory fake."""

import pytest

from events.postgres import Pool, PostgresEventStore
from events.store import Clock, EventStore
from events.upcasting import Upcasters
from tests.contract.event_store import EventStoreContract, StepClock, StoreFactory


class TestPostgresEventStore(EventStoreContract):
    @pytest.fixture
    def make_store(self, app_pool: Pool) -> StoreFactory:
        def make(clock: Clock | None = None, upcasters: Upcasters | None = None) -> EventStore:
            return PostgresEventStore(app_pool, clock or StepClock(), upcasters)

        return make
