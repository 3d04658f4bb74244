"""Reading an export's lines into checked values: every key present and of the right type.

A line that cannot be read as what its kind promises is `DamagedError`: verification stops there
with one line saying what is wrong and where (line number, and position for an event).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, NoReturn

from shoebox_verify.strictjson import BadJsonError, loads_line

EXPORT_FORMAT = "shoebox-export/1"
SEAMLESS_EXPORT_FORMAT = "shoebox-export/2"
"""Version 1 and seamless (operator-wallet) money: the `seamless:` streams' events."""
EXPORT_FORMATS = (EXPORT_FORMAT, SEAMLESS_EXPORT_FORMAT)
GENESIS_HASH = "0" * 64
HEX64 = re.compile(r"[0-9a-f]{64}")
TIMESTAMP = re.compile(r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})\.\d{6}Z")
METADATA_KEYS = frozenset(
    ("actor", "role", "request_id", "correlation_id", "causation_id", "idempotency_key")
)
DOCUMENT_KEYS = (
    "position",
    "stream_id",
    "category",
    "version",
    "type",
    "schema_version",
    "payload",
    "metadata",
    "recorded_at",
)
EVENT_KEYS = frozenset((*DOCUMENT_KEYS, "kind", "prev_hash", "hash"))
_DAYS = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


class DamagedError(Exception):
    """The export cannot be read at a line: verification stops with this one message."""

    def __init__(self, line: int, message: str, position: int | None = None) -> None:
        super().__init__(message)
        self.line = line
        self.message = message
        self.position = position

    def __str__(self) -> str:
        where = f"line {self.line}" if self.line else "the export"
        if self.position is not None:
            where += f" (position {self.position})"
        return f"{where}: {self.message}"


