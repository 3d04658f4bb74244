"""Leaving on SIGTERM in bounded time, for `shoebox worker` and `shoebox projector`.

A process told to stop finishes what it has in hand (a window's close, a projection batch) and
leaves; each of its waits on the way out is bounded where it is made. This is the backstop for
a wait nobody foresaw (a library that joins a thread without a timeout did hold the worker for
a minute: service/runtime/rq_worker.py): EXIT_BOUND_SECONDS after the request, the process
logs what each thread was doing and leaves anyway. Either way it logs why it left, and when.
"""

from __future__ import annotations

import faulthandler
import logging
import os
import sys
import threading
import time
from typing import Final

log = logging.getLogger(__name__)

EXIT_BOUND_SECONDS: Final = 10.0
"""How long after a stop request a process may take to leave before it is made to."""
GAVE_UP_EXIT_CODE: Final = 3


class StopWatch:
    """Times a process's stop from the request on, and ends the process if it takes too long."""

    def __init__(self, process: str, bound: float = EXIT_BOUND_SECONDS) -> None:
        self._process = process
        self._bound = bound
        self._lock = threading.Lock()
        self._reason: str | None = None
        self._since: float | None = None
        self._watchdog: threading.Timer | None = None

    @property
    def requested(self) -> bool:
        """Whether a stop was asked for."""
        return self._reason is not None

    def request(self, reason: str) -> None:
        """Note the stop request (the first one counts) and start the watchdog."""
        with self._lock:
            if self._reason is not None:
                return
            self._reason, self._since = reason, time.monotonic()
            self._watchdog = threading.Timer(self._bound, self._give_up)
            self._watchdog.daemon = True
            self._watchdog.name = f"{self._process}-stop-watchdog"
            self._watchdog.start()
        log.info(
            "%s stopping (%s): finishing the work in hand, leaving within %g s",
            self._process,
            reason,
            self._bound,
        )

    def stopped(self) -> None:
        """Log that the process is leaving, why, and how long after the request."""
        with self._lock:
            if self._watchdog is not None:
                self._watchdog.cancel()
            reason, since = self._reason, self._since
        if reason is None or since is None:
            log.info("%s stopped", self._process)
            return
        log.info(
            "%s stopped (%s), %.2f s after the request",
            self._process,
            reason,
            time.monotonic() - since,
        )

    def _give_up(self) -> None:
        log.error(
            "%s still running %g s after the stop request (%s); leaving now. Its threads:",
            self._process,
            self._bound,
            self._reason,
        )
        try:
            faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        except (AttributeError, OSError, ValueError):  # a stderr with no file behind it
            log.exception("could not write the threads' tracebacks")
        logging.shutdown()
        os._exit(GAVE_UP_EXIT_CODE)
