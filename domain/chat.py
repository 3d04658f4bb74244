"""Chat at a table: who may post, and what a message may hold.

A message is stored exactly as sent: nothing is trimmed, normalised or escaped, because each
client renders text for its own medium and escaping here would corrupt it for the others. The
only characters refused are those no client can render and some stores cannot keep: control
characters other than tab and newline (NUL, for one, cannot be stored in PostgreSQL's jsonb),
and lone surrogates, which are not text at all and cannot be encoded as UTF-8.
"""

# ruff: noqa: N818 -- each refusal is named after the rule it enforces, as in domain/errors.py.

import unicodedata
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import ClassVar, TypeAlias

from domain.errors import DomainError
from domain.table import Table

MAX_MESSAGE_LENGTH = 500
_ALLOWED_CONTROLS = frozenset("\t\n")


class ChatError(DomainError):
    """A chat message breaks one of the chat's rules."""

    rule = "chat.rule_broken"


class MessageLength(ChatError):
    """A message is 1 to 500 characters (Unicode code points), counted as sent."""

    rule = "chat.message_length"


class MessageCharacters(ChatError):
    """A message holds no control characters but tab and newline, and no lone surrogates."""

    rule = "chat.message_characters"


class PlayerMutedInChat(ChatError):
    """A player muted by ops at a table may not post in its chat."""

    rule = "chat.player_muted"


class PlayerRemovedFromChat(ChatError):
    """A player removed by ops from a table may not post in its chat."""

    rule = "chat.player_removed"


class NotSeatedForChat(ChatError):
    """Only players seated at a table post in its chat."""

    rule = "chat.player_not_seated"


@dataclass(frozen=True, slots=True)
class MessagePosted:
    """A player posted a message at a table, exactly as sent."""

    type: ClassVar[str] = "MessagePosted"
    table_id: str
    player_id: str
    text: str
    posted_at: str


ChatEvent: TypeAlias = MessagePosted
CHAT_EVENT_TYPES: tuple[type[ChatEvent], ...] = (MessagePosted,)


@dataclass(frozen=True, slots=True)
class PostMessage:
    """Post a message in a table's chat."""

    player_id: str
    text: str


def decide_post(table: Table, command: PostMessage, now: datetime) -> list[ChatEvent]:
    """The posted message, or the refusal naming the rule; `table` decides who may speak."""
    player_id, text = command.player_id, command.text
    if player_id in table.removed:
        raise PlayerRemovedFromChat(
            f"{player_id} was removed from table {table.table_id} "
            f"(rule {PlayerRemovedFromChat.rule})"
        )
    if player_id in table.muted:
        raise PlayerMutedInChat(
            f"{player_id} is muted at table {table.table_id} (rule {PlayerMutedInChat.rule})"
        )
    if table.seat_of(player_id) is None:
        raise NotSeatedForChat(
            f"{player_id} holds no seat at table {table.table_id} (rule {NotSeatedForChat.rule})"
        )
    if not 1 <= len(text) <= MAX_MESSAGE_LENGTH:
        raise MessageLength(
            f"a message is 1 to {MAX_MESSAGE_LENGTH} characters, not {len(text)} "
            f"(rule {MessageLength.rule})"
        )
    for index, char in enumerate(text):
        if char not in _ALLOWED_CONTROLS and unicodedata.category(char) in ("Cc", "Cs"):
            raise MessageCharacters(
                f"character {index + 1} of the message is U+{ord(char):04X}, which a message "
                f"may not hold (rule {MessageCharacters.rule})"
            )
    if now.tzinfo is None or now.utcoffset() is None:
        raise ValueError(f"the clock must give timezone-aware times, not {now!r}")
    return [MessagePosted(table.table_id, player_id, text, now.astimezone(UTC).isoformat())]
