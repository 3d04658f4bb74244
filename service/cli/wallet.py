"""`shoebox wallet`: reconcile a seamless operator's wallet with the log, resume parked calls."""

from __future__ import annotations

import getpass
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

import click

from events.migrations import apply_migrations
from events.postgres import Pool, app_conninfo, open_pool
from events.store import utc_now
from service.application.seamless_calls import SeamlessCalls, shoebox_calls
from service.application.wallet_reconciliation import WalletEntry, reconcile
from service.embedded import database_url
from service.runtime.seamless_wallet import SeamlessWalletClient, WalletUnavailableError
from service.runtime.settings import Settings, SettingsError

LIST_MARGIN = timedelta(minutes=10)
"""How far around the window the wallet's list is read: a call sent at the window's last
instant may be recorded by the wallet just after it."""


@contextmanager
def _pool(settings: Settings) -> Iterator[Pool]:
    with database_url(settings) as db_url:
        apply_migrations(db_url)
        conninfo = settings.app_database_url or app_conninfo(db_url, environ={})
        pool = open_pool(conninfo, max_size=4)
        try:
            yield pool
        finally:
            pool.close()


def _calls(settings: Settings, pool: Pool) -> SeamlessCalls:
    from events.postgres import PostgresEventStore
    from service.application.game.tables import GameService
    from service.application.upcasters import upcasters
    from service.runtime.seamless_wiring import owed_calls, seamless_calls

    store = PostgresEventStore(pool, utc_now, upcasters())
    games = GameService(
        store, utc_now, seamless=settings.is_seamless, owed=owed_calls(settings, pool)
    )
    return seamless_calls(settings, store, utc_now, pool, games)


@click.group("wallet")
def wallet() -> None:
    """Seamless operators' wallets: reconciliation, parked calls, and the wallet modes."""


@wallet.command("reconcile")
@click.option("--operator", required=True, help="A seamless operator of the wallets file.")
@click.option(
    "--from",
    "since",
    type=click.DateTime(),
    help="Start of the window (UTC); default 24 hours before --to.",
)
@click.option("--to", "until", type=click.DateTime(), help="End of the window (UTC); default now.")
def reconcile_command(operator: str, since: datetime | None, until: datetime | None) -> None:
    """Compare the log's calls with the wallet's transaction list; exit 1 on a difference."""
    settings = Settings.from_env()
    config = settings.seamless_wallet(operator)
    if config is None:
        raise click.UsageError(f"{operator!r} is not a seamless operator of the wallets file")
    end = until.replace(tzinfo=UTC) if until is not None else utc_now()
    start = since.replace(tzinfo=UTC) if since is not None else end - timedelta(days=1)
    with _pool(settings) as pool:
        _calls(settings, pool).catch_up()
        ours = shoebox_calls(pool, operator, config.currency, start, end)
    client = SeamlessWalletClient(config, utc_now)
    try:
        listed = [
            WalletEntry.from_document(row)
            for row in client.transactions(start - LIST_MARGIN, end + LIST_MARGIN)
        ]
    except (WalletUnavailableError, ValueError) as error:
        raise click.ClickException(f"cannot read the wallet's transactions: {error}") from None
    result = reconcile(ours, listed, (start, end))
    for difference in result.differences:
        click.echo(f"{difference.transaction_uuid} {difference.problem}: {difference.detail}")
    for note in result.notes:
        click.echo(f"note: {note.transaction_uuid} {note.problem}: {note.detail}")
    verdict = "clean" if result.clean else f"{len(result.differences)} difference(s)"
    click.echo(
        f"{operator} {start.isoformat()}..{end.isoformat()}: {result.compared} transaction(s)"
        f" compared, {verdict}, {len(result.notes)} note(s)"
    )
    if not result.clean:
        sys.exit(1)


def restore_point(pool: Pool) -> datetime | None:
    """When the last recorded restore's last kept event was recorded; None if none is."""
    from events.postgres import PostgresEventStore
    from service.application.restores import restores

    store = PostgresEventStore(pool)
    recorded = restores(store)
    if not recorded:
        return None
    kept = recorded[-1][1].lost_after
    found = store.read_all(kept - 1, 1, upcast=False) if kept > 0 else []
    return found[0].recorded_at if found else datetime.fromtimestamp(0, UTC)


