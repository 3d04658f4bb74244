"""The container: the services one process of the API shares, wired in one place."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

import psycopg
from psycopg.rows import TupleRow
from psycopg_pool import ConnectionPool

from events.merkle_store import MemoryTree, PostgresTree, TreeStore
from events.postgres import Pool, PostgresEventStore, connect_kwargs, keep_from_forks
from events.sequencer import SequencerRole
from events.snapshots import InMemorySnapshotStore, PostgresSnapshotStore, SnapshotStore
from events.store import Clock, EventStore, JsonValue
from events.stream_locks import PostgresStreamLocks, StreamLocks
from events.tail import LogTail
from service.application.chat import ChatService
from service.application.feed import FeedService, is_public, lag_document
from service.application.game.tables import GameService, WindowScheduler
from service.application.keys import KeyRing
from service.application.players import KnownPlayers, LimitCache, PlayerService
from service.application.read_models.queries import ProjectionService
from service.application.seamless_bets import SeamlessService
from service.application.streams import TableCache
from service.application.wallets import WalletCache, WalletService
from service.runtime.failpoints import deal_append_hook
from service.runtime.head_signal import HeadSubscriber, head_channel
from service.runtime.metrics import MeteredEventStore, MeteredStreamLocks
from service.runtime.read_pools import ReplicaHealth
from service.runtime.seamless_wiring import is_seamless, owed_calls, seamless_service
from service.runtime.settings import Settings

REPLICA_POLL_SECONDS: Final = 0.1
"""How often the feed's tail on a replica looks for new positions: the latency it adds to the
feed, against one primary-key range query a tenth of a second a process."""


@dataclass(frozen=True, slots=True)
class Container:
    """Everything a view needs, wired once by create_app."""

    settings: Settings
    store: EventStore
    clock: Clock
    keys: KeyRing
    games: GameService
    wallets: WalletService
    players: PlayerService
    chat: ChatService
    # Which players exist (a 404 `player-not-found` for the others, issue 24).
    known_players: KnownPlayers
    # The pool create_app opened, closed with the app; None when the store was handed in.
    pool: ConnectionPool[Any] | None = None
    # The key under which other operators' players are aliased (service/web/operators.py).
    alias_secret: bytes = b""
    # The read models. None only when an in-memory store was handed in (the unit tests' wiring),
    # where there is no PostgreSQL to project into: see `reads_from_projections`.
    projections: ProjectionService | None = None
    # The live feed: None without a PostgreSQL pool, since it follows the log by LISTEN.
    feed: FeedService | None = None
    # The log's Merkle tree, which the checkpoint job integrates; the API only reads it.
    tree: TreeStore = field(default_factory=MemoryTree)
    # Sessions and bets of seamless operators' players; None without PostgreSQL, where the
    # per-player lock cannot be taken (and then no operator is seamless).
    seamless: SeamlessService | None = None
    # This process's candidacy for the sequencer's role, when its appends are left to it.
    sequencer: SequencerRole | None = None
    # The replica's pool (DATABASE_READ_URL), which `pool` routes a GET's reads to, and what
    # this process last saw of the replica; None without one (service/runtime/read_pools.py).
    read_pool: Pool | None = None
    replica: ReplicaHealth | None = None

    def close(self) -> None:
        """Stop the feed's tail and release the connections create_app opened."""
        if self.sequencer is not None:
            self.sequencer.stop()
        if self.feed is not None:
            self.feed.tail.stop()
        if self.pool is not None:
            self.pool.close()
        if self.read_pool is not None:
            self.read_pool.close()


