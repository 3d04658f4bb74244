"""Per process, one command at a time at each table, and which tables are hot.

Every command at a table appends to the table's stream at the version it read, so two
commands at one table that overlap in one process can never both succeed: the second was
decided on the version the first has just moved past. Taking turns per table keeps a worker's
own requests from racing (and wasting a decision and an append on it), and keeps its cache of
the table current, so its next bet there is decided without a read, in one call. Races
between processes remain, and `run_command` retries them (service/application/appends.py).

The lock is held across the append, so under gevent it must be gevent's: it is made on first
use from `threading.Lock` looked up then, which a gevent worker has patched by the time it
serves a request (gunicorn does not preload the app). The guard of the dictionary is held only
around dictionary operations, never across a wait, so it may be either kind.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Final


class TurnNotReached(Exception):  # noqa: N818 -- named for what happened
    """The table's earlier commands in this process took longer than the caller could wait."""

    def __init__(self, table_id: str, waited: float) -> None:
        super().__init__(f"table {table_id!r} was busy in this process for {waited:.2f} s")
        self.table_id = table_id


@dataclass(slots=True)
class _Turn:
    lock: threading.Lock
    # Holders and waiters: the entry goes once nobody needs it, so that the dictionary holds
    # only the tables being played now, however many tables the process has served.
    users: int = 0


class TableTurns:
    """Per process: the commands at one table run one at a time, the others wait their turn."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._turns: dict[str, _Turn] = {}

    @contextmanager
    def turn(self, table_id: str, timeout: float) -> Iterator[None]:
        """Hold the table's turn for the block; raise TurnNotReached after `timeout` seconds."""
        with self._guard:
            entry = self._turns.get(table_id)
            if entry is None:
                entry = self._turns[table_id] = _Turn(threading.Lock())
            entry.users += 1
        try:
            if not entry.lock.acquire(timeout=max(0.0, timeout)):
                raise TurnNotReached(table_id, timeout)
            try:
                yield
            finally:
                entry.lock.release()
        finally:
            with self._guard:
                entry.users -= 1
                if entry.users == 0:
                    del self._turns[table_id]

    def __len__(self) -> int:
        """How many tables have a command running or waiting in this process now."""
        with self._guard:
            return len(self._turns)


CONTENDED_SECONDS: Final = 10.0
"""How long a table stays hot after the last sign that another process writes it too."""


class TableHeat:
    """Per process: the tables to write in turns under their lock rather than in one call.

    A table is hot for CONTENDED_SECONDS after this process last saw another process play it
    while it did (a race lost to a player's or an operator's write, or a read under the lock
    that found one: not the table's clock, a window closed elsewhere once a round), or first
    played it (from a first read, nobody can tell whether others write it too). Seconds, not
    the instant: at one or two commands a second a process's table would cool between its
    own commands, and its next one-call append would race the lock's holders, and keep
    winning them, since it decides without a read.
    """

    def __init__(self, monotonic: Callable[[], float]) -> None:
        self._monotonic = monotonic
        self._guard = threading.Lock()
        self._hot_until: dict[str, float] = {}

    def note_contended(self, table_id: str) -> None:
        """Another process wrote the table while this one did, or may have."""
        now = self._monotonic()
        with self._guard:
            self._hot_until[table_id] = now + CONTENDED_SECONDS
            if len(self._hot_until) > 1024:
                # Bounded by the tables contended lately, however many the process served.
                for cool in [t for t, until in self._hot_until.items() if until <= now]:
                    del self._hot_until[cool]

    def hot(self, table_id: str) -> bool:
        """Whether the table's commands here should take turns under its lock."""
        with self._guard:
            return self._hot_until.get(table_id, 0.0) > self._monotonic()
