"""Signed checkpoints of the log's head, for regulators to keep outside the casino's database."""

from __future__ import annotations

from typing import Any

import marshmallow as ma
from flask.views import MethodView

from domain.audit import CheckpointSigned
from service.application.checkpoints import document, from_recorded, kept_line
from service.application.keys import Role
from service.web.api import Blueprint, container
from service.web.auth import roles
from service.web.fields import DEFAULT_PAGE, MAX_PAGE

blp = Blueprint(
    "checkpoints",
    __name__,
    url_prefix="/audit",
    description="Signed checkpoints (position, head hash, time) of the log, as"
    " docs/verification.md specifies.",
)


class CheckpointQuerySchema(ma.Schema):
    """A page of checkpoints."""

    after = ma.fields.Integer(
        load_default=0,
        validate=ma.validate.Range(min=0),
        metadata={"description": "The cursor: checkpoints recorded after this log position."},
    )
    limit = ma.fields.Integer(
        load_default=DEFAULT_PAGE,
        validate=ma.validate.Range(min=1, max=MAX_PAGE),
        metadata={"description": f"At most this many, 1 to {MAX_PAGE}."},
    )


class CheckpointSchema(ma.Schema):
    """One checkpoint: its fields, where it is logged (`recorded_in`), and its file line (`line`).

    The fields and `recorded_in` together are not a checkpoint file's line, which holds
    exactly the checkpoint's keys: `line` is that line, as `shoebox-verify --checkpoint` and
    `shoebox audit verify --checkpoint` read it.
    """

    kind = ma.fields.String(required=True, metadata={"enum": ["checkpoint"]})
    format = ma.fields.String(required=True)
    position = ma.fields.Integer(required=True, metadata={"description": "The head signed."})
    head_hash = ma.fields.String(required=True)
    recorded_at = ma.fields.String(required=True)
    key_id = ma.fields.String(required=True)
    public_key = ma.fields.String(required=True)
    signature = ma.fields.String(required=True)
    previous_key_signature = ma.fields.String(allow_none=True, required=True)
    recorded_in = ma.fields.Integer(
        required=True, metadata={"description": "The log position of its CheckpointSigned."}
    )
    line = ma.fields.String(
        required=True,
        metadata={
            "description": "Exactly the checkpoint's line in a checkpoint file (JSON, keys"
            " sorted, no spaces, no newline): append it and a newline to the file you keep"
            " for `shoebox-verify --checkpoint`."
        },
    )


class CheckpointPageSchema(ma.Schema):
    """A page of checkpoints in log order, and the cursor of the next page."""

    checkpoints = ma.fields.List(ma.fields.Nested(CheckpointSchema), required=True)
    next_after = ma.fields.Integer(
        allow_none=True,
        required=True,
        metadata={"description": "Pass as `after` for the next page; null on the last."},
    )


@blp.route("/checkpoints")
class Checkpoints(MethodView):
    """The log's signed checkpoints."""

    @roles(Role.REGULATOR, Role.OPS)
    @blp.arguments(CheckpointQuerySchema, location="query")
    @blp.response(200, CheckpointPageSchema)
    def get(self, query: dict[str, Any]) -> dict[str, Any]:
        """List the signed checkpoints of the log, oldest first, a page at a time."""
        limit: int = query["limit"]
        # Through events_type_position: one index range, however long the log.
        found = container().store.read_all(
            query["after"], limit, types=[CheckpointSigned.type], upcast=False
        )
        page = [_item(from_recorded(event), event.position) for event in found]
        return {
            "checkpoints": page,
            "next_after": found[-1].position if len(found) == limit else None,
        }


def _item(checkpoint: CheckpointSigned, recorded_in: int) -> dict[str, Any]:
    return {**document(checkpoint), "recorded_in": recorded_in, "line": kept_line(checkpoint)}
