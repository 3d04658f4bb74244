"""The log's RFC 6962 / RFC 9162 Merkle tree: hashes, finished nodes, proofs and their checks.

Leaf i of the tree is the canonical bytes of the event at position i + 1. Only finished
nodes are stored: node (level, index) covers leaves [index * 2**level, (index + 1) * 2**level)
and exists once all of them do, so it never changes. A tree of any size is then a handful of
finished nodes (its "frontier", one for each bit set in the size), and any root or proof is
O(log n) of them, read in one sitting.

The proofs follow RFC 6962 section 2.1 (PATH and SUBPROOF) and the checks follow RFC 9162
sections 2.1.3.2 and 2.1.4.2 step by step. The linear hash chain of the log is a separate
structure: nothing here reads or trusts its fields.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

HASH_SIZE = 32
"""SHA-256's digest size: every leaf hash, node hash, root and proof element."""

MAX_PROOF_HASHES = 63
"""No proof in a tree of fewer than 2**63 leaves is longer; a longer one is refused unread."""

EMPTY_ROOT = hashlib.sha256(b"").digest()
"""The root of the empty tree (RFC 6962: the hash of an empty string)."""

Node = tuple[int, int]
"""A finished node's address: (level, index)."""


class ProofError(ValueError):
    """A proof, a size or a hash that does not verify; the message says which step failed."""


def leaf_hash(entry: bytes) -> bytes:
    """SHA-256(0x00 || entry): the hash of one leaf."""
    return hashlib.sha256(b"\x00" + entry).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """SHA-256(0x01 || left || right): the hash of an interior node."""
    return hashlib.sha256(b"\x01" + left + right).digest()


class NodeReader(Protocol):
    """Where finished nodes are read from: the database's table, or memory in tests."""

    def read_nodes(self, wanted: Sequence[Node]) -> Mapping[Node, bytes]:
        """The hashes of these finished nodes, read together; a missing one is an error."""
        ...


@dataclass(frozen=True, slots=True)
class FinishedNode:
    """A node that became finished when leaves were added, to be stored once."""

    level: int
    index: int
    hash: bytes


def frontier(size: int) -> list[Node]:
    """The finished nodes that make up a tree of `size` leaves, left to right."""
    return aligned_nodes(0, size)


def aligned_nodes(start: int, end: int) -> list[Node]:
    """The largest finished nodes that tile leaves [start, end), left to right."""
    if not 0 <= start <= end:
        raise ValueError(f"not a range of leaves: [{start}, {end})")
    nodes: list[Node] = []
    while start < end:
        # The biggest node that starts at `start` (aligned to its own size) and fits.
        level = (start & -start).bit_length() - 1 if start else (end - start).bit_length() - 1
        while start + (1 << level) > end:
            level -= 1
        nodes.append((level, start >> level))
        start += 1 << level
    return nodes


def fold(hashes: Sequence[bytes]) -> bytes:
    """The hash of a range from its tiling nodes, largest first: RFC 6962's MTH of that range."""
    if not hashes:
        return EMPTY_ROOT
    result = hashes[-1]
    for left in reversed(hashes[:-1]):
        result = node_hash(left, result)
    return result


def added_nodes(
    size_before: int, leaf_hashes: Sequence[bytes], reader: NodeReader
) -> list[FinishedNode]:
    """Every node finished by appending these leaves to a tree of `size_before` leaves.

    Reads only the old frontier (at most one node a level, in one call). On average each
    leaf finishes two nodes, its own and one above: the cost per event is constant.
    """
    border = frontier(size_before)
    known: dict[Node, bytes] = dict(reader.read_nodes(border)) if border and leaf_hashes else {}
    added: list[FinishedNode] = []
    for offset, hashed in enumerate(leaf_hashes):
        level, index, current = 0, size_before + offset, hashed
        known[(level, index)] = current
        added.append(FinishedNode(level, index, current))
        while index & 1:
            current = node_hash(known[(level, index - 1)], current)
            level, index = level + 1, index >> 1
            known[(level, index)] = current
            added.append(FinishedNode(level, index, current))
    return added


def root(size: int, reader: NodeReader) -> bytes:
    """The root of the tree of the first `size` leaves."""
    nodes = frontier(size)
    found = reader.read_nodes(nodes) if nodes else {}
    return fold([found[node] for node in nodes])


def _largest_power_of_two_below(n: int) -> int:
    return 1 << ((n - 1).bit_length() - 1)


def inclusion_ranges(index: int, size: int) -> list[tuple[int, int]]:
    """The leaf ranges whose hashes make up the inclusion proof of leaf `index` (RFC 6962 PATH)."""
    if not 0 <= index < size:
        raise ValueError(f"leaf {index} is not in a tree of {size}")
    ranges: list[tuple[int, int]] = []
    start, end = 0, size
    while end - start > 1:
        k = _largest_power_of_two_below(end - start)
        if index < start + k:
            ranges.append((start + k, end))
            end = start + k
        else:
            ranges.append((start, start + k))
            start += k
    # PATH lists the hashes from the leaf up; the loop walked down from the root.
    ranges.reverse()
    return ranges


def consistency_ranges(old_size: int, new_size: int) -> list[tuple[int, int]]:
    """The leaf ranges whose hashes make up the consistency proof (RFC 6962 SUBPROOF)."""
    if not 0 < old_size <= new_size:
        raise ValueError(f"no consistency proof from {old_size} to {new_size}")
    ranges: list[tuple[int, int]] = []
    start, end, whole = 0, new_size, True
    m = old_size
    while True:
        n = end - start
        if m == n:
            if not whole:
                ranges.append((start, end))
            break
        k = _largest_power_of_two_below(n)
        if m <= k:
            ranges.append((start + k, end))
            end = start + k
        else:
            ranges.append((start, start + k))
            start, m, whole = start + k, m - k, False
    ranges.reverse()
    return ranges


