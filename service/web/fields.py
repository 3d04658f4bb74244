"""The request fields every resource shares: ids, money, reasons and pages.

Requests are strict: money is an integer number of pence (`fields.Integer(strict=True)`: no
floats, strings, booleans, NaN or 1e400), capped at the wallet's largest single movement,
and ids match ID_PATTERN. A resource's own schemas live beside its views.
"""

from __future__ import annotations

import re
from typing import Any, Final

import marshmallow as ma

from domain.wallet import MAX_AMOUNT
from service.web.problems import FieldError, Problem

ID_PATTERN: Final = r"^[A-Za-z0-9_.-]{1,64}$"
"""Table and player ids: 1 to 64 letters, digits, `_`, `.` or `-` (safe in a URL and a log)."""
_ID: Final = re.compile(r"[A-Za-z0-9_.-]{1,64}")
MAX_PENCE: Final = MAX_AMOUNT
"""The largest amount a request may name, £1bn: anything larger is a typing error."""
MAX_REASON_LENGTH: Final = 500
DEFAULT_PAGE: Final = 50
MAX_PAGE: Final = 500


def checked_id(name: str, value: str) -> str:
    """A path's table or player id if it matches ID_PATTERN, else a 422 naming the parameter."""
    if _ID.fullmatch(value) is None:
        raise Problem(
            422,
            "validation-failed",
            f"{name}: must be 1 to 64 letters, digits, '_', '.' or '-'.",
            errors=[FieldError(name, f"Does not match {ID_PATTERN}.", "path")],
        )
    return value


def path_parameter(name: str, description: str) -> dict[str, Any]:
    """The OpenAPI description of an id in the path, with its pattern."""
    return {
        "in": "path",
        "name": name,
        "required": True,
        "description": description,
        "schema": {"type": "string", "pattern": ID_PATTERN},
    }


TABLE_ID_PARAMETER: Final = path_parameter("table_id", "The table's id.")
PLAYER_ID_PARAMETER: Final = path_parameter("player_id", "The player's id.")


def _valid_id(value: str) -> None:
    # fullmatch, because `$` in a marshmallow Regexp would also accept a trailing newline.
    if _ID.fullmatch(value) is None:
        raise ma.ValidationError(f"Must match {ID_PATTERN}.")


def id_field(description: str) -> ma.fields.String:
    """A required table or player id in a request body."""
    return ma.fields.String(
        required=True,
        validate=_valid_id,
        metadata={"description": description, "pattern": ID_PATTERN, "example": "alice"},
    )


def pence_field(description: str, *, minimum: int = 1, **options: Any) -> ma.fields.Integer:
    """A required amount of pence: an integer (never a float, string or bool), bounded."""
    return ma.fields.Integer(
        strict=True,
        validate=ma.validate.Range(min=minimum, max=MAX_PENCE),
        metadata={"description": description},
        **options,
    )


def reason_field(description: str) -> ma.fields.String:
    """A required reason, 1 to 500 characters."""
    return ma.fields.String(
        required=True,
        validate=ma.validate.Length(min=1, max=MAX_REASON_LENGTH),
        metadata={"description": description},
    )


class PageQuerySchema(ma.Schema):
    """How many of the latest entries to list."""

    limit = ma.fields.Integer(
        load_default=DEFAULT_PAGE,
        validate=ma.validate.Range(min=1, max=MAX_PAGE),
        metadata={"description": f"At most this many entries, 1 to {MAX_PAGE}."},
    )
