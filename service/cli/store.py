"""Commands for the store concern of the `shoebox` CLI."""

import click

from events.migrations import apply_migrations
from service.runtime.settings import Settings


@click.command()
def migrate() -> None:
    """Apply pending schema migrations to DATABASE_URL, or to the embedded server if unset."""
    # Imported here: only a run without DATABASE_URL needs the embedded server's machinery.
    from service.embedded import database_url

    with database_url(Settings.from_env()) as url:
        applied = apply_migrations(url)
    click.echo(f"applied {len(applied)} migration(s)" + "".join(f"\n  {m}" for m in applied))


commands: list[click.Command] = [migrate]
