"""The jobs `shoebox worker` runs: importable top-level functions that take plain ids.

A job builds what it needs once per worker process, on its first call, from the settings that
`configure` was given (by `shoebox worker`) or else from the environment. Nothing connects at
import time. The worker runs jobs in its own process (rq's SimpleWorker), so the pool and the
caches of tables, wallets and shuffled shoes live as long as the worker does.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import TYPE_CHECKING, Final

from events import deadlines
from events.merkle_store import PostgresTree
from events.postgres import Pool, PostgresEventStore, Sequencing, app_conninfo, open_pool
from events.snapshots import PostgresSnapshotStore
from events.store import EventStore, utc_now
from service.application.actor import Actor
from service.application.checkpoints import CheckpointService
from service.application.errors import NotFound
from service.application.game.open_rounds import PostgresOpenRounds
from service.application.game.recovery import recover
from service.application.game.tables import GameService, WindowScheduler
from service.application.read_models import projector
from service.application.seamless import SeamlessWalletConfig
from service.application.seamless_calls import SeamlessCalls, shoebox_calls
from service.application.streams import TableCache, table_stream
from service.application.upcasters import upcasters
from service.application.wallet_reconciliation import WalletEntry, report_day
from service.runtime.failpoints import deal_append_hook
from service.runtime.metrics import (
    WALLET_CALLS_FLAGGED,
    WALLET_CALLS_PARKED,
    MeteredEventStore,
    observe_window_close,
)
from service.runtime.scheduler import CLOSERS, WINDOW_QUEUE, RedisWindowScheduler
from service.runtime.seamless_wallet import SeamlessWalletClient, WalletUnavailableError
from service.runtime.seamless_wiring import is_seamless, owed_calls, seamless_calls
from service.runtime.settings import Settings, SettingsError
from service.runtime.signing import checkpoint_service, publish, publish_note

if TYPE_CHECKING:
    from rq import Queue

log = logging.getLogger(__name__)

RECOVERY_INTERVAL: Final = timedelta(seconds=60)
RECOVERY_GRACE: Final = timedelta(seconds=10)
"""How long past its close a window is left to its timer before the sweep calls it interrupted:
far beyond a live timer's lateness, far below anything a player would wait for."""
CHECKPOINT_INTERVAL: Final = timedelta(seconds=60)
CHECKPOINTER: Final = Actor("checkpointer", "system")
"""The actor of the CheckpointSigned events the periodic job appends."""

# One rq job at a time per worker process, beside the window timer's closers. A window close
# needs one connection; a rebuild needs four: its lock, its writes and two read-ahead readers;
# and a spare for a slow release.
POOL_SIZE: Final = 5 + CLOSERS

DELIVERY_INTERVAL: Final = timedelta(seconds=2)
"""How often owed wallet calls are looked for (service/application/seamless_calls.py)."""
DELIVERY_JOB_PREFIX: Final = "shoebox-wallet-delivery"
RECOVERY_JOB_PREFIX: Final = "shoebox-recovery"
CHECKPOINT_JOB_PREFIX: Final = "shoebox-checkpoint"
RECONCILIATION_INTERVAL: Final = timedelta(hours=1)
"""How often the worker looks for a day not yet reconciled: yesterday is reported within the
hour after midnight UTC, and once only (service/application/wallet_reconciliation.py)."""
RECONCILIATION_JOB_PREFIX: Final = "shoebox-wallet-reconciliation"

CLOSE_DEADLINE_SECONDS: Final = 5.0
"""How long one window's close may wait on PostgreSQL in all (events/deadlines.py)."""
CLOSED: Final = "closed"
NOTHING_DUE: Final = "nothing due"
GONE: Final = "no such table or round"


@dataclass(frozen=True, slots=True)
class _Services:
    store: EventStore
    games: GameService
    tables: TableCache
    pool: Pool
    settings: Settings
    checkpoints: CheckpointService | None
    seamless_calls: SeamlessCalls | None


_lock = threading.Lock()
_settings: Settings | None = None
_queue_name = WINDOW_QUEUE
_services: _Services | None = None
_sequencing: Sequencing = "inline"


