"""The log's head over Redis: the sequencer says where the head is, a replica's feed wakes.

A hot standby refuses LISTEN and no NOTIFY reaches it, so a feed reading a replica polls the
log's positions every REPLICA_POLL_SECONDS (service/runtime/container.py). With Redis, the
process holding the sequencer's role publishes each batch's last position on the database's
head channel, and each tail reading a replica subscribes to it: woken, it reads its standby
until the standby has replayed that far (events/tail.py, `LogTail.wake`).

Redis keeps nothing here (docs/scaling.md): a message lost, or Redis away, costs a feed one
poll interval, as without Redis. Neither side ever waits on Redis for anything else: the
publisher is a thread of its own that only ever sends the newest head, so a slow or dead Redis
never holds up a batch, and the subscriber only ever wakes a tail that polls anyway.
"""

from __future__ import annotations

import getpass
import logging
import os
import threading
from collections.abc import Callable, Mapping
from typing import Final

from psycopg.conninfo import conninfo_to_dict
from redis import Redis
from redis.backoff import NoBackoff
from redis.exceptions import RedisError
from redis.retry import Retry

log = logging.getLogger(__name__)

CHANNEL_PREFIX: Final = "shoebox:log-head:"
TIMEOUT_SECONDS: Final = 0.5
"""A Redis command's bound, and its connection's."""
RETRY_SECONDS: Final = 1.0
"""How long either side leaves Redis alone after it failed them."""


def head_channel(conninfo: str, environ: Mapping[str, str] = os.environ) -> str:
    """The channel of one database's head: deployments (and tests) sharing a Redis stay apart.

    Named as libpq names the database a conninfo reaches (its dbname, else PGDATABASE, else
    the user, else PGUSER, else the login), so that a publisher and a reader whose URLs say it
    differently (one names the database, one leaves it to the default) still meet.
    """
    given = conninfo_to_dict(conninfo)
    name = (
        given.get("dbname")
        or environ.get("PGDATABASE")
        or given.get("user")
        or environ.get("PGUSER")
        or getpass.getuser()
    )
    return CHANNEL_PREFIX + str(name)


def _client(url: str, read_timeout: float | None) -> Redis[bytes]:
    return Redis.from_url(
        url,
        socket_connect_timeout=TIMEOUT_SECONDS,
        socket_timeout=read_timeout,
        socket_keepalive=True,
        retry=Retry(NoBackoff(), 0),
    )


class HeadPublisher:
    """Sends the newest head announced, on a daemon thread started by the first announcement."""

    def __init__(self, url: str, channel: str) -> None:
        self._url = url
        self._channel = channel
        self._head = 0
        self._due = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def announce(self, head: int) -> None:
        """The log's head is now `head`: say so soon, or a later head instead."""
        with self._lock:
            self._head = max(self._head, head)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="head-signal", daemon=True)
                self._thread.start()
        self._due.set()

    def _run(self) -> None:
        client: Redis[bytes] | None = None
        sent = 0
        while True:
            self._due.wait()
            # Cleared before the head is read: a head announced after this sets it again.
            self._due.clear()
            with self._lock:
                head = self._head
            if head <= sent:
                continue
            try:
                if client is None:
                    client = _client(self._url, TIMEOUT_SECONDS)
                client.publish(self._channel, str(head))
                sent = head
            except RedisError as error:
                log.debug("head signal: could not publish (%s); feeds poll meanwhile", error)
                client = None
                threading.Event().wait(RETRY_SECONDS)
                self._due.set()


class HeadSubscriber:
    """Calls `on_head` with each head published, on a daemon thread, reconnecting as needed."""

    def __init__(self, url: str, channel: str, on_head: Callable[[int], None]) -> None:
        self._url = url
        self._channel = channel
        self._on_head = on_head
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start listening, once."""
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="head-wake", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while True:
            try:
                client = _client(self._url, None)
                with client.pubsub(ignore_subscribe_messages=True) as pubsub:
                    pubsub.subscribe(self._channel)
                    while True:
                        message = pubsub.get_message(timeout=RETRY_SECONDS)
                        if message is not None and message.get("type") == "message":
                            self._on_head(int(message["data"]))
            except (RedisError, OSError, ValueError) as error:
                log.debug("head signal: not listening (%s); the feed polls meanwhile", error)
            threading.Event().wait(RETRY_SECONDS)
