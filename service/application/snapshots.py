"""The snapshot codec: an aggregate's frozen-dataclass tree as JSON and back, exactly, and the
fingerprint that says which code wrote it.

Encoding is driven by the type hints, never by pickle or by names stored in the document, so a
document can only ever become the classes the reader's own code declares:
- dataclasses are objects of their fields (every field, no other key);
- str, int, bool and None are themselves; an Enum is its value;
- a datetime is its ISO 8601 text (aware, microseconds kept); a timedelta is
  [days, seconds, microseconds];
- tuple[X, ...] and fixed tuples are arrays; a frozenset is an array sorted by its encoding;
  a Mapping is an array of [key, value] pairs, sorted the same way;
- a union with None is null or the other member; a union of dataclasses is [class name, value].
Decoding checks every type on the way and raises UnreadableSnapshot on anything else. Each
kind is one small class holding both directions, and `codec_for` builds (once per hint) the
tree of them that a state's type hints describe: no field is named here, so a field added to
the domain's state is encoded and decoded with no change to this module.

The fingerprint (the snapshot's `schema`) is a digest of the state's shape (every dataclass,
field name and type hint, recursively, every Enum's values) and of the source of every module
that declares one of those classes or the fold. Any change to the domain therefore retires
every snapshot taken before it by itself, including a change to how events fold that keeps the
shape: a stale snapshot costs one full replay, a trusted wrong one would cost money.
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import sys
import types
import typing
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from enum import Enum
from functools import cache
from typing import Any, Generic, TypeVar

import orjson

from events.store import JsonObject, JsonValue

CODEC_REVISION = 1
"""Bumped when this module's encoding changes; part of every fingerprint."""

S = TypeVar("S")


class UnreadableSnapshot(ValueError):  # noqa: N818 - named for what it is
    """A snapshot document that does not decode into the reader's classes."""


@cache
def _hints(cls: type[Any]) -> dict[str, Any]:
    # Cached: resolving a class's hints evaluates its annotations, which costs far more than
    # the encoding itself, and a class's fields never change while it is loaded.
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def _is_union(hint: Any) -> bool:
    return typing.get_origin(hint) in (typing.Union, types.UnionType)


def _sort_key(encoded: JsonValue) -> bytes:
    return orjson.dumps(encoded, option=orjson.OPT_SORT_KEYS)


def _expect(document: JsonValue, kind: type[Any], hint: Any) -> None:
    if not isinstance(document, kind) or (kind is int and isinstance(document, bool)):
        raise UnreadableSnapshot(f"{document!r} is not a {hint}")


def _items(document: JsonValue, hint: Any, count: int | None = None) -> list[JsonValue]:
    """The document as an array, of `count` items when given."""
    _expect(document, list, hint)
    assert isinstance(document, list)
    if count is not None and len(document) != count:
        raise UnreadableSnapshot(f"{document!r} does not have {count} items for {hint}")
    return document


# One codec per kind of type hint, each with its encoding and decoding side by side, so that a
# kind cannot be written one way and read another. `codec_for` builds the tree of them for a
# hint once; a dataclass's fields come from its own hints, so a field cannot be left out.


class _Codec(ABC):
    """A value of one type hint as JSON, and back."""

    @abstractmethod
    def encode(self, value: Any) -> JsonValue:
        """The value as JSON; TypeError if it is not of the codec's type."""

    @abstractmethod
    def decode(self, document: JsonValue) -> Any:
        """The value `encode` turned into `document`; UnreadableSnapshot if none."""


class _Null(_Codec):
    def encode(self, value: Any) -> JsonValue:
        if value is not None:
            raise TypeError(f"{value!r} is not None")
        return None

    def decode(self, document: JsonValue) -> Any:
        if document is not None:
            raise UnreadableSnapshot(f"{document!r} is not null")
        return None