def wallets_after_restore(
    settings: Settings,
    pool: Pool,
    since: datetime,
    operators: tuple[str, ...] = (),
    err: bool = False,
) -> bool:
    """Reconcile each seamless operator's wallet with the restored log from `since` to now,
    owe the rollback of each debit the restore lost, deliver what is due now, and print every
    difference (on stderr with `err`); True if something is flagged for the operator (or a
    wallet cannot be read)."""
    from service.application.actor import Actor
    from service.application.restore_wallets import reconcile_after_restore

    calls = _calls(settings, pool)
    names = operators or tuple(config.operator for config in settings.seamless_wallets)
    actor = Actor(f"cli:{getpass.getuser()}", "cli")
    attention = False
    for operator in names:
        config = settings.seamless_wallet(operator)
        if config is None:
            raise click.UsageError(f"{operator!r} is not a seamless operator of the wallets file")
        client = SeamlessWalletClient(config, utc_now)
        try:
            report = reconcile_after_restore(
                calls,
                calls.seamless,
                pool,
                operator,
                client.transactions,
                since,
                utc_now(),
                actor,
            )
        except (WalletUnavailableError, ValueError) as error:
            click.echo(f"{operator}: cannot read the wallet's transactions: {error}", err=True)
            attention = True
            continue
        for line in report.lines():
            click.echo(line, err=err)
        attention = attention or bool(report.flagged)
    delivery = calls.deliver_due()
    click.echo(f"owed calls: {delivery.summary()} (the worker retries the rest)", err=err)
    return attention


@wallet.command("after-restore")
@click.option(
    "--operator", "operators", multiple=True, help="A seamless operator (default: every one)."
)
@click.option(
    "--from",
    "since",
    type=click.DateTime(),
    help="Start (UTC); default the last recorded restore's point (its last kept event's time).",
)
def after_restore_command(operators: tuple[str, ...], since: datetime | None) -> None:
    """After a restore: reconcile the seamless wallets from its point, roll back lost debits.

    `shoebox restore` and `shoebox audit record-loss` run it on their own. Exit 1 when
    something is flagged for the operator (a win, or a round the wallet saw settled, that the
    restored log does not hold), 0 otherwise.
    """
    settings = Settings.from_env()
    if not settings.seamless_wallets:
        click.echo("no seamless operator: nothing to reconcile")
        return
    with _pool(settings) as pool:
        start = since.replace(tzinfo=UTC) if since is not None else restore_point(pool)
        if start is None:
            raise click.UsageError("no restore is recorded in the log: give --from")
        if wallets_after_restore(settings, pool, start, operators):
            sys.exit(1)


@wallet.command("resume")
@click.argument("transaction_uuid")
def resume_command(transaction_uuid: str) -> None:
    """Send a parked win or rollback again, once the cause of its fatal answer is fixed."""
    settings = Settings.from_env()
    with _pool(settings) as pool:
        if not _calls(settings, pool).resume(transaction_uuid):
            raise click.ClickException(f"no parked win or rollback {transaction_uuid}")
    click.echo(f"resumed {transaction_uuid}: the worker sends it within seconds")


def refuse_to_start_on_mode_change(settings: Settings, url: str) -> None:
    """Stop a process before it starts when the wallets file would strand an operator's money."""
    from service.runtime.seamless_wiring import refuse_wallet_mode_changes

    try:
        refuse_wallet_mode_changes(settings, url)
    except SettingsError as error:
        raise click.ClickException(str(error)) from None


@wallet.command("check-mode")
def check_mode_command() -> None:
    """Check that each operator's wallet mode fits its players' money; exit 1 if not.

    `shoebox serve` and `shoebox worker` run the same check at startup and refuse to start on
    a conflict: run this before changing SHOEBOX_SEAMLESS_WALLETS_FILE.
    """
    from service.runtime.seamless_wiring import refuse_wallet_mode_changes

    settings = Settings.from_env()
    with database_url(settings) as db_url:
        apply_migrations(db_url)
        try:
            refuse_wallet_mode_changes(settings, db_url)
        except SettingsError as error:
            click.echo(str(error), err=True)
            sys.exit(1)
    seamless = ", ".join(c.operator for c in settings.seamless_wallets) or "none"
    click.echo(f"wallet modes fit the money held (seamless operators: {seamless})")


commands = [wallet]
