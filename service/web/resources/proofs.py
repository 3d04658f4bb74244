"""The log's Merkle tree over HTTP: its signed checkpoint, and proofs against it.

A regulator asks for any proof. A front end may fetch the proof of a round only when every
player in the round is its operator's and the round's shoe has been revealed: a proof holds
the raw events, whose player ids no alias can hide, and the shoe's cards until it is revealed.
"""

from __future__ import annotations

import base64
from typing import Any, Final

import marshmallow as ma
import orjson
from flask import Response
from flask.views import MethodView

from events.merkle import consistency_proof, inclusion_proof
from service.application.checkpoints import TREE_STREAM
from service.application.keys import Role
from service.application.operators import operator_of
from service.regulator.proofs import (
    ProofUnavailableError,
    round_evidence,
    round_proof,
    tree_checkpoint_at,
)
from service.regulator.replay import NotInLogError
from service.web.api import Blueprint, actor, container, read_models
from service.web.auth import READERS, roles
from service.web.operators import request_operator
from service.web.problems import Problem
from service.web.resources.replays import ROUND_ID_PARAMETER

blp = Blueprint(
    "proofs",
    __name__,
    url_prefix="",
    description="The log's Merkle tree (RFC 6962): its C2SP checkpoint, inclusion and"
    " consistency proofs, and one round's proof (docs/verification.md, 'Proving one round').",
)

NOTE_MIMETYPE: Final = "text/plain; charset=utf-8"
MAX_SIZE: Final = 2**62


class InclusionQuerySchema(ma.Schema):
    """Which leaf, in which tree."""

    index = ma.fields.Integer(
        required=True,
        validate=ma.validate.Range(min=0, max=MAX_SIZE),
        metadata={"description": "The leaf's index: the event's position minus one."},
    )
    size = ma.fields.Integer(
        required=True,
        validate=ma.validate.Range(min=1, max=MAX_SIZE),
        metadata={"description": "The tree size to prove against (a signed checkpoint's)."},
    )


class ConsistencyQuerySchema(ma.Schema):
    """Two tree sizes."""

    from_size = ma.fields.Integer(
        data_key="from",
        required=True,
        validate=ma.validate.Range(min=1, max=MAX_SIZE),
        metadata={"description": "The older tree's size."},
    )
    to_size = ma.fields.Integer(
        data_key="to",
        required=True,
        validate=ma.validate.Range(min=1, max=MAX_SIZE),
        metadata={"description": "The newer tree's size, at least `from`."},
    )


class RoundProofQuerySchema(ma.Schema):
    """The checkpoint a round's proof is made against."""

    size = ma.fields.Integer(
        required=True,
        validate=ma.validate.Range(min=1, max=MAX_SIZE),
        metadata={"description": "The size of a signed tree checkpoint after the round."},
    )


class ProofSchema(ma.Schema):
    """A Merkle proof: its hashes in base64, from the leaf's (or old tree's) side up."""

    hashes = ma.fields.List(ma.fields.String(), required=True)


class InclusionProofSchema(ProofSchema):
    """An inclusion proof (RFC 6962 section 2.1.1)."""

    index = ma.fields.Integer(required=True)
    size = ma.fields.Integer(required=True)


class ConsistencyProofSchema(ProofSchema):
    """A consistency proof (RFC 6962 section 2.1.2)."""

    from_size = ma.fields.Integer(data_key="from", required=True)
    to_size = ma.fields.Integer(data_key="to", required=True)


class RoundProofEntrySchema(ma.Schema):
    """One event of the round: its leaf bytes and its c2sp.org/tlog-proof."""

    position = ma.fields.Integer(required=True)
    event = ma.fields.String(
        required=True, metadata={"description": "The leaf: the event's canonical document."}
    )
    tlog_proof = ma.fields.String(required=True)


class RoundProofSchema(ma.Schema):
    """A round's events with their inclusion proofs against one signed tree checkpoint."""

    format = ma.fields.String(required=True, metadata={"enum": ["shoebox-round-proof/1"]})
    round_id = ma.fields.String(required=True)
    size = ma.fields.Integer(required=True)
    checkpoint = ma.fields.String(
        required=True, metadata={"description": "The signed note (C2SP tlog-checkpoint)."}
    )
    entries = ma.fields.List(ma.fields.Nested(RoundProofEntrySchema), required=True)


def _encoded(hashes: list[bytes]) -> list[str]:
    return [base64.b64encode(h).decode() for h in hashes]


def _tree_size_at_least(size: int) -> None:
    held = container().tree.size()
    if size > held:
        raise Problem(
            409,
            "tree-behind",
            f"The tree holds {held} leaves; size {size} is not in it yet. Use the size of"
            " GET /v1/log/checkpoint.",
        )


