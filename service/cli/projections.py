"""`shoebox projector` follows the log into the read models; `shoebox projections` manages them."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

import click

from events.migrations import apply_migrations
from events.postgres import Pool, app_conninfo, open_pool
from events.store import utc_now
from service.application.read_models import projector as read_models
from service.embedded import database_url
from service.runtime.logs import configure_logging
from service.runtime.settings import Settings


@contextmanager
def _pool(max_size: int) -> Iterator[Pool]:
    settings = Settings.from_env()
    with database_url(settings) as db_url:
        # Harmless when another process got there first: yoyo locks and skips the applied.
        apply_migrations(db_url)
        conninfo = settings.app_database_url or app_conninfo(db_url, environ={})
        pool = open_pool(conninfo, max_size=max_size)
        try:
            yield pool
        finally:
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
@click.argument("names", nargs=-1, metavar="[NAME]...")
def projector(poll_interval: float, names: tuple[str, ...]) -> None:
    """Follow the log into every read model (or the NAMEd ones) until interrupted."""
    configure_logging("projector")
    chosen = _names(names)
    stop = threading.Event()

    def _stop(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    # A connection per subscription and one for its listener's fallback queries.
    with _pool(max_size=len(chosen) + 2) as pool:
        running = read_models.Projector(
            read_models.subscriptions(pool, chosen, poll_interval=poll_interval)
        )
        running.start()
        click.echo(f"projector following the log into {', '.join(chosen)}", err=True)
        stop.wait()
        running.stop()


@click.group()
def projections() -> None:
    """Rebuild the read models and see how far they have read."""


@projections.command()
@click.argument("names", nargs=-1, metavar="[NAME]...")
def rebuild(names: tuple[str, ...]) -> None:
    """Rebuild the NAMEd read models (default: all) from position 0 and swap them in."""
    chosen = _names(names)
    with _pool(max_size=4) as pool:
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
