"""Per process, one command at a time at each table.

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
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass


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
