"""The Merkle tree store's contract, written once and run against memory and PostgreSQL.

Subclasses provide `log` (an empty event store) and `tree` (an empty tree beside it).
"""

from __future__ import annotations

import hashlib

import pytest

from events.canonical import event_bytes
from events.merkle import (
    MemoryNodes,
    consistency_proof,
    inclusion_proof,
    leaf_hash,
    node_hash,
    root,
    verify_consistency,
    verify_inclusion,
)
from events.merkle_store import TreeMoved, TreeStore, integrate, leaf_entry
from events.store import EventMetadata, EventStore, NewEvent, StreamAppend

ACTOR = EventMetadata(actor="dealer-7", role="dealer", request_id="req-1", correlation_id="c-1")


def grow(log: EventStore, appends: int) -> None:
    """Append `appends` appends of one or two events each, on a few streams."""
    versions: dict[str, int] = {}
    for n in range(appends):
        stream = f"table:T{n % 3}"
        events = [NewEvent("BetPlaced", {"seat": n % 7, "stake": 100 + n})] * (1 + n % 2)
        log.append([StreamAppend(stream, versions.get(stream, 0), events)], ACTOR)
        versions[stream] = versions.get(stream, 0) + len(events)


def reference_root(leaves: list[bytes]) -> bytes:
    """RFC 6962's MTH, recursively over the leaf hashes: the model the stores must agree with."""
    if not leaves:
        return hashlib.sha256(b"").digest()
    if len(leaves) == 1:
        return leaves[0]
    k = 1 << ((len(leaves) - 1).bit_length() - 1)
    return node_hash(reference_root(leaves[:k]), reference_root(leaves[k:]))


class MerkleTreeContract:
    @pytest.fixture
    def log(self) -> EventStore:
        raise NotImplementedError

    @pytest.fixture
    def tree(self) -> TreeStore:
        raise NotImplementedError

    def test_an_empty_tree_has_size_zero_and_the_empty_root(self, tree: TreeStore) -> None:
        assert tree.size() == 0
        assert root(0, tree) == hashlib.sha256(b"").digest()

    def test_integration_follows_the_log_in_batches_to_the_reference_root(
        self, log: EventStore, tree: TreeStore
    ) -> None:
        grow(log, 40)
        head = log.head()
        assert integrate(log, tree, up_to=17, batch=5) == 17
        assert integrate(log, tree, up_to=head, batch=7) == head
        events = log.read_all(0, head, upcast=False)
        leaves = [leaf_hash(leaf_entry(event)) for event in events]
        for size in (1, 2, 17, 32, head):
            assert root(size, tree) == reference_root(leaves[:size])

    def test_a_leaf_is_the_canonical_document_the_chain_hashes(
        self, log: EventStore, tree: TreeStore
    ) -> None:
        grow(log, 1)
        (event,) = log.read_all(0, 1, upcast=False)
        integrate(log, tree, up_to=1)
        document = event_bytes(
            1,
            event.stream_id,
            event.category,
            event.version,
            event.type,
            event.schema_version,
            event.payload,
            event.metadata,
            event.recorded_at,
        )
        assert document.startswith(b'{"category":"table"')
        assert root(1, tree) == leaf_hash(document)

    def test_proofs_from_the_store_verify_at_every_size(
        self, log: EventStore, tree: TreeStore
    ) -> None:
        grow(log, 30)
        head = integrate(log, tree, up_to=log.head())
        events = log.read_all(0, head, upcast=False)
        memory = MemoryNodes()
        memory.append(leaf_entry(event) for event in events)
        for size in range(1, head + 1, 5):
            tree_root = root(size, tree)
            for index in range(0, size, 3):
                proof = inclusion_proof(index, size, tree)
                assert proof == inclusion_proof(index, size, memory)
                verify_inclusion(
                    index, size, leaf_hash(leaf_entry(events[index])), proof, tree_root
                )
            for old in range(1, size + 1, 4):
                proof = consistency_proof(old, size, tree)
                verify_consistency(old, size, root(old, tree), tree_root, proof)

    def test_an_integrator_that_lost_the_race_is_told_and_writes_nothing(
        self, log: EventStore, tree: TreeStore
    ) -> None:
        grow(log, 5)
        integrate(log, tree, up_to=3)
        events = log.read_all(0, 3, upcast=False)
        stale = [leaf_hash(leaf_entry(event)) for event in events[:1]]
        from events.merkle import added_nodes

        with pytest.raises(TreeMoved):
            tree.add(0, 1, added_nodes(0, stale, tree))
        assert tree.size() == 3
        assert integrate(log, tree, up_to=log.head()) == log.head()
