"""Fixtures for tests against the real PostgreSQL server: migrated databases and app pools."""

import os
import secrets
from collections.abc import Iterator

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from events.migrations import apply_migrations
from events.postgres import Pool, app_conninfo, open_pool


def _with_dbname(server_url: str, name: str) -> str:
    params = conninfo_to_dict(server_url)
    params["dbname"] = name
    return make_conninfo(**params)  # type: ignore[arg-type]


def _create_database(server_url: str, name: str, template: str | None = None) -> None:
    query = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
    if template is not None:
        query = sql.SQL("{} TEMPLATE {}").format(query, sql.Identifier(template))
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(query)


def _drop_database(server_url: str, name: str) -> None:
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


@pytest.fixture(scope="session")
def migrated_database_url(database_url: str) -> str:
    """The run's own database with every migration applied (owner's connection string)."""
    apply_migrations(database_url)
    return database_url


@pytest.fixture(scope="session")
def app_database_url(migrated_database_url: str) -> str:
    """The run's migrated database, connected as the application role."""
    return app_conninfo(migrated_database_url, environ={})


@pytest.fixture(scope="session")
def migrated_template(postgres_server_url: str) -> Iterator[str]:
    """A migrated database that `fresh_database` clones, so each test migrates for free."""
    name = f"shoebox_template_{os.getpid()}_{secrets.token_hex(4)}"
    _create_database(postgres_server_url, name)
    try:
        apply_migrations(_with_dbname(postgres_server_url, name))
        yield name
    finally:
        _drop_database(postgres_server_url, name)


@pytest.fixture
def fresh_database(postgres_server_url: str, migrated_template: str) -> Iterator[str]:
    """A migrated database with an empty log, for this test alone (owner's connection string).

    The events table refuses DELETE and TRUNCATE, so a clean log means a new database.
    """
    name = f"shoebox_test_{os.getpid()}_{secrets.token_hex(4)}"
    _create_database(postgres_server_url, name, template=migrated_template)
    try:
        yield _with_dbname(postgres_server_url, name)
    finally:
        _drop_database(postgres_server_url, name)


@pytest.fixture
def app_pool(fresh_database: str) -> Iterator[Pool]:
    """A pool on `fresh_database` connected as the application role, as the service runs."""
    pool = open_pool(app_conninfo(fresh_database, environ={}), max_size=16)
    try:
        yield pool
    finally:
        pool.close()
