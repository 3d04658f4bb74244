"""The sequencer's role in Shoebox's long-running processes, with its metrics.

`shoebox serve` (each gunicorn worker), `shoebox worker` and `shoebox projector` each stand
for the role; the one holding the sequencer's advisory lock gives the log its positions, and
the others take over within half a second of its connection ending (events/sequencer.py).
Their stores then append without sequencing ("background"): a bet's answer never waits for it.
"""

from __future__ import annotations

import logging
import os
import socket

import psycopg
from psycopg import Connection
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import TupleRow

from events.postgres import connect_kwargs, keep_from_forks
from events.sequencer import Batch, SequencerRole
from service.runtime.failpoints import sequencer_batch_hook
from service.runtime.head_signal import HeadPublisher, head_channel

log = logging.getLogger(__name__)


def sequencer_application_name() -> str:
    """`shoebox sequencer HOST PID`: the role's session as pg_stat_activity shows it."""
    # PostgreSQL keeps 63 bytes of it; the host name is cut, never the pid.
    host = socket.gethostname()[:32]
    return f"shoebox sequencer {host} {os.getpid()}"


def start_sequencer_role(conninfo: str, redis_url: str | None = None) -> SequencerRole:
    """Stand for the sequencer's role on a connection of its own, from now until stopped.

    With `redis_url`, each batch's new head is also published there, for the feeds reading
    replicas, which cannot LISTEN (service/runtime/head_signal.py).
    """
    # Imported here: prometheus_client must not be imported before the multiprocess
    # directory is set (service/runtime/metrics.py), and this runs once the process is set up.
    from service.runtime import metrics

    def connect() -> Connection[TupleRow]:
        # Bounded as the pools' are: unbounded, an attempt on a hung server waits minutes,
        # and the process's stop with it.
        kwargs = connect_kwargs(conninfo)
        # Named in pg_stat_activity, so that ops (and the failover drills) can tell which
        # host and process holds the role from the lock's backend.
        if "application_name" not in conninfo_to_dict(conninfo):
            kwargs["application_name"] = sequencer_application_name()
        conn = psycopg.connect(conninfo, autocommit=True, **kwargs)
        # The role's advisory lock lives on this session: a forked child (rq's scheduler) that
        # kept a copy of its socket would keep the role from every other process after a kill.
        keep_from_forks(conn)
        return conn

    publisher = None if redis_url is None else HeadPublisher(redis_url, head_channel(conninfo))

    def observe(batch: Batch) -> None:
        if publisher is not None:
            publisher.announce(batch.last_position)
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
