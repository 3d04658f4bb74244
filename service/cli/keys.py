"""Commands for the API-key concern of the `shoebox` CLI: create, revoke and list keys."""

import getpass
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

import click
import psycopg

from events.postgres import PostgresEventStore, open_pool
from events.store import EventMetadata, EventStore
from service.application.keys import ApiKeyError, Role, create_key, list_keys, revoke_key
from service.application.operators import checked_operator
from service.application.upcasters import upcasters
from service.embedded import database_url
from service.runtime.settings import Settings

# Recorded as the actor of key events: the operator at the terminal, not an API caller.
CLI_ROLE = "cli"


@contextmanager
def _store() -> Iterator[EventStore]:
    try:
        with database_url(Settings.from_env()) as url, open_pool(url, max_size=1) as pool:
            yield PostgresEventStore(pool, upcasters=upcasters())
    except psycopg.errors.UndefinedTable as error:
        raise click.ClickException(
            "this database has no event log; run `shoebox migrate`"
        ) from error
    except psycopg.OperationalError as error:
        raise click.ClickException(f"cannot reach the database: {error}") from error


def _metadata() -> EventMetadata:
    return EventMetadata(actor=f"cli:{getpass.getuser()}", role=CLI_ROLE)


@click.group("keys")
def keys() -> None:
    """Create, revoke and list API keys."""


@keys.command("create")
@click.option(
    "--role",
    type=click.Choice([role.value for role in Role]),
    required=True,
    help="What it may do.",
)
@click.option("--name", required=True, help="Who holds it, e.g. the front end's name.")
@click.option(
    "--operator",
    default=None,
    help="The casino whose players it acts for. A frontend key without one belongs to the"
    " default operator; an ops or regulator key without one sees every operator.",
)
def create(role: str, name: str, operator: str | None) -> None:
    """Create a key and print it; it is shown this once and stored only as its SHA-256."""
    if operator is not None:
        try:
            checked_operator(operator)
        except ValueError as error:
            raise click.BadParameter(str(error), param_hint="--operator") from error
    try:
        with _store() as store:
            issued = create_key(store, name, Role(role), _metadata(), operator)
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--name") from error
    click.echo(f"key id: {issued.key.key_id}", err=True)
    click.echo(f"role:   {issued.key.role.value}", err=True)
    click.echo(f"name:   {issued.key.name}", err=True)
    click.echo(f"operator: {issued.key.operator or 'every operator'}", err=True)
    click.echo("The key below is shown once; keep it secret.", err=True)
    click.echo(issued.secret)


@keys.command("revoke")
@click.argument("key_id")
@click.option("--reason", required=True, help="Why, for the audit log.")
def revoke(key_id: str, reason: str) -> None:
    """Revoke a key; every server refuses it within about a second."""
    try:
        with _store() as store:
            key = revoke_key(store, key_id, reason, _metadata())
    except ApiKeyError as error:
        raise click.ClickException(str(error)) from error
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--reason") from error
    click.echo(f"revoked {key.key_id} ({key.name}, {key.role.value})")


@keys.group("signing-key")
def signing_key() -> None:
    """The Ed25519 key that signs checkpoints of the log (docs/verification.md)."""


@signing_key.command("create")
@click.option(
    "--out",
    "out",
    required=True,
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    help="The new key file; it must not exist. Keep it off the database's machine.",
)
def create_signing_key(out: Path) -> None:
    """Make a signing key in a file only its owner can read; print its public key and id."""
    from service.application.checkpoints import SigningKey
    from service.runtime.signing import write_key_file

    key = SigningKey.generate()
    try:
        write_key_file(out, key)
    except FileExistsError as error:
        raise click.BadParameter(
            f"{out} exists; a key is never overwritten", param_hint="--out"
        ) from error
    click.echo(f"wrote {out} (mode 0600); point SHOEBOX_SIGNING_KEY_FILE at it", err=True)
    click.echo(f"public key: {key.public_key}")
    click.echo(f"key id:     {key.key_id}")


@keys.command("list")
def list_command() -> None:
    """List every key: id, role, name, created, and revocation if any. Never the secret."""
    with _store() as store:
        all_keys = list_keys(store)
    if not all_keys:
        click.echo("no API keys")
    for key in all_keys:
        status = "live"
        if key.revoked_at is not None:
            status = f"revoked {_when(key.revoked_at)}: {key.revoke_reason}"
        operator = key.operator or "all operators"
        fields = [key.key_id, key.role.value, key.name, operator, _when(key.created_at), status]
        click.echo("\t".join(fields))


def _when(moment: datetime) -> str:
    return f"{moment:%Y-%m-%dT%H:%M:%SZ}"


commands: list[click.Command] = [keys]