def _type_name(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


@dataclass(slots=True)
class Fields:
    """Typed access to one JSON object of a line; a missing or mistyped key is DamagedError."""

    document: dict[str, Any]
    line: int
    path: str = ""
    position: int | None = None

    def fail(self, message: str) -> NoReturn:
        """Stop verification at this line."""
        raise DamagedError(self.line, message, self.position)

    def _get(self, key: str) -> Any:
        try:
            return self.document[key]
        except KeyError:
            self.fail(f"{self.path}{key} is missing")

    def _wrong(self, key: str, value: object, wanted: str) -> NoReturn:
        self.fail(f"{self.path}{key} is {_type_name(value)}, not {wanted}")

    def integer(self, key: str, minimum: int | None = None) -> int:
        """An integer (never a boolean), optionally at least `minimum`."""
        value = self._get(key)
        if type(value) is not int:
            self._wrong(key, value, "an integer")
        if minimum is not None and value < minimum:
            self.fail(f"{self.path}{key} is {value}, below {minimum}")
        return value

    def integer_or_none(self, key: str) -> int | None:
        """An integer or null."""
        value = self._get(key)
        if value is not None and type(value) is not int:
            self._wrong(key, value, "an integer or null")
        return value

    def text(self, key: str) -> str:
        """A string."""
        value = self._get(key)
        if type(value) is not str:
            self._wrong(key, value, "a string")
        return str(value)

    def text_or_none(self, key: str) -> str | None:
        """A string or null."""
        value = self._get(key)
        if value is not None and type(value) is not str:
            self._wrong(key, value, "a string or null")
        return value

    def choice(self, key: str, choices: tuple[str, ...]) -> str:
        """One of a few fixed strings."""
        value = self.text(key)
        if value not in choices:
            self.fail(f"{self.path}{key} is {value!r}, not one of {', '.join(choices)}")
        return value

    def obj(self, key: str) -> Fields:
        """A nested object, for typed access in turn."""
        value = self._get(key)
        if type(value) is not dict:
            self._wrong(key, value, "an object")
        return Fields(value, self.line, f"{self.path}{key}.", self.position)

    def array(self, key: str) -> list[Any]:
        """An array."""
        value = self._get(key)
        if type(value) is not list:
            self._wrong(key, value, "an array")
        return value

    def hash(self, key: str) -> str:
        """64 lowercase hex characters."""
        value = self.text(key)
        if not HEX64.fullmatch(value):
            self.fail(f"{self.path}{key} is not 64 lowercase hex characters: {value[:70]!r}")
        return value

    def timestamp(self, key: str) -> str:
        """A YYYY-MM-DDTHH:MM:SS.ffffffZ timestamp naming a real instant."""
        value = self.timestamp_or_none(key)
        if value is None:
            self._wrong(key, value, "a timestamp")
        return value

    def timestamp_or_none(self, key: str) -> str | None:
        """A timestamp as `timestamp` says, or null."""
        value = self.text_or_none(key)
        if value is not None and not valid_timestamp(value):
            self.fail(
                f"{self.path}{key} {value[:40]!r} is not a UTC timestamp of the form "
                "YYYY-MM-DDTHH:MM:SS.ffffffZ"
            )
        return value


def valid_timestamp(value: str) -> bool:
    """Whether `value` is YYYY-MM-DDTHH:MM:SS.ffffffZ with every field in range."""
    match = TIMESTAMP.fullmatch(value)
    if match is None:
        return False
    year, month, day, hour, minute, second = (int(part) for part in match.groups())
    if not (1 <= month <= 12 and hour <= 23 and minute <= 59 and second <= 59):
        return False
    leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
    days = 28 if month == 2 and not leap else _DAYS[month - 1]
    return 1 <= day <= days and year >= 1


def read_object(raw: bytes, line: int) -> dict[str, Any]:
    """One line as a JSON object with a string `kind`; DamagedError otherwise."""
    try:
        document = loads_line(raw)
    except BadJsonError as error:
        raise DamagedError(line, str(error)) from None
    if not isinstance(document, dict):
        raise DamagedError(line, f"an export line is a JSON object, not {_type_name(document)}")
    kind = document.get("kind")
    if type(kind) is not str:
        raise DamagedError(
            line, "the line has no string kind (header, event, shoe, wallet, checkpoint)"
        )
    return document


@dataclass(frozen=True, slots=True)
class Header:
    """What the header promises about the slice."""

    table_id: str
    start: str | None
    end: str | None
    first_position: int | None
    last_position: int | None
    prev_hash: str | None
    format: str = EXPORT_FORMAT


def read_header(document: dict[str, Any], line: int) -> Header:
    """The header line, checked for shape and for its own consistency."""
    fields = Fields(document, line)
    if document.get("kind") != "header":
        fields.fail('the first line must be the header (kind "header")')
    format_ = fields.text("format")
    if format_ not in EXPORT_FORMATS:
        fields.fail(f"format {format_!r} is not one this verifier reads: {EXPORT_FORMATS}")
    header = Header(
        fields.text("table_id"),
        fields.timestamp_or_none("from"),
        fields.timestamp_or_none("to"),
        fields.integer_or_none("first_position"),
        fields.integer_or_none("last_position"),
        fields.hash("prev_hash") if document.get("prev_hash") is not None else None,
        format_,
    )
    if "prev_hash" not in document:
        fields.fail("prev_hash is missing")
    present = [
        value is not None
        for value in (header.first_position, header.last_position, header.prev_hash)
    ]
    if any(present) and not all(present):
        fields.fail("first_position, last_position and prev_hash are all null or none is")
    if header.first_position is not None and header.last_position is not None:
        if header.first_position < 1:
            fields.fail(f"first_position {header.first_position} is below 1")
        if header.last_position < header.first_position:
            fields.fail("last_position is before first_position")
    return header


@dataclass(frozen=True, slots=True)
class ShoeLine:
    """A shoe as the export publishes it."""

    line: int
    table_id: str
    shoe_id: str
    server_seed_hash: str
    client_seed: str
    nonce: int
    decks: int
    hands: int
    server_seed: str | None


def read_shoe(document: dict[str, Any], line: int) -> ShoeLine:
    """A shoe line, checked for shape."""
    fields = Fields(document, line)
    return ShoeLine(
        line,
        fields.text("table_id"),
        fields.text("shoe_id"),
        fields.text("server_seed_hash"),
        fields.text("client_seed"),
        fields.integer("nonce"),
        fields.integer("decks"),
        fields.integer("hands"),
        fields.text_or_none("server_seed"),
    )


@dataclass(frozen=True, slots=True)
class WalletState:
    """A wallet's balances and its open stakes keyed (table_id, round_id, spot)."""

    available: int
    reserved: int
    open_stakes: dict[tuple[str, str, str], int]


@dataclass(frozen=True, slots=True)
class WalletLine:
    """A wallet's opening and closing states as the export states them."""

    line: int
    player_id: str
    opening: WalletState
    closing: WalletState


def _wallet_state(fields: Fields) -> WalletState:
    stakes: dict[tuple[str, str, str], int] = {}
    for index, item in enumerate(fields.array("open_stakes")):
        if (
            type(item) is not list
            or len(item) != 4
            or not all(type(part) is str for part in item[:3])
            or type(item[3]) is not int
        ):
            fields.fail(
                f"{fields.path}open_stakes[{index}] is not [table_id, round_id, spot, stake]"
            )
        key = (item[0], item[1], item[2])
        if key in stakes:
            fields.fail(f"{fields.path}open_stakes lists {key} twice")
        stakes[key] = item[3]
    return WalletState(fields.integer("available"), fields.integer("reserved"), stakes)


def read_wallet(document: dict[str, Any], line: int) -> WalletLine:
    """A wallet line, checked for shape."""
    fields = Fields(document, line)
    return WalletLine(
        line,
        fields.text("player_id"),
        _wallet_state(fields.obj("opening")),
        _wallet_state(fields.obj("closing")),
    )
