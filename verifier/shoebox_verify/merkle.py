"""Merkle proofs of the log (RFC 6962 hashing), checked with nothing of the server's code.

The server builds its tree and its proofs; this module only checks them. It sees a proof as
two parts, as the verifier of transparency-dev/merkle does: the "inner" part, where the path
from the leaf to the root meets siblings on both sides, and the "border" part along the right
edge of the tree, where every sibling is on the left. The lengths of both parts follow from
the index and the size alone, so a proof of any other length is refused before any hashing.
This gives the same answers as the step-by-step algorithm of RFC 9162 sections 2.1.3.2 and
2.1.4.2 (the server's code follows that one), and the shared test vectors hold both to it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

DIGEST_BYTES = 32
LONGEST_PROOF = 63


class MerkleProofError(ValueError):
    """A Merkle proof that does not prove what it claims."""


def hash_leaf(entry: bytes) -> bytes:
    """RFC 6962 leaf hash: SHA-256 of 0x00 and the entry."""
    return hashlib.sha256(bytes([0]) + entry).digest()


def hash_children(left: bytes, right: bytes) -> bytes:
    """RFC 6962 interior hash: SHA-256 of 0x01, the left child and the right child."""
    return hashlib.sha256(bytes([1]) + left + right).digest()


def root_of_entries(entries: Sequence[bytes]) -> bytes:
    """The root of a whole tree, from its entries (for small trees: a round's own checks)."""
    if not entries:
        return hashlib.sha256(b"").digest()
    level = [hash_leaf(entry) for entry in entries]
    while len(level) > 1:
        paired = [hash_children(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            # The last node of an odd level rises unpaired: RFC 6962 splits at powers of two.
            paired.append(level[-1])
        level = paired
    return level[0]


def _split(index: int, size: int) -> tuple[int, int]:
    # Inner: the levels below the point where the paths to `index` and to the last leaf part.
    # Border: one left sibling for every level above it where `index`'s ancestor is a right child.
    inner = (index ^ (size - 1)).bit_length()
    border = bin(index >> inner).count("1")
    return inner, border


def _climb_inner(seed: bytes, siblings: Sequence[bytes], index: int) -> bytes:
    node = seed
    for level, sibling in enumerate(siblings):
        on_the_right = (index >> level) & 1
        node = hash_children(sibling, node) if on_the_right else hash_children(node, sibling)
    return node


def _climb_inner_right(seed: bytes, siblings: Sequence[bytes], index: int) -> bytes:
    # Only the siblings on the left: the ones inside an old tree whose right edge `index` is.
    node = seed
    for level, sibling in enumerate(siblings):
        if (index >> level) & 1:
            node = hash_children(sibling, node)
    return node


def _climb_border(seed: bytes, siblings: Sequence[bytes]) -> bytes:
    node = seed
    for sibling in siblings:
        node = hash_children(sibling, node)
    return node


def _check_shape(proof: Sequence[bytes]) -> None:
    if len(proof) > LONGEST_PROOF:
        raise MerkleProofError(f"{len(proof)} hashes: no proof is that long")
    if any(len(element) != DIGEST_BYTES for element in proof):
        raise MerkleProofError("a proof hash is not 32 bytes")


def root_from_inclusion(index: int, size: int, leaf: bytes, proof: Sequence[bytes]) -> bytes:
    """The root that an inclusion proof of a leaf hash at `index` leads to."""
    _check_shape(proof)
    if not 0 <= index < size:
        raise MerkleProofError(f"index {index} is outside a tree of {size}")
    if len(leaf) != DIGEST_BYTES:
        raise MerkleProofError("the leaf hash is not 32 bytes")
    inner, border = _split(index, size)
    if len(proof) != inner + border:
        raise MerkleProofError(f"{len(proof)} hashes where the path has {inner + border}")
    return _climb_border(_climb_inner(leaf, proof[:inner], index), proof[inner:])


def check_inclusion(
    index: int, size: int, leaf: bytes, proof: Sequence[bytes], root: bytes
) -> None:
    """Raise MerkleProofError unless the leaf hash is at `index` in the tree with this root."""
    if root_from_inclusion(index, size, leaf, proof) != root:
        raise MerkleProofError("the inclusion proof leads to another root")


def check_consistency(
    old_size: int, new_size: int, old_root: bytes, new_root: bytes, proof: Sequence[bytes]
) -> None:
    """Raise MerkleProofError unless the tree of `old_size` is a prefix of the new tree."""
    _check_shape(proof)
    if new_size < old_size:
        raise MerkleProofError("the new tree is smaller than the old")
    if old_size == 0:
        raise MerkleProofError("a proof from the empty tree proves nothing")
    if old_size == new_size:
        if proof:
            raise MerkleProofError("same size, yet a non-empty proof")
        if old_root != new_root:
            raise MerkleProofError("same size, different roots")
        return
    if not proof:
        raise MerkleProofError("different sizes, empty proof")
    # The paths to the old tree's last leaf and to the new tree's last leaf part at `fork`;
    # below it, the old tree's rightmost perfect subtree of height `shift` needs no proof.
    fork, border = _split(old_size - 1, new_size)
    shift = ((old_size & -old_size).bit_length()) - 1
    inner = fork - shift
    if old_size == 1 << shift:
        # The old tree is itself a perfect subtree: its root is the proof's first node.
        seed, rest = old_root, proof
    else:
        seed, rest = proof[0], proof[1:]
    if len(rest) != inner + border:
        raise MerkleProofError(f"{len(rest)} hashes where the proof has {inner + border}")
    last = (old_size - 1) >> shift
    old = _climb_border(_climb_inner_right(seed, rest[:inner], last), rest[inner:])
    if old != old_root:
        raise MerkleProofError("the consistency proof does not rebuild the old root")
    new = _climb_border(_climb_inner(seed, rest[:inner], last), rest[inner:])
    if new != new_root:
        raise MerkleProofError("the consistency proof does not lead to the new root")
