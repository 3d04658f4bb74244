"""The sweeper: closes every lapsed betting window it finds, needing nothing but PostgreSQL.

A window is closed by whichever comes first: the RQ job scheduled at its deadline, the table's
next command, or this sweep. The sweep is what closes it when Redis or the worker is down and
the players, having bet, are waiting for the deal and send nothing more. It runs in the
projector's process (`shoebox projector`), every SWEEP_INTERVAL, and looks only at the index of
open rounds: one indexed query a pass, however many tables there are.

Closing is the same `GameService.close_window` the job runs, so racing with the job or a
command is harmless: whoever appends first deals, and the others find nothing due. A round that
cannot be closed here (a deal interrupted mid-way, a shoe whose secret is lost) is left to
recovery, and not tried again for a while.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import Final

from service.application.errors import NotFound
from service.application.game.open_rounds import OpenRounds
from service.application.game.tables import GameService

log = logging.getLogger(__name__)

SWEEP_INTERVAL: Final = 0.2
"""Seconds between two passes: a lapsed window waits at most this long (plus the projector's
lag) when the scheduled job cannot run. One pass is one indexed query when nothing is due."""
RETRY_AFTER_FAILURE: Final = 30.0
"""Seconds before a round whose closing failed is tried again by the sweep."""


class WindowSweeper:
    """Closes the lapsed windows the index of open rounds names, on a thread of its own."""

    def __init__(
        self,
        games: GameService,
        open_rounds: OpenRounds,
        clock: Callable[[], datetime],
        *,
        interval: float = SWEEP_INTERVAL,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._games = games
        self._open_rounds = open_rounds
        self._clock = clock
        self._interval = interval
        self._monotonic = monotonic
        self._failed: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sweep(self) -> int:
        """One pass: close every due window the index names; the number closed."""
        closed = 0
        now = self._monotonic()
        self._failed = {r: until for r, until in self._failed.items() if until > now}
        for due in self._open_rounds.due(self._clock()):
            if due.round_id in self._failed:
                continue
            try:
                receipt = self._games.close_window(due.table_id, due.round_id)
            except NotFound:
                continue  # the index lags a table that has moved on; nothing to do
            except Exception:
                log.exception("the sweeper could not close round %s; recovery will", due.round_id)
                self._failed[due.round_id] = now + RETRY_AFTER_FAILURE
                continue
            if receipt is not None:
                closed += 1
                log.info("swept the lapsed window of round %s at %s", due.round_id, due.table_id)
        return closed

    def start(self) -> None:
        """Sweep every interval on a daemon thread until `stop`."""
        self._thread = threading.Thread(target=self._run, name="window-sweeper", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.sweep()
            except Exception:
                # The database may be away for a moment; the next pass tries again.
                log.exception("window sweep failed")
            self._stop.wait(self._interval)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop sweeping and wait for the pass under way."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def alive(self) -> bool:
        """Whether the sweeping thread is running."""
        return self._thread is not None and self._thread.is_alive()
