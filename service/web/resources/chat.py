"""Chat at a table, and its moderation by ops: mutes and removals.

Messages are stored and answered exactly as sent; the API escapes nothing, because each client
renders text for its own medium. A mute or removal is a fact of the table, since a removal
also unseats the player and bars them from sitting there again.
"""

from datetime import datetime
from typing import Any

import marshmallow as ma
from flask.views import MethodView

from domain.chat import MAX_MESSAGE_LENGTH, MessagePosted
from service.application.chat import ChatMessage
from service.application.keys import Role
from service.application.streams import chat_stream
from service.web.api import Blueprint, actor, container, read_models
from service.web.auth import READERS, roles
from service.web.fields import (
    DEFAULT_PAGE,
    PLAYER_ID_PARAMETER,
    TABLE_ID_PARAMETER,
    PageQuerySchema,
    free_text_field,
    reason_field,
)
from service.web.operators import known_player, player_field
from service.web.table_actions import TableAction, TableActionSchema, answered_with_wallet

blp = Blueprint(
    "chat", __name__, url_prefix="/tables", description="Chat at a table, and its moderation."
)


class NewMessageSchema(ma.Schema):
    """A message from a seated player."""

    player_id = player_field("The player who speaks.")
    text = free_text_field("The message, stored as sent.", max_length=MAX_MESSAGE_LENGTH)


class MessageSchema(ma.Schema):
    """A message as posted."""

    table_id = ma.fields.String(required=True)
    player_id = ma.fields.String(required=True)
    text = ma.fields.String(required=True)
    posted_at = ma.fields.DateTime(required=True)
    version = ma.fields.Integer(required=True, metadata={"description": "In the table's chat."})


class ChatQuerySchema(PageQuerySchema):
    """A page of a table's messages: the latest, or those before a version."""

    before = ma.fields.Integer(
        validate=ma.validate.Range(min=1),
        metadata={"description": "Only messages before this chat version (the next page)."},
    )


class MessagesSchema(ma.Schema):
    """A page of a table's messages, oldest first."""

    table_id = ma.fields.String(required=True)
    messages = ma.fields.List(ma.fields.Nested(MessageSchema), required=True)
    next_before = ma.fields.Integer(
        allow_none=True,
        required=True,
        metadata={"description": "Pass as `before` for older messages; null at the first."},
    )


class ModerationSchema(ma.Schema):
    """A player ops act on, and why."""

    player_id = player_field("The player ops act on.")
    reason = reason_field("Why, for the player and the audit log.")


def _message(message: ChatMessage) -> dict[str, Any]:
    return {
        "table_id": message.table_id,
        "player_id": message.player_id,
        "text": message.text,
        "posted_at": message.posted_at,
        "version": message.version,
    }


@blp.route("/<id:table_id>/chat", parameters=[TABLE_ID_PARAMETER])
class Chat(MethodView):
    """A table's chat."""

    @roles(*READERS)
    @blp.arguments(ChatQuerySchema, location="query")
    @blp.response(200, MessagesSchema)
    def get(self, page: dict[str, Any], table_id: str) -> dict[str, Any]:
        """Read a page of a table's messages, oldest first: the latest, or those before one."""
        limit = page.get("limit", DEFAULT_PAGE)
        wiring = container()
        # The chat read model, paged by version through proj_chat's primary key (table_id,
        # version); the chat stream's last versions only in the in-memory wiring.
        models = read_models()
        if models is None:
            messages = wiring.chat.recent(table_id, limit, page.get("before"))
        else:
            wiring.games.table(table_id)  # an unknown table is a 404; a read never writes
            messages = models.chat(table_id, limit, page.get("before"))
        first = messages[0].version if messages else None
        return {
            "table_id": table_id,
            "messages": [_message(m) for m in messages],
            "next_before": first if len(messages) == limit and first and first > 1 else None,
        }

    @roles(Role.FRONTEND)
    @blp.arguments(NewMessageSchema)
    @blp.alt_response(404, response="NOT_FOUND")
    @blp.response(201, MessageSchema)
    def post(self, new: dict[str, Any], table_id: str) -> dict[str, Any]:
        """Post a message; refused for players not seated, muted or removed."""
        player_id, text = new["player_id"], new["text"]
        receipt = container().chat.post(table_id, player_id, text, actor())
        (posted,) = receipt.events
        if not isinstance(posted, MessagePosted):
            raise TypeError(f"a post appended a {posted.type}")
        return {
            "table_id": table_id,
            "player_id": player_id,
            "text": posted.text,
            "posted_at": datetime.fromisoformat(posted.posted_at),
            "version": receipt.versions[chat_stream(table_id)],
        }


@blp.route("/<id:table_id>/mutes", parameters=[TABLE_ID_PARAMETER], names_player=True)
class Mutes(MethodView):
    """Players muted in a table's chat."""

    @roles(Role.OPS)
    @blp.arguments(ModerationSchema)
    @blp.alt_response(404, response="NOT_FOUND")
    @blp.response(201, TableActionSchema)
    def post(self, mute: dict[str, Any], table_id: str) -> TableAction:
        """Mute a player in a table's chat, saying why."""
        player_id = mute["player_id"]
        receipt = container().chat.mute(table_id, player_id, actor(), mute["reason"])
        return answered_with_wallet(table_id, player_id, container().wallets, container().seamless)(
            receipt
        )


@blp.route(
    "/<id:table_id>/mutes/<id:player_id>", parameters=[TABLE_ID_PARAMETER, PLAYER_ID_PARAMETER]
)
class Mute(MethodView):
    """A player's mute at a table."""

    @roles(Role.OPS)
    @blp.alt_response(404, response="NOT_FOUND")
    @blp.response(200, TableActionSchema)
    def delete(self, table_id: str, player_id: str) -> TableAction:
        """Lift a player's mute at a table."""
        known_player(player_id)
        receipt = container().chat.unmute(table_id, player_id, actor())
        return answered_with_wallet(table_id, player_id, container().wallets, container().seamless)(
            receipt
        )


@blp.route("/<id:table_id>/removals", parameters=[TABLE_ID_PARAMETER], names_player=True)
class Removals(MethodView):
    """Players removed from a table for good."""

    @roles(Role.OPS)
    @blp.arguments(ModerationSchema)
    @blp.alt_response(404, response="NOT_FOUND")
    @blp.response(201, TableActionSchema)
    def post(self, removal: dict[str, Any], table_id: str) -> TableAction:
        """Remove a player from a table: unseated, unconfirmed bets returned, barred from it."""
        player_id = removal["player_id"]
        receipt = container().chat.remove_player(table_id, player_id, removal["reason"], actor())
        return answered_with_wallet(table_id, player_id, container().wallets, container().seamless)(
            receipt
        )
