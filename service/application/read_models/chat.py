"""Chat by table: one row per message, keyed by the table's chat-stream version (the keyset)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from psycopg import Connection
from psycopg.rows import TupleRow

from domain.chat import MessagePosted
from events.projections.base import Projection, copy_rows
from events.store import RecordedEvent
from service.application.streams import CHAT, id_of


class ChatProjection(Projection):
    """Every message posted, by table and version."""

    name = "chat"
    categories = (CHAT,)
    tables = ("proj_chat",)

    def apply(self, conn: Connection[TupleRow], events: Sequence[RecordedEvent]) -> None:
        """Add a row for each message of the batch."""
        rows = []
        for event in events:
            if event.type != MessagePosted.type:
                continue
            payload: Any = event.payload
            rows.append(
                (
                    id_of(event.stream_id),
                    event.version,
                    event.position,
                    payload["player_id"],
                    payload["text"],
                    datetime.fromisoformat(payload["posted_at"]),
                )
            )
        if rows:
            copy_rows(
                conn,
                self.table("proj_chat"),
                ("table_id", "version", "position", "player_id", "text", "posted_at"),
                rows,
            )