def configure(
    settings: Settings, queue_name: str = WINDOW_QUEUE, *, sequencing: Sequencing = "inline"
) -> None:
    """Build the jobs' services from `settings` (URLs resolved), scheduling on `queue_name`.

    `sequencing` "background" when this process stands for the sequencer's role: a window
    close answered only once sequenced kept its table waiting on the sequencer (at 50 tables a
    bet's p99 rose to about a second), and nothing a job does after an append reads it by
    position. A burst run stands for no role, and places its own appends ("inline").
    """
    global _settings, _queue_name, _sequencing
    with _lock:
        if _services is not None:
            raise RuntimeError("the jobs' services are already built; configure before work")
        _settings = settings
        _queue_name = queue_name
        _sequencing = sequencing


def close_betting_window(table_id: str, round_id: str) -> str:
    """Close a round's betting window if it is still open and due, then deal; say what happened.

    The worker's window timer (service/runtime/scheduler.py) runs it at the round's deadline.

    Safe to run any number of times: a round already dealt (by an earlier run, or lazily by a
    request to its table) is left alone.
    """
    services = _built()
    games = services.games
    # A close is milliseconds of PostgreSQL; bounded, so that a database that hangs fails it
    # (to be tried again, or swept) rather than holding a closer, or a stopping worker, for good.
    with deadlines.until(time.monotonic() + CLOSE_DEADLINE_SECONDS):
        # The round's deadline, for the lateness metric: from the cache GameService shares,
        # where this worker's last close of the table left the round it opened (the usual
        # case); else read, without closing anything, as reading through GameService would.
        cached = services.tables.cached(table_stream(table_id))
        table = cached[1] if cached is not None else None
        if table is None or table.round is None or table.round.round_id != round_id:
            _, table = services.tables.table(services.store, table_id)
        due = table.round if table is not None and table.round is not None else None
        try:
            receipt = games.close_window(table_id, round_id)
        except NotFound as gone:
            # Retrying cannot make a table or round appear; the job is simply moot.
            log.warning("window job for round %s at table %s: %s", round_id, table_id, gone)
            return GONE
    if receipt is None:
        return NOTHING_DUE
    if due is not None and due.round_id == round_id:
        observe_window_close(due.deadline, utc_now())
    log.info("closed the window of round %s at table %s", round_id, table_id)
    return CLOSED


def rebuild_projection(name: str) -> str:
    """Rebuild one read model from position 0 beside the live one and swap it in; say how far.

    Safe to run any number of times, even twice at once: each run builds its own shadow and the
    swap happens under the projection's checkpoint lock, so the last one simply wins with the
    same rows. A name that is not a projection fails at once rather than being retried.
    """
    result = projector.rebuild(_built().pool, [name])
    log.info("rebuilt %s: %d events up to %d", name, result.events, result.position)
    return f"rebuilt {name} up to {result.position}"


def recover_interrupted_rounds() -> str:
    """The periodic job: complete (or void) every round left due but undealt, then come again.

    Safe to run any number of times, and by several workers: recovery appends with the
    table's expected version, so a round is completed once whoever gets there first.
    """
    services = _built()
    try:
        open_rounds = PostgresOpenRounds(services.pool, upcasters())
        recovered = recover(services.store, services.games, utc_now, open_rounds, RECOVERY_GRACE)
    finally:
        _reschedule(schedule_recovery, RECOVERY_INTERVAL)
    # Only what it did, and at INFO: a recovered round is the system working as designed, and
    # a minute that found nothing says nothing.
    for outcome in recovered:
        log.info(
            "recovered round %s at table %s: %s", outcome.round_id, outcome.table_id, outcome.action
        )
    return f"recovered {len(recovered)} round(s)"


def sign_checkpoint() -> str:
    """The periodic job: sign the log's head if anything but a checkpoint was appended since.

    Safe to run any number of times, by several workers: the checkpoint stream's expected
    version lets one of two racing runs append, and the other fails and is retried.
    """
    services = _built()
    try:
        if services.checkpoints is None:
            return "no signing key"
        checkpoint = services.checkpoints.sign_if_due(CHECKPOINTER)
    finally:
        _reschedule(schedule_checkpoints, checkpoint_interval())
    if checkpoint is None:
        return "nothing new to sign"
    publish(services.settings, checkpoint)
    publish_note(services.settings, services.checkpoints.latest_tree())
    log.info("signed checkpoint at position %d", checkpoint.position)
    return f"signed position {checkpoint.position}"


