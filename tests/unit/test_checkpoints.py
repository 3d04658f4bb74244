"""Signed checkpoints: the service's signing matches docs/verification.md to the byte, and the
independent verifier accepts what the service signs, rotations included."""

import json
from datetime import UTC, datetime, timedelta

import pytest
from shoebox_verify import checkpoints as independent

from domain.audit import CheckpointSigned
from events.memory import InMemoryEventStore
from events.store import EventMetadata, NewEvent, StreamAppend
from service.application.actor import Actor
from service.application.checkpoints import (
    STREAM,
    CheckpointError,
    CheckpointService,
    SigningKey,
    document,
    kept_line,
    message,
    verify_signatures,
)

SYSTEM = Actor("checkpointer", "system")
KEY_1 = SigningKey.from_seed(bytes(range(32)))
KEY_2 = SigningKey.from_seed(bytes(range(32, 64)))
HEAD = "d82ec8e46b448f547aab7b0830d719f8147a347d1b056b76ce499873a9edbbd0"


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 11, 30, 16, 22, 24, tzinfo=UTC)

    def __call__(self) -> datetime:
        self.now += timedelta(seconds=1)
        return self.now


def test_keys_and_the_signature_match_the_published_vectors() -> None:
    assert KEY_1.public_key == "03a107bff3ce10be1d70dd18e74bc09967e4d6309ba50d5f1ddc8664125531b8"
    assert KEY_1.key_id == "56475aa75463474c0285df5dbf2bcab73da651358839e9b77481b2eab107708c"
    assert KEY_2.key_id == "24f6ed6acbfe1009c030d7ca567c33ca4830911498236b5561a6c82abec5de28"
    signed = message(1, HEAD, KEY_1.key_id, "2026-11-30T16:22:24.000000Z")
    assert KEY_1.sign(signed) == (
        "259150c53239a9bdcbc2f36cfc0897697fc53735666455c2f2d886a97d76a8c7"
        "4ff97dd3eaac06d453f67f69ec58f79fd62b3f7d5576206565fc1a69b6e6c303"
    )
    rotated = message(2, HEAD, KEY_2.key_id, "2026-12-01T00:00:00.000000Z")
    assert KEY_1.sign(rotated).startswith("c6c835ce66a1dcca")
    assert KEY_2.sign(rotated).startswith("cd2370c3d2b44a3a")


def _store_with_events(count: int) -> InMemoryEventStore:
    store = InMemoryEventStore()
    for n in range(count):
        store.append(
            [StreamAppend(f"wallet:p{n}", 0, [NewEvent("Deposited", {"amount": 1})])],
            EventMetadata(actor="test", role="ops"),
        )
    return store


def test_a_checkpoint_signs_the_head_and_is_recorded_in_the_log() -> None:
    store = _store_with_events(3)
    service = CheckpointService(store, Clock(), KEY_1)
    signed = service.sign_head(SYSTEM)
    assert signed is not None
    head = store.read_all(2, 1, upcast=False)[0]
    assert (signed.position, signed.head_hash) == (3, head.hash)
    verify_signatures(signed)
    recorded = store.last_of_stream(STREAM)
    assert recorded is not None
    assert recorded.type == CheckpointSigned.type
    assert service.latest() == signed


def test_a_periodic_checkpoint_is_skipped_when_only_a_checkpoint_came_since() -> None:
    store = _store_with_events(1)
    service = CheckpointService(store, Clock(), KEY_1)
    assert service.sign_if_due(SYSTEM) is not None
    assert service.sign_if_due(SYSTEM) is None
    _append_one(store, "wallet:late")
    assert service.sign_if_due(SYSTEM) is not None


def test_an_empty_log_has_no_head_to_sign() -> None:
    assert CheckpointService(InMemoryEventStore(), Clock(), KEY_1).sign_head(SYSTEM) is None


def _append_one(store: InMemoryEventStore, stream_id: str) -> None:
    store.append(
        [StreamAppend(stream_id, 0, [NewEvent("Deposited", {"amount": 1})])],
        EventMetadata(actor="test", role="ops"),
    )


def test_a_new_key_needs_the_old_one_to_endorse_it() -> None:
    store = _store_with_events(1)
    clock = Clock()
    CheckpointService(store, clock, KEY_1).sign_head(SYSTEM)
    _append_one(store, "wallet:more")
    with pytest.raises(CheckpointError, match="previous signing key"):
        CheckpointService(store, clock, KEY_2).sign_head(SYSTEM)
    rotated = CheckpointService(store, clock, KEY_2, previous=KEY_1).sign_head(SYSTEM)
    assert rotated is not None
    assert rotated.previous_key_signature is not None
    verify_signatures(rotated, previous=KEY_1.public_key)
    _append_one(store, "wallet:after")
    settled = CheckpointService(store, clock, KEY_2, previous=KEY_1).sign_head(SYSTEM)
    assert settled is not None
    assert settled.previous_key_signature is None