def wire(
    settings: Settings,
    store: EventStore,
    clock: Clock,
    scheduler: WindowScheduler | None,
    pool: Pool | None,
    projections: ProjectionService | None,
    read_pool: Pool | None = None,
) -> Container:
    """The services a process of the API shares, over one store and one cache of each aggregate."""
    # A hot table's commands append in their turn's transaction, through the store itself.
    stream_locks: StreamLocks | None = None
    if pool is not None:
        inner = store if isinstance(store, PostgresEventStore) else None
        stream_locks = MeteredStreamLocks(PostgresStreamLocks(pool, store=inner))
    # Every append of the API's services is counted for /metrics (service/runtime/metrics.py).
    store = MeteredEventStore(store)
    # One cache of each aggregate for the process, shared by every service that reads it:
    # each loads only the events after its cached version, so sharing is safe and cheaper.
    # Cold loads start from a snapshot, in PostgreSQL beside the log when there is one.
    snapshots: SnapshotStore = (
        PostgresSnapshotStore(pool, clock) if pool is not None else InMemorySnapshotStore()
    )
    tables, wallets = TableCache(snapshots=snapshots), WalletCache(snapshots=snapshots)
    limits = LimitCache()
    games = GameService(
        store,
        clock,
        scheduler,
        tables=tables,
        wallets=wallets,
        limits=limits,
        before_deal_append=deal_append_hook(),
        # The workers bet at one table at once: they take turns at its lock once they race.
        stream_locks=stream_locks,
        seamless=is_seamless(settings),
        owed=owed_calls(settings, pool, clock),
    )
    return Container(
        settings=settings,
        store=store,
        clock=clock,
        keys=KeyRing(store),
        games=games,
        wallets=WalletService(store, clock, wallets=wallets),
        players=PlayerService(store, clock, limits=limits),
        chat=ChatService(store, clock, games, tables=tables),
        known_players=KnownPlayers(store),
        pool=pool,
        projections=projections,
        alias_secret=alias_secret(pool),
        feed=None if pool is None else feed_service(settings, pool, clock, projections, read_pool),
        tree=MemoryTree() if pool is None else PostgresTree(pool),
        seamless=None if pool is None else seamless_service(settings, store, clock, pool, games),
        read_pool=read_pool,
        replica=None if read_pool is None else ReplicaHealth(read_pool),
    )


def feed_service(
    settings: Settings,
    pool: Pool,
    clock: Clock,
    projections: ProjectionService | None,
    read_pool: Pool | None = None,
) -> FeedService:
    """The live feed over `pool`, with a log tail on a connection of its own (started lazily,
    by the first client, so that a worker that serves no feed holds no LISTEN connection).

    With a replica (`read_pool`) the feed follows the log there instead: a standby has no
    LISTEN, so its tail polls the log's positions every REPLICA_POLL_SECONDS, and wakes sooner
    on the sequencer's signal when Redis is configured; the projection
    lag it reports is the replica's too, what a client of the feed sees.
    """
    if read_pool is not None:
        pool = read_pool
        if projections is not None:
            projections = ProjectionService(read_pool, clock)
    conninfo = pool.conninfo

    def connect() -> psycopg.Connection[TupleRow]:
        text = conninfo() if callable(conninfo) else conninfo
        conn = psycopg.connect(text, autocommit=True, **connect_kwargs(text))
        keep_from_forks(conn)
        conn.execute("SET TIME ZONE 'UTC'")  # as the pool's sessions read timestamps
        return conn

    if read_pool is None:
        tail = LogTail(connect, keep=is_public)
    else:
        # Woken by the sequencer's signal over Redis when there is one; the poll stays, for a
        # signal lost or a Redis away (service/runtime/head_signal.py).
        wakes: list[HeadSubscriber] = []

        def listen_for_heads() -> None:
            for wake in wakes:
                wake.start()

        tail = LogTail(
            connect,
            keep=is_public,
            listen=False,
            poll_seconds=REPLICA_POLL_SECONDS,
            on_start=listen_for_heads,
        )
        if settings.redis_url is not None:
            channel = head_channel(conninfo() if callable(conninfo) else conninfo)
            wakes.append(HeadSubscriber(settings.redis_url, channel, tail.wake))
    lag: Callable[[], dict[str, JsonValue]] | None = None
    if projections is not None:
        status = projections.status

        def lag_now() -> dict[str, JsonValue]:
            found = status()
            return lag_document(found, max((s.head for s in found), default=0), clock())

        lag = lag_now
    return FeedService(pool, tail, heartbeat_seconds=settings.feed_heartbeat_seconds, lag=lag)


_ALIAS_KEY_NAME = "player-alias"
_ENSURE_ALIAS_KEY = """
INSERT INTO service_secrets (name, value) VALUES (%s, %s) ON CONFLICT (name) DO NOTHING
"""
_READ_ALIAS_KEY = "SELECT value FROM service_secrets WHERE name = %s"


def alias_secret(pool: Pool | None) -> bytes:
    """The aliasing key every worker shares: made once in the database, then read from it.

    Without a database (the unit tests' in-memory store) a random key serves this process.
    """
    if pool is None:
        return secrets.token_bytes(32)
    with pool.connection() as conn:
        conn.execute(_ENSURE_ALIAS_KEY, [_ALIAS_KEY_NAME, secrets.token_bytes(32)])
        row = conn.execute(_READ_ALIAS_KEY, [_ALIAS_KEY_NAME]).fetchone()
    if row is None:
        raise RuntimeError("service_secrets lost its alias key mid-read")
    return bytes(row[0])
