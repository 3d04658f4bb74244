"""`shoebox projector` follows the log into the read models; `shoebox projections` manages them."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

import click

from events.migrations import apply_migrations
from events.postgres import Pool, PostgresEventStore, Sequencing, app_conninfo, open_pool
from events.snapshots import PostgresSnapshotStore
from events.store import EventStore, utc_now
from service.application.game.open_rounds import OpenRoundsProjection, PostgresOpenRounds
from service.application.game.sweeper import SWEEP_INTERVAL, WindowSweeper
from service.application.game.tables import GameService, WindowScheduler
from service.application.read_models import projector as read_models
from service.application.upcasters import upcasters
from service.embedded import database_url
from service.runtime.failpoints import projection_batch_hook
from service.runtime.logs import configure_logging
from service.runtime.sequencing import start_sequencer_role
from service.runtime.settings import DEFAULT_API_HOST, Settings
from service.runtime.stopping import StopWatch


@contextmanager
def _pool(max_size: int, *, sequencer: bool = False) -> Iterator[Pool]:
    settings = Settings.from_env()
    with database_url(settings) as db_url:
        # Harmless when another process got there first: yoyo locks and skips the applied.
        apply_migrations(db_url)
        conninfo = settings.app_database_url or app_conninfo(db_url, environ={})
        pool = open_pool(conninfo, max_size=max_size)
        # A long-running projector stands for the log's sequencer too (events/sequencer.py).
        # With Redis it also announces each new head, for the feeds reading replicas.
        role = start_sequencer_role(conninfo, settings.redis_url) if sequencer else None
        try:
            yield pool
        finally:
            if role is not None:
                role.stop()
            pool.close()


def _names(names: tuple[str, ...]) -> tuple[str, ...]:
    for name in names:
        if name not in read_models.NAMES:
            raise click.BadParameter(
                f"no projection {name!r}; choose from {', '.join(read_models.NAMES)}",
                param_hint="NAME",
            )
    return names or read_models.NAMES


@click.command()
@click.option(
    "--poll-interval",
    type=click.FloatRange(min=0.1),
    default=5.0,
    show_default=True,
    help="Seconds between looks at the log when no NOTIFY arrives.",
)
@click.option(
    "--sweep-interval",
    type=click.FloatRange(min=0.05),
    default=SWEEP_INTERVAL,
    show_default=True,
    help="Seconds between the sweeper's looks for lapsed betting windows.",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(min=0, max=65535),
    default=None,
    help="Serve this projector's own /metrics on this port (compose's Prometheus scrapes it);"
    " under `shoebox run`, the API's /metrics already holds them.",
)
@click.option(
    "--metrics-host",
    default=DEFAULT_API_HOST,
    show_default=True,
    help="The address --metrics-port listens on.",
)
@click.argument("names", nargs=-1, metavar="[NAME]...")
def projector(
    poll_interval: float,
    sweep_interval: float,
    metrics_port: int | None,
    metrics_host: str,
    names: tuple[str, ...],
) -> None:
    """Follow the log into every read model (or the NAMEd ones) until interrupted.

    It also keeps the index of open rounds and sweeps it for lapsed betting windows, closing
    them with nothing but PostgreSQL: windows close on time even when Redis or the worker is
    down and nobody sends the table another command.
    """
    configure_logging("projector")
    chosen = _names(names)
    stop = threading.Event()
    # Times the stop, logs why the projector left, and ends it should a wait outlast the bound.
    watch = StopWatch("projector")

    def _stop(signum: int, frame: FrameType | None) -> None:
        watch.request(signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    # One connection for the follower's passes, and two for the sweeper (its look at the
    # index, and the window it closes), and a spare.
    with _pool(max_size=4, sequencer=True) as pool:
        # One follower, one transaction a pass for every model and the index of open rounds:
        # a subscription each meant a commit each per append (docs/benchmarks.md).
        following = read_models.follower(
            pool,
            chosen,
            also=[OpenRoundsProjection],
            poll_interval=poll_interval,
            after_apply=projection_batch_hook(),
        )
        running = read_models.Projector([following])
        sweeper = window_sweeper(
            pool,
            interval=sweep_interval,
            redis_url=Settings.from_env().redis_url,
            metered=metrics_port is not None,
            # This process stands for the sequencer's role (its pool's): a window it closes
            # is answered once durable, never kept waiting for its position (see window_sweeper).
            sequencing="background",
        )
        served = None
        if metrics_port is not None:
            from service.runtime.metrics import MetricsServer, ScrapeTimeGauges

            def lag_now() -> dict[str, int]:
                return {s.name: s.lag_events for s in read_models.status(pool, utc_now())}

            # The projections' lag from the process that makes it, so a scrape sees it while
            # the API is down; and what the sweeper appended (the windows it closed and dealt).
            served = MetricsServer(metrics_host, metrics_port, ScrapeTimeGauges(lag_now, None))
            click.echo(
                f"projector metrics on http://{metrics_host}:{served.port}/metrics", err=True
            )
        running.start()
        sweeper.start()
        click.echo(
            f"projector following the log into {', '.join(p.name for p in following.projections)},"
            " sweeping lapsed windows",
            err=True,
        )
        stop.wait()
        sweeper.stop()
        running.stop()
        if served is not None:
            served.stop()
    watch.stopped()


def window_sweeper(
    pool: Pool,
    *,
    interval: float = SWEEP_INTERVAL,
    redis_url: str | None = None,
    metered: bool = False,
    sequencing: Sequencing = "inline",
) -> WindowSweeper:
    """The sweeper over the projector's pool: it needs PostgreSQL only.

    Dealing a round can open the next one; with `redis_url` its window goes to the worker's timer as
    the API and the worker do. Without it, a round the sweeper opened would never reach the timer,
    and its table's windows would be closed by the sweeper alone from then on, even once Redis
    is back (tests/faults/test_redis_stopped.py). A Redis that is down costs nothing here: the
    scheduler fails fast and logs. `metered`: its appends count in this process's metrics.
    `sequencing` "background" in a process that stands for the sequencer's role: a close
    that waited for its position would keep the table's next commands (its deal, the bets of
    the next round) waiting for the sequencer too (docs/scaling.md).
    """
    store: EventStore = PostgresEventStore(pool, utc_now, upcasters(), sequencing=sequencing)
    if metered:
        # Imported only then: prometheus_client must not be imported before a multiprocess
        # directory is chosen (service/runtime/metrics.py), and only a metrics port needs it.
        from service.runtime.metrics import MeteredEventStore

        store = MeteredEventStore(store)
    scheduler: WindowScheduler | None = None
    if redis_url:
        # Imported here: the CLI's other commands should not pay for importing rq.
        from service.runtime.scheduler import RedisWindowScheduler

        scheduler = RedisWindowScheduler.from_url(redis_url)
    from service.runtime.seamless_wiring import owed_calls

    settings = Settings.from_env()
    games = GameService(
        store,
        utc_now,
        scheduler,
        snapshots=PostgresSnapshotStore(pool, utc_now),
        # A window closed here deals seamless players' bets too: no Shoebox wallet of theirs.
        seamless=settings.is_seamless,
        owed=owed_calls(settings, pool),
    )
    # The index is kept by this very process's subscription; catching it up before each look
    # as well costs one query when it is current, and keeps the sweep right if it lags.
    return WindowSweeper(games, PostgresOpenRounds(pool, upcasters()), utc_now, interval=interval)


@click.group()
def projections() -> None:
    """Rebuild the read models and see how far they have read."""


@projections.command()
@click.argument("names", nargs=-1, metavar="[NAME]...")
def rebuild(names: tuple[str, ...]) -> None:
    """Rebuild the NAMEd read models (default: all) from position 0 and swap them in."""
    chosen = _names(names)
    with _pool(max_size=4, sequencer=True) as pool:
        result = read_models.rebuild(pool, chosen)
    click.echo(
        f"rebuilt {', '.join(result.names)}: {result.events} events, up to position "
        f"{result.position}"
    )


@projections.command()
def status() -> None:
    """Each read model's checkpoint, the log's head, and the lag in events and seconds."""
    with _pool(max_size=1) as pool:
        found = read_models.status(pool, utc_now())
    for item in found:
        click.echo(
            f"{item.name:<12} checkpoint {item.checkpoint:>10}  head {item.head:>10}  "
            f"lag {item.lag_events} events, {item.lag_seconds:.1f} s"
        )


@projections.command("catch-up")
@click.argument("names", nargs=-1, metavar="[NAME]...")
def catch_up(names: tuple[str, ...]) -> None:
    """Apply everything in the log to the NAMEd read models now, then stop."""
    with _pool(max_size=2) as pool:
        handled = read_models.catch_up(pool, _names(names))
    click.echo(f"applied {handled} events")


commands: list[click.Command] = [projector, projections]
