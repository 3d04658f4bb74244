"""`shoebox audit verify` against the real server, including rows edited behind the triggers."""

import dataclasses
from collections.abc import Iterator

import psycopg
import pytest
from click.testing import CliRunner, Result

from events.canonical import hash_event
from events.postgres import Pool, PostgresEventStore
from events.store import EventMetadata, NewEvent, RecordedEvent, StreamAppend
from service.cli import main
from tests.contract.event_store import StepClock
from tests.databases import scratch_database

DEALER = EventMetadata(actor="dealer-7", role="dealer")


@pytest.fixture
def log(app_pool: Pool) -> list[RecordedEvent]:
    """Nine events over three streams, as recorded."""
    store = PostgresEventStore(app_pool, StepClock())
    for n in range(3):
        store.append(
            [
                StreamAppend(f"wallet:p{n}", 0, [NewEvent("StakeReserved", {"amount": 100 + n})]),
                StreamAppend(
                    f"round:T1:{n:06d}",
                    0,
                    [NewEvent("BetPlaced", {"stake": 100 + n}), NewEvent("CardDrawn", {"n": 1})],
                ),
            ],
            DEALER,
        )
    return store.read_all(upcast=False)


def verify(database: str, *arguments: str) -> Result:
    return CliRunner().invoke(main, ["audit", "verify", *arguments], env={"DATABASE_URL": database})


def tamper(database: str, statement: str) -> None:
    """Edit the log as its owner with the guarding triggers switched off for one transaction."""
    with psycopg.connect(database) as conn:
        conn.execute("ALTER TABLE events DISABLE TRIGGER USER")
        conn.execute(statement)
        conn.execute("ALTER TABLE events ENABLE TRIGGER USER")


def test_an_intact_chain_verifies_in_batches_and_reports_its_head(
    fresh_database: str, log: list[RecordedEvent]
) -> None:
    result = verify(fresh_database, "--batch-size", "2")
    assert result.exit_code == 0, result.output
    assert f"OK: 9 events verified, positions 1..9, head hash {log[-1].hash}" in result.output


def test_an_empty_log_verifies(fresh_database: str) -> None:
    result = verify(fresh_database)
    assert result.exit_code == 0, result.output
    assert "OK: no events from position 1 on" in result.output


def test_an_edited_payload_is_named_as_the_first_broken_link(
    fresh_database: str, log: list[RecordedEvent]
) -> None:
    tamper(fresh_database, """UPDATE events SET payload = '{"stake": 1}' WHERE position = 5""")
    edited = dataclasses.replace(log[4], payload={"stake": 1})
    assert log[4].stream_id == "round:T1:000001"

    result = verify(fresh_database, "--batch-size", "2")

    assert result.exit_code == 1, result.output
    assert "positions 1..4 verify" in result.output
    assert (
        f"BROKEN at position 5 (stream round:T1:000001): hash expected {hash_event(edited)},"
        f" found {log[4].hash}"
    ) in result.output


def test_a_forged_hash_breaks_the_next_link(fresh_database: str, log: list[RecordedEvent]) -> None:
    forged = hash_event(dataclasses.replace(log[1], payload={"stake": 1}))
    tamper(
        fresh_database,
        f"""UPDATE events SET payload = '{{"stake": 1}}', hash = '{forged}' WHERE position = 2""",
    )
    result = verify(fresh_database)
    assert result.exit_code == 1, result.output
    assert (
        f"BROKEN at position 3 (stream {log[2].stream_id}): prev_hash expected {forged},"
        f" found {log[1].hash}"
    ) in result.output


def test_a_deleted_event_is_named_by_its_missing_position(
    fresh_database: str, log: list[RecordedEvent]
) -> None:
    tamper(fresh_database, "DELETE FROM events WHERE position = 7")
    result = verify(fresh_database, "--batch-size", "3")
    assert result.exit_code == 1, result.output
    assert (
        f"BROKEN at position 7 (stream {log[7].stream_id}): position expected 7, found 8"
        in result.output
    )


def test_verifying_from_a_position_trusts_the_hash_of_the_event_before_it(
    fresh_database: str, log: list[RecordedEvent]
) -> None:
    tamper(fresh_database, """UPDATE events SET payload = '{"stake": 1}' WHERE position = 5""")

    after_the_edit = verify(fresh_database, "--from-position", "6", "--batch-size", "2")
    at_the_edit = verify(fresh_database, "--from-position", "5")

    assert after_the_edit.exit_code == 0, after_the_edit.output
    assert f"OK: 4 events verified, positions 6..9, head hash {log[-1].hash}" in (
        after_the_edit.output
    )
    assert at_the_edit.exit_code == 1, at_the_edit.output
    assert "BROKEN at position 5" in at_the_edit.output


def test_a_start_beyond_the_head_is_refused(fresh_database: str, log: list[RecordedEvent]) -> None:
    assert verify(fresh_database, "--from-position", "10").exit_code == 0
    beyond = verify(fresh_database, "--from-position", "11")
    assert beyond.exit_code == 2
    assert "there is no event at position 10" in beyond.output


@pytest.fixture
def bare_database(postgres_server_url: str) -> Iterator[str]:
    with scratch_database(postgres_server_url, "shoebox_bare") as url:
        yield url


def test_a_database_without_an_event_log_is_an_error_not_a_clean_bill(bare_database: str) -> None:
    result = verify(bare_database)
    assert result.exit_code == 2
    assert "no event log" in result.output


DAMAGE = [
    pytest.param(
        "UPDATE events SET payload = '{\"stake\": 1e400}' WHERE position = 5",
        "payload",
        id="huge-number",
    ),
    pytest.param(
        "UPDATE events SET payload = '{\"stake\": 1.5}' WHERE position = 5", "", id="float"
    ),
    pytest.param(
        "UPDATE events SET payload = '[1, 2]' WHERE position = 5", "hash", id="not-an-object"
    ),
    pytest.param(
        "UPDATE events SET metadata = '{\"actor\": 1e400}' WHERE position = 5",
        "metadata",
        id="metadata",
    ),
    pytest.param(
        "UPDATE events SET recorded_at = 'infinity' WHERE position = 5",
        "recorded_at",
        id="infinity",
    ),
    pytest.param(
        "UPDATE events SET recorded_at = '12000-01-01' WHERE position = 5",
        "recorded_at",
        id="year-12000",
    ),
    pytest.param("UPDATE events SET hash = 'x' WHERE position = 5", "", id="short-hash"),
]


@pytest.mark.parametrize(("statement", "column"), DAMAGE)
def test_a_damaged_row_is_one_line_naming_its_position_never_a_traceback(
    fresh_database: str, log: list[RecordedEvent], statement: str, column: str
) -> None:
    tamper(fresh_database, statement)

    result = verify(fresh_database, "--batch-size", "3")

    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output
    [line] = [line for line in result.output.splitlines() if "position 5" in line]
    assert line.startswith("BROKEN at position 5 (stream ")
    assert column in line
