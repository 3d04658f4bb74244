"""One round proved over HTTP against a signed tree checkpoint, on the real PostgreSQL, and
checked by the independent verifier; tampering with any part of the proof is caught."""

from __future__ import annotations

import base64
import json
from dataclasses import replace
from typing import Any

import pytest
from shoebox_verify.merkle import check_consistency, check_inclusion, hash_leaf
from shoebox_verify.note import VerifierKey, open_checkpoint
from shoebox_verify.roundproof import RoundProofError, check_round_proof

from domain.outcome import Outcome
from events.merkle_store import PostgresTree, leaf_entry
from events.postgres import Pool, PostgresEventStore
from service.application.actor import Actor
from service.application.checkpoints import CheckpointService, SigningKey, TreeSigning
from service.application.keys import Role, create_key
from service.application.tree_notes import verifier_key
from service.regulator.proofs import tree_checkpoint_at
from service.runtime.container import Container
from service.web.api import EXTENSION
from tests.api_harness import OPERATOR, Api, seed_dealing

KEY = SigningKey.from_seed(bytes(range(32)))
ORIGIN = "casino.example/shoebox"
SIGNER = Actor("checkpointer", "system")


def _vkey() -> VerifierKey:
    return VerifierKey.parse(verifier_key(ORIGIN, KEY.private))


@pytest.fixture
def played(app_pool: Pool) -> tuple[Api, CheckpointService, PostgresTree]:
    api = Api(store=PostgresEventStore(app_pool), seeds=(seed_dealing((Outcome.BANKER,)),))
    tree = PostgresTree(app_pool)
    wiring = api.app.extensions[EXTENSION]
    assert isinstance(wiring, Container)
    api.app.extensions[EXTENSION] = replace(wiring, tree=tree)
    signer = CheckpointService(api.store, api.clock, KEY, tree=TreeSigning(tree, ORIGIN))
    api.create_table("T1")
    for seat, player in enumerate(("alice", "bob"), start=1):
        api.fund(player)
        api.sit("T1", player, seat)
    signer.sign_head(SIGNER)  # a checkpoint before the round: too early to prove it
    api.bet("T1", "alice", "banker", 1_000)
    api.bet("T1", "bob", "player", 500)
    api.act("T1", "deal", "alice")
    api.act("T1", "deal", "bob")
    return api, signer, tree


def _get(api: Api, path: str, role: Role = Role.REGULATOR) -> Any:
    return api.call("GET", path, role=role)


def test_a_round_is_proved_and_replayed_by_the_verifier(
    played: tuple[Api, CheckpointService, PostgresTree], app_pool: Pool
) -> None:
    api, signer, _ = played
    early = signer.latest_tree()
    signer.sign_head(SIGNER)
    latest = signer.latest_tree()
    assert early is not None
    assert latest is not None
    served = _get(api, "/v1/log/checkpoint", Role.FRONTEND)
    assert served.status_code == 200
    assert served.mimetype == "text/plain"
    assert served.get_data(as_text=True) == latest.note
    assert tree_checkpoint_at(api.store, app_pool, latest.size).note == latest.note

    answer = _get(api, f"/v1/rounds/T1-1/proof?size={latest.size}")
    assert answer.status_code == 200, answer.get_json()
    assert "immutable" in answer.headers["Cache-Control"]
    report = check_round_proof(answer.get_data(as_text=True), [_vkey()])
    types = [event["type"] for event in report.events]
    assert {"ShoeOpened", "BetPlaced", "StakeReserved"} <= set(types)
    assert any("not revealed" in note for note in report.notes)

    too_early = _get(api, f"/v1/rounds/T1-1/proof?size={early.size}")
    assert too_early.status_code == 409
    assert _get(api, f"/v1/rounds/T1-1/proof?size={latest.size + 1}").status_code == 409
    assert _get(api, f"/v1/rounds/T1-9/proof?size={latest.size}").status_code == 404


