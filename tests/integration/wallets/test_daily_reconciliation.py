"""The worker's daily reconciliation against the reference wallet over HTTP.

Each test plays on a UTC day of its own, thousands of days ahead (the wallet, its clock and its
transaction list are shared with the session's other tests, which play today), so the day's
list at the wallet holds only what the test did.
"""

from __future__ import annotations

import secrets
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from rq import Queue
from shoebox_verify.verify import verify

from domain.outcome import Spot
from domain.reconciliation import WalletReconciled
from domain.table import TableSettings
from events.postgres import Pool, PostgresEventStore
from operator_wallet import WalletServer
from service.application.read_models import projector
from service.application.read_models.queries import ProjectionService
from service.application.read_models.significant import RECONCILIATION_KIND, kind_of
from service.application.seamless import Outcome
from service.application.wallet_reconciliation import RECONCILER, reconciliation_stream
from service.regulator.export import build_export, write_lines
from service.regulator.verification import verify_export
from service.runtime import jobs
from service.runtime.jobs import reconcile_yesterday
from service.runtime.seamless_wallet import SeamlessWalletClient
from service.runtime.settings import Settings
from tests.integration.test_jobs import burst, queue, redis_url  # noqa: F401 -- fixtures

from .conftest import SECRET_1, Admin, MovableClock, Round, client_config
from .test_seamless_bets import FRONTEND, OPS, Shoebox, build


def _play_a_round(shoebox: Shoebox, admin: Admin, clock: MovableClock) -> tuple[str, str, str]:
    """A seamless player bets and is dealt through Shoebox; (table, wallet id, session token)."""
    table = "T" + secrets.token_hex(4)
    shoebox.games.create_table(table, TableSettings(), OPS)
    wallet_id, token = admin.player(deposit=5_000)
    player = f"acme/{wallet_id}"
    shoebox.seamless.open_session(player, token, FRONTEND)
    shoebox.games.sit(table, player, 1, FRONTEND)
    shoebox.seamless.place_bet(table, player, Spot.BANKER, 500, FRONTEND)
    shoebox.games.press_deal(table, player, FRONTEND)
    shoebox.drain(clock)
    return table, wallet_id, token


def _setup(
    app_pool: Pool, wallet: WalletServer, clock: MovableClock, days_ahead: int
) -> tuple[Shoebox, SeamlessWalletClient]:
    # Noon of a day of the test's own: the round and its retries stay inside the day.
    now = clock()
    clock.offset = timedelta(days=days_ahead) - timedelta(
        hours=now.hour - 12, minutes=now.minute, seconds=now.second
    )
    config = client_config(wallet)
    client = SeamlessWalletClient(config, clock)
    return build(app_pool, clock, config, client), client


def test_a_clean_day_is_reported_once_with_no_difference_and_is_not_significant(
    app_pool: Pool, wallet: WalletServer, admin: Admin, wallet_clock: MovableClock
) -> None:
    shoebox, _ = _setup(app_pool, wallet, wallet_clock, days_ahead=4000)
    day = wallet_clock().date()
    _play_a_round(shoebox, admin, wallet_clock)
    wallet_clock.offset += timedelta(days=1)
    config = client_config(wallet)

    first = reconcile_yesterday(shoebox.store, app_pool, shoebox.calls, [config], wallet_clock)
    again = reconcile_yesterday(shoebox.store, app_pool, shoebox.calls, [config], wallet_clock)

    recorded = shoebox.store.read_stream(reconciliation_stream("acme"))
    assert [event.type for event in recorded] == [WalletReconciled.type]
    payload = recorded[0].payload
    assert payload["operator"] == "acme"
    assert payload["day"] == day.isoformat()
    assert payload["differences"] == 0
    assert payload["first_differences"] == []
    # A bet and the win or nothing its settlement owed: at least the bet was compared.
    assert isinstance(payload["compared"], int)
    assert payload["compared"] >= 1
    assert recorded[0].metadata.actor == RECONCILER.actor_id
    assert kind_of(recorded[0]) is None
    projector.catch_up(app_pool)
    listed, _ = ProjectionService(app_pool, wallet_clock).significant(
        0, 100, type=WalletReconciled.type
    )
    assert listed == []
    assert first == [f"acme {day}: {payload['compared']} compared, 0 differ"]
    assert again == [f"acme {day}: reported already"]


