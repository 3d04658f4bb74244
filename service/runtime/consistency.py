"""The `Shoebox-Consistency` token: what a write answers so that a later read can see it.

A write's token names two things (docs/api.md, "Reading your writes"):

- an LSN of the primary's write-ahead log at or past the write's commit record, which a
  replica has replayed once it holds the write;
- the write's last event, by stream and version, when the write appended any. With the
  parallel log a write is answered before the sequencer gives its events positions, so the
  token cannot name a position; the read models are fed from positions. Positions follow the
  appends' order and, within an append, its events' order (migrations/0030), so the write's
  last event has the highest position of all its events: once that event is in `events` with
  a position P, and a read model's checkpoint is at least P, the model holds the whole write.

The form is `1.<LSN, 16 hex digits>` or `1.<LSN>.<stream, base64url unpadded>.<version>`.
Clients must treat it as opaque: send back what they were given, or the later of two (the
LSN orders them; `later` picks it).
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar, Token
from dataclasses import dataclass
from typing import Final

from events.postgres import checkouts
from events.store import AppendResult

HEADER: Final = "Shoebox-Consistency"
VERSION: Final = "1"
MAX_TOKEN_CHARS: Final = 256
_LSN_TEXT: Final = re.compile(r"([0-9A-Fa-f]{1,8})/([0-9A-Fa-f]{1,8})")
_HEX16: Final = re.compile(r"[0-9A-F]{16}")
# A stream's name is a category, ':' and an id of at most 64 ASCII characters: far below the
# 150 bytes this admits, and a whole token stays under MAX_TOKEN_CHARS.
_STREAM_B64: Final = re.compile(r"[A-Za-z0-9_-]{1,200}")
_VERSION_TEXT: Final = re.compile(r"[1-9][0-9]{0,17}")


class MalformedToken(ValueError):  # noqa: N818 - the client's input, named as it reads
    """A `Shoebox-Consistency` value that no Shoebox wrote."""


@dataclass(frozen=True, slots=True)
class Consistency:
    """A write's token: the primary's WAL position past its commit, and its last event."""

    lsn: int
    # The write's last event (stream, version); None when the write appended nothing.
    stream: str | None = None
    version: int | None = None

    def __post_init__(self) -> None:
        if not 0 <= self.lsn < 1 << 64:
            raise ValueError(f"an LSN is 64 bits, not {self.lsn}")
        if (self.stream is None) != (self.version is None):
            raise ValueError("a stream needs its version, and a version its stream")

    @property
    def lsn_text(self) -> str:
        """The LSN as PostgreSQL writes a pg_lsn: `X/Y`, each half in hex."""
        return f"{self.lsn >> 32:X}/{self.lsn & 0xFFFFFFFF:X}"

    def encode(self) -> str:
        """The header's value."""
        head = f"{VERSION}.{self.lsn:016X}"
        if self.stream is None:
            return head
        stream = base64.urlsafe_b64encode(self.stream.encode()).rstrip(b"=").decode("ascii")
        return f"{head}.{stream}.{self.version}"


def parse(value: str) -> Consistency:
    """The token in a header's value; MalformedToken if it is not one Shoebox writes."""
    if len(value) > MAX_TOKEN_CHARS:
        raise MalformedToken(f"a consistency token holds at most {MAX_TOKEN_CHARS} characters")
    parts = value.strip().split(".")
    if parts[0] != VERSION or len(parts) not in (2, 4):
        raise MalformedToken("not a consistency token of this server's (version 1)")
    if not _HEX16.fullmatch(parts[1]):
        raise MalformedToken("its LSN is not 16 hexadecimal digits")
    lsn = int(parts[1], 16)
    if len(parts) == 2:
        return Consistency(lsn)
    if not (_STREAM_B64.fullmatch(parts[2]) and _VERSION_TEXT.fullmatch(parts[3])):
        raise MalformedToken("its event is not a base64url stream and a version")
    try:
        padded = parts[2] + "=" * (-len(parts[2]) % 4)
        stream = base64.urlsafe_b64decode(padded).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        raise MalformedToken("its stream is not base64url UTF-8") from None
    if not stream or not stream.isprintable():
        raise MalformedToken("its stream is not a stream's name")
    return Consistency(lsn, stream, int(parts[3]))


def lsn_of(text: str) -> int:
    """A pg_lsn's text (`X/Y`) as its 64-bit number."""
    found = _LSN_TEXT.fullmatch(text)
    if found is None:
        raise ValueError(f"not an LSN: {text!r}")
    return int(found[1], 16) << 32 | int(found[2], 16)


def later(first: Consistency, second: Consistency) -> Consistency:
    """The token of the two whose LSN is further on (what a client holding both should send)."""
    return second if second.lsn > first.lsn else first


class WrittenEvents(list[tuple[str, int]]):
    """The last event of each append a request made (most recent last), and what its last
    append knew of its own commit.

    `commit` is the commit's WAL position (pg_lsn text) as the append read it in its own round
    trip, with `events.postgres.checkouts()` just after: while the count is unchanged, the
    request has not touched the database since, so that position covers every write it made.
    None when the last append did not read it (a replay, or a read that failed).
    """

    commit: tuple[str, int] | None = None


# The last event this request's appends wrote: set by `record_append`, read when the write is
# answered. A context variable, so each request's thread or greenlet has its own.
_WRITTEN: ContextVar[WrittenEvents | None] = ContextVar("shoebox_written", default=None)


@contextmanager
def recording_writes() -> Iterator[WrittenEvents]:
    """Within the block, note the last event of each append (most recent last)."""
    written = WrittenEvents()
    token = _WRITTEN.set(written)
    try:
        yield written
    finally:
        _WRITTEN.reset(token)


def start_recording() -> tuple[WrittenEvents, Token[WrittenEvents | None]]:
    """Note this context's appends from now on; `stop_recording` with the token it gives.

    A request's hooks call these two: a thread of gthread serves request after request in one
    context, so what one request set must be undone before the next.
    """
    written = WrittenEvents()
    return written, _WRITTEN.set(written)


def stop_recording(token: Token[WrittenEvents | None]) -> None:
    """Stop noting appends (what `start_recording` began)."""
    _WRITTEN.reset(token)


def record_append(result: AppendResult) -> None:
    """Note an append's last event, if this context is recording (a write request is)."""
    written = _WRITTEN.get()
    if written is None:
        return
    if result.appended:
        stream, _first, last = result.appended[-1]
        written.append((stream, last))
    # The last append decides: one that did not read its commit's position leaves none.
    written.commit = None if result.commit_lsn is None else (result.commit_lsn, checkouts())
