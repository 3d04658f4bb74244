"""Operators: the casinos that share one Shoebox, and how a player is named inside it.

A player id is unique within its operator, so two casinos may both have an `alice`. Inside the
service a player is named by a *player key*: the bare id for the default operator, and
`operator/player` for every other. Ids never contain `/` (docs/api.md gives the grammar), so
the key is unambiguous. Every event written before operators existed names its players by
bare id, and so reads as belonging to the default operator, with no stream id changed:
stream ids are inside the hashes, and history is never rewritten.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from domain.ids import ID_RULE, is_id

DEFAULT_OPERATOR: Final = "default"
"""The operator of every key created without one, and of every player of the early log."""

SEPARATOR: Final = "/"
ALIAS_PREFIX: Final = "guest-"
PLAYER_FIELD: Final = "player_id"
"""The field that names a player wherever the service writes one."""


def checked_operator(operator: str) -> str:
    """`operator` if it is a well-formed operator id, else ValueError saying why."""
    if not is_id(operator):
        raise ValueError(f"an operator id is {ID_RULE}; not {operator!r}")
    return operator


@dataclass(frozen=True, slots=True)
class PlayerRef:
    """A player as an operator names it: the operator and its own id for the player."""

    operator: str
    player_id: str

    @property
    def key(self) -> str:
        """The player key that names this player in the log."""
        return player_key(self.operator, self.player_id)


def player_key(operator: str, player_id: str) -> str:
    """The log's name for `operator`'s player `player_id`."""
    if operator == DEFAULT_OPERATOR:
        return player_id
    return f"{operator}{SEPARATOR}{player_id}"


def player_ref(key: str) -> PlayerRef:
    """The operator and id a player key names; a bare id is the default operator's."""
    operator, separator, player_id = key.partition(SEPARATOR)
    if not separator:
        return PlayerRef(DEFAULT_OPERATOR, key)
    return PlayerRef(operator, player_id)


def operator_of(key: str) -> str:
    """The operator a player key belongs to."""
    return player_ref(key).operator


@dataclass(frozen=True, slots=True)
class Audience:
    """Whom a response is for: one operator's view, or every operator's (None)."""

    operator: str | None
    alias_secret: bytes

    def sees(self, key: str) -> bool:
        """Whether this audience may see the player's id."""
        return self.operator is None or operator_of(key) == self.operator

    def name(self, key: str, table_id: str | None) -> str:
        """How a player key is shown: the operator's own id, the key, or a per-table alias."""
        if self.operator is None:
            return key
        ref = player_ref(key)
        if ref.operator == self.operator:
            return ref.player_id
        return alias(self.alias_secret, table_id or "", key)

    def rename(self, document: Any, table_id: str | None) -> Any:
        """`document` with every `player_id` in it named for this audience.

        A dict's own `table_id` says which table's aliases apply inside it, else `table_id`.
        This is the one place that decides what a caller sees of players, for JSON responses
        (service/web/operators.py) and the live feed (service/application/feed.py) alike.
        """
        if self.operator is None:
            return document
        return self._rename(document, table_id)

    def _rename(self, value: Any, table_id: str | None) -> Any:
        if isinstance(value, list | tuple):
            return [self._rename(item, table_id) for item in value]
        if not isinstance(value, Mapping):
            return value
        table = value.get("table_id")
        here = table if isinstance(table, str) else table_id
        renamed: dict[str, Any] = {}
        for name, item in value.items():
            if name == PLAYER_FIELD and isinstance(item, str):
                renamed[name] = self.name(item, here)
            else:
                renamed[name] = self._rename(item, here)
        return renamed


def alias(secret: bytes, table_id: str, key: str) -> str:
    """Another operator's player at a table: stable at that table, meaningless elsewhere.

    An HMAC under a secret the callers never see, so a rival cannot confirm a guess of who
    sits at a table by hashing candidate ids.
    """
    digest = hmac.new(secret, f"{table_id}\x00{key}".encode(), hashlib.sha256).hexdigest()
    return ALIAS_PREFIX + digest[:10]
