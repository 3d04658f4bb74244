"""Shoes as published: commitment and seeds, the revealed seed after retirement, a re-check."""

from typing import Any

import marshmallow as ma
from flask.views import MethodView

from domain.table import ClientSeedRotated
from service.application.keys import Role
from service.application.malfunctions import MalfunctionService
from service.application.streams import table_stream
from service.regulator.replay import NotInLogError, ShoeRecord, find_shoe, shoe_view, verify_shoe
from service.web.api import Blueprint, actor, container, read_models
from service.web.auth import READERS, roles
from service.web.fields import TABLE_ID_PARAMETER, path_parameter, reason_field
from service.web.problems import Problem
from service.web.table_actions import OpenedShoeSchema

# Mounted at the root: shoes live under /shoes, and the next shoe's seed under its table.
blp = Blueprint(
    "shoes", __name__, url_prefix="", description="Shoes: provably fair records and checks."
)

SHOE_ID_PARAMETER = path_parameter("shoe_id", "The shoe's id.")


class ShoeSchema(OpenedShoeSchema):
    """A shoe's published facts; `server_seed` is null until the shoe has retired."""

    table_id = ma.fields.String(required=True)
    hands_dealt = ma.fields.Integer(required=True)
    cards_dealt = ma.fields.Integer(required=True)
    cards_left = ma.fields.Integer(required=True)
    retired = ma.fields.Boolean(required=True)
    server_seed = ma.fields.String(allow_none=True, required=True)


class MismatchSchema(ma.Schema):
    """One way the log differs from the shoe re-derived from its seed."""

    check = ma.fields.String(required=True)
    where = ma.fields.String(required=True)
    detail = ma.fields.String(required=True)


class ShoeVerificationSchema(ma.Schema):
    """The result of re-deriving a shoe and re-dealing every coup dealt from it."""

    shoe_id = ma.fields.String(required=True)
    verified = ma.fields.Boolean(
        required=True, metadata={"description": "Revealed, and every coup agrees with the log."}
    )
    revealed = ma.fields.Boolean(required=True)
    coups = ma.fields.Integer(required=True)
    cards = ma.fields.Integer(required=True)
    settlements = ma.fields.Integer(required=True)
    mismatches = ma.fields.List(ma.fields.Nested(MismatchSchema), required=True)


def _record(shoe_id: str) -> ShoeRecord:
    try:
        wiring = container()
        return find_shoe(wiring.store, shoe_id, read_models())
    except NotInLogError as error:
        raise Problem(404, "not-found", f"{error}.") from None


@blp.route("/shoes/<id:shoe_id>", parameters=[SHOE_ID_PARAMETER])
class Shoe(MethodView):
    """One shoe as published."""

    @roles(*READERS)
    @blp.response(200, ShoeSchema)
    def get(self, shoe_id: str) -> dict[str, Any]:
        """Read a shoe: commitment, client seed, nonce, decks, hands; its seed once retired."""
        return shoe_view(_record(shoe_id))


@blp.route("/shoes/<id:shoe_id>/verify", parameters=[SHOE_ID_PARAMETER])
class ShoeVerification(MethodView):
    """A shoe re-derived from its revealed seed and compared with the log."""

    @roles(*READERS)
    @blp.response(200, ShoeVerificationSchema)
    def get(self, shoe_id: str) -> dict[str, Any]:
        """Re-deal every coup of a retired shoe from its seed and report each mismatch."""
        record = _record(shoe_id)
        report = verify_shoe(record)
        revealed = record.server_seed is not None
        return {
            "shoe_id": shoe_id,
            "verified": revealed and report.ok,
            "revealed": revealed,
            "coups": report.rounds,
            "cards": report.cards,
            "settlements": report.settlements,
            "mismatches": [
                {"check": str(d.check), "where": d.where, "detail": d.detail}
                for d in report.discrepancies
            ],
        }


class ClientSeedRotationSchema(ma.Schema):
    """The client seed the table's next shoe opens with, and why ops chose it."""

    client_seed = ma.fields.String(
        required=True,
        validate=ma.validate.Regexp(r"^[\x20-\x7e]{1,64}$"),
        metadata={"description": "1 to 64 printable ASCII characters (0x20-0x7E)."},
    )
    reason = reason_field("Why the seed is rotated.")


class ClientSeedRotatedSchema(ma.Schema):
    """The rotation as recorded; the next ShoeOpened of the table carries this client seed."""

    table_id = ma.fields.String(required=True)
    client_seed = ma.fields.String(required=True)
    version = ma.fields.Integer(
        required=True,
        metadata={
            "description": "The table stream's version after the rotation. Not a log position:"
            " the rotation is answered once durable, before the sequencer places it."
        },
    )


@blp.route("/tables/<id:table_id>/client-seed-rotations", parameters=[TABLE_ID_PARAMETER])
class ClientSeedRotations(MethodView):
    """Ops' choice of the client seed of a table's next shoe."""

    @roles(Role.OPS)
    @blp.arguments(ClientSeedRotationSchema)
    @blp.response(201, ClientSeedRotatedSchema)
    def post(self, body: dict[str, Any], table_id: str) -> dict[str, Any]:
        """Rotate the client seed of the table's next shoe, before that shoe opens."""
        wiring = container()
        receipt = MalfunctionService(wiring.store, wiring.clock).rotate_client_seed(
            table_id, body["client_seed"], body["reason"], actor()
        )
        rotated = next(e for e in receipt.events if isinstance(e, ClientSeedRotated))
        return {
            "table_id": table_id,
            "client_seed": rotated.client_seed,
            "version": receipt.versions[table_stream(table_id)],
        }