def test_every_change_to_a_round_proof_is_caught(
    played: tuple[Api, CheckpointService, PostgresTree],
) -> None:
    api, signer, _ = played
    signer.sign_head(SIGNER)
    latest = signer.latest_tree()
    assert latest is not None
    document = _get(api, f"/v1/rounds/T1-1/proof?size={latest.size}").get_json()
    entry = document["entries"][-1]

    def refused(change: dict[str, Any]) -> None:
        with pytest.raises(RoundProofError):
            check_round_proof(json.dumps(change), [_vkey()])

    rewritten = json.loads(json.dumps(document))
    rewritten["entries"][-1]["event"] = entry["event"].replace('"stake":', '"stake":1')
    refused(rewritten)
    moved = json.loads(json.dumps(document))
    moved["entries"][-1]["tlog_proof"] = entry["tlog_proof"].replace(
        f"index {entry['position'] - 1}", f"index {entry['position']}"
    )
    refused(moved)
    dropped_hash = json.loads(json.dumps(document))
    lines = entry["tlog_proof"].split("\n")
    dropped_hash["entries"][-1]["tlog_proof"] = "\n".join(lines[:3] + lines[4:])
    refused(dropped_hash)
    resized = json.loads(json.dumps(document))
    resized["checkpoint"] = document["checkpoint"].replace(
        f"\n{latest.size}\n", f"\n{latest.size + 1}\n"
    )
    refused(resized)
    with pytest.raises(RoundProofError):
        check_round_proof(json.dumps(document), [])  # no trusted key: nothing is proved


def test_inclusion_and_consistency_proofs_verify_independently(
    played: tuple[Api, CheckpointService, PostgresTree],
) -> None:
    api, signer, _ = played
    first = signer.latest_tree()
    signer.sign_head(SIGNER)
    second = signer.latest_tree()
    assert first is not None
    assert second is not None
    _, old = open_checkpoint(first.note, [_vkey()])
    _, new = open_checkpoint(second.note, [_vkey()])
    proof = _get(api, f"/v1/log/proof/consistency?from={old.size}&to={new.size}").get_json()
    check_consistency(
        old.size, new.size, old.root, new.root, [base64.b64decode(h) for h in proof["hashes"]]
    )
    inclusion = _get(api, f"/v1/log/proof/inclusion?index=0&size={new.size}").get_json()
    assert len(inclusion["hashes"]) <= 63
    first_event = api.store.read_all(0, 1, upcast=False)[0]

    check_inclusion(
        0,
        new.size,
        hash_leaf(leaf_entry(first_event)),
        [base64.b64decode(h) for h in inclusion["hashes"]],
        new.root,
    )
    for bad in (
        f"/v1/log/proof/inclusion?index={new.size}&size={new.size}",
        "/v1/log/proof/inclusion?index=-1&size=3",
        "/v1/log/proof/consistency?from=5&to=4",
        "/v1/log/proof/consistency?from=0&to=4",
    ):
        answer = _get(api, bad)
        assert answer.status_code == 422, bad
        assert answer.mimetype == "application/problem+json"
    beyond = _get(api, f"/v1/log/proof/inclusion?index=0&size={new.size + 100}")
    assert beyond.status_code == 409
    assert (
        _get(api, f"/v1/log/proof/inclusion?index=0&size={new.size}", Role.FRONTEND).status_code
        == 403
    )


def test_a_front_end_gets_its_own_round_only_after_the_shoe_is_revealed(
    played: tuple[Api, CheckpointService, PostgresTree],
) -> None:
    api, signer, _ = played
    signer.sign_head(SIGNER)
    latest = signer.latest_tree()
    assert latest is not None
    hidden = _get(api, f"/v1/rounds/T1-1/proof?size={latest.size}", Role.FRONTEND)
    assert hidden.status_code == 403
    retired = api.call(
        "POST",
        "/v1/tables/T1/malfunctions",
        {"reason": "a card reader fault", "scope": "rounds", "round_ids": ["T1-1"]},
        role=Role.OPS,
    )
    assert retired.status_code in (200, 201), retired.get_json()
    signer.sign_head(SIGNER)
    after = signer.latest_tree()
    assert after is not None
    shown = _get(api, f"/v1/rounds/T1-1/proof?size={after.size}", Role.FRONTEND)
    assert shown.status_code == 200, shown.get_json()
    # Another casino's front end learns nothing of the round, not even that it exists.
    stranger = create_key(api.store, "casino b's lobby", Role.FRONTEND, OPERATOR, "casino-b")
    wiring = api.app.extensions[EXTENSION]
    assert isinstance(wiring, Container)
    wiring.keys.refresh()  # a new key is otherwise seen within MISS_REFRESH_SECONDS
    elsewhere = api.client.get(
        f"/v1/rounds/T1-1/proof?size={after.size}",
        headers={"Authorization": f"Bearer {stranger.secret}"},
    )
    missing = _get(api, f"/v1/rounds/T1-77/proof?size={after.size}", Role.FRONTEND)
    assert elsewhere.status_code == missing.status_code == 404
    assert elsewhere.get_json()["detail"] == missing.get_json()["detail"].replace("T1-77", "T1-1")
    report = check_round_proof(shown.get_data(as_text=True), [_vkey()])
    assert any(line.startswith("outcome: banker") for line in report.lines)
    assert any("alice: banker 1000 -> 1950" in line for line in report.lines)
    assert not report.notes
