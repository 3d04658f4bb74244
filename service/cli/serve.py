"""`shoebox serve`: migrations, then the API under gunicorn; Flask's server is for debugging.

The serving model (docs/api.md, "The live feed"): gunicorn's gevent worker by default. A feed
client holds its connection for hours, so a worker must serve thousands of connections while
it answers bets; with gevent each connection is a greenlet, and psycopg (whose waits go
through a monkey-patched `select`), psycopg_pool (whose locks and threads are patched) and
redis-py all yield while they wait. One `LogTail` per worker LISTENs for appends and wakes the
feed clients (events/tail.py). `--worker-class gthread` keeps the thread-per-request model
for those who need it, where each feed client holds a thread.

SIGTERM drains: gunicorn stops accepting, each worker finishes the requests in flight (up to
`graceful_timeout`), and its feed clients are sent `retry:` and closed, to reconnect to
another process with Last-Event-ID.
"""

import contextlib
import importlib
import logging
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from typing import Any

import click
from flask import Flask
from gunicorn.app.base import BaseApplication
from gunicorn.glogging import Logger

from events.migrations import apply_migrations
from service.embedded import database_url
from service.runtime.logs import configure_logging
from service.runtime.settings import MULTIPROC_VARIABLE, Settings

_CORES = min(os.cpu_count() or 1, 16)
# gevent: one worker for every two cores. A gevent worker never waits on PostgreSQL (its other
# requests run meanwhile), so more workers only add processes writing the same tables: each
# bet then finds its table written by another process and reads it again in the table's turn
# (service/application/game/turns.py). On 2 cores one worker answered 1.5 times the bets of
# five at saturation, at half their web CPU a bet (docs/benchmarks.md, "One web worker"); the
# other core is PostgreSQL's, the projector's and the worker's, which take as much at load.
DEFAULT_WORKERS = max(1, _CORES // 2)
# Threads and sync workers do wait, each request on its own: enough of them to keep the cores
# busy meanwhile, few enough that their pools stay inside PostgreSQL's 100 connections.
DEFAULT_BLOCKING_WORKERS = 2 * min(_CORES, 8) + 1
WORKER_CLASSES = ("gevent", "gthread", "sync")
# Under gevent, the greenlets of a worker share its pool: enough connections that bets do not
# queue behind one another (a seamless bet holds one through its wallet's call), few enough
# for PostgreSQL's 100 across the workers. The server's workers share about GEVENT_CONNECTIONS,
# at least DEFAULT_GEVENT_POOL_SIZE each: 24 for the one worker of a 2-core machine, as its
# five workers had 30 between them before.
DEFAULT_GEVENT_POOL_SIZE = 6
GEVENT_CONNECTIONS = 24
WORKER_CONNECTIONS = 2000
"""Connections one gevent worker holds at once, feed clients included."""
GRACEFUL_TIMEOUT_SECONDS = 10

_logger = logging.getLogger(__name__)


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
        cooperate_with_gevent()
        return self._factory()

    def run(self) -> None:
        """Run the master; a worker forked by it leaves with os._exit, never by unwinding.

        Gunicorn forks each worker deep inside the master's stack and lets it leave by raising
        SystemExit. Unwound, that exit would run the master's context managers in the worker:
        the first worker to stop would delete the metrics directory the others still write to,
        and release the master's hold on an embedded PostgreSQL.
        """
        master = os.getpid()
        try:
            super().run()
        except SystemExit as leaving:
            if os.getpid() == master:
                raise
            code = leaving.code if isinstance(leaving.code, int) else int(leaving.code is not None)
            logging.shutdown()
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)


def cooperate_with_gevent() -> None:
    """Make psycopg wait cooperatively in a worker that gevent has monkey-patched.

    psycopg picks its wait function when it is imported, and the CLI imported it in the
    master, before the worker patched anything: left alone, every query would block the
    whole worker (psycopg's C wait cannot be patched). Re-running the choice now picks a wait
    on the patched `select`. psycopg_pool took `time.sleep` (its back-off between failed
    connection attempts) at import as well.
    """
    monkey = sys.modules.get("gevent.monkey")
    if monkey is None or not monkey.is_module_patched("select"):
        return
    import gevent
    import psycopg.waiting
    import psycopg_pool.pool

    importlib.reload(psycopg.waiting)
    psycopg_pool.pool.sleep = gevent.sleep  # type: ignore[attr-defined]