def test_the_independent_verifier_follows_the_services_checkpoints_through_a_rotation() -> None:
    store = _store_with_events(1)
    clock = Clock()
    first = CheckpointService(store, clock, KEY_1).sign_head(SYSTEM)
    _append_one(store, "wallet:more")
    second = CheckpointService(store, clock, KEY_2, previous=KEY_1).sign_head(SYSTEM)
    assert first is not None
    assert second is not None
    chain = independent.KeyChain([bytes.fromhex(KEY_1.public_key)])
    for checkpoint in (first, second):
        chain.accept(independent.parse(document(checkpoint)))
    assert chain.current == bytes.fromhex(KEY_2.public_key)


def test_a_tampered_checkpoint_does_not_verify() -> None:
    signed = CheckpointService(_store_with_events(2), Clock(), KEY_1).sign_head(SYSTEM)
    assert signed is not None
    from dataclasses import replace

    with pytest.raises(CheckpointError):
        verify_signatures(replace(signed, position=1))
    with pytest.raises(CheckpointError):
        verify_signatures(replace(signed, public_key=KEY_2.public_key))


def test_regulators_read_the_checkpoints_a_page_at_a_time() -> None:
    from service.application.keys import Role
    from tests.api_harness import Api

    api = Api()
    service = CheckpointService(api.store, Clock(), KEY_1)
    signed = []
    for n in range(3):
        _append_one(api.store, f"wallet:x{n}")  # type: ignore[arg-type]
        found = service.sign_head(SYSTEM)
        assert found is not None
        signed.append(found)
    first = api.ok("GET", "/v1/audit/checkpoints?limit=2", role=Role.REGULATOR)
    assert [c["position"] for c in first["checkpoints"]] == [s.position for s in signed[:2]]
    rest = api.ok("GET", f"/v1/audit/checkpoints?after={first['next_after']}", role=Role.REGULATOR)
    assert [c["signature"] for c in rest["checkpoints"]] == [signed[2].signature]
    assert rest["next_after"] is None
    item = first["checkpoints"][0]
    # `line` is exactly a checkpoint file's line; the item's other keys are its fields.
    assert item["line"] == kept_line(signed[0])
    independent.parse(json.loads(item["line"]))
    assert {k: v for k, v in item.items() if k not in {"recorded_in", "line"}} == json.loads(
        item["line"]
    )
    status, _ = api.refused("GET", "/v1/audit/checkpoints")
    assert status == 403


def test_kept_checkpoints_catch_a_rewritten_log_and_a_key_nobody_endorsed() -> None:
    from service.application.checkpoints import check_kept

    store = _store_with_events(2)
    signed = CheckpointService(store, Clock(), KEY_1).sign_head(SYSTEM)
    assert signed is not None
    hashes: dict[int, str] = {2: signed.head_hash}
    assert check_kept([signed], hashes.get) == []
    (rewritten,) = check_kept([signed], {2: "0" * 64}.get)
    assert "rewritten" in rewritten
    nothing: dict[int, str] = {}
    (cut,) = check_kept([signed], nothing.get)
    assert "cut short" in cut
    _append_one(store, "wallet:more")
    elsewhere = InMemoryEventStore()
    _append_one(elsewhere, "wallet:x")
    foreign = CheckpointService(elsewhere, Clock(), KEY_2).sign_head(SYSTEM)
    assert foreign is not None
    (unendorsed,) = check_kept([signed, foreign], {2: signed.head_hash, 1: foreign.head_hash}.get)
    assert "is not trusted" in unendorsed


def test_kept_checkpoints_must_descend_from_a_trusted_key_when_one_is_given() -> None:
    from service.application.checkpoints import check_kept

    store = _store_with_events(2)
    first = CheckpointService(store, Clock(), KEY_1).sign_head(SYSTEM)
    assert first is not None
    _append_one(store, "wallet:more")
    second = CheckpointService(store, Clock(), KEY_2, previous=KEY_1).sign_head(SYSTEM)
    assert second is not None
    hashes = {first.position: first.head_hash, second.position: second.head_hash}.get
    # Trusted on first use, anchored on key 1, or on key 1 through key 2's endorsement.
    assert check_kept([first, second], hashes) == []
    assert check_kept([first, second], hashes, trusted=[KEY_1.public_key]) == []
    assert check_kept([second], hashes, trusted=[KEY_1.public_key]) == []
    # Signed by a key nobody trusted.
    (foreign,) = check_kept([first], hashes, trusted=[KEY_2.public_key])
    assert "is not trusted" in foreign
    # Key 1 was rotated out by key 2: it may sign nothing after.
    (retired,) = check_kept([first, second, first], hashes)
    assert "rotated out" in retired