def deliver_due() -> str:
    """The periodic job: queue the wallet calls the log owes, then send those due.

    Safe to run any number of times, by several workers: the projection's batch and
    checkpoint commit together, and each call is sent under its player's money lock, with the
    same request id whoever sends it.
    """
    services = _built()
    try:
        if services.seamless_calls is None:
            return "no seamless operator"
        delivery = services.seamless_calls.deliver_due()
    finally:
        _reschedule(schedule_delivery, DELIVERY_INTERVAL)
    for operator, _ in delivery.parked:
        WALLET_CALLS_PARKED.labels(operator).inc()
    for operator, _ in delivery.flagged:
        WALLET_CALLS_FLAGGED.labels(operator).inc()
    if delivery.confirmed or delivery.parked or delivery.orphans:
        log.info("wallet calls: %s", delivery.summary())
    return delivery.summary()


def reconcile_wallets() -> str:
    """The periodic job: report each seamless operator's previous UTC day once, as an event.

    Safe to run any number of times, by several workers: a day already reported is left alone.
    """
    services = _built()
    try:
        if services.seamless_calls is None:
            return "no seamless operator"
        reported = reconcile_yesterday(
            services.store,
            services.pool,
            services.seamless_calls,
            services.settings.seamless_wallets,
            utc_now,
        )
    finally:
        _reschedule(schedule_reconciliation, RECONCILIATION_INTERVAL)
    return "; ".join(reported) or "no seamless operator"


def reconcile_yesterday(
    store: EventStore,
    pool: Pool,
    calls: SeamlessCalls,
    operators: Sequence[SeamlessWalletConfig],
    clock: Callable[[], datetime],
) -> list[str]:
    """Report the UTC day before `clock()` for each operator not yet reported; say what happened.

    An operator whose wallet cannot be read is skipped (and logged): the next run tries it
    again, and the others are still reported. Raises at the end if any was skipped, so the
    job's retries come sooner than the next interval.
    """
    # The projection of Shoebox's calls is read, so it must hold everything up to midnight.
    calls.catch_up()
    day = (clock() - timedelta(days=1)).date()
    reported: list[str] = []
    failed: list[str] = []
    for config in operators:
        try:
            event = report_day(
                store,
                config.operator,
                day,
                partial(shoebox_calls, pool, config.operator, config.currency),
                partial(_wallet_list, SeamlessWalletClient(config, clock)),
            )
        except (WalletUnavailableError, ValueError) as error:
            log.warning("could not reconcile %s for %s: %s", config.operator, day, error)
            failed.append(config.operator)
            continue
        if event is None:
            reported.append(f"{config.operator} {day}: reported already")
            continue
        outcome = f"{config.operator} {day}: {event.compared} compared, {event.differences} differ"
        reported.append(outcome)
        if event.differences:
            log.error(
                "ALERT: wallet reconciliation of %s: %s",
                outcome,
                ", ".join(event.first_differences),
                extra={"operator": config.operator},
            )
        else:
            log.info("wallet reconciliation of %s", outcome)
    if failed:
        raise WalletUnavailableError(f"could not read the wallets of {', '.join(failed)}")
    return reported


def _wallet_list(
    client: SeamlessWalletClient, since: datetime, until: datetime
) -> list[WalletEntry]:
    return [WalletEntry.from_document(row) for row in client.transactions(since, until)]


def schedule_reconciliation(queue: Queue, delay: timedelta = RECONCILIATION_INTERVAL) -> None:
    """Schedule the daily reconciliation's look for an unreported day once per interval."""
    _schedule_once(
        queue, delay, RECONCILIATION_INTERVAL, reconcile_wallets, RECONCILIATION_JOB_PREFIX
    )


