"""Apply the plain-SQL migrations in migrations/ with yoyo-migrations."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote, urlencode

import yoyo
from psycopg.conninfo import conninfo_to_dict

MIGRATIONS_DIR = Path(__file__).resolve().parent.parent / "migrations"


def yoyo_url(conninfo: str) -> str:
    """A yoyo URL for psycopg 3 from a libpq URL or key=value string.

    Every parameter but the database name travels in the query string, which yoyo passes to
    psycopg as keyword arguments; that keeps Unix-socket hosts and options intact.
    """
    params = {k: str(v) for k, v in conninfo_to_dict(conninfo).items() if v is not None}
    dbname = params.pop("dbname", "")
    query = urlencode(params)
    return f"postgresql+psycopg:///{quote(dbname, safe='')}" + (f"?{query}" if query else "")


def apply_migrations(admin_url: str, directory: Path = MIGRATIONS_DIR) -> list[str]:
    """Apply every pending migration as the database owner; return the ids applied."""
    backend = yoyo.get_backend(yoyo_url(admin_url))
    try:
        migrations = yoyo.read_migrations(str(directory))
        with backend.lock():
            pending = backend.to_apply(migrations)
            backend.apply_migrations(pending)
        return [migration.id for migration in pending]
    finally:
        backend.connection.close()