def test_a_transaction_the_log_does_not_know_is_a_significant_event_naming_it(
    app_pool: Pool,
    wallet: WalletServer,
    admin: Admin,
    wallet_clock: MovableClock,
    tmp_path: Path,
) -> None:
    shoebox, client = _setup(app_pool, wallet, wallet_clock, days_ahead=4010)
    day = wallet_clock().date()
    start = wallet_clock()
    table, wallet_id, token = _play_a_round(shoebox, admin, wallet_clock)
    # A bet at the wallet that Shoebox never sent: the wallet's record differs from the log's.
    stray = Round(client_config(wallet), wallet_id, token).bet(300)
    assert client.send(stray).outcome is Outcome.OK
    wallet_clock.offset += timedelta(days=1)
    config = client_config(wallet)

    for _ in range(2):
        reconcile_yesterday(shoebox.store, app_pool, shoebox.calls, [config], wallet_clock)

    recorded = shoebox.store.read_stream(reconciliation_stream("acme"))
    assert len(recorded) == 1
    payload = recorded[0].payload
    assert payload["day"] == day.isoformat()
    assert payload["differences"] == 1
    assert payload["first_differences"] == [str(stray.transaction_uuid)]
    assert kind_of(recorded[0]) == RECONCILIATION_KIND
    # The regulator's significant-event log, read from its projection, lists it.
    projector.catch_up(app_pool)
    listed, _ = ProjectionService(app_pool, wallet_clock).significant(
        0, 100, type=WalletReconciled.type
    )
    assert [(kind, event.position) for kind, event in listed] == [
        (RECONCILIATION_KIND, recorded[0].position)
    ]
    # Named by id only: neither the session token nor the signing secret is in the event.
    assert token not in str(payload)
    assert SECRET_1 not in str(payload)

    # The event sits inside a table's export (a later command at the table brings it into the
    # slice): the export carries it, and both verifiers accept it.
    shoebox.games.sit(table, "bob", 2, FRONTEND)
    lines = list(build_export(shoebox.store, table, start, wallet_clock() + timedelta(minutes=1)))
    assert WalletReconciled.type in [line.get("type") for line in lines]
    server_report = verify_export(lines)
    assert server_report.ok, server_report.discrepancies
    path = tmp_path / "export.jsonl"
    write_lines(iter(lines), str(path))
    independent = verify(str(path), progress=False)
    assert independent.ok, independent.findings


def test_the_periodic_job_reports_yesterday_once_and_schedules_its_next_run(
    fresh_database: str,
    app_pool: Pool,
    wallet: WalletServer,
    queue: Queue,  # noqa: F811 -- test_jobs's fixture, imported above
    redis_url: str,  # noqa: F811
) -> None:
    jobs.reset()
    settings = Settings(
        database_url=fresh_database,
        redis_url=redis_url,
        seamless_wallets=(client_config(wallet),),
    )
    jobs.configure(settings, queue.name)
    before = (datetime.now(UTC) - timedelta(days=1)).date()
    try:
        jobs.schedule_reconciliation(queue, timedelta(0))
        burst(queue)
        again = jobs.reconcile_wallets()
    finally:
        jobs.reset()
    # The worker's clock is the real one: yesterday, which this test's log has no call of.
    yesterday = (datetime.now(UTC) - timedelta(days=1)).date()
    if yesterday != before:
        pytest.skip("ran across midnight UTC: the worker's 'yesterday' changed under the test")
    recorded = PostgresEventStore(app_pool).read_stream(reconciliation_stream("acme"))
    assert [(event.type, event.payload["day"]) for event in recorded] == [
        (WalletReconciled.type, yesterday.isoformat())
    ]
    assert again == f"acme {yesterday}: reported already"
    scheduled = queue.scheduled_job_registry.get_job_ids()
    assert [job for job in scheduled if job.startswith(jobs.RECONCILIATION_JOB_PREFIX)], scheduled