def schedule_delivery(queue: Queue, delay: timedelta = DELIVERY_INTERVAL) -> None:
    """Schedule the delivery of owed wallet calls once per interval."""
    _schedule_once(queue, delay, DELIVERY_INTERVAL, deliver_due, DELIVERY_JOB_PREFIX)


def checkpoint_interval() -> timedelta:
    """How often the head is signed: SHOEBOX_CHECKPOINT_INTERVAL_SECONDS, or every minute."""
    if _settings is None:
        return CHECKPOINT_INTERVAL
    return timedelta(seconds=_settings.checkpoint_interval_seconds)


def schedule_checkpoints(queue: Queue, delay: timedelta | None = None) -> None:
    """Schedule the checkpoint job once per interval, whichever worker asks first."""
    interval = checkpoint_interval()
    delay = interval if delay is None else delay
    _schedule_once(queue, delay, interval, sign_checkpoint, CHECKPOINT_JOB_PREFIX)


def _reschedule(schedule: Callable[[Queue, timedelta], None], delay: timedelta) -> None:
    from rq import Queue, get_current_job
    from rq.serializers import JSONSerializer

    job = get_current_job()
    if job is not None:
        schedule(Queue(job.origin, connection=job.connection, serializer=JSONSerializer), delay)


def _schedule_once(
    queue: Queue,
    delay: timedelta,
    interval: timedelta,
    job: Callable[[], str],
    prefix: str,
) -> None:
    from rq import Retry

    # One id per interval slot: workers starting together, or a run rescheduling itself,
    # cannot pile up copies of the job.
    slot = int((utc_now() + delay).timestamp() // interval.total_seconds())
    queue.enqueue_in(
        delay, job, job_id=f"{prefix}-{slot}", retry=Retry(max=3, interval=[5, 15, 30])
    )


def schedule_recovery(queue: Queue, delay: timedelta = RECOVERY_INTERVAL) -> None:
    """Schedule the recovery job once per interval, whichever worker asks first."""
    _schedule_once(queue, delay, RECOVERY_INTERVAL, recover_interrupted_rounds, RECOVERY_JOB_PREFIX)


def _built() -> _Services:
    global _services
    with _lock:
        if _services is None:
            settings = _settings if _settings is not None else Settings.from_env()
            _services = _build(settings, _queue_name)
        return _services


def _build(settings: Settings, queue_name: str) -> _Services:
    if settings.database_url is None:
        raise SettingsError(
            "the worker's jobs need DATABASE_URL; `shoebox worker` sets it, starting the"
            " embedded PostgreSQL when it is unset"
        )
    conninfo = settings.app_database_url or app_conninfo(settings.database_url, environ={})
    pool = open_pool(conninfo, max_size=POOL_SIZE)
    atexit.register(pool.close)
    # Dealing a round opens the next one, whose window this worker's scheduler schedules.
    scheduler: WindowScheduler | None = (
        RedisWindowScheduler.from_url(settings.redis_url, queue_name=queue_name)
        if settings.redis_url
        else None
    )
    # The worker's appends (window closes, recoveries) count in /metrics too.
    store = MeteredEventStore(
        PostgresEventStore(pool, utc_now, upcasters(), sequencing=_sequencing)
    )
    tables = TableCache()
    games = GameService(
        store,
        utc_now,
        scheduler,
        tables=tables,
        before_deal_append=deal_append_hook(),
        snapshots=PostgresSnapshotStore(pool, utc_now),
        # A seamless player's money moves through their operator's wallet, not Shoebox's.
        seamless=is_seamless(settings),
        owed=owed_calls(settings, pool),
    )
    return _Services(
        store=store,
        games=games,
        tables=tables,
        pool=pool,
        settings=settings,
        checkpoints=checkpoint_service(settings, store, utc_now, PostgresTree(pool)),
        seamless_calls=seamless_calls(settings, store, utc_now, pool, games)
        if settings.seamless_wallets
        else None,
    )


def reset() -> None:
    """Forget the built services and configuration, closing the pool: for tests."""
    global _settings, _queue_name, _services, _sequencing
    with _lock:
        if _services is not None:
            _services.pool.close()
        _services = None
        _settings = None
        _queue_name = WINDOW_QUEUE
        _sequencing = "inline"
