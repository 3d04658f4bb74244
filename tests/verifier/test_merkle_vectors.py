"""The verifier's Merkle checks: transparency-dev/merkle's vectors, and the server's proofs.

The verifier's checks were written apart from the server's tree (a different algorithm, see
shoebox_verify/merkle.py); here both meet the same published vectors, and the verifier
checks every proof the server makes of random trees, and refuses every one-bit change.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from shoebox_verify.merkle import (
    MerkleProofError,
    check_consistency,
    check_inclusion,
    hash_leaf,
    root_of_entries,
)

from events.merkle import MemoryNodes, consistency_proof, inclusion_proof, root

VECTORS = Path(__file__).resolve().parents[1] / "vectors" / "merkle"


def _cases(kind: str) -> Iterator[Any]:
    for path in sorted((VECTORS / kind).rglob("*.json")):
        yield pytest.param(json.loads(path.read_text()), id=str(path.relative_to(VECTORS)))


def _b64(value: str | None) -> bytes:
    return base64.b64decode(value or "")


@pytest.mark.parametrize("case", list(_cases("inclusion")))
def test_inclusion_vector_is_judged_as_published(case: dict[str, Any]) -> None:
    proof = [_b64(element) for element in case["proof"] or []]
    arguments = (case["leafIdx"], case["treeSize"], _b64(case["leafHash"]), proof)
    if case["wantErr"]:
        with pytest.raises(MerkleProofError):
            check_inclusion(*arguments, _b64(case["root"]))
    else:
        check_inclusion(*arguments, _b64(case["root"]))


@pytest.mark.parametrize("case", list(_cases("consistency")))
def test_consistency_vector_is_judged_as_published(case: dict[str, Any]) -> None:
    proof = [_b64(element) for element in case["proof"] or []]
    arguments = (case["size1"], case["size2"], _b64(case["root1"]), _b64(case["root2"]), proof)
    if case["wantErr"]:
        with pytest.raises(MerkleProofError):
            check_consistency(*arguments)
    else:
        check_consistency(*arguments)


def test_whole_tree_roots_match_the_published_ones() -> None:
    fixture = json.loads((VECTORS / "leaves.json").read_text())
    entries = [bytes.fromhex(value) for value in fixture["leaf_inputs_hex"]]
    for size, expected in enumerate(fixture["root_hashes_hex_by_size"]):
        assert root_of_entries(entries[:size]).hex() == expected


def _flip(value: bytes, bit: int) -> bytes:
    changed = bytearray(value)
    changed[bit // 8 % len(changed)] ^= 1 << (bit % 8)
    return bytes(changed)


@settings(max_examples=30, deadline=None)
@given(size=st.integers(min_value=1, max_value=10_000), data=st.data())
def test_the_verifier_accepts_the_servers_proofs_and_no_flipped_bit(
    size: int, data: st.DataObject
) -> None:
    entries = [b"entry %d" % i for i in range(size)]
    nodes = MemoryNodes()
    nodes.append(entries)
    new_root = root(size, nodes)
    assert root_of_entries(entries) == new_root
    index = data.draw(st.integers(0, size - 1), label="index")
    proof = inclusion_proof(index, size, nodes)
    check_inclusion(index, size, hash_leaf(entries[index]), proof, new_root)
    bit = data.draw(st.integers(0, 255), label="bit")
    with pytest.raises(MerkleProofError):
        check_inclusion(index, size, hash_leaf(entries[index] + b"!"), proof, new_root)
    if proof:
        at = data.draw(st.integers(0, len(proof) - 1), label="at")
        tampered = [_flip(h, bit) if i == at else h for i, h in enumerate(proof)]
        with pytest.raises(MerkleProofError):
            check_inclusion(index, size, hash_leaf(entries[index]), tampered, new_root)
    old_size = data.draw(st.integers(1, size), label="old size")
    old_root = root(old_size, nodes)
    proof = consistency_proof(old_size, size, nodes)
    check_consistency(old_size, size, old_root, new_root, proof)
    with pytest.raises(MerkleProofError):
        check_consistency(old_size, size, _flip(old_root, bit), new_root, proof)
    if proof:
        at = data.draw(st.integers(0, len(proof) - 1), label="at")
        tampered = [_flip(h, bit) if i == at else h for i, h in enumerate(proof)]
        with pytest.raises(MerkleProofError):
            check_consistency(old_size, size, old_root, new_root, tampered)
