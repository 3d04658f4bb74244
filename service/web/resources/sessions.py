"""Sessions: a seamless operator's player comes to play with the operator's token.

A seamless operator keeps its players' money in its own wallet (docs/wallets.md). Its front
end opens a player's session with the token the operator gave it for that player; Shoebox
checks the token with the wallet's `balance` call and keeps it, outside the log, for the
player's bets. The log records that a session was opened and the token's SHA-256, never the
token.
"""

from typing import Any

import marshmallow as ma
from flask.views import MethodView

from service.application.keys import Role
from service.application.seamless_bets import WalletNotSeamless
from service.web.api import Blueprint, actor, container
from service.web.auth import roles
from service.web.operators import player_field

blp = Blueprint(
    "sessions",
    __name__,
    url_prefix="/sessions",
    description="Sessions of seamless operators' players, checked with the operator's wallet.",
)


class NewSessionSchema(ma.Schema):
    """The player and the operator's token for them."""

    player_id = player_field("The player whose session this is.", new=True)
    token = ma.fields.String(
        required=True,
        validate=ma.validate.Length(min=1, max=512),
        load_only=True,
        metadata={
            "description": "The operator's session token for the player; never stored"
            " in the log, and never answered back."
        },
    )


class SessionSchema(ma.Schema):
    """An open session: what the operator's wallet said of the player."""

    player_id = ma.fields.String(required=True)
    balance_pence = ma.fields.Integer(
        required=True, metadata={"description": "The wallet's balance, as its `balance` said."}
    )
    opened_at = ma.fields.DateTime(required=True)


@blp.route("")
class Sessions(MethodView):
    """Opening a seamless player's session."""

    @roles(Role.FRONTEND)
    @blp.arguments(NewSessionSchema())
    @blp.response(201, SessionSchema)
    def post(self, body: dict[str, Any]) -> dict[str, Any]:
        """Check the operator's token with its wallet and open the player's session.

        409 `wallet-not-seamless` for an operator of Shoebox's own wallet, 409 `wallet-refused`
        when the wallet refuses the token, 503 `wallet-unavailable` when it does not answer.
        """
        seamless = container().seamless
        if seamless is None:
            raise WalletNotSeamless("no operator of this Shoebox has a seamless wallet")
        session = seamless.open_session(body["player_id"], body["token"], actor())
        return {
            "player_id": session.player_id,
            "balance_pence": session.balance,
            "opened_at": session.opened_at,
        }
