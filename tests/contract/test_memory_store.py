"""The in-memory fake passes the event store contract."""

import pytest

from events.memory import InMemoryEventStore
from events.store import Clock, EventStore
from events.upcasting import Upcasters
from tests.contract.event_store import EventStoreContract, StepClock, StoreFactory


class TestInMemoryEventStore(EventStoreContract):
    @pytest.fixture
    def make_store(self) -> StoreFactory:
        def make(clock: Clock | None = None, upcasters: Upcasters | None = None) -> EventStore:
            return InMemoryEventStore(clock or StepClock(), upcasters)

        return make
