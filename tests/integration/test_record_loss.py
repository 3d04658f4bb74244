"""A failover that lost the log's tail is recorded before play resumes, and nothing starts on it.

A manual failover to an asynchronous standby (Patroni's strict synchronous mode never does
this by itself) leaves a primary that lacks the old primary's last commits, and checkpoints
kept outside the database (SHOEBOX_CHECKPOINT_FILE, a regulator's copy) over positions the
new log never had. Simulated here as the owner cutting the tail, as tests/integration/
test_log_restored.py does for a restore; what is tested is how Shoebox notices and records it.
"""

from pathlib import Path

import click
import pytest

from events.postgres import Pool, PostgresEventStore
from service.application.restores import continuity, restores
from service.cli.audit import refuse_to_start_on_cut_log
from service.runtime.settings import Settings
from tests.integration.test_log_restored import add_events, cut_after, queue_old_appends, run, sign


def test_a_lost_tail_stops_play_from_starting_until_record_loss_records_it(
    tmp_path: Path, fresh_database: str, app_pool: Pool
) -> None:
    key, kept = tmp_path / "signing.key", tmp_path / "kept.jsonl"
    run(fresh_database, "keys", "signing-key", "create", "--out", str(key))
    add_events(fresh_database, "a", "b")
    first = sign(fresh_database, key, kept)
    add_events(fresh_database, "c", "d")
    second = sign(fresh_database, key, kept)
    settings = Settings(checkpoint_file=kept)
    refuse_to_start_on_cut_log(settings, fresh_database)  # the log extends them: starts

    # The promoted standby had the first checkpoint's record and nothing after it.
    cut_after(fresh_database, first + 1)
    with pytest.raises(click.ClickException, match="shoebox audit record-loss"):
        refuse_to_start_on_cut_log(settings, fresh_database)

    looked = run(
        fresh_database,
        "audit",
        "record-loss",
        "--checkpoint",
        str(kept),
        "--reason",
        "x",
        "--dry-run",
    )
    assert looked.exit_code == 0, looked.output
    assert f"checkpoint at position {second}: LOST (the log ends at {first + 1})" in looked.output
    store = PostgresEventStore(app_pool)
    assert restores(store) == []

    reason = "manual failover to pg3 (asynchronous) after pg1 and pg2 were lost"
    recorded = run(
        fresh_database, "audit", "record-loss", "--checkpoint", str(kept), "--reason", reason
    )
    assert recorded.exit_code == 0, recorded.output
    assert f"the log kept to position {first + 1}" in recorded.output
    ((at, restored),) = restores(store)
    assert restored.last_position_kept == first + 1
    assert restored.last_checkpoint_position == first
    assert restored.reason == reason
    assert restored.recovery_target == (
        f"failover: the log ends at position {first + 1}; kept checkpoints reach {second}"
    )

    # Explained now: play may start, and verify reports the loss as the recorded event it is.
    refuse_to_start_on_cut_log(settings, fresh_database)
    verified = run(fresh_database, "audit", "verify", "--checkpoint", str(kept))
    assert verified.exit_code == 0, verified.output
    assert f"checkpoint at position {second}: LOST by the restore recorded at position {at}" in (
        verified.output
    )
    again = run(
        fresh_database, "audit", "record-loss", "--checkpoint", str(kept), "--reason", "again"
    )
    assert again.exit_code == 0, again.output
    assert "nothing recorded" in again.output
    assert len(restores(store)) == 1


def test_a_log_written_over_the_lost_positions_is_refused_not_recorded(
    tmp_path: Path, fresh_database: str, app_pool: Pool
) -> None:
    key, kept = tmp_path / "signing.key", tmp_path / "kept.jsonl"
    run(fresh_database, "keys", "signing-key", "create", "--out", str(key))
    add_events(fresh_database, "a", "b")
    first = sign(fresh_database, key, kept)
    add_events(fresh_database, "c", "d")
    second = sign(fresh_database, key, kept)
    # Play resumed on the cut log before anyone recorded the loss: other events now sit at
    # the lost checkpoint's position, which no LogRestored can explain.
    cut_after(fresh_database, first + 1)
    add_events(fresh_database, "e", "f", "g", "h", "i")
    store = PostgresEventStore(app_pool)
    standing = continuity(store, [])
    assert not standing.cut
    with pytest.raises(click.ClickException, match="does not extend"):
        refuse_to_start_on_cut_log(Settings(checkpoint_file=kept), fresh_database)
    refused = run(
        fresh_database, "audit", "record-loss", "--checkpoint", str(kept), "--reason", "late"
    )
    assert refused.exit_code == 1, refused.output
    assert f"other events at the kept checkpoints' positions ({second})" in refused.output
    assert restores(store) == []


def test_force_records_a_loss_no_kept_checkpoint_shows(
    tmp_path: Path, fresh_database: str, app_pool: Pool
) -> None:
    key, kept = tmp_path / "signing.key", tmp_path / "kept.jsonl"
    run(fresh_database, "keys", "signing-key", "create", "--out", str(key))
    add_events(fresh_database, "a")
    sign(fresh_database, key, kept)
    # Writes after the last checkpoint were lost: no kept checkpoint can show it.
    shown = run(fresh_database, "audit", "record-loss", "--checkpoint", str(kept), "--reason", "r")
    assert "nothing recorded" in shown.output
    forced = run(
        fresh_database,
        "audit",
        "record-loss",
        "--checkpoint",
        str(kept),
        "--reason",
        "r",
        "--force",
    )
    assert forced.exit_code == 0, forced.output
    assert len(restores(PostgresEventStore(app_pool))) == 1


def test_record_loss_places_the_queued_appends_after_the_head_it_compared(
    tmp_path: Path, fresh_database: str, app_pool: Pool
) -> None:
    key, kept = tmp_path / "signing.key", tmp_path / "kept.jsonl"
    run(fresh_database, "keys", "signing-key", "create", "--out", str(key))
    add_events(fresh_database, "a", "b")
    first = sign(fresh_database, key, kept)
    add_events(fresh_database, "c", "d")
    second = sign(fresh_database, key, kept)
    cut_after(fresh_database, first + 1)
    # The promoted standby also holds an append its old primary committed but had not
    # sequenced: it is older than the log's back-pressure bound by the time ops record.
    queue_old_appends(app_pool, fresh_database, 2)

    recorded = run(
        fresh_database, "audit", "record-loss", "--checkpoint", str(kept), "--reason", "x"
    )
    assert recorded.exit_code == 0, recorded.output
    assert f"the log kept to position {first + 3}" in recorded.output
    ((at, restored),) = restores(PostgresEventStore(app_pool))
    assert (at, restored.recovered_head, restored.last_position_kept) == (
        first + 4,
        first + 1,
        first + 3,
    )
    verified = run(fresh_database, "audit", "verify", "--checkpoint", str(kept))
    assert verified.exit_code == 0, verified.output
    assert f"checkpoint at position {second}: LOST by the restore recorded at position {at}" in (
        verified.output
    )
