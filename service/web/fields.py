"""The request fields every resource shares: ids, money, free text, days, instants and pages.

Requests are strict: money is an integer number of pence (`fields.Integer(strict=True)`: no
floats, strings, booleans, NaN or 1e400), capped at the wallet's largest single movement,
ids follow the one grammar of domain/ids.py, in the body, the query and the path alike,
free text (reasons, chat) holds no control characters, and days and instants stay within
the range that can be stored and computed with.
A resource's own schemas live beside its views.
"""

from __future__ import annotations

import unicodedata
from datetime import UTC, date, datetime
from typing import Any, Final

import marshmallow as ma
from flask import request
from werkzeug.routing import BaseConverter

from domain.ids import ID_PATTERN, ID_RULE, is_id
from domain.wallet import MAX_AMOUNT
from service.web.problems import FieldError, Problem

MAX_PENCE: Final = MAX_AMOUNT
"""The largest amount a request may name, £1bn: anything larger is a typing error."""
MAX_REASON_LENGTH: Final = 500
_TEXT_CONTROLS: Final = frozenset("\t\n")
# The days and instants a request may name. Nothing happened before 1970 here, and a day
# short of datetime's own end leaves room to convert any UTC offset and add a day.
EARLIEST_DAY: Final = date(1970, 1, 1)
LATEST_DAY: Final = date(9999, 12, 30)
EARLIEST_INSTANT: Final = datetime(1970, 1, 1, tzinfo=UTC)
LATEST_INSTANT: Final = datetime(9999, 12, 30, tzinfo=UTC)
DEFAULT_PAGE: Final = 50
MAX_PAGE: Final = 500


class MalformedId:
    """A path segment where an id belongs that does not follow the id grammar."""

    __slots__ = ("value",)

    def __init__(self, value: str) -> None:
        self.value = value


class IdConverter(BaseConverter):
    """An id in a URL path, `<id:table_id>`; a variable that names no converter is one too.

    It matches any one segment, so that a malformed id is not the router's 404 for a path that
    exists: it becomes a MalformedId, which `check_path_ids` answers with a 422 naming the
    parameter once the caller is authenticated, the same order in which a body is checked.
    """

    def to_python(self, value: str) -> str | MalformedId:
        """The id, or a MalformedId for `check_path_ids` to refuse."""
        return value if is_id(value) else MalformedId(value)


def id_parameter_schema(converter: BaseConverter) -> dict[str, Any]:
    """The OpenAPI schema of an id in the path, for flask-smorest's converter mapping."""
    return {"type": "string", "pattern": ID_PATTERN}


def check_path_ids() -> None:
    """Before the view: a 422 problem naming every id in the path that breaks the grammar."""
    malformed = [
        name for name, value in (request.view_args or {}).items() if isinstance(value, MalformedId)
    ]
    if malformed:
        raise Problem(
            422,
            "validation-failed",
            "; ".join(f"{name}: must be {ID_RULE}." for name in malformed),
            errors=[
                FieldError(name, f"Does not match {ID_PATTERN}.", "path") for name in malformed
            ],
        )


def path_parameter(name: str, description: str) -> dict[str, Any]:
    """The OpenAPI description of an id in the path; IdConverter documents its pattern."""
    return {"in": "path", "name": name, "required": True, "description": description}


TABLE_ID_PARAMETER: Final = path_parameter("table_id", "The table's id.")
PLAYER_ID_PARAMETER: Final = path_parameter("player_id", "The player's id.")


def _valid_id(value: str) -> None:
    if not is_id(value):
        raise ma.ValidationError(f"Must match {ID_PATTERN}.")


def id_field(description: str, example: str = "alice", **options: Any) -> ma.fields.String:
    """An id in a request body or query, required unless `options` say otherwise."""
    options.setdefault("required", True)
    return ma.fields.String(
        validate=_valid_id,
        metadata={"description": description, "pattern": ID_PATTERN, "example": example},
        **options,
    )


def pence_field(description: str, *, minimum: int = 1, **options: Any) -> ma.fields.Integer:
    """A required amount of pence: an integer (never a float, string or bool), bounded."""
    return ma.fields.Integer(
        strict=True,
        validate=ma.validate.Range(min=minimum, max=MAX_PENCE),
        metadata={"description": description},
        **options,
    )


def _text_characters(text: str) -> None:
    for index, character in enumerate(text):
        if character not in _TEXT_CONTROLS and unicodedata.category(character) in ("Cc", "Cs"):
            raise ma.ValidationError(
                f"Character {index + 1} is U+{ord(character):04X}: free text holds no control"
                " characters but tab and newline, and no lone surrogates."
            )


def free_text_field(
    description: str, *, max_length: int = MAX_REASON_LENGTH, **options: Any
) -> ma.fields.String:
    """Required free text, as people write it: 1 to `max_length` characters, stored as sent.

    Control characters other than tab and newline are refused (NUL, for one, cannot be kept
    in PostgreSQL's jsonb), and so are lone surrogates, which are not text and cannot be
    written as UTF-8. Everything else, any script or emoji, is kept exactly.
    """
    options.setdefault("required", True)
    return ma.fields.String(
        validate=[ma.validate.Length(min=1, max=max_length), _text_characters],
        metadata={
            "description": f"{description} 1 to {max_length} characters; no control characters"
            " but tab and newline."
        },
        **options,
    )


def reason_field(description: str) -> ma.fields.String:
    """A required reason: free text of 1 to 500 characters."""
    return free_text_field(description)


def _in_supported_range(value: date) -> None:
    # A datetime is a date too; compared as instants, so any UTC offset is fine.
    earliest, latest = (
        (EARLIEST_INSTANT, LATEST_INSTANT)
        if isinstance(value, datetime)
        else (EARLIEST_DAY, LATEST_DAY)
    )
    if not earliest <= value <= latest:
        raise ma.ValidationError(f"Must be from {earliest.isoformat()} to {latest.isoformat()}.")


def day_field(description: str, **options: Any) -> ma.fields.Date:
    """An ISO 8601 day within the supported range, 1970-01-01 to 9999-12-30."""
    return ma.fields.Date(
        validate=_in_supported_range,
        metadata={"description": f"{description} {EARLIEST_DAY} to {LATEST_DAY}."},
        **options,
    )


def instant_field(description: str, **options: Any) -> ma.fields.AwareDateTime:
    """An ISO 8601 instant with its UTC offset, within the supported range."""
    return ma.fields.AwareDateTime(
        validate=_in_supported_range,
        metadata={
            "description": f"{description} With a UTC offset, {EARLIEST_DAY} to {LATEST_DAY}."
        },
        **options,
    )


class PageQuerySchema(ma.Schema):
    """How many of the latest entries to list."""

    limit = ma.fields.Integer(
        load_default=DEFAULT_PAGE,
        validate=ma.validate.Range(min=1, max=MAX_PAGE),
        metadata={"description": f"At most this many entries, 1 to {MAX_PAGE}."},
    )
