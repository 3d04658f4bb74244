"""A restore loses bets the operator's wallet has debited: reconciled, rolled back, flagged.

Shoebox plays against the reference wallet over real HTTP; then the log is cut back to an
earlier position, as a point-in-time restore would leave it (the events, the streams' heads,
and `seamless_calls` as of that moment), while the wallet keeps every call made after it.
After `record_restore`, the reconciliation from the restore point finds each lost call by
transaction id, owes the rollback of each lost debit of an open bet, and flags the round the
wallet saw settled; once the rollbacks are delivered, the wallet holds the restored log's money
and reconciles clean for that player.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from domain.outcome import Spot
from domain.table import TableSettings
from events.postgres import Pool
from operator_wallet import WalletServer, running_wallet
from service.application.restore_wallets import reconcile_after_restore
from service.application.restores import record_restore
from service.application.wallet_reconciliation import Problem
from service.cli import main
from service.runtime.seamless_wallet import SeamlessWalletClient
from tests.integration.test_log_restored import cut_after

from .conftest import ADMIN_TOKEN, KEYS, SECRET_1, Admin, MovableClock, client_config
from .figures import reconciled
from .test_seamless_bets import FRONTEND, OPS, Shoebox, build


def _cut(database: str, position: int, moment: object) -> None:
    """The database as a restore to `position` (committed at `moment`) brings it back."""
    cut_after(database, position)
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("DELETE FROM seamless_calls WHERE created_at > %s", [moment])
        conn.execute(
            "UPDATE checkpoints SET position = least(position, %s)"
            " WHERE subscription = 'seamless-calls'",
            [position],
        )


@pytest.fixture
def own_wallet(postgres_server_url: str, wallet_clock: MovableClock) -> Iterator[WalletServer]:
    """A wallet on a database of its own: the reconciliation after a restore reads every
    transaction of the period, and the session's wallet holds other tests' (some stamped in
    the future by their moved clocks), which this one must neither report nor roll back."""
    name = f"operator_wallet_restore_{secrets.token_hex(4)}"
    with psycopg.connect(postgres_server_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    params = conninfo_to_dict(postgres_server_url)
    params["dbname"] = name
    wallet_clock.offset = timedelta()
    try:
        with running_wallet(
            make_conninfo(**params),  # type: ignore[arg-type]
            KEYS,
            admin_token=ADMIN_TOKEN,
            clock=wallet_clock,
            pool_size=4,
        ) as server:
            yield server
    finally:
        wallet_clock.offset = timedelta()
        with psycopg.connect(postgres_server_url, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


def test_debits_a_restore_lost_are_rolled_back_and_a_lost_settlement_is_flagged(
    fresh_database: str,
    app_pool: Pool,
    own_wallet: WalletServer,
    wallet_clock: MovableClock,
    tmp_path: Path,
) -> None:
    wallet = own_wallet
    admin = Admin(wallet)
    config = client_config(wallet)
    client = SeamlessWalletClient(config, wallet_clock)
    shoebox: Shoebox = build(app_pool, wallet_clock, config, client)
    since = wallet_clock() - timedelta(seconds=1)
    tables = ["T" + secrets.token_hex(4), "T" + secrets.token_hex(4)]
    players: dict[str, str] = {}
    for table in tables:
        shoebox.games.create_table(table, TableSettings(), OPS)
        wallet_id, token = admin.player(deposit=10_000)
        key = f"acme/{wallet_id}"
        shoebox.seamless.open_session(key, token, FRONTEND)
        shoebox.games.sit(table, key, 1, FRONTEND)
        players[key] = wallet_id
    alice, bob = players
    shoebox.seamless.place_bet(tables[0], alice, Spot.BANKER, 300, FRONTEND)
    shoebox.calls.catch_up()
    kept, moment = shoebox.store.head(), wallet_clock()
    # After the restore point: two more debits at an open round, and a whole round at the
    # other table, its win delivered. The wallet applies them all; the restore loses them.
    shoebox.seamless.place_bet(tables[0], alice, Spot.PLAYER, 500, FRONTEND)
    shoebox.seamless.place_bet(tables[0], alice, Spot.TIE, 200, FRONTEND)
    shoebox.seamless.place_bet(tables[1], bob, Spot.BANKER, 100, FRONTEND)
    shoebox.games.press_deal(tables[1], bob, FRONTEND)
    shoebox.drain(wallet_clock)
    assert admin.balance(players[alice]) == 10_000 - 1_000
    lost = {
        row["transaction_uuid"]
        for row in client.transactions(since, wallet_clock() + timedelta(minutes=1))
        if row["player_id"] == players[alice] and row["amount"] in (500, 200)
    }
    assert len(lost) == 2

    _cut(fresh_database, kept, moment)
    restored: Shoebox = build(app_pool, wallet_clock, config, client)
    recorded = record_restore(
        restored.store,
        wallet_clock,
        OPS,
        last_position_kept=kept,
        recovery_target="time of the drill",
        reason="drill: a restore with seamless play",
        seamless=restored.games.is_seamless,
        owed=restored.games.owed,
    )
    assert tables[0] in recorded.tables  # its open round voided, the kept bet rolled back
    report = reconcile_after_restore(
        restored.calls,
        restored.seamless,
        app_pool,
        "acme",
        client.transactions,
        moment,
        wallet_clock() + timedelta(minutes=1),
        OPS,
    )
    # Every call the restore lost is reported by transaction id.
    unknown = {
        d.transaction_uuid for d in report.differences if d.problem is Problem.UNKNOWN_TO_SHOEBOX
    }
    assert lost <= unknown
    assert {debit for debit, _ in report.rolled_back} == lost
    # Bob's round played out at the wallet: flagged for the operator, nothing sent.
    assert report.flagged
    assert all(players[bob] in line for line in report.flagged), report.flagged
    assert any(line.startswith("FLAGGED") for line in report.lines())

    # The rollbacks (the lost debits', and the kept bet's, voided by the restore) delivered.
    restored.drain(wallet_clock)
    assert admin.balance(players[alice]) == 10_000
    listed, result = reconciled(
        app_pool,
        config,
        wallet_clock,
        {alice: players[alice]},
        since,
        wallet_clock() + timedelta(minutes=1),
    )
    assert result.clean, result.differences
    assert [entry.rolled_back_by is not None for entry in listed if entry.kind == "bet"] == [
        True,
        True,
        True,
    ]
    # Run again, it owes nothing more: every lost debit is Shoebox's call now.
    again = reconcile_after_restore(
        restored.calls,
        restored.seamless,
        app_pool,
        "acme",
        client.transactions,
        moment,
        wallet_clock() + timedelta(minutes=1),
        OPS,
    )
    assert again.rolled_back == ()

    # The command an operator runs (and `shoebox restore` runs on its own), from the restore
    # point the log records; it signs with the real clock, as the wallet's is again.
    wallet_clock.offset = timedelta()
    wallets_file = tmp_path / "wallets.toml"
    wallets_file.write_text(
        f'[operators.acme]\nbase_url = "{wallet.url}"\nkey_id = "k1"\n'
        f'secret = "{SECRET_1}"\ncurrency = "GBP"\n'
    )
    run = CliRunner().invoke(
        main,
        ["wallet", "after-restore", "--operator", "acme"],
        env={"DATABASE_URL": fresh_database, "SHOEBOX_SEAMLESS_WALLETS_FILE": str(wallets_file)},
    )
    assert run.exit_code == 1, run.output  # Bob's round, flagged until the operator settles it
    assert "FLAGGED" in run.output
    assert players[bob] in run.output
    assert "a debit the restore lost" not in run.output  # owed once, by the first run
    assert SECRET_1 not in run.output
    # The compensating calls are events like any other: the log still verifies.
    audited = CliRunner().invoke(main, ["audit", "verify"], env={"DATABASE_URL": fresh_database})
    assert audited.exit_code == 0, audited.output
    # And an export of the table verifies offline. Its slice ends with the table's last event
    # (the void's StakeReturned): the lost debits' rollbacks, appended after it on the seamless
    # stream, are outside it (the slice's gap docs/wallets.md names); `audit verify` above
    # read the whole log, them included.
    path = tmp_path / "export.jsonl"
    day = wallet_clock().date()
    window = [(day - timedelta(days=1)).isoformat(), (day + timedelta(days=1)).isoformat()]
    exported = CliRunner().invoke(
        main,
        ["export", "--table", tables[0], "--from", window[0], "--to", window[1], "-o", str(path)],
        env={"DATABASE_URL": fresh_database},
    )
    assert exported.exit_code == 0, exported.output
    verified = CliRunner().invoke(main, ["verify", str(path)], env={"DATABASE_URL": ""})
    assert verified.exit_code == 0, verified.output
    assert "\nOK: " in verified.output, verified.output
