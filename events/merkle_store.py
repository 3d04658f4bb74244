"""Where the log's Merkle tree lives, and how it follows the log: in batches, in order.

The tree is built from `events` by position, so it holds only what every other reader by
position sees. `integrate` reads the events after the tree's size, hashes their canonical
bytes into leaves and stores the nodes they finish, a batch a transaction. Any process may
run it (the checkpoint job does, before it signs): racing integrators take turns in
PostgreSQL, and one that started from a size already passed is told so (`TreeMoved`) and
simply reads the new size.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence

import psycopg

from events.canonical import event_bytes
from events.merkle import FinishedNode, Node, added_nodes, leaf_hash
from events.postgres import Pool
from events.store import EventStore, RecordedEvent

INTEGRATION_BATCH = 5_000
"""Leaves a transaction: enough to share a commit, few enough for a quick backfill step."""

_TREE_MOVED = "SB010"


class TreeMoved(Exception):  # noqa: N818 - a race to report, not a fault
    """Another integrator added leaves first; read the size again."""


class TreeStore(ABC):
    """The finished nodes of the log's tree."""

    @abstractmethod
    def read_nodes(self, wanted: Sequence[Node]) -> Mapping[Node, bytes]:
        """The hashes of these finished nodes, in one read; KeyError if one is missing."""

    @abstractmethod
    def size(self) -> int:
        """How many leaves the tree holds."""

    @abstractmethod
    def add(self, size_before: int, leaves: int, nodes: Sequence[FinishedNode]) -> None:
        """Store the nodes finished by `leaves` new leaves; TreeMoved if the size moved on."""


def leaf_entry(event: RecordedEvent) -> bytes:
    """A leaf's bytes: the event's canonical document, exactly as the hash chain hashes it."""
    return event_bytes(
        event.position,
        event.stream_id,
        event.category,
        event.version,
        event.type,
        event.schema_version,
        event.payload,
        event.metadata,
        event.recorded_at,
    )


def integrate(
    store: EventStore, tree: TreeStore, up_to: int, batch: int = INTEGRATION_BATCH
) -> int:
    """Add every event up to position `up_to` to the tree; the tree's size afterwards."""
    size = tree.size()
    while size < up_to:
        events = store.read_all(size, min(batch, up_to - size), upcast=False)
        if not events:
            break
        if events[0].position != size + 1:
            raise RuntimeError(f"the log skips from {size} to {events[0].position}")
        leaves = [leaf_hash(leaf_entry(event)) for event in events]
        try:
            tree.add(size, len(leaves), added_nodes(size, leaves, tree))
        except TreeMoved:
            size = tree.size()
            continue
        size += len(leaves)
    return size


class MemoryTree(TreeStore):
    """The tree in a dict, beside the in-memory event store."""

    def __init__(self) -> None:
        self._nodes: dict[Node, bytes] = {}
        self._size = 0

    def read_nodes(self, wanted: Sequence[Node]) -> Mapping[Node, bytes]:
        """The hashes of these nodes."""
        return {node: self._nodes[node] for node in wanted}

    def size(self) -> int:
        """How many leaves the tree holds."""
        return self._size

    def add(self, size_before: int, leaves: int, nodes: Sequence[FinishedNode]) -> None:
        """Store the new nodes, unless another integrator got there first."""
        if size_before != self._size:
            raise TreeMoved(f"the tree has {self._size} leaves, not {size_before}")
        for node in nodes:
            self._nodes[(node.level, node.index)] = node.hash
        self._size += leaves


_READ_NODES = """
SELECT n.level, n.idx, n.hash
FROM unnest(%s::smallint[], %s::bigint[]) AS w(level, idx)
JOIN merkle_nodes AS n ON n.level = w.level AND n.idx = w.idx
"""
# The primary key (level, idx) answers each wanted node with one index probe.

_SIZE = "SELECT coalesce(max(idx) + 1, 0) FROM merkle_nodes WHERE level = 0"
# A backward scan of the primary key: one probe, however large the tree.

_ADD = "SELECT merkle_add_nodes(%s, %s, %s::smallint[], %s::bigint[], %s::bytea[])"


class PostgresTree(TreeStore):
    """The tree in `merkle_nodes` (migration 0040), written only through merkle_add_nodes()."""

    def __init__(self, pool: Pool) -> None:
        self._pool = pool

    def read_nodes(self, wanted: Sequence[Node]) -> Mapping[Node, bytes]:
        """The hashes of these nodes, in one statement."""
        if not wanted:
            return {}
        with self._pool.connection() as conn:
            rows = conn.execute(
                _READ_NODES, ([level for level, _ in wanted], [index for _, index in wanted])
            ).fetchall()
        found = {(int(level), int(index)): bytes(hashed) for level, index, hashed in rows}
        missing = [node for node in wanted if node not in found]
        if missing:
            raise KeyError(f"the tree has no finished node {missing[0]}")
        return found

    def size(self) -> int:
        """How many leaves the tree holds."""
        with self._pool.connection() as conn:
            row = conn.execute(_SIZE).fetchone()
        assert row is not None
        return int(row[0])

    def add(self, size_before: int, leaves: int, nodes: Sequence[FinishedNode]) -> None:
        """Store the new nodes in one transaction; TreeMoved if another integrator won."""
        try:
            with self._pool.connection() as conn:
                conn.execute(
                    _ADD,
                    (
                        size_before,
                        leaves,
                        [node.level for node in nodes],
                        [node.index for node in nodes],
                        [node.hash for node in nodes],
                    ),
                )
        except psycopg.DatabaseError as error:
            if error.sqlstate == _TREE_MOVED:
                raise TreeMoved(str(error)) from error
            raise
