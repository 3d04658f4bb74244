"""Tree checkpoints: signed with the JSON checkpoint at the same size, bound to the chain,
rotated with both keys, cosigned by witnesses, and checked by the independent verifier."""

from __future__ import annotations

import base64
import itertools
from collections.abc import Callable
from pathlib import Path

import pytest
from shoebox_verify.merkle import check_consistency, root_of_entries
from shoebox_verify.note import Note, TreeCheckpoint, VerifierKey, open_checkpoint, witnessed_by
from shoebox_verify.witness import Witness, WitnessKey

from domain.audit import CheckpointSigned, TreeCheckpointSigned
from events.memory import InMemoryEventStore
from events.merkle import consistency_proof
from events.merkle_store import MemoryTree, leaf_entry
from events.store import EventMetadata, NewEvent, StreamAppend
from service.application.actor import Actor
from service.application.checkpoints import (
    CheckpointError,
    CheckpointService,
    Cosignatures,
    SigningKey,
    TreeSigning,
)
from service.application.tree_notes import EXAMPLE_ORIGIN, verifier_key
from service.runtime.settings import Settings, SettingsError
from service.runtime.signing import log_origin
from tests.unit.test_checkpoints import Clock

SYSTEM = Actor("checkpointer", "system")
KEY_1 = SigningKey.from_seed(bytes(range(32)))
KEY_2 = SigningKey.from_seed(bytes(range(32, 64)))
ORIGIN = "casino.example/shoebox"


def _grow(store: InMemoryEventStore, count: int) -> None:
    for n in range(count):
        stream = f"wallet:p{n}-{store.head()}"
        store.append(
            [StreamAppend(stream, 0, [NewEvent("Deposited", {"amount": n + 1})])],
            EventMetadata(actor="test", role="ops"),
        )


def _vkey(key: SigningKey) -> VerifierKey:
    return VerifierKey.parse(verifier_key(ORIGIN, key.private))


def test_the_note_is_signed_at_the_json_checkpoints_size_and_binds_the_chain() -> None:
    store, tree = InMemoryEventStore(), MemoryTree()
    _grow(store, 11)
    service = CheckpointService(store, Clock(), KEY_1, tree=TreeSigning(tree, ORIGIN))
    signed = service.sign_if_due(SYSTEM)
    assert signed is not None
    noted = service.latest_tree()
    assert noted is not None
    assert noted.size == signed.position == 11
    assert noted.chain_head_hash == signed.head_hash
    _, checkpoint = open_checkpoint(noted.note, [_vkey(KEY_1)], origin=ORIGIN)
    events = store.read_all(0, 11, upcast=False)
    assert checkpoint.root == root_of_entries([leaf_entry(event) for event in events])
    assert checkpoint.extension("shoebox-chain-head ") == signed.head_hash
    assert base64.b64decode(noted.root_hash) == checkpoint.root
    # Both checkpoints went in one append, right after the head they sign.
    (json_event, tree_event) = store.read_all(11, 2, upcast=False)
    assert (json_event.type, tree_event.type) == (CheckpointSigned.type, TreeCheckpointSigned.type)
    assert service.sign_if_due(SYSTEM) is None


def test_successive_notes_are_consistent_for_the_independent_verifier() -> None:
    store, tree = InMemoryEventStore(), MemoryTree()
    service = CheckpointService(store, Clock(), KEY_1, tree=TreeSigning(tree, ORIGIN))
    notes: list[TreeCheckpoint] = []
    for batch in (3, 1, 20):
        _grow(store, batch)
        service.sign_if_due(SYSTEM)
        noted = service.latest_tree()
        assert noted is not None
        notes.append(open_checkpoint(noted.note, [_vkey(KEY_1)])[1])
    for old, new in itertools.pairwise(notes):
        proof = consistency_proof(old.size, new.size, tree)
        check_consistency(old.size, new.size, old.root, new.root, proof)


