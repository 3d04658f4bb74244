"""The stateful play of tests/stateful.py over PostgreSQL: fewer, shorter sequences."""

import os
import secrets
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test

from events.postgres import PostgresEventStore, app_conninfo, open_pool
from events.store import EventStore
from tests.integration.conftest import _create_database, _drop_database, _with_dbname
from tests.stateful import ShoeboxMachine


@pytest.mark.slow
def test_random_play_over_postgres_keeps_the_books_balanced_at_every_step(
    postgres_server_url: str, migrated_template: str
) -> None:
    opened: list[str] = []

    def open_store() -> tuple[EventStore, Callable[[], None]]:
        # Each sequence starts from an empty log: a database of its own, from the template.
        name = f"shoebox_stateful_{os.getpid()}_{secrets.token_hex(4)}"
        _create_database(postgres_server_url, name, template=migrated_template)
        opened.append(name)
        pool = open_pool(app_conninfo(_with_dbname(postgres_server_url, name), environ={}))

        def dispose() -> None:
            pool.close()
            _drop_database(postgres_server_url, name)

        return PostgresEventStore(pool), dispose

    class PostgresPlay(ShoeboxMachine):
        pass

    PostgresPlay.open_store = open_store
    run_state_machine_as_test(
        PostgresPlay,
        settings=settings(
            max_examples=4,
            stateful_step_count=25,
            derandomize=True,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        ),
    )
    assert len(opened) >= 4
