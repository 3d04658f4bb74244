"""A recorded restore (LogRestored) explains the checkpoints it lost, and only those.

The restore itself is simulated as the owner cutting the log's tail (the drill in
tests/faults/test_restore_drill.py does it with pgBackRest); what is tested here is what
`record_restore` appends and how `shoebox audit verify --checkpoint` reads it.
"""

import json
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner, Result

from domain.audit import LogRestored
from domain.payloads import to_payload
from events.postgres import Pool, PostgresEventStore
from events.store import NewEvent, StreamAppend, utc_now
from service.application.actor import Actor
from service.application.restores import (
    STREAM,
    RestoreNotRecordableError,
    record_restore,
    restores,
)
from service.cli import main
from service.cli.restore import _record
from tests.databases import age_the_queue

OPS = Actor("cli:test", "cli")


def run(database: str, *arguments: str, **env: str) -> Result:
    return CliRunner().invoke(main, list(arguments), env={"DATABASE_URL": database, **env})


def sign(database: str, key: Path, kept: Path) -> int:
    signed = run(
        database, "audit", "checkpoint", "--out", str(kept), SHOEBOX_SIGNING_KEY_FILE=str(key)
    )
    assert signed.exit_code == 0, signed.output
    return int(json.loads(signed.stdout)["position"])


def add_events(database: str, *names: str) -> None:
    for name in names:
        made = run(database, "keys", "create", "--role", "ops", "--name", name)
        assert made.exit_code == 0, made.output


def cut_after(database: str, position: int) -> None:
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("SET session_replication_role = replica")
        conn.execute("DELETE FROM events WHERE position > %s", [position])
        # A real restore brings back every table as of one moment: the streams' heads too,
        # which appends lock and check their versions against (the parallel log, issue 22).
        conn.execute("DELETE FROM stream_heads")
        conn.execute(
            "INSERT INTO stream_heads (stream_id, version)"
            " SELECT stream_id, max(version) FROM events GROUP BY stream_id"
        )


def queue_old_appends(pool: Pool, database: str, count: int) -> None:
    """`count` appends committed and left unsequenced an hour ago, as a recovery keeps them."""
    queued = PostgresEventStore(pool, sequencing="background")
    for n in range(count):
        note = NewEvent("ApiKeyRevoked", {"key_id": f"k{n}", "reason": "queued"})
        queued.append([StreamAppend(f"test:queued-{n}", 0, [note])], OPS.metadata())
    age_the_queue(database, 3600)


def test_a_recorded_restore_reports_the_checkpoints_it_lost_and_no_later_cut(
    tmp_path: Path, fresh_database: str, app_pool: Pool
) -> None:
    key, kept = tmp_path / "signing.key", tmp_path / "kept.jsonl"
    run(fresh_database, "keys", "signing-key", "create", "--out", str(key))
    add_events(fresh_database, "a", "b")
    first = sign(fresh_database, key, kept)
    add_events(fresh_database, "c", "d")
    second = sign(fresh_database, key, kept)
    assert second > first + 1

    # Restored to just after the first checkpoint's own record: the second is lost.
    kept_position = first + 1
    cut_after(fresh_database, kept_position)
    cut = run(fresh_database, "audit", "verify", "--checkpoint", str(kept))
    assert cut.exit_code == 1
    assert "cut short" in cut.output

    store = PostgresEventStore(app_pool)
    with pytest.raises(RestoreNotRecordableError):
        record_restore(
            store,
            utc_now,
            OPS,
            last_position_kept=kept_position - 1,
            recovery_target="x",
            reason="drill",
        )
    recorded = record_restore(
        store,
        utc_now,
        OPS,
        last_position_kept=kept_position,
        recovery_target="xid 1",
        reason="drill",
    )
    assert recorded.restored.last_checkpoint_position == first
    assert recorded.tables == ()
    ((at, restored),) = restores(store)
    assert at == kept_position + 1
    assert restored.reason == "drill"

    explained = run(fresh_database, "audit", "verify", "--checkpoint", str(kept))
    assert explained.exit_code == 0, explained.output
    assert f"checkpoint at position {second}: LOST by the restore recorded at position {at}" in (
        explained.output
    )
    assert "extends the 1 other kept checkpoints; 1 lost by a recorded restore" in explained.output

    # A checkpoint signed after the restore is over the new log: cutting it is not excused.
    add_events(fresh_database, "e", "f")
    third = sign(fresh_database, key, kept)
    cut_after(fresh_database, third - 1)
    again = run(fresh_database, "audit", "verify", "--checkpoint", str(kept))
    assert again.exit_code == 1, again.output
    assert f"BROKEN checkpoint at position {third}: the log has no such event" in again.output
    assert f"checkpoint at position {second}: LOST" in again.output


def test_a_restore_record_naming_a_checkpoint_the_log_lacks_fails_verify(
    tmp_path: Path, fresh_database: str, app_pool: Pool
) -> None:
    key, kept = tmp_path / "signing.key", tmp_path / "kept.jsonl"
    run(fresh_database, "keys", "signing-key", "create", "--out", str(key))
    add_events(fresh_database, "a")
    signed = sign(fresh_database, key, kept)
    # A record whose claim is false, appended with a valid chain (as anyone able to append
    # as the service could): the checkpoint it names does not have that hash.
    forged = LogRestored(
        restore_id="forged",
        last_position_kept=signed,
        last_checkpoint_position=signed,
        last_checkpoint_hash="00" * 32,
        recovery_target="xid 1",
        reason="forged",
        restored_at="2026-01-01T00:00:00.000000Z",
    )
    store = PostgresEventStore(app_pool)
    event = NewEvent(LogRestored.type, to_payload(forged))  # type: ignore[arg-type]
    store.append([StreamAppend(STREAM, 0, [event])], OPS.metadata())
    result = run(fresh_database, "audit", "verify", "--checkpoint", str(kept))
    assert result.exit_code == 1, result.output
    assert "which the log does not hold" in result.output


def test_a_restore_places_the_appends_recovery_kept_unsequenced_before_its_record(
    fresh_database: str, app_pool: Pool
) -> None:
    # Recovery keeps every append committed before its target, and the lost timeline may not
    # have sequenced them all: they come back queued, and look as old as they are.
    add_events(fresh_database, "a", "b")
    head = PostgresEventStore(app_pool).head()
    queue_old_appends(app_pool, fresh_database, 3)

    placed, recorded = _record(fresh_database, head, "1", "drill")

    assert placed == 3
    assert recorded.restored.recovered_head == head
    assert recorded.restored.last_position_kept == head + 3
    assert recorded.restored.lost_after == head
    store = PostgresEventStore(app_pool)
    after = store.read_all(head, 4, upcast=False)
    assert [e.stream_id for e in after] == [*(f"test:queued-{n}" for n in range(3)), STREAM]
    ((at, restored),) = restores(store)
    assert (at, restored) == (head + 4, recorded.restored)
    result = run(fresh_database, "audit", "verify")
    assert result.exit_code == 0, result.output
