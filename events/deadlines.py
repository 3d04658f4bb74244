"""A deadline for the work done on behalf of one caller, which every wait on the database keeps.

An HTTP request must be answered within a bound whatever PostgreSQL does: stopped (it refuses
at once), hung or unreachable (it answers nothing, and the kernel may still acknowledge every
packet). Bounding each wait on its own does not give that: a request makes several waits in
a row (a pool checkout, a read, the append, storing the answer), and five bounded waits of 5 s
each made a request wait about 20 s. So the request sets one deadline here, and each wait
takes the smaller of its own bound and the time left: the pool's checkout, every round trip of
a pooled connection, the append's turn in a group commit and its wait for its streams' row locks.

The deadline lives in a context variable, so it follows the request's thread (gthread) or
greenlet (gevent, where each greenlet has its own context) and nothing else: background
threads, the pool's reconnects and the worker's jobs have none, and wait as they always did.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar, Token

_DEADLINE: ContextVar[float | None] = ContextVar("shoebox_deadline", default=None)


class DeadlinePassed(TimeoutError):  # noqa: N818 - named as AppendTimedOut is
    """The caller's deadline passed while it waited; what it waited for was not done."""

    def __init__(self, waited_for: str) -> None:
        super().__init__(f"the deadline passed while waiting for {waited_for}")
        self.waited_for = waited_for


def remaining() -> float | None:
    """Seconds left before this context's deadline (0 or less once it has passed), or None."""
    deadline = _DEADLINE.get()
    return None if deadline is None else deadline - time.monotonic()


def current() -> float | None:
    """This context's deadline on time.monotonic()'s clock, or None."""
    return _DEADLINE.get()


def bounded(limit: float | None) -> float | None:
    """The smaller of `limit` (None: no limit) and the time left, never below 0."""
    left = remaining()
    if left is None:
        return limit
    left = max(0.0, left)
    return left if limit is None else min(limit, left)


def start(seconds: float) -> Token[float | None]:
    """Set a deadline `seconds` from now, or keep an earlier one; `stop` with the token."""
    return _tighten(time.monotonic() + seconds)


def stop(token: Token[float | None]) -> None:
    """Restore the deadline that `start` replaced."""
    _DEADLINE.reset(token)


@contextmanager
def until(deadline: float | None) -> Iterator[None]:
    """Within the block, keep to `deadline` (a time.monotonic() reading) as well, if not None."""
    if deadline is None:
        yield
        return
    token = _tighten(deadline)
    try:
        yield
    finally:
        _DEADLINE.reset(token)


@contextmanager
def instead(seconds: float) -> Iterator[None]:
    """Within the block, a deadline `seconds` from now in place of the caller's, later or not.

    For the rare request that asks to wait for long work: it stays bounded, by its own bound.
    """
    token = _DEADLINE.set(time.monotonic() + seconds)
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def _tighten(deadline: float) -> Token[float | None]:
    earlier = _DEADLINE.get()
    return _DEADLINE.set(deadline if earlier is None else min(earlier, deadline))


@contextmanager
def holding(lock: threading.Lock, waited_for: str) -> Iterator[None]:
    """Hold `lock` for the block, waiting for it no longer than the deadline (DeadlinePassed).

    For a lock held across a round trip to the database: without a bound, the callers queued
    behind a slow holder would each wait for every holder before them in turn.
    """
    bound = bounded(None)
    if not lock.acquire(timeout=-1 if bound is None else bound):
        raise DeadlinePassed(waited_for)
    try:
        yield
    finally:
        lock.release()
