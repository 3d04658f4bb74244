"""`shoebox worker`: the window timer that closes betting windows on time, and the RQ worker."""

from dataclasses import replace

import click

from events.migrations import apply_migrations
from service.embedded import database_url, redis_url
from service.runtime.settings import DEFAULT_API_HOST, Settings


@click.command()
@click.option(
    "--queue",
    "queue_name",
    metavar="NAME",
    default=None,
    help="The queue to serve. Default: the one the API schedules on.",
)
@click.option(
    "--rebuilds",
    is_flag=True,
    help="Serve the queue of read-model rebuilds instead, so they never hold up a window.",
)
@click.option("--burst", is_flag=True, help="Run the jobs that are due, then stop.")
@click.option(
    "--metrics-port",
    type=click.IntRange(min=0, max=65535),
    default=None,
    help="Serve this worker's own /metrics on this port (compose's Prometheus scrapes it);"
    " under `shoebox run`, the API's /metrics already holds them.",
)
@click.option(
    "--metrics-host",
    default=DEFAULT_API_HOST,
    show_default=True,
    help="The address --metrics-port listens on.",
)
def worker(
    queue_name: str | None,
    rebuilds: bool,
    burst: bool,
    metrics_port: int | None,
    metrics_host: str,
) -> None:
    """Close betting windows at their deadlines, and run the periodic jobs, until interrupted.

    The window timer closes each window within milliseconds of its deadline; rq (with its
    scheduler) runs recovery and checkpoint signing.

    With --rebuilds, run the read models' rebuilds instead: a second worker process, since a
    worker runs one job at a time and a rebuild of a long log takes minutes.
    """
    # Imported here: the CLI's other commands should not pay for importing rq and the service.
    from events.store import utc_now
    from service.runtime import jobs, rq_worker
    from service.runtime.logs import configure_logging
    from service.runtime.scheduler import REBUILD_QUEUE, WINDOW_QUEUE, WindowTimer, redis_for_timer
    from service.runtime.signing import signing_keys

    configure_logging("worker")
    # First: a SIGTERM while the worker starts is honoured too, once it has started.
    watch = rq_worker.stop_on_signals("worker")
    settings = Settings.from_env()
    with database_url(settings) as db_url, redis_url(settings) as queue_url:
        # Harmless when `shoebox serve` got there first: yoyo takes a lock and skips the applied.
        apply_migrations(db_url)
        from service.cli.wallet import refuse_to_start_on_mode_change

        # The worker sends and settles seamless calls: it must not start on a mode change
        # that strands money either.
        refuse_to_start_on_mode_change(settings, db_url)
        # Nor deal, on a log that lost a tail nobody recorded, the lost rounds' cards again.
        from service.cli.audit import refuse_to_start_on_cut_log

        refuse_to_start_on_cut_log(settings, db_url)
        if rebuilds and queue_name is not None:
            raise click.UsageError("--rebuilds names its queue; leave out --queue")
        name = REBUILD_QUEUE if rebuilds else (queue_name or WINDOW_QUEUE)
        # Windows are always scheduled on the windows' queue, whichever queue this one serves.
        jobs.configure(
            replace(settings, database_url=db_url, redis_url=queue_url),
            WINDOW_QUEUE if rebuilds else name,
            # Any long-running worker stands for the sequencer's role (below): its appends
            # are placed by whichever process holds it, never waited for.
            sequencing="inline" if burst else "background",
        )
        periodic: tuple[rq_worker.Periodic, ...] = ()
        if not rebuilds:
            # Interrupted rounds are looked for now and then every minute (service/recovery.py).
            periodic += ((jobs.RECOVERY_JOB_PREFIX, jobs.schedule_recovery),)
            # Owed calls to seamless operators' wallets are sent every 2 s.
            if settings.seamless_wallets:
                periodic += ((jobs.DELIVERY_JOB_PREFIX, jobs.schedule_delivery),)
                # And the day before is reconciled with each wallet once, within the hour.
                periodic += ((jobs.RECONCILIATION_JOB_PREFIX, jobs.schedule_reconciliation),)
            # The log's head is signed every minute that saw appends, if a signing key is set.
            if signing_keys(settings) is not None:
                periodic += ((jobs.CHECKPOINT_JOB_PREFIX, jobs.schedule_checkpoints),)
        click.echo(f"worker serving queue {name!r} on {queue_url}", err=True)
        served = None
        if metrics_port is not None:
            from service.runtime.metrics import MetricsServer

            # What this process records: the windows' lateness, its appends, the rounds it dealt.
            served = MetricsServer(metrics_host, metrics_port)
            click.echo(f"worker metrics on http://{metrics_host}:{served.port}/metrics", err=True)
        # Any long-running process may be the log's sequencer; a burst run is not one.
        sequencer = None
        if not burst:
            from events.postgres import app_conninfo
            from service.runtime.sequencing import start_sequencer_role

            sequencer = start_sequencer_role(
                settings.app_database_url or app_conninfo(db_url, environ={}), queue_url
            )
        timer: WindowTimer | None = None
        if not rebuilds:
            # Beside rq's loop, on threads of its own: a window's deadline cannot wait for a
            # recovery job to finish, nor for rq's once-a-second scheduler. The timer keeps
            # trying when Redis goes away, and rq's loop is started again (rq_worker.work).
            timer = WindowTimer(
                redis_for_timer(queue_url),
                jobs.close_betting_window,
                queue_name=name,
                clock=utc_now,
            )
            if burst:
                timer.take_due()  # once, like rq's burst: what is due now, then stop
            else:
                timer.start()
        try:
            # A SimpleWorker runs each job in this process rather than a fork per job: a job is a
            # few milliseconds of PostgreSQL, and the pool and caches built by the first job serve
            # every later one.
            rq_worker.work(queue_url, name, periodic, burst=burst, watch=watch)
        finally:
            if timer is not None:
                timer.stop()
            if sequencer is not None:
                # Bounded (events/sequencer.py): a batch in flight is cancelled, not awaited.
                sequencer.stop()
            if served is not None:
                served.stop()
            watch.stopped()


commands: list[click.Command] = [worker]