class _Scalar(_Codec):
    """str, int and bool are themselves (a bool is never an int, nor the other way)."""

    def __init__(self, hint: type[Any]) -> None:
        self._hint = hint

    def encode(self, value: Any) -> JsonValue:
        if type(value) is not self._hint:
            raise TypeError(f"cannot encode {value!r} as {self._hint}")
        plain: JsonValue = value
        return plain

    def decode(self, document: JsonValue) -> Any:
        _expect(document, self._hint, self._hint)
        return document


class _Enumeration(_Codec):
    """An Enum is its value."""

    def __init__(self, hint: type[Enum]) -> None:
        self._hint = hint

    def encode(self, value: Any) -> JsonValue:
        enum_value: JsonValue = self._hint(value).value
        return enum_value

    def decode(self, document: JsonValue) -> Any:
        try:
            return self._hint(document)
        except (TypeError, ValueError) as error:
            raise UnreadableSnapshot(str(error)) from error


class _Moment(_Codec):
    """An aware datetime is its ISO 8601 text, microseconds kept."""

    def encode(self, value: Any) -> JsonValue:
        if value.tzinfo is None:
            raise TypeError("a snapshot keeps only aware datetimes")
        text: str = value.isoformat()
        return text

    def decode(self, document: JsonValue) -> Any:
        _expect(document, str, datetime)
        assert isinstance(document, str)
        try:
            moment = datetime.fromisoformat(document)
        except ValueError as error:
            raise UnreadableSnapshot(str(error)) from error
        if moment.tzinfo is None:
            raise UnreadableSnapshot(f"{document!r} is a naive time")
        return moment


class _Span(_Codec):
    """A timedelta is [days, seconds, microseconds], each exact."""

    def encode(self, value: Any) -> JsonValue:
        return [value.days, value.seconds, value.microseconds]

    def decode(self, document: JsonValue) -> Any:
        parts = _items(document, timedelta, 3)
        if not all(type(part) is int for part in parts):
            raise UnreadableSnapshot(f"{document!r} is not [days, seconds, microseconds]")
        return timedelta(*typing.cast(list[int], parts))


class _Optional(_Codec):
    """A union of None and one type is null or that type's encoding."""

    def __init__(self, other: Any) -> None:
        self._other = other

    def encode(self, value: Any) -> JsonValue:
        return None if value is None else codec_for(self._other).encode(value)

    def decode(self, document: JsonValue) -> Any:
        return None if document is None else codec_for(self._other).decode(document)


class _Tagged(_Codec):
    """A union of several classes is [class name, value] (or null, if None is a member)."""

    def __init__(self, hint: Any) -> None:
        members = typing.get_args(hint)
        self._hint = hint
        self._nullable = type(None) in members
        self._members: dict[str, Any] = {m.__name__: m for m in members if m is not type(None)}

    def encode(self, value: Any) -> JsonValue:
        if value is None and self._nullable:
            return None
        name = type(value).__name__
        if self._members.get(name) is not type(value):
            raise TypeError(f"{value!r} is none of {self._hint}")
        return [name, codec_for(self._members[name]).encode(value)]

    def decode(self, document: JsonValue) -> Any:
        if document is None and self._nullable:
            return None
        tag, inner = _items(document, self._hint, 2)
        member = self._members.get(tag) if isinstance(tag, str) else None
        if member is None:
            raise UnreadableSnapshot(f"{tag!r} is none of {self._hint}")
        return codec_for(member).decode(inner)


class _Sequence(_Codec):
    """tuple[X, ...] is an array of X."""

    def __init__(self, item: Any) -> None:
        self._item = item

    def encode(self, value: Any) -> JsonValue:
        item = codec_for(self._item)
        return [item.encode(each) for each in value]

    def decode(self, document: JsonValue) -> Any:
        item = codec_for(self._item)
        return tuple(item.decode(each) for each in _items(document, tuple))


