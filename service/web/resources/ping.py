"""GET /v1/ping: proof of life, and the trivial endpoint the API benchmark measures against."""

import marshmallow as ma
from flask.views import MethodView

from service.application.keys import Role
from service.web.api import Blueprint
from service.web.auth import roles

blp = Blueprint("ping", __name__, url_prefix="/ping", description="Proof of life.")


class PingSchema(ma.Schema):
    """The answer of a live server."""

    status = ma.fields.String(required=True, metadata={"example": "ok"})


@blp.route("")
class Ping(MethodView):
    """The server's liveness."""

    @roles(Role.FRONTEND, Role.OPS, Role.REGULATOR)
    @blp.response(200, PingSchema)
    def get(self) -> dict[str, str]:
        """Answer ok without touching the database."""
        return {"status": "ok"}
