"""Chat: stored exactly as sent, length-limited, refused to the unseated, muted and removed."""

from datetime import UTC, datetime

import pytest

from domain.chat import (
    MessageCharacters,
    MessageLength,
    MessagePosted,
    NotSeatedForChat,
    PlayerMutedInChat,
    PlayerRemovedFromChat,
    PostMessage,
    decide_post,
)
from domain.round_errors import PlayerNotMuted
from domain.table import TableSettings
from events.memory import InMemoryEventStore
from service.application.actor import Actor
from service.application.chat import ChatService
from service.application.errors import TableNotFound
from service.application.game.tables import GameService

NOW = datetime(2024, 5, 3, 20, 0, tzinfo=UTC)
OPS = Actor("ops-1", "ops")
FRONTEND = Actor("frontend-1", "frontend")


class Room:
    """A table with alice seated, its game and chat services."""

    def __init__(self) -> None:
        self.store = InMemoryEventStore(clock=lambda: NOW)
        self.game = GameService(self.store, lambda: NOW)
        self.chat = ChatService(self.store, lambda: NOW, self.game)
        self.game.create_table("T1", TableSettings(), OPS)
        self.game.sit("T1", "alice", 1, FRONTEND)

    def post(self, text: str, player_id: str = "alice") -> None:
        self.chat.post("T1", player_id, text, FRONTEND)


def test_a_message_is_stored_exactly_as_sent() -> None:
    room = Room()
    text = "  <b>gg</b> & 'ta'\n\t😀 "
    room.post(text)
    (message,) = room.chat.recent("T1")
    assert message.text == text
    assert message.player_id == "alice"
    assert message.posted_at == NOW


def test_recent_messages_come_oldest_first_newest_last() -> None:
    room = Room()
    for number in range(5):
        room.post(f"message {number}")
    assert [m.text for m in room.chat.recent("T1", limit=3)] == [
        "message 2",
        "message 3",
        "message 4",
    ]


@pytest.mark.parametrize("text", ["", "x" * 501])
def test_a_message_is_one_to_five_hundred_characters(text: str) -> None:
    with pytest.raises(MessageLength):
        Room().post(text)


def test_five_hundred_characters_counted_as_code_points_are_allowed() -> None:
    room = Room()
    room.post("é" * 500)
    assert len(room.chat.recent("T1")[0].text) == 500


@pytest.mark.parametrize("char", ["\x00", "\x07", "\r", "\x7f", "\ud800"])
def test_control_characters_and_lone_surrogates_are_refused(char: str) -> None:
    with pytest.raises(MessageCharacters):
        Room().post(f"hi{char}there")


def test_a_player_not_seated_may_not_post() -> None:
    with pytest.raises(NotSeatedForChat):
        Room().post("hello", player_id="bob")


def test_a_muted_player_is_refused_until_unmuted() -> None:
    room = Room()
    room.chat.mute("T1", "alice", OPS, "spam")
    head = room.store.head()
    with pytest.raises(PlayerMutedInChat):
        room.post("hello")
    assert room.store.head() == head
    room.chat.unmute("T1", "alice", OPS)
    room.post("sorry")
    with pytest.raises(PlayerNotMuted):
        room.chat.unmute("T1", "alice", OPS)


def test_a_removed_player_is_refused_with_the_removal_named() -> None:
    room = Room()
    room.chat.remove_player("T1", "alice", "abuse", OPS)
    with pytest.raises(PlayerRemovedFromChat):
        room.post("let me back")


def test_chat_at_an_unknown_table_is_not_found() -> None:
    room = Room()
    with pytest.raises(TableNotFound):
        room.chat.post("T9", "alice", "hi", FRONTEND)
    with pytest.raises(TableNotFound):
        room.chat.recent("T9")


def test_a_post_decided_on_a_table_state_is_a_plain_fact() -> None:
    room = Room()
    table = room.game.table("T1")
    assert decide_post(table, PostMessage("alice", "hi"), NOW) == [
        MessagePosted("T1", "alice", "hi", NOW.isoformat())
    ]


def test_a_post_is_guarded_by_the_table_version_so_a_mute_meanwhile_refuses_it() -> None:
    room = Room()
    room.chat.post("T1", "alice", "first", FRONTEND)
    last = room.store.read_all()[-1]
    assert last.stream_id == "chat:T1"
    # The post's append named the table stream's version alongside the chat's.
    room.game.mute("T1", "alice", OPS)
    with pytest.raises(PlayerMutedInChat):
        room.post("second")