class GunicornLogger(Logger):  # type: ignore[misc]  # gunicorn is untyped
    """gunicorn's logger, with no access line built when nothing would print it.

    With a `logconfig_dict` gunicorn counts its access log as on, whatever the dict says, and
    builds a line of some thirty fields after every request (4% of a gevent worker's CPU
    under bets, sampled with py-spy; docs/benchmarks.md, issue 14) for `gunicorn.access`,
    which that dict silences: the app writes the one line a request.
    """

    def access(self, resp: Any, req: Any, environ: Any, request_time: Any) -> None:
        """An access line, if a handler would take it."""
        if self.access_log.isEnabledFor(logging.INFO):
            super().access(resp, req, environ, request_time)


def gunicorn_options(
    bind: str | list[str], workers: int, threads: int, worker_class: str = "gevent"
) -> dict[str, Any]:
    """Gunicorn's settings for a Shoebox server."""
    from service.cli.workers import WORKER_CLASS_PATHS
    from service.runtime.logs import gunicorn_log_config
    from service.web.app import MAX_HEADER_FIELD_BYTES, MAX_HEADER_FIELDS

    if worker_class == "gthread" and threads == 1:
        worker_class = "sync"
    return {
        "bind": [bind] if isinstance(bind, str) else bind,
        "workers": workers,
        "threads": threads,
        # gunicorn's own workers, but for their error pages: problems, not HTML.
        "worker_class": WORKER_CLASS_PATHS[worker_class],
        "worker_connections": WORKER_CONNECTIONS,
        # The app is built after the fork: a psycopg pool must not cross one.
        "preload_app": False,
        # A feed's tail is told to stop as soon as the worker is (SIGTERM), so its clients
        # get their retry hint within the graceful timeout.
        "post_worker_init": drain_feed_on_exit,
        # ...and closed as the worker leaves, so its connections end cleanly.
        "worker_exit": close_worker_app,
        # A dead worker's live gauges (feed clients) leave the sum.
        "child_exit": forget_worker_metrics,
        # One fixed control socket path would make two servers on one machine collide.
        "control_socket_disable": True,
        "accesslog": None,
        "errorlog": "-",
        # The app logs one JSON line a request; gunicorn's own lines take the same shape.
        "logconfig_dict": gunicorn_log_config("api"),
        "logger_class": GunicornLogger,
        "graceful_timeout": GRACEFUL_TIMEOUT_SECONDS,
        # The app answers a request line or header over its limits with a 414 or 431 problem
        # that names the limit; gunicorn's own limits sit above the app's, as a backstop
        # against abuse only, answered as problems by the workers above. 8190 is the longest
        # line gunicorn bounds (0 would bound none).
        "limit_request_line": 8190,
        "limit_request_field_size": 2 * MAX_HEADER_FIELD_BYTES,
        "limit_request_fields": 2 * MAX_HEADER_FIELDS,
    }


def _wiring_of(worker: Any) -> Any:
    from service.runtime.container import Container
    from service.web.api import EXTENSION

    app = getattr(worker, "wsgi", None)
    wiring = app.extensions.get(EXTENSION) if isinstance(app, Flask) else None
    return wiring if isinstance(wiring, Container) else None


def drain_feed_on_exit(worker: Any) -> None:
    """Gunicorn's post_worker_init hook: when the worker is told to stop, close its feeds.

    Gunicorn marks the worker not `alive` on SIGTERM and then waits for the requests in
    flight; a feed never ends by itself, so this stops the worker's log tail, which sends
    every feed client `retry:` and ends its response.
    """
    wiring = _wiring_of(worker)
    if wiring is None or wiring.feed is None:
        return
    tail = wiring.feed.tail

    def watch() -> None:
        while worker.alive:
            time.sleep(0.2)
        tail.stop()

    threading.Thread(target=watch, name="feed-drain", daemon=True).start()


