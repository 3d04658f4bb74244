"""Test-only failpoints: places where a process can be made to hang so that a test can kill it.

The application layer knows nothing of them: the runtime hands GameService a hook
(`deal_append_hook`) only when a failpoint is armed in the environment.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

log = logging.getLogger(__name__)

# The test-only failpoint. It pauses a deal just before its append, forever, so that an
# end-to-end test can kill the server mid-deal. Two variables must both be set, one of them
# to a sentence nobody types by accident; a process that reaches it logs a CRITICAL line.
FAILPOINT: Final = "SHOEBOX_TEST_FAILPOINT"
FAILPOINT_CONSENT: Final = "SHOEBOX_TEST_FAILPOINT_CONSENT"
FAILPOINT_MARKER: Final = "SHOEBOX_TEST_FAILPOINT_MARKER"
CONSENT: Final = "this process may hang forever, it is a test"
PAUSE_BEFORE_DEAL_APPEND: Final = "pause-before-deal-append"
# Delays a deal by SHOEBOX_TEST_FAILPOINT_SECONDS (default 2) and then lets it go on, so that a
# test can stop a server while a request is in flight and see it finish (a graceful drain).
DELAY_BEFORE_DEAL_APPEND: Final = "delay-before-deal-append"
FAILPOINT_SECONDS: Final = "SHOEBOX_TEST_FAILPOINT_SECONDS"
# Pauses the projector inside a batch's transaction, once a read model has applied the batch and
# before its checkpoint moves, so that a test can kill it mid-batch.
PAUSE_IN_PROJECTION_BATCH: Final = "pause-in-projection-batch"
# Pauses the sequencer inside a batch's transaction, once its events are inserted and before
# the commit, so that a test can kill it mid-batch.
PAUSE_IN_SEQUENCER_BATCH: Final = "pause-in-sequencer-batch"


def failpoint(name: str) -> None:
    """Hang here, after touching the marker file, if the test-only failpoint `name` is armed."""
    if os.environ.get(FAILPOINT) != name or os.environ.get(FAILPOINT_CONSENT) != CONSENT:
        return
    log.critical("test failpoint %s reached: this process now hangs until killed", name)
    marker = os.environ.get(FAILPOINT_MARKER)
    if marker:
        Path(marker).write_text(f"{os.getpid()}\n")
    while True:
        time.sleep(3600)


def delay(name: str) -> None:
    """Sleep here for a while, if the test-only failpoint `name` is armed."""
    if os.environ.get(FAILPOINT) != name or os.environ.get(FAILPOINT_CONSENT) != CONSENT:
        return
    seconds = float(os.environ.get(FAILPOINT_SECONDS) or 2)
    log.critical("test failpoint %s reached: this request waits %g s", name, seconds)
    marker = os.environ.get(FAILPOINT_MARKER)
    if marker:
        # So that a test can act while the delayed work is in flight (a worker's SIGTERM).
        Path(marker).write_text(f"{os.getpid()}\n")
    time.sleep(seconds)


def deal_append_hook() -> Callable[[], None] | None:
    """The hook GameService calls before a deal's append, if a failpoint is armed; else None."""
    armed = os.environ.get(FAILPOINT)
    if armed == PAUSE_BEFORE_DEAL_APPEND:
        return lambda: failpoint(PAUSE_BEFORE_DEAL_APPEND)
    if armed == DELAY_BEFORE_DEAL_APPEND:
        return lambda: delay(DELAY_BEFORE_DEAL_APPEND)
    return None


def projection_batch_hook() -> Callable[[], None] | None:
    """The hook the projector runs inside each batch's transaction, if its failpoint is armed."""
    if os.environ.get(FAILPOINT) == PAUSE_IN_PROJECTION_BATCH:
        return lambda: failpoint(PAUSE_IN_PROJECTION_BATCH)
    return None


def sequencer_batch_hook() -> Callable[[], None] | None:
    """The hook the sequencer runs inside each batch's transaction, if its failpoint is armed."""
    if os.environ.get(FAILPOINT) == PAUSE_IN_SEQUENCER_BATCH:
        return lambda: failpoint(PAUSE_IN_SEQUENCER_BATCH)
    return None
