"""The log's Merkle tree against transparency-dev/merkle's vectors and random trees."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from events.merkle import (
    EMPTY_ROOT,
    MAX_PROOF_HASHES,
    MemoryNodes,
    ProofError,
    consistency_proof,
    consistency_ranges,
    inclusion_proof,
    inclusion_ranges,
    leaf_hash,
    node_hash,
    root,
    verify_consistency,
    verify_inclusion,
)

VECTORS = Path(__file__).resolve().parents[1] / "vectors" / "merkle"


def _cases(kind: str) -> Iterator[Any]:
    for path in sorted((VECTORS / kind).rglob("*.json")):
        yield pytest.param(json.loads(path.read_text()), id=str(path.relative_to(VECTORS)))


def _b64(value: str | None) -> bytes:
    return base64.b64decode(value or "")


def _reference_root(entries: list[bytes]) -> bytes:
    # RFC 6962's MTH written as the RFC writes it, recursively over the whole list: a model
    # that shares nothing with the finished-node store under test.
    if not entries:
        return hashlib.sha256(b"").digest()
    if len(entries) == 1:
        return leaf_hash(entries[0])
    k = 1 << ((len(entries) - 1).bit_length() - 1)
    return node_hash(_reference_root(entries[:k]), _reference_root(entries[k:]))


def _tree(entries: list[bytes]) -> MemoryNodes:
    nodes = MemoryNodes()
    nodes.append(entries)
    return nodes


def _standard_tree() -> tuple[MemoryNodes, list[bytes]]:
    fixture = json.loads((VECTORS / "leaves.json").read_text())
    entries = [bytes.fromhex(value) for value in fixture["leaf_inputs_hex"]]
    roots = [bytes.fromhex(value) for value in fixture["root_hashes_hex_by_size"]]
    return _tree(entries), roots


def test_roots_of_the_standard_tree_at_every_size_match_the_published_ones() -> None:
    fixture = json.loads((VECTORS / "leaves.json").read_text())
    entries = [bytes.fromhex(value) for value in fixture["leaf_inputs_hex"]]
    _, roots = _standard_tree()
    for size in range(len(entries) + 1):
        nodes = _tree(entries[:size])
        assert root(size, nodes) == roots[size]
    assert root(0, MemoryNodes()) == EMPTY_ROOT


@pytest.mark.parametrize("case", list(_cases("inclusion")))
def test_inclusion_vector_is_judged_as_published(case: dict[str, Any]) -> None:
    proof = [_b64(element) for element in case["proof"] or []]
    arguments = (case["leafIdx"], case["treeSize"], _b64(case["leafHash"]), proof)
    if case["wantErr"]:
        with pytest.raises(ProofError):
            verify_inclusion(*arguments, _b64(case["root"]))
    else:
        verify_inclusion(*arguments, _b64(case["root"]))


@pytest.mark.parametrize("case", list(_cases("consistency")))
def test_consistency_vector_is_judged_as_published(case: dict[str, Any]) -> None:
    proof = [_b64(element) for element in case["proof"] or []]
    arguments = (case["size1"], case["size2"], _b64(case["root1"]), _b64(case["root2"]), proof)
    if case["wantErr"]:
        with pytest.raises(ProofError):
            verify_consistency(*arguments)
    else:
        verify_consistency(*arguments)


@pytest.mark.parametrize(
    "case",
    [c for c in _cases("inclusion") if "happy path" in c.values[0]["desc"]],
)
def test_inclusion_proofs_made_here_equal_the_published_ones(case: Any) -> None:
    nodes, _ = _standard_tree()
    vector = case
    made = inclusion_proof(vector["leafIdx"], vector["treeSize"], nodes)
    assert made == [_b64(element) for element in vector["proof"] or []]


@pytest.mark.parametrize(
    "case",
    [c for c in _cases("consistency") if "happy path" in c.values[0]["desc"]],
)
def test_consistency_proofs_made_here_equal_the_published_ones(case: Any) -> None:
    nodes, _ = _standard_tree()
    made = consistency_proof(case["size1"], case["size2"], nodes)
    assert made == [_b64(element) for element in case["proof"] or []]


def test_a_proof_longer_than_any_tree_allows_is_refused_unread() -> None:
    proof = [b"\x00" * 32] * (MAX_PROOF_HASHES + 1)
    with pytest.raises(ProofError, match="longer than any"):
        verify_inclusion(0, 1 << 62, b"\x00" * 32, proof, b"\x00" * 32)


def _flip(value: bytes, bit: int) -> bytes:
    changed = bytearray(value)
    changed[bit // 8 % len(changed)] ^= 1 << (bit % 8)
    return bytes(changed)


sizes = st.integers(min_value=1, max_value=10_000)


def _path_shape(index: int, size: int) -> list[bool] | None:
    # The side of each sibling: all that a verifier can tell of a claimed index and size.
    if not 0 <= index < size:
        return None
    return [start < index for start, _ in inclusion_ranges(index, size)]


def _consistency_shape(old_size: int, new_size: int) -> tuple[bool, list[bool]] | None:
    # Whether the old root seeds the proof, and which hashes lie inside the old tree.
    if not 0 < old_size < new_size:
        return None
    inside = [end <= old_size for _, end in consistency_ranges(old_size, new_size)]
    return old_size & (old_size - 1) == 0, inside


@settings(max_examples=40, deadline=None)
@given(size=sizes, data=st.data())
def test_every_inclusion_proof_of_a_random_tree_verifies_and_no_bit_flip_does(
    size: int, data: st.DataObject
) -> None:
    entries = [i.to_bytes(4, "big") for i in range(size)]
    nodes = _tree(entries)
    tree_root = root(size, nodes)
    assert tree_root == _reference_root(entries)
    index = data.draw(st.integers(min_value=0, max_value=size - 1), label="index")
    leaf = leaf_hash(entries[index])
    proof = inclusion_proof(index, size, nodes)
    verify_inclusion(index, size, leaf, proof, tree_root)
    bit = data.draw(st.integers(min_value=0, max_value=255), label="bit")
    if proof:
        element = data.draw(st.integers(min_value=0, max_value=len(proof) - 1), label="element")
        tampered = list(proof)
        tampered[element] = _flip(tampered[element], bit)
        with pytest.raises(ProofError):
            verify_inclusion(index, size, leaf, tampered, tree_root)
    with pytest.raises(ProofError):
        verify_inclusion(index, size, _flip(leaf, bit), proof, tree_root)
    with pytest.raises(ProofError):
        verify_inclusion(index, size, leaf, proof, _flip(tree_root, bit))
    # A changed index or size is refused unless it gives the path the same shape: a proof
    # holds no sizes, so such a twin is told apart only by the signed checkpoint's size.
    other_index = index ^ (1 << data.draw(st.integers(0, 13), label="index bit"))
    other_size = size ^ (1 << data.draw(st.integers(0, 13), label="size bit"))
    for claimed_index, claimed_size in ((other_index, size), (index, other_size)):
        if _path_shape(claimed_index, claimed_size) != _path_shape(index, size):
            with pytest.raises(ProofError):
                verify_inclusion(claimed_index, claimed_size, leaf, proof, tree_root)


@settings(max_examples=40, deadline=None)
@given(new_size=sizes, data=st.data())
def test_every_consistency_proof_of_a_random_tree_verifies_and_no_bit_flip_does(
    new_size: int, data: st.DataObject
) -> None:
    entries = [i.to_bytes(4, "big") for i in range(new_size)]
    nodes = _tree(entries)
    old_size = data.draw(st.integers(min_value=1, max_value=new_size), label="old size")
    old_root, new_root = root(old_size, nodes), root(new_size, nodes)
    assert old_root == _reference_root(entries[:old_size])
    proof = consistency_proof(old_size, new_size, nodes)
    verify_consistency(old_size, new_size, old_root, new_root, proof)
    bit = data.draw(st.integers(min_value=0, max_value=255), label="bit")
    if proof:
        element = data.draw(st.integers(min_value=0, max_value=len(proof) - 1), label="element")
        tampered = list(proof)
        tampered[element] = _flip(tampered[element], bit)
        with pytest.raises(ProofError):
            verify_consistency(old_size, new_size, old_root, new_root, tampered)
    with pytest.raises(ProofError):
        verify_consistency(old_size, new_size, _flip(old_root, bit), new_root, proof)
    with pytest.raises(ProofError):
        verify_consistency(old_size, new_size, old_root, _flip(new_root, bit), proof)
    flip = 1 << data.draw(st.integers(0, 13), label="size bit")
    for claimed_old, claimed_new in ((old_size ^ flip, new_size), (old_size, new_size ^ flip)):
        if _consistency_shape(claimed_old, claimed_new) != _consistency_shape(old_size, new_size):
            with pytest.raises(ProofError):
                verify_consistency(claimed_old, claimed_new, old_root, new_root, proof)


def test_a_tree_grown_in_batches_has_the_same_nodes_as_one_grown_a_leaf_at_a_time() -> None:
    entries = [i.to_bytes(4, "big") for i in range(1_000)]
    by_leaf, in_batches = MemoryNodes(), MemoryNodes()
    for entry in entries:
        by_leaf.append([entry])
    start = 0
    for batch in (1, 7, 64, 3, 300, 625):
        in_batches.append(entries[start : start + batch])
        start += batch
    assert start == len(entries)
    for size in (1, 2, 3, 255, 256, 257, 999, 1_000):
        assert root(size, by_leaf) == root(size, in_batches) == _reference_root(entries[:size])