def forget_worker_metrics(server: Any, worker: Any) -> None:
    """Gunicorn's child_exit hook, in the master: drop the dead worker's live gauges."""
    from service.runtime.metrics import mark_process_dead

    mark_process_dead(worker.pid)


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
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    help=f"Default: {DEFAULT_WORKERS} under gevent (a worker for every two cores), else"
    f" {DEFAULT_BLOCKING_WORKERS} (2 x cores + 1).",
)
@click.option(
    "--worker-class",
    type=click.Choice(WORKER_CLASSES),
    default="gevent",
    show_default=True,
    help="gevent serves many feed clients a worker; gthread is a thread a request.",
)
@click.option(
    "--threads", type=click.IntRange(min=1), default=1, show_default=True, help="gthread only."
)
@click.option(
    "--pool-size",
    type=click.IntRange(min=2),
    help="PostgreSQL connections a worker. Default: threads + 1, or under gevent"
    f" {GEVENT_CONNECTIONS} / workers, at least {DEFAULT_GEVENT_POOL_SIZE}.",
)
def serve(
    bind: str | None, workers: int | None, worker_class: str, threads: int, pool_size: int | None
) -> None:
    """Apply migrations, then serve the API and its live feed under gunicorn until stopped."""
    # Every line the server writes is JSON, from its first; gunicorn takes the same shape
    # (gunicorn_log_config). A Python warning (gevent's, as a worker patches) is logged too,
    # rather than printed as text in the middle of them; forked workers inherit both.
    configure_logging("api")
    logging.captureWarnings(True)
    settings = Settings.from_env()
    address = bind or f"{settings.api_host}:{settings.api_port}"
    binds = [address]
    if settings.metrics_port is not None:
        binds.append(f"{settings.metrics_host}:{settings.metrics_port}")
    if worker_class == "gevent":
        threads = 1
    if workers is None:
        workers = DEFAULT_WORKERS if worker_class == "gevent" else DEFAULT_BLOCKING_WORKERS
    with database_url(settings) as url, metrics_directory():
        # Imported here: the CLI's other commands should not pay for importing the whole app,
        # and prometheus_client must first see PROMETHEUS_MULTIPROC_DIR (metrics_directory).
        from service.cli.audit import refuse_to_start_on_cut_log
        from service.cli.wallet import refuse_to_start_on_mode_change
        from service.web.app import create_app

        applied = apply_migrations(url)
        if applied:
            _logger.info("applied %d migration(s)", len(applied))
        wired = replace(settings, database_url=url)
        refuse_to_start_on_mode_change(settings, url)
        refuse_to_start_on_cut_log(settings, url)
        if settings.demo:
            # Before the workers fork, so that every worker's /play acts with the same keys.
            from service.runtime.demo import ensure_demo_keys

            ensure_demo_keys(url, settings.data_dir)
            _logger.info("demo mode: /play is served on http://%s/play", address)
        _recover_interrupted_rounds(wired)
        # A connection per thread, and one over for the key ring's refresh between requests.
        gevent_size = max(DEFAULT_GEVENT_POOL_SIZE, GEVENT_CONNECTIONS // workers)
        size = pool_size or (gevent_size if worker_class == "gevent" else threads + 1)
        _logger.info(
            "serving on http://%s/v1 (%d %s worker%s%s)",
            address,
            workers,
            worker_class,
            "" if workers == 1 else "s",
            f" x {threads} threads" if worker_class == "gthread" else "",
        )
        ShoeboxServer(
            lambda: create_app(wired, pool_size=size, sequencer=True),
            gunicorn_options(binds, workers, threads, worker_class),
        ).run()


@contextlib.contextmanager
def metrics_directory() -> Iterator[None]:
    """PROMETHEUS_MULTIPROC_DIR for the workers: as given (made if missing), or a fresh one
    removed afterwards. Set before any worker imports prometheus_client, as it must be."""
    given = os.environ.get(MULTIPROC_VARIABLE)
    if given:
        os.makedirs(given, exist_ok=True)
        yield
        return
    made = tempfile.mkdtemp(prefix="shoebox-metrics-")
    os.environ[MULTIPROC_VARIABLE] = made
    try:
        yield
    finally:
        os.environ.pop(MULTIPROC_VARIABLE, None)
        shutil.rmtree(made, ignore_errors=True)


def _recover_interrupted_rounds(settings: Settings) -> None:
    """Complete, or void, any round a crash left due but undealt, before taking requests."""
    from events.postgres import PostgresEventStore, app_conninfo, open_pool
    from events.snapshots import PostgresSnapshotStore
    from events.store import utc_now
    from service.application.game.open_rounds import PostgresOpenRounds
    from service.application.game.recovery import recover_on_start
    from service.application.game.tables import GameService
    from service.application.upcasters import upcasters
    from service.runtime.seamless_wiring import owed_calls

    assert settings.database_url is not None
    conninfo = settings.app_database_url or app_conninfo(settings.database_url, environ={})
    with open_pool(conninfo, max_size=2) as pool:
        store = PostgresEventStore(pool, utc_now, upcasters())
        games = GameService(
            store,
            utc_now,
            snapshots=PostgresSnapshotStore(pool, utc_now),
            seamless=settings.is_seamless,
            owed=owed_calls(settings, pool),
        )
        open_rounds = PostgresOpenRounds(pool, upcasters())
        recovered = recover_on_start(store, games, utc_now, open_rounds)
    if recovered:
        _logger.info("recovered %d interrupted round(s)", recovered)


commands: list[click.Command] = [serve]