class _Fixed(_Codec):
    """tuple[A, B] is an array of an A and a B."""

    def __init__(self, hint: Any) -> None:
        self._hint = hint
        self._items = typing.get_args(hint)

    def encode(self, value: Any) -> JsonValue:
        return [codec_for(h).encode(v) for v, h in zip(value, self._items, strict=True)]

    def decode(self, document: JsonValue) -> Any:
        items = _items(document, self._hint, len(self._items))
        return tuple(codec_for(h).decode(d) for d, h in zip(items, self._items, strict=True))


class _Set(_Codec):
    """A frozenset is an array sorted by its items' encoding, so equal sets encode equally."""

    def __init__(self, item: Any) -> None:
        self._item = item

    def encode(self, value: Any) -> JsonValue:
        item = codec_for(self._item)
        return sorted((item.encode(each) for each in value), key=_sort_key)

    def decode(self, document: JsonValue) -> Any:
        item = codec_for(self._item)
        return frozenset(item.decode(each) for each in _items(document, frozenset))


class _Pairs(_Codec):
    """A Mapping is an array of [key, value] pairs sorted by the key's encoding (keys need not
    be strings)."""

    def __init__(self, hint: Any) -> None:
        self._hint = hint
        self._key, self._value = typing.get_args(hint)

    def encode(self, value: Any) -> JsonValue:
        key, item = codec_for(self._key), codec_for(self._value)
        pairs: list[JsonValue] = [[key.encode(k), item.encode(v)] for k, v in value.items()]
        return sorted(pairs, key=lambda pair: _sort_key(_items(pair, self._hint)[0]))

    def decode(self, document: JsonValue) -> Any:
        key, item = codec_for(self._key), codec_for(self._value)
        mapping: dict[Any, Any] = {}
        for pair in _items(document, self._hint):
            encoded_key, encoded_value = _items(pair, self._hint, 2)
            mapping[key.decode(encoded_key)] = item.decode(encoded_value)
        return mapping


class _Record(_Codec):
    """A dataclass is an object of every one of its fields, and no other key."""

    def __init__(self, hint: type[Any]) -> None:
        self._hint: Any = hint

    def encode(self, value: Any) -> JsonValue:
        # Resolved per call, not in __init__: a class may refer to itself through its fields.
        return {
            name: codec_for(h).encode(getattr(value, name))
            for name, h in _hints(self._hint).items()
        }

    def decode(self, document: JsonValue) -> Any:
        _expect(document, dict, self._hint)
        assert isinstance(document, dict)
        hints = _hints(self._hint)
        if set(document) != set(hints):
            raise UnreadableSnapshot(f"{sorted(document)} are not the fields of {self._hint}")
        fields = {name: codec_for(h).decode(document[name]) for name, h in hints.items()}
        try:
            return self._hint(**fields)
        except (TypeError, ValueError) as error:
            # A class that checks itself in __post_init__ refuses a document it cannot be.
            if isinstance(error, UnreadableSnapshot):
                raise
            raise UnreadableSnapshot(f"not a {self._hint.__name__}: {error}") from error


_PLAIN: Mapping[Any, _Codec] = {
    type(None): _Null(),
    str: _Scalar(str),
    int: _Scalar(int),
    bool: _Scalar(bool),
    datetime: _Moment(),
    timedelta: _Span(),
}


def _union(hint: Any) -> _Codec:
    others = [m for m in typing.get_args(hint) if m is not type(None)]
    if len(others) == 1:
        return _Optional(others[0])
    return _Tagged(hint)


def _generic(hint: Any) -> _Codec | None:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is tuple:
        return _Sequence(args[0]) if len(args) == 2 and args[1] is Ellipsis else _Fixed(hint)
    if origin is frozenset:
        return _Set(args[0])
    if origin in (Mapping, dict):
        return _Pairs(hint)
    return None


