"""The in-memory tree passes the Merkle tree contract."""

import pytest

from events.memory import InMemoryEventStore
from events.merkle_store import MemoryTree, TreeStore
from events.store import EventStore
from tests.contract.event_store import StepClock
from tests.contract.merkle_tree import MerkleTreeContract


class TestMemoryTree(MerkleTreeContract):
    @pytest.fixture
    def log(self) -> EventStore:
        return InMemoryEventStore(StepClock())

    @pytest.fixture
    def tree(self) -> TreeStore:
        return MemoryTree()
