"""Commands for the regulator concern of the `shoebox` CLI: export a table's log, verify one."""

import sys
from datetime import UTC, datetime

import click
import orjson

from events.postgres import PostgresEventStore, open_pool
from service.application.upcasters import upcasters
from service.embedded import database_url
from service.regulator.export import build_export, write_lines
from service.regulator.log_index import PostgresLogIndex
from service.runtime.settings import Settings


def _utc(value: datetime) -> datetime:
    # click parses naive datetimes; a regulator's times are UTC unless they say otherwise.
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


_FORMATS = ["%Y-%m-%d", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M:%S"]


@click.command("export")
@click.option("--table", "table_id", required=True, help="The table whose events to export.")
@click.option("--from", "start", type=click.DateTime(_FORMATS), required=True, help="UTC.")
@click.option("--to", "end", type=click.DateTime(_FORMATS), required=True, help="UTC.")
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False, writable=True),
    default="-",
    show_default=True,
    help="File to write; - for standard output.",
)
def export(table_id: str, start: datetime, end: datetime, output: str) -> None:
    """Write a table's events in a time range, and its revealed seeds, as JSON Lines.

    From the read replica when DATABASE_READ_URL names one: an export only reads, and a long
    one is kept from replay conflicts there by hot_standby_feedback (docs/operations.md).
    """
    settings = Settings.from_env()
    with database_url(settings) as url, open_pool(settings.database_read_url or url) as pool:
        store = PostgresEventStore(pool, upcasters=upcasters())
        index = PostgresLogIndex(pool)
        lines = build_export(store, table_id, _utc(start), _utc(end), index)
        if output == "-":
            for line in lines:
                sys.stdout.buffer.write(orjson.dumps(line) + b"\n")
            return
        count = write_lines(lines, output)
    click.echo(f"wrote {count} lines to {output}", err=True)


@click.command(
    "verify",
    context_settings={"ignore_unknown_options": True, "help_option_names": []},
    add_help_option=False,
)
@click.argument("arguments", nargs=-1, type=click.UNPROCESSED)
def verify(arguments: tuple[str, ...]) -> None:
    """Check an export offline with the independent verifier (`shoebox verify --help`).

    The same code as the `shoebox-verify` command of the separate distribution in verifier/,
    which shares nothing with this server: a regulator can run it without Shoebox installed.
    """
    try:
        from shoebox_verify.cli import main as shoebox_verify
    except ImportError as error:
        raise click.ClickException(
            "the verifier is not installed: `pip install ./verifier` (make test installs it)"
        ) from error
    raise click.exceptions.Exit(shoebox_verify(list(arguments)))


@click.command("recover")
def recover_command() -> None:
    """Complete rounds left due but undealt by a crash; void those whose shoe secret is lost."""
    from events.snapshots import PostgresSnapshotStore
    from events.store import utc_now
    from service.application.game.open_rounds import PostgresOpenRounds
    from service.application.game.recovery import recover
    from service.application.game.tables import GameService
    from service.runtime.seamless_wiring import owed_calls

    settings = Settings.from_env()
    with database_url(settings) as url, open_pool(url) as pool:
        store = PostgresEventStore(pool, upcasters=upcasters())
        games = GameService(
            store,
            utc_now,
            snapshots=PostgresSnapshotStore(pool, utc_now),
            seamless=settings.is_seamless,
            owed=owed_calls(settings, pool),
        )
        open_rounds = PostgresOpenRounds(pool, upcasters())
        recovered = recover(store, games, utc_now, open_rounds)
    for outcome in recovered:
        click.echo(f"{outcome.action}: round {outcome.round_id}: {outcome.detail}")
    click.echo(f"recovered {len(recovered)} interrupted round(s)")


commands: list[click.Command] = [export, verify, recover_command]
