"""Fixtures shared by every test tier: a PostgreSQL server and a fresh database per run."""

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.databases import scratch_database


@pytest.fixture(scope="session")
def postgres_server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A server to create test databases on: TEST_DATABASE_URL, DATABASE_URL, or an embedded one."""
    url = os.environ.get("TEST_DATABASE_URL") or os.environ.get("DATABASE_URL")
    if url:
        yield url
        return
    # Imported here so that runs against a real server never touch the embedded wheel.
    from service.embedded import EmbeddedPostgres

    data_dir = Path(os.environ.get("SHOEBOX_DATA_DIR", ".shoebox")) / "test-postgres"
    with EmbeddedPostgres(data_dir) as server:
        yield server.url


@pytest.fixture(scope="session")
def database_url(postgres_server_url: str) -> Iterator[str]:
    """A database of this run's own, dropped when the run ends."""
    with scratch_database(postgres_server_url, "shoebox_test") as url:
        yield url
