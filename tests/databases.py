"""Databases of a test's own on a PostgreSQL server, dropped when the test is done."""

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo


@contextmanager
def scratch_database(server_url: str, prefix: str) -> Iterator[str]:
    """A new, empty database on `server_url`'s server, its URL for the block; then dropped,
    with any session still in it. Its name carries the process id, so a leftover says whose."""
    name = f"{prefix}_{os.getpid()}_{secrets.token_hex(4)}"
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    params = conninfo_to_dict(server_url)
    params["dbname"] = name
    try:
        yield make_conninfo(**params)  # type: ignore[arg-type]
    finally:
        with psycopg.connect(server_url, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


def age_the_queue(database_url: str, seconds: float) -> None:
    """Make every append waiting in unsequenced_events look `seconds` older, as if no
    sequencer had run for that long (the queue refuses updates; this goes past its guard as
    the database's owner)."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("SET session_replication_role = replica")
        conn.execute(
            "UPDATE unsequenced_events SET queued_at = queued_at - make_interval(secs => %s)",
            [seconds],
        )