def hashes_of(ranges: Iterable[tuple[int, int]], reader: NodeReader) -> list[bytes]:
    """The hash of each range, from the finished nodes that tile them, read in one call."""
    tilings = [aligned_nodes(start, end) for start, end in ranges]
    wanted = sorted({node for tiling in tilings for node in tiling})
    found = reader.read_nodes(wanted) if wanted else {}
    return [fold([found[node] for node in tiling]) for tiling in tilings]


def inclusion_proof(index: int, size: int, reader: NodeReader) -> list[bytes]:
    """The audit path of leaf `index` in the tree of `size` leaves."""
    return hashes_of(inclusion_ranges(index, size), reader)


def consistency_proof(old_size: int, new_size: int, reader: NodeReader) -> list[bytes]:
    """The proof that the tree of `old_size` leaves is a prefix of the one of `new_size`."""
    if old_size == new_size:
        return []
    return hashes_of(consistency_ranges(old_size, new_size), reader)


def _check_hash(name: str, value: bytes) -> None:
    if len(value) != HASH_SIZE:
        raise ProofError(f"{name} is {len(value)} bytes, not {HASH_SIZE}")


def _check_proof(proof: Sequence[bytes]) -> None:
    if len(proof) > MAX_PROOF_HASHES:
        raise ProofError(f"a proof of {len(proof)} hashes is longer than any can be")
    for number, element in enumerate(proof):
        _check_hash(f"proof element {number}", element)


def verify_inclusion(
    index: int, size: int, hashed_leaf: bytes, proof: Sequence[bytes], expected_root: bytes
) -> None:
    """RFC 9162 section 2.1.3.2: raise ProofError unless the leaf is in the tree at `index`."""
    _check_proof(proof)
    # Roots are only ever compared with a computed root, so a root of the wrong size simply
    # never matches; the vectors take it that way too.
    _check_hash("the leaf hash", hashed_leaf)
    if not 0 <= index < size:
        raise ProofError(f"leaf index {index} is not below the tree size {size}")
    fn, sn, result = index, size - 1, hashed_leaf
    for element in proof:
        if sn == 0:
            raise ProofError("the proof is longer than the path to the root")
        if fn & 1 or fn == sn:
            result = node_hash(element, result)
            if not fn & 1:
                while not (fn & 1 or fn == 0):
                    fn, sn = fn >> 1, sn >> 1
        else:
            result = node_hash(result, element)
        fn, sn = fn >> 1, sn >> 1
    if sn != 0:
        raise ProofError("the proof is shorter than the path to the root")
    if result != expected_root:
        raise ProofError("the proof does not lead to the root")


def verify_consistency(
    old_size: int,
    new_size: int,
    old_root: bytes,
    new_root: bytes,
    proof: Sequence[bytes],
) -> None:
    """RFC 9162 section 2.1.4.2: raise ProofError unless the old tree is a prefix of the new."""
    _check_proof(proof)
    if new_size < old_size:
        raise ProofError(f"the new size {new_size} is below the old size {old_size}")
    if old_size == 0:
        # Every tree extends the empty one; a proof from it proves nothing and is refused.
        raise ProofError("a consistency proof from the empty tree is meaningless")
    if old_size == new_size:
        if proof:
            raise ProofError("equal sizes take an empty proof")
        if old_root != new_root:
            raise ProofError("equal sizes, different roots")
        return
    if not proof:
        raise ProofError("an empty proof between different sizes")
    path = list(proof)
    if old_size & (old_size - 1) == 0:
        # Step 2: an old tree that is a perfect subtree is its own first node.
        path.insert(0, old_root)
    fn, sn = old_size - 1, new_size - 1
    while fn & 1:
        fn, sn = fn >> 1, sn >> 1
    fr = sr = path[0]
    for element in path[1:]:
        if sn == 0:
            raise ProofError("the proof is longer than the path to the root")
        if fn & 1 or fn == sn:
            fr = node_hash(element, fr)
            sr = node_hash(element, sr)
            if not fn & 1:
                while not (fn & 1 or fn == 0):
                    fn, sn = fn >> 1, sn >> 1
        else:
            sr = node_hash(sr, element)
        fn, sn = fn >> 1, sn >> 1
    if sn != 0:
        raise ProofError("the proof is shorter than the path to the root")
    if fr != old_root:
        raise ProofError("the proof does not lead to the old root")
    if sr != new_root:
        raise ProofError("the proof does not lead to the new root")


class MemoryNodes:
    """Finished nodes kept in a dict: the reader for unit tests and in-memory stores."""

    def __init__(self) -> None:
        self._nodes: dict[Node, bytes] = {}
        self.size = 0

    def read_nodes(self, wanted: Sequence[Node]) -> Mapping[Node, bytes]:
        """The hashes of these nodes; KeyError for a node not finished."""
        return {node: self._nodes[node] for node in wanted}

    def append(self, entries: Iterable[bytes]) -> None:
        """Add leaves (raw entries) and store every node they finish."""
        hashed = [leaf_hash(entry) for entry in entries]
        for node in added_nodes(self.size, hashed, self):
            self._nodes[(node.level, node.index)] = node.hash
        self.size += len(hashed)