def test_the_first_note_under_a_new_key_carries_both_keys_lines() -> None:
    store, tree = InMemoryEventStore(), MemoryTree()
    _grow(store, 2)
    CheckpointService(store, Clock(), KEY_1, tree=TreeSigning(tree, ORIGIN)).sign_if_due(SYSTEM)
    _grow(store, 2)
    with pytest.raises(CheckpointError, match="previous signing key"):
        CheckpointService(store, Clock(), KEY_2, tree=TreeSigning(tree, ORIGIN)).sign_if_due(SYSTEM)
    rotated = CheckpointService(store, Clock(), KEY_2, KEY_1, tree=TreeSigning(tree, ORIGIN))
    rotated.sign_if_due(SYSTEM)
    noted = rotated.latest_tree()
    assert noted is not None
    note = Note.parse(noted.note)
    assert note.verified_by([_vkey(KEY_1), _vkey(KEY_2)]) == [_vkey(KEY_2), _vkey(KEY_1)]
    _grow(store, 1)
    rotated.sign_if_due(SYSTEM)
    later = rotated.latest_tree()
    assert later is not None
    assert Note.parse(later.note).verified_by([_vkey(KEY_1), _vkey(KEY_2)]) == [_vkey(KEY_2)]


class InProcessWitnesses:
    """The verifier's real witness logic, called in-process instead of over HTTP."""

    def __init__(self, witnesses: list[Witness], down: set[int] | None = None) -> None:
        self.witnesses = witnesses
        self.down = down or set()

    def cosign(
        self,
        note: str,
        size: int,
        last_sizes: dict[str, int],
        proof: Callable[[int], list[bytes]],
    ) -> Cosignatures:
        lines: list[str] = []
        names: list[str] = []
        for number, witness in enumerate(self.witnesses):
            if number in self.down:
                continue
            name = witness.verifier_key.name
            old = last_sizes.get(name, 0)
            for _ in range(2):
                head = [
                    f"old {old}",
                    *(base64.b64encode(h).decode() for h in (proof(old) if old else [])),
                ]
                answer = witness.add_checkpoint("\n".join(head) + "\n\n" + note)
                if answer.status == 409:
                    old = int(answer.body)
                    continue
                if answer.status == 200:
                    lines.append(answer.body.decode())
                    names.append(name)
                break
        return Cosignatures(tuple(lines), tuple(names))


def test_witnesses_cosign_and_one_that_is_down_catches_up_later(tmp_path: Path) -> None:
    store, tree = InMemoryEventStore(), MemoryTree()
    log_key = _vkey(KEY_1)
    witnesses = [
        Witness(WitnessKey.generate(f"witness.example/w{n}"), tmp_path / str(n), [log_key])
        for n in range(3)
    ]
    keys = [w.verifier_key for w in witnesses]
    fleet = InProcessWitnesses(witnesses, down={2})
    service = CheckpointService(store, Clock(), KEY_1, tree=TreeSigning(tree, ORIGIN, fleet))
    _grow(store, 5)
    service.sign_if_due(SYSTEM)
    first = service.latest_tree()
    assert first is not None
    assert first.cosigners == ("witness.example/w0", "witness.example/w1")
    assert len(witnessed_by(Note.parse(first.note), keys, quorum=2)) == 2
    fleet.down = set()
    _grow(store, 9)
    service.sign_if_due(SYSTEM)
    second = service.latest_tree()
    assert second is not None
    assert len(second.cosigners) == 3
    assert len(witnessed_by(Note.parse(second.note), keys, quorum=3)) == 3


def test_the_example_origin_is_refused_outside_demo_mode() -> None:
    assert log_origin(Settings(demo=True)) == EXAMPLE_ORIGIN
    assert log_origin(Settings()) is None
    assert log_origin(Settings(log_origin=ORIGIN)) == ORIGIN
    with pytest.raises(SettingsError, match="example origin"):
        log_origin(Settings(log_origin=EXAMPLE_ORIGIN))
