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
Decoding checks every type on the way and raises UnreadableSnapshot on anything else.

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


def encode(value: Any, hint: Any) -> JsonValue:
    """`value`, of type `hint`, as JSON."""
    if hint is type(None):
        return None
    if _is_union(hint):
        members = typing.get_args(hint)
        if value is None and type(None) in members:
            return None
        others = [m for m in members if m is not type(None)]
        if len(others) == 1:
            return encode(value, others[0])
        for member in others:
            if type(value) is member:
                return [member.__name__, encode(value, member)]
        raise TypeError(f"{value!r} is none of {hint}")
    origin = typing.get_origin(hint)
    if origin is tuple:
        args = typing.get_args(hint)
        if len(args) == 2 and args[1] is Ellipsis:
            return [encode(item, args[0]) for item in value]
        return [encode(item, arg) for item, arg in zip(value, args, strict=True)]
    if origin is frozenset:
        (arg,) = typing.get_args(hint)
        return sorted((encode(item, arg) for item in value), key=_sort_key)
    if origin in (Mapping, dict, typing.Mapping):
        key_hint, value_hint = typing.get_args(hint)
        pairs = [[encode(k, key_hint), encode(v, value_hint)] for k, v in value.items()]
        return sorted(pairs, key=lambda pair: _sort_key(pair[0]))
    if isinstance(hint, type):
        if dataclasses.is_dataclass(hint):
            return {name: encode(getattr(value, name), h) for name, h in _hints(hint).items()}
        if issubclass(hint, Enum):
            enum_value: JsonValue = value.value
            return enum_value
        if hint is datetime:
            if value.tzinfo is None:
                raise TypeError("a snapshot keeps only aware datetimes")
            text: str = value.isoformat()
            return text
        if hint is timedelta:
            return [value.days, value.seconds, value.microseconds]
        if hint in (str, int, bool) and type(value) is hint:
            plain: JsonValue = value
            return plain
    raise TypeError(f"cannot encode {value!r} as {hint}")


def _expect(document: JsonValue, kind: type[Any] | tuple[type[Any], ...], hint: Any) -> None:
    if not isinstance(document, kind) or (kind is int and isinstance(document, bool)):
        raise UnreadableSnapshot(f"{document!r} is not a {hint}")


def decode(document: JsonValue, hint: Any) -> Any:
    """The value of type `hint` that `encode` turned into `document`; UnreadableSnapshot if none."""
    if hint is type(None):
        if document is not None:
            raise UnreadableSnapshot(f"{document!r} is not null")
        return None
    if _is_union(hint):
        members = typing.get_args(hint)
        if document is None and type(None) in members:
            return None
        others = [m for m in members if m is not type(None)]
        if len(others) == 1:
            return decode(document, others[0])
        _expect(document, list, hint)
        assert isinstance(document, list)
        if len(document) != 2:
            raise UnreadableSnapshot(f"{document!r} is not a tagged {hint}")
        tag, inner = document
        for member in others:
            if member.__name__ == tag:
                return decode(inner, member)
        raise UnreadableSnapshot(f"{tag!r} is none of {hint}")
    origin = typing.get_origin(hint)
    if origin is tuple:
        _expect(document, list, hint)
        assert isinstance(document, list)
        args = typing.get_args(hint)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(decode(item, args[0]) for item in document)
        if len(document) != len(args):
            raise UnreadableSnapshot(f"{document!r} does not have {len(args)} items")
        return tuple(decode(item, arg) for item, arg in zip(document, args, strict=True))
    if origin is frozenset:
        _expect(document, list, hint)
        assert isinstance(document, list)
        (arg,) = typing.get_args(hint)
        return frozenset(decode(item, arg) for item in document)
    if origin in (Mapping, dict, typing.Mapping):
        _expect(document, list, hint)
        assert isinstance(document, list)
        key_hint, value_hint = typing.get_args(hint)
        mapping: dict[Any, Any] = {}
        for pair in document:
            _expect(pair, list, hint)
            assert isinstance(pair, list)
            if len(pair) != 2:
                raise UnreadableSnapshot(f"{pair!r} is not a [key, value] pair")
            mapping[decode(pair[0], key_hint)] = decode(pair[1], value_hint)
        return mapping
    if isinstance(hint, type):
        if dataclasses.is_dataclass(hint):
            _expect(document, dict, hint)
            assert isinstance(document, dict)
            hints = _hints(hint)
            if set(document) != set(hints):
                raise UnreadableSnapshot(f"{sorted(document)} are not the fields of {hint}")
            try:
                return hint(**{name: decode(document[name], h) for name, h in hints.items()})
            except (TypeError, ValueError) as error:
                if isinstance(error, UnreadableSnapshot):
                    raise
                raise UnreadableSnapshot(f"not a {hint.__name__}: {error}") from error
        if issubclass(hint, Enum):
            try:
                return hint(document)
            except ValueError as error:
                raise UnreadableSnapshot(str(error)) from error
        if hint is datetime:
            _expect(document, str, hint)
            assert isinstance(document, str)
            try:
                moment = datetime.fromisoformat(document)
            except ValueError as error:
                raise UnreadableSnapshot(str(error)) from error
            if moment.tzinfo is None:
                raise UnreadableSnapshot(f"{document!r} is a naive time")
            return moment
        if hint is timedelta:
            _expect(document, list, hint)
            assert isinstance(document, list)
            if len(document) != 3 or not all(type(part) is int for part in document):
                raise UnreadableSnapshot(f"{document!r} is not [days, seconds, microseconds]")
            days, seconds, microseconds = document
            return timedelta(days=days, seconds=seconds, microseconds=microseconds)
        if hint in (str, int, bool):
            _expect(document, hint, hint)
            return document
    raise UnreadableSnapshot(f"no decoding for {hint}")


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