@cache
def codec_for(hint: Any) -> _Codec:
    """The codec of a type hint; TypeError for a hint that snapshots do not keep."""
    if hint in _PLAIN:
        return _PLAIN[hint]
    if _is_union(hint):
        return _union(hint)
    generic = _generic(hint)
    if generic is not None:
        return generic
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _Record(hint)
    if isinstance(hint, type) and issubclass(hint, Enum):
        return _Enumeration(hint)
    raise TypeError(f"a snapshot cannot keep a {hint}")


def encode(value: Any, hint: Any) -> JsonValue:
    """`value`, of type `hint`, as JSON."""
    return codec_for(hint).encode(value)


def decode(document: JsonValue, hint: Any) -> Any:
    """The value of type `hint` that `encode` turned into `document`; UnreadableSnapshot if none."""
    try:
        codec = codec_for(hint)
    except TypeError as error:
        raise UnreadableSnapshot(str(error)) from error
    return codec.decode(document)


def describe(hint: Any, seen: dict[type[Any], str] | None = None) -> str:
    """The shape of `hint` as text: classes, fields, hints and enum values, recursively."""
    seen = {} if seen is None else seen
    if isinstance(hint, type) and (dataclasses.is_dataclass(hint) or issubclass(hint, Enum)):
        name = f"{hint.__module__}.{hint.__qualname__}"
        if hint not in seen:
            seen[hint] = name  # before recursing: a class may refer to itself
            if dataclasses.is_dataclass(hint):
                fields = ", ".join(f"{n}: {describe(h, seen)}" for n, h in _hints(hint).items())
                seen[hint] = f"{name}({fields})"
            else:
                assert issubclass(hint, Enum)
                seen[hint] = f"{name}[{', '.join(repr(m.value) for m in hint)}]"
        return seen[hint]
    origin = typing.get_origin(hint)
    if origin is not None:
        args = ", ".join(
            "..." if a is Ellipsis else describe(a, seen) for a in typing.get_args(hint)
        )
        kind = "Union" if _is_union(hint) else getattr(origin, "__qualname__", str(origin))
        return f"{kind}[{args}]"
    if isinstance(hint, type):
        return hint.__qualname__
    return repr(hint)


def _modules(hint: Any, found: set[str], seen: set[Any]) -> None:
    """Add to `found` the module of every dataclass and Enum reachable from `hint`."""
    if hint in seen:
        return
    seen.add(hint)
    if isinstance(hint, type):
        if dataclasses.is_dataclass(hint) or issubclass(hint, Enum):
            found.add(hint.__module__)
        if dataclasses.is_dataclass(hint):
            for field_hint in _hints(hint).values():
                _modules(field_hint, found, seen)
        return
    for arg in typing.get_args(hint):
        if arg is not Ellipsis:
            _modules(arg, found, seen)


def fingerprint(root: type[Any], fold: Callable[..., Any]) -> str:
    """The schema of snapshots of `root` folded by `fold`: changes whenever either could."""
    modules: set[str] = {fold.__module__}
    _modules(root, modules, set())
    digest = hashlib.sha256()
    digest.update(f"codec {CODEC_REVISION}\n{describe(root)}\n".encode())
    for name in sorted(modules):
        digest.update(f"module {name}\n".encode())
        digest.update(inspect.getsource(sys.modules[name]).encode())
    return digest.hexdigest()[:32]


class SnapshotCodec(Generic[S]):
    """One aggregate's snapshots: its schema, and its state to a document and back."""

    def __init__(self, root: type[Any], fold: Callable[..., Any]) -> None:
        self._root = root
        self.schema = fingerprint(root, fold)

    def encode(self, state: S) -> JsonObject:
        """The state as a snapshot document."""
        return {"state": encode(state, self._root)}

    def decode(self, document: JsonObject) -> S:
        """The state a document holds; UnreadableSnapshot if it holds none of the root's type."""
        if set(document) != {"state"}:
            raise UnreadableSnapshot(f"{sorted(document)} is not a snapshot document")
        state: S = decode(document["state"], self._root)
        return state
