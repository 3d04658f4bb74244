"""How a domain event becomes a JSON payload and back: the one codec every stream uses.

Events are frozen dataclasses of str, int, bool, None, StrEnum and tuples of those; a payload
holds the same values with enums as their strings and tuples as lists.
"""

import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import MISSING, fields
from enum import Enum
from typing import Any, TypeAlias, TypeVar

E = TypeVar("E")

_Coercer: TypeAlias = Callable[[Any], Any]
# Reading type hints is slow and they never change, so each class's coercers are built once.
_COERCERS: dict[type[Any], dict[str, _Coercer]] = {}


def to_payload(event: Any) -> dict[str, object]:
    """A dataclass event's fields as JSON values."""
    return {f.name: _json_value(getattr(event, f.name)) for f in fields(event)}


def schema_version_of(event: Any) -> int:
    """The schema version an event's payload is written in: its class's, 1 unless it says.

    An event class that changes its fields declares `schema_version: ClassVar[int]`, one more
    than before, and the service registers how to lift the older payloads to it.
    """
    version: int = getattr(type(event), "schema_version", 1)
    return version


def from_payload(cls: type[E], payload: Mapping[str, object]) -> E:
    """The event of class `cls` that `to_payload` turned into `payload`."""
    coercers = _coercers(cls)
    return cls(**{name: coercers[name](value) for name, value in payload.items()})


def payload_json_schema(cls: type[Any]) -> dict[str, Any]:
    """The JSON Schema of the payloads `to_payload` makes of `cls`'s events.

    Derived from the field types by the same rules as `_json_value`, so that a field added to
    an event is documented with it. A field with a default may be missing from a payload
    written before the field existed (`from_payload` then takes the default).
    """
    hints = typing.get_type_hints(cls)
    required = [
        f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING
    ]
    return {
        "type": "object",
        "properties": {f.name: _json_schema(hints[f.name]) for f in fields(cls)},
        "required": required,
    }


def _json_schema(hint: Any) -> dict[str, Any]:
    scalar = {str: "string", int: "integer", bool: "boolean", type(None): "null"}
    if hint in scalar:
        return {"type": scalar[hint]}
    if isinstance(hint, type) and issubclass(hint, Enum):
        return {"type": "string", "enum": [str(member.value) for member in hint]}
    origin, arguments = typing.get_origin(hint), typing.get_args(hint)
    if origin is tuple and len(arguments) == 2 and arguments[1] is Ellipsis:
        return {"type": "array", "items": _json_schema(arguments[0])}
    if origin is tuple:
        count = len(arguments)
        items = [_json_schema(argument) for argument in arguments]
        return {"type": "array", "prefixItems": items, "minItems": count, "maxItems": count}
    if origin is typing.Union or origin is types.UnionType:
        return {"anyOf": [_json_schema(argument) for argument in arguments]}
    raise TypeError(f"an event field of type {hint!r} has no JSON form")


def _json_value(value: object) -> object:
    if isinstance(value, Enum):
        return str(value.value)
    if isinstance(value, tuple):
        return [_json_value(item) for item in value]
    return value


def _tupled(value: Any) -> Any:
    if isinstance(value, list | tuple):
        return tuple(_tupled(item) for item in value)
    return value


def _unchanged(value: Any) -> Any:
    return value


def _coercers(cls: type[Any]) -> dict[str, _Coercer]:
    """Per field, how a JSON value becomes the field's type again."""
    found = _COERCERS.get(cls)
    if found is not None:
        return found
    coercers: dict[str, _Coercer] = {}
    for name, hint in typing.get_type_hints(cls).items():
        if typing.get_origin(hint) is typing.ClassVar:
            continue
        if isinstance(hint, type) and issubclass(hint, Enum):
            coercers[name] = hint
        elif typing.get_origin(hint) is tuple:
            coercers[name] = _tupled
        else:
            coercers[name] = _unchanged
    _COERCERS[cls] = coercers
    return coercers
