"""Apply the plain-SQL migrations in migrations/ with yoyo-migrations."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import quote, urlencode

import yoyo
from psycopg.conninfo import conninfo_to_dict

from events.postgres import connect_kwargs

MIGRATIONS_DIR = Path(__file__).resolve().parent.parent / "migrations"
"""The migrations beside the source tree, where a checkout or an editable install finds them."""
MIGRATIONS_DIR_VARIABLE = "SHOEBOX_MIGRATIONS_DIR"
APPLIED_TABLE = yoyo.migrations.default_migration_table
"""yoyo's list of applied migrations; migration 0008 lets the application role read it."""


def applied_migrations_query() -> str:
    """The query that lists the ids of the applied migrations."""
    return f"SELECT migration_id FROM {APPLIED_TABLE}"  # noqa: S608 - yoyo's constant name


def migrations_dir() -> Path:
    """SHOEBOX_MIGRATIONS_DIR, else MIGRATIONS_DIR.

    An installed wheel (the container image) has no source tree around its packages, so the
    image copies migrations/ somewhere and names it in the variable.
    """
    configured = os.environ.get(MIGRATIONS_DIR_VARIABLE)
    return Path(configured) if configured else MIGRATIONS_DIR


def yoyo_url(conninfo: str) -> str:
    """A yoyo URL for psycopg 3 from a libpq URL or key=value string.

    Every parameter but the database name travels in the query string, which yoyo passes to
    psycopg as keyword arguments; that keeps Unix-socket hosts and options intact.
    """
    params = {k: str(v) for k, v in conninfo_to_dict(conninfo).items() if v is not None}
    # The keepalives and connect timeout of every other connection (events/postgres.py):
    # migrating holds a lock that a lost host must not keep.
    params.update({k: str(v) for k, v in connect_kwargs(conninfo).items()})
    dbname = params.pop("dbname", "")
    query = urlencode(params)
    return f"postgresql+psycopg:///{quote(dbname, safe='')}" + (f"?{query}" if query else "")


def apply_migrations(admin_url: str, directory: Path | None = None) -> list[str]:
    """Apply every pending migration as the database owner; return the ids applied."""
    directory = directory if directory is not None else migrations_dir()
    if not any(directory.glob("*.sql")):
        # yoyo would apply nothing and say nothing; a misplaced directory must not pass.
        raise FileNotFoundError(f"no migrations in {directory}; set {MIGRATIONS_DIR_VARIABLE}")
    backend = yoyo.get_backend(yoyo_url(admin_url))
    try:
        migrations = yoyo.read_migrations(str(directory))
        with backend.lock():
            pending = backend.to_apply(migrations)
            backend.apply_migrations(pending)
        return [migration.id for migration in pending]
    finally:
        backend.connection.close()
