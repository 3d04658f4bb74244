"""Strict JSON in, canonical JSON out: the value space of docs/audit-log.md and nothing else.

Reading refuses what the log can never hold (floats, NaN and infinities, integers outside
signed 64-bit, duplicate keys) with a message that says what and where, so a damaged export
gives one clear line instead of a traceback. Writing is the canonical encoding of
docs/audit-log.md, which the document itself defines as the standard library's
`json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))` in UTF-8;
`canonical_json_reference` spells the same rules out character by character, and the tests
hold the two together.
"""

from __future__ import annotations

import json
import re
from typing import Any

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1


class BadJsonError(ValueError):
    """A line is not JSON in the log's value space; the message says why, without a location."""


def _refuse_float(text: str) -> Any:
    raise BadJsonError(
        f"the number {_clip(text)} is not an integer: the log holds integers only "
        "(money is integer pence), never fractions, exponents or floats"
    )


def _refuse_constant(name: str) -> Any:
    raise BadJsonError(f"{name} is not a JSON value")


def _integer(text: str) -> int:
    try:
        value = int(text)
    except ValueError:  # longer than Python's int conversion limit
        raise BadJsonError(f"the integer {_clip(text)} is far outside signed 64-bit") from None
    if not INT64_MIN <= value <= INT64_MAX:
        raise BadJsonError(f"the integer {_clip(text)} is outside signed 64-bit")
    return value


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise BadJsonError(f"the key {key!r} appears twice in one object")
            seen.add(key)
    return result


def _clip(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


_DECODER = json.JSONDecoder(
    object_pairs_hook=_object,
    parse_float=_refuse_float,
    parse_int=_integer,
    parse_constant=_refuse_constant,
)
# An escaped U+0000 (jsonb cannot store it): "\u0000" preceded by an even number of backslashes.
_ESCAPED_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


def loads_line(raw: bytes) -> object:
    """Decode one line of an export; BadJsonError says what is wrong with it."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise BadJsonError(f"not UTF-8 (byte {error.start + 1} of the line)") from None
    if "\\u0000" in text and _ESCAPED_NUL.search(text):
        raise BadJsonError("a string holds U+0000, which the log cannot store")
    try:
        return _DECODER.decode(text)
    except json.JSONDecodeError as error:
        cut = (
            not raw.endswith(b"\n")
            or error.msg.startswith("Unterminated")
            or error.pos >= len(text.rstrip())
        )
        hint = " (the line looks cut short)" if cut else ""
        raise BadJsonError(f"not valid JSON: {error.msg} (column {error.colno}){hint}") from None
    except RecursionError:
        raise BadJsonError("JSON nested too deeply") from None
    except ValueError as error:  # BadJsonError from a hook, or int() refusing a huge literal
        if isinstance(error, BadJsonError):
            raise
        raise BadJsonError(f"not valid JSON: {error}") from None


_ENCODER = json.JSONEncoder(
    ensure_ascii=False,
    sort_keys=True,
    separators=(",", ":"),
    allow_nan=False,
    check_circular=False,
)


def canonical_json(value: object) -> bytes:
    """The canonical bytes of a value read by `loads_line` (docs/audit-log.md)."""
    try:
        return _ENCODER.encode(value).encode("utf-8")
    except UnicodeEncodeError:
        raise BadJsonError(
            "a string holds an unpaired surrogate, which has no UTF-8 form"
        ) from None


_SHORT_ESCAPES = {
    '"': '\\"',
    "\\": "\\\\",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
}


def _reference_string(text: str) -> str:
    out = ['"']
    for char in text:
        escaped = _SHORT_ESCAPES.get(char)
        if escaped is not None:
            out.append(escaped)
        elif char < "\x20":
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(char)
    out.append('"')
    return "".join(out)


def _reference(value: object) -> str:
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        if not INT64_MIN <= value <= INT64_MAX:
            raise BadJsonError(f"the integer {value} is outside signed 64-bit")
        return str(value)
    if isinstance(value, str):
        return _reference_string(value)
    if isinstance(value, list):
        return "[" + ",".join(_reference(item) for item in value) + "]"
    if isinstance(value, dict):
        members = sorted(value.items())  # str order is code point order
        return "{" + ",".join(_reference_string(k) + ":" + _reference(v) for k, v in members) + "}"
    raise BadJsonError(f"{type(value).__name__} is not in the log's JSON value space")


def canonical_json_reference(value: object) -> bytes:
    """The same bytes as `canonical_json`, written rule by rule from docs/audit-log.md (slow)."""
    try:
        return _reference(value).encode("utf-8")
    except UnicodeEncodeError:
        raise BadJsonError(
            "a string holds an unpaired surrogate, which has no UTF-8 form"
        ) from None
