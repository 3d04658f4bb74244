"""`shoebox serve`: migrations, then the API under gunicorn; Flask's server is for debugging."""

import os
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import click
from flask import Flask
from gunicorn.app.base import BaseApplication

from events.migrations import apply_migrations
from service.embedded import database_url
from service.runtime.settings import Settings

# Enough workers to keep the cores busy while others wait on PostgreSQL, and few enough that
# their pools stay well inside PostgreSQL's default 100 connections on a large machine.
DEFAULT_WORKERS = 2 * min(os.cpu_count() or 1, 8) + 1


class ShoeboxServer(BaseApplication):  # type: ignore[misc]
    """Gunicorn running the app that `factory` builds, once in each worker after the fork."""

    def __init__(self, factory: Callable[[], Flask], options: Mapping[str, Any]) -> None:
        self._factory = factory
        self._options = dict(options)
        super().__init__()

    def load_config(self) -> None:
        """Apply our options instead of reading gunicorn's command line."""
        for name, value in self._options.items():
            self.cfg.set(name, value)

    def load(self) -> Flask:
        """Build the app; gunicorn calls this in each worker, so each opens its own pool."""
        return self._factory()


def gunicorn_options(bind: str, workers: int, threads: int) -> dict[str, Any]:
    """Gunicorn's settings for a Shoebox server."""
    from service.web.app import MAX_HEADER_FIELD_BYTES, MAX_HEADER_FIELDS

    return {
        "bind": bind,
        "workers": workers,
        "threads": threads,
        "worker_class": "gthread" if threads > 1 else "sync",
        # The app is built after the fork: a psycopg pool must not cross one.
        "preload_app": False,
        # ...and closed as the worker leaves, so its connections end cleanly.
        "worker_exit": close_worker_app,
        # One fixed control socket path would make two servers on one machine collide.
        "control_socket_disable": True,
        "accesslog": None,
        "errorlog": "-",
        "graceful_timeout": 10,
        # The app answers a request line or header over its limits with a 414 or 431 problem;
        # gunicorn would answer in HTML, so its own limits sit above the app's, as a backstop
        # against abuse only. 8190 is the longest line gunicorn bounds (0 would bound none).
        "limit_request_line": 8190,
        "limit_request_field_size": 2 * MAX_HEADER_FIELD_BYTES,
        "limit_request_fields": 2 * MAX_HEADER_FIELDS,
    }


def close_worker_app(server: Any, worker: Any) -> None:
    """Gunicorn's worker_exit hook: close the pool of the app the worker built, if it built one."""
    from service.runtime.container import Container
    from service.web.api import EXTENSION

    # The master calls the hook too, for a worker that died before it could report back; that
    # worker object never loaded an app. A worker whose app failed to load holds gunicorn's own.
    app = getattr(worker, "wsgi", None)
    wiring = app.extensions.get(EXTENSION) if isinstance(app, Flask) else None
    if isinstance(wiring, Container):
        wiring.close()


@click.command()
@click.option("--bind", metavar="HOST:PORT", help="Default: SHOEBOX_API_HOST:SHOEBOX_API_PORT.")
@click.option("--workers", type=click.IntRange(min=1), default=DEFAULT_WORKERS, show_default=True)
@click.option("--threads", type=click.IntRange(min=1), default=1, show_default=True)
def serve(bind: str | None, workers: int, threads: int) -> None:
    """Apply migrations, then serve the API under gunicorn until interrupted."""
    # Imported here: the CLI's other commands should not pay for importing the whole app.
    from service.web.app import create_app

    settings = Settings.from_env()
    address = bind or f"{settings.api_host}:{settings.api_port}"
    with database_url(settings) as url:
        applied = apply_migrations(url)
        if applied:
            click.echo(f"applied {len(applied)} migration(s)", err=True)
        wired = replace(settings, database_url=url)
        _recover_interrupted_rounds(wired)
        # A connection per thread, and one over for the key ring's refresh between requests.
        pool_size = threads + 1
        click.echo(
            f"serving on http://{address}/v1 ({workers} workers x {threads} threads)", err=True
        )
        ShoeboxServer(
            lambda: create_app(wired, pool_size=pool_size),
            gunicorn_options(address, workers, threads),
        ).run()


def _recover_interrupted_rounds(settings: Settings) -> None:
    """Complete, or void, any round a crash left due but undealt, before taking requests."""
    from events.postgres import PostgresEventStore, app_conninfo, open_pool
    from events.snapshots import PostgresSnapshotStore
    from events.store import utc_now
    from service.application.game.open_rounds import PostgresOpenRounds
    from service.application.game.recovery import recover_on_start
    from service.application.game.tables import GameService
    from service.application.upcasters import upcasters

    assert settings.database_url is not None
    conninfo = settings.app_database_url or app_conninfo(settings.database_url, environ={})
    with open_pool(conninfo, max_size=2) as pool:
        store = PostgresEventStore(pool, utc_now, upcasters())
        games = GameService(store, utc_now, snapshots=PostgresSnapshotStore(pool, utc_now))
        open_rounds = PostgresOpenRounds(pool, upcasters())
        recovered = recover_on_start(store, games, utc_now, open_rounds)
    if recovered:
        click.echo(f"recovered {recovered} interrupted round(s)", err=True)


commands: list[click.Command] = [serve]