@blp.route("/log/checkpoint")
class LogCheckpoint(MethodView):
    """The latest signed tree checkpoint."""

    @roles(*READERS)
    @blp.doc(
        responses={
            "200": {
                "description": "A C2SP signed note: origin, size, root, the chain-head extension,"
                " the log's signature lines and the witnesses' cosignatures.",
                "content": {"text/plain": {"schema": {"type": "string"}}},
            },
            "404": "NOT_FOUND",
        }
    )
    def get(self) -> Response:
        """The log's latest Merkle tree checkpoint, as a signed note (text/plain)."""
        # The tree-checkpoint stream's last event: one probe of events' (stream_id, version).
        last = container().store.last_of_stream(TREE_STREAM, upcast=False)
        if last is None:
            raise Problem(404, "not-found", "No tree checkpoint has been signed yet.")
        response = Response(str(last.payload["note"]), mimetype="text/plain")
        response.headers["Cache-Control"] = "no-cache"
        return response


@blp.route("/log/proof/inclusion")
class InclusionProof(MethodView):
    """An inclusion proof of one leaf."""

    @roles(Role.REGULATOR)
    @blp.arguments(InclusionQuerySchema, location="query")
    @blp.response(200, InclusionProofSchema)
    @blp.alt_response(409, description="The tree does not reach that size yet.")
    def get(self, query: dict[str, Any]) -> dict[str, Any]:
        """Prove that the leaf at `index` is in the tree of `size` leaves (O(log n) reads)."""
        index, size = query["index"], query["size"]
        if index >= size:
            raise Problem(422, "validation-failed", "index: must be below size.")
        _tree_size_at_least(size)
        hashes = inclusion_proof(index, size, container().tree)
        return {"index": index, "size": size, "hashes": _encoded(hashes)}


@blp.route("/log/proof/consistency")
class ConsistencyProof(MethodView):
    """A consistency proof between two tree sizes."""

    @roles(Role.REGULATOR)
    @blp.arguments(ConsistencyQuerySchema, location="query")
    @blp.response(200, ConsistencyProofSchema)
    @blp.alt_response(409, description="The tree does not reach that size yet.")
    def get(self, query: dict[str, Any]) -> dict[str, Any]:
        """Prove that the tree of `from` leaves is a prefix of the tree of `to` leaves."""
        old, new = query["from_size"], query["to_size"]
        if old > new:
            raise Problem(422, "validation-failed", "from: must not exceed to.")
        _tree_size_at_least(new)
        hashes = consistency_proof(old, new, container().tree)
        return {"from_size": old, "to_size": new, "hashes": _encoded(hashes)}


@blp.route("/rounds/<id:round_id>/proof", parameters=[ROUND_ID_PARAMETER])
class RoundProof(MethodView):
    """One round, proved against a signed tree checkpoint."""

    @roles(Role.REGULATOR, Role.FRONTEND)
    @blp.arguments(RoundProofQuerySchema, location="query")
    @blp.response(200, RoundProofSchema)
    @blp.alt_response(404, description="No such round, or not one of this key's.")
    @blp.alt_response(409, description="No checkpoint of that size, or it precedes the round.")
    def get(self, query: dict[str, Any], round_id: str) -> Response:
        """The round's events, each with its inclusion proof: one self-contained document."""
        wired = container()
        try:
            evidence = round_evidence(wired.store, round_id, read_models())
        except NotInLogError as error:
            raise Problem(404, "not-found", f"{error}.") from None
        if actor().role == Role.FRONTEND.value:
            operator = request_operator()
            if any(operator_of(player) != operator for player in evidence.players):
                # The same answer as for a round that does not exist: no key learns of
                # another operator's rounds.
                raise Problem(404, "not-found", f"no round {round_id} in the log.")
            if not evidence.shoe_revealed:
                raise Problem(
                    403,
                    "forbidden",
                    "A front end may fetch a round's proof once its shoe is revealed;"
                    " until then it is for regulators.",
                )
        try:
            checkpoint = tree_checkpoint_at(wired.store, wired.pool, query["size"])
            _tree_size_at_least(checkpoint.size)
            proof = round_proof(wired.store, wired.tree, evidence, checkpoint)
        except ProofUnavailableError as error:
            raise Problem(409, "proof-unavailable", f"{error}.") from None
        response = RoundProofSchema().dump(proof)
        answer = Response(_json(response), mimetype="application/json")
        # The proof at a fixed size never changes: caches may keep it.
        answer.headers["Cache-Control"] = "public, max-age=86400, immutable"
        return answer


def _json(document: Any) -> str:
    return orjson.dumps(document).decode()
