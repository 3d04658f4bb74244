"""The sequencer's role in Shoebox's long-running processes, with its metrics.

`shoebox serve` (each gunicorn worker), `shoebox worker` and `shoebox projector` each stand
for the role; the one holding the sequencer's advisory lock gives the log its positions, and
the others take over within half a second of its connection ending (events/sequencer.py).
Their stores then append without sequencing ("background"): a bet's answer never waits for it.
"""

from __future__ import annotations

import logging

import psycopg
from psycopg import Connection
from psycopg.rows import TupleRow

from events.postgres import connect_kwargs
from events.sequencer import Batch, SequencerRole
from service.runtime.failpoints import sequencer_batch_hook

log = logging.getLogger(__name__)


def start_sequencer_role(conninfo: str) -> SequencerRole:
    """Stand for the sequencer's role on a connection of its own, from now until stopped."""
    # Imported here: prometheus_client must not be imported before the multiprocess
    # directory is set (service/runtime/metrics.py), and this runs once the process is set up.
    from service.runtime import metrics

    def connect() -> Connection[TupleRow]:
        # Bounded as the pools' are: unbounded, an attempt on a hung server waits minutes,
        # and the process's stop with it.
        return psycopg.connect(conninfo, autocommit=True, **connect_kwargs(conninfo))

    def observe(batch: Batch) -> None:
        metrics.SEQUENCER_BATCH_EVENTS.observe(batch.events)
        if batch.oldest_wait is not None:
            metrics.SEQUENCER_LAG.observe(max(0.0, batch.oldest_wait))

    def took_role(active: bool) -> None:
        metrics.SEQUENCER_ACTIVE.set(1 if active else 0)
        if not active:
            log.warning("sequencer: this process no longer holds the role")

    role = SequencerRole(
        connect, on_batch=observe, on_role=took_role, before_commit=sequencer_batch_hook()
    )
    role.start()
    return role
