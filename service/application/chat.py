"""The chat application service: post at a table and read its recent messages.

Whether a player may speak is a fact of the table (seated, not muted, not removed), so a post
reads the table and appends its message with the table stream's version as a guard: a mute or
removal recorded meanwhile makes the post retry and be refused.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from domain.chat import CHAT_EVENT_TYPES, PostMessage, decide_post
from events.store import EventStore, StreamAppend
from service.application.actor import Actor
from service.application.appends import DEFAULT_PATIENCE, Patience, Prepared, Receipt, run_command
from service.application.errors import TableNotFound
from service.application.game.tables import GameService
from service.application.streams import (
    TableCache,
    chat_stream,
    from_recorded_as,
    table_stream,
    to_new_event,
)


@dataclass(frozen=True, slots=True)
class ChatMessage:
    """A message as posted: who, when, and the text exactly as sent."""

    table_id: str
    player_id: str
    text: str
    posted_at: datetime
    version: int


class ChatService:
    """Posting and reading a table's chat; moderation goes through the game service."""

    def __init__(
        self,
        store: EventStore,
        clock: Callable[[], datetime],
        game: GameService,
        *,
        tables: TableCache | None = None,
        patience: Patience = DEFAULT_PATIENCE,
    ) -> None:
        self._store = store
        self._clock = clock
        self._game = game
        self._tables = tables if tables is not None else TableCache()
        self._patience = patience

    def post(self, table_id: str, player_id: str, text: str, actor: Actor) -> Receipt:
        """Post a message, refused for players not seated, muted or removed."""

        self._game.catch_up(table_id)

        def prepare() -> Prepared:
            table_version, table = self._tables.table(self._store, table_id)
            if table is None:
                raise TableNotFound(table_id)
            events = decide_post(table, PostMessage(player_id, text), self._clock())
            chat_version = self._chat_version(table_id)
            return Prepared(
                [
                    StreamAppend(
                        chat_stream(table_id), chat_version, [to_new_event(e) for e in events]
                    ),
                    StreamAppend(table_stream(table_id), table_version, []),
                ],
                tuple(events),
            )

        return run_command(self._store, actor, prepare, self._patience)

    def recent(
        self, table_id: str, limit: int = 50, before: int | None = None
    ) -> list[ChatMessage]:
        """The table's last `limit` messages (before version `before`), oldest first.

        The API reads the chat read model (read_models/queries.py); this is the in-memory
        wiring's read, and reads only the last `limit` versions of the chat stream.
        """
        if limit < 1:
            raise ValueError("limit must be at least 1")
        # An unknown table is not found. Only read: a lapsed window is left to the table's
        # next command, because a read never writes.
        self._game.table(table_id)
        last = self._chat_version(table_id)
        if before is not None:
            last = min(last, before - 1)
        recorded = (
            self._store.read_stream(chat_stream(table_id), max(1, last - limit + 1))[:limit]
            if last > 0
            else []
        )
        messages: list[ChatMessage] = []
        for event in recorded:
            posted = from_recorded_as(event, CHAT_EVENT_TYPES)
            messages.append(
                ChatMessage(
                    posted.table_id,
                    posted.player_id,
                    posted.text,
                    datetime.fromisoformat(posted.posted_at),
                    event.version,
                )
            )
        return messages

    def mute(self, table_id: str, player_id: str, actor: Actor, reason: str = "") -> Receipt:
        """Mute a player at a table (ops)."""
        return self._game.mute(table_id, player_id, actor, reason)

    def unmute(self, table_id: str, player_id: str, actor: Actor) -> Receipt:
        """Lift a player's mute at a table (ops)."""
        return self._game.unmute(table_id, player_id, actor)

    def remove_player(self, table_id: str, player_id: str, reason: str, actor: Actor) -> Receipt:
        """Remove a player from a table (ops)."""
        return self._game.remove_player(table_id, player_id, reason, actor)

    def _chat_version(self, table_id: str) -> int:
        # The stream's last event through events' (stream_id, version) key, backwards: one
        # row however much the table has said.
        last = self._store.last_of_stream(chat_stream(table_id), upcast=False)
        return 0 if last is None else last.version
