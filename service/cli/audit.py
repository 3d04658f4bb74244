"""Commands for the audit concern of the `shoebox` CLI."""

import getpass
import re
import time
from dataclasses import dataclass, replace
from pathlib import Path

import click
import psycopg

from domain.audit import CheckpointSigned
from events.canonical import BreakKind, ChainBreak, verify_rows
from events.postgres import READ_AHEAD, Pool, PostgresEventStore, open_pool
from events.store import GENESIS_HASH, utc_now
from service.application.upcasters import upcasters
from service.embedded import database_url
from service.runtime.settings import Settings

DEFAULT_BATCH_SIZE = 10_000
# Often enough to show a long walk is alive, rarely enough not to flood a terminal.
PROGRESS_EVERY_SECONDS = 2.0

_HASH_BEFORE = "SELECT hash FROM events WHERE position = %s"
_PUBLIC_KEY = re.compile(r"[0-9a-f]{64}")


class AuditUnavailable(click.ClickException):
    """The chain could not be walked at all; distinct from a walk that found a break."""

    exit_code = 2


@click.group("audit")
def audit() -> None:
    """Check the tamper-evident event log."""


@audit.command("verify")
@click.option(
    "--from-position",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="First position to verify; its prev_hash is taken from the event before it.",
)
@click.option(
    "--batch-size",
    type=click.IntRange(min=1),
    default=DEFAULT_BATCH_SIZE,
    show_default=True,
    help="Events read per query.",
)
@click.option(
    "--checkpoint",
    "kept_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="Signed checkpoints you kept: the log must still hold each signed head.",
)
@click.option(
    "--trusted-key",
    "trusted_keys",
    metavar="HEX",
    multiple=True,
    callback=lambda _context, _option, keys: _public_keys(keys),
    help="An Ed25519 public key (64 hex) the kept checkpoints' keys must descend from"
    " (repeatable); without one, the kept file's first key is trusted on first use.",
)
def verify(
    from_position: int, batch_size: int, kept_file: Path | None, trusted_keys: tuple[str, ...]
) -> None:
    """Walk the hash chain and name the first broken link; exit 1 if there is one.

    With --checkpoint, the log must also extend every checkpoint kept outside the database,
    so a log cut short or rewritten and rehashed from some point on fails too. The kept
    file's keys are anchored on --trusted-key, as shoebox-verify's are.
    """
    if trusted_keys and kept_file is None:
        raise click.UsageError("--trusted-key anchors the keys of --checkpoint; give that too")
    kept = _kept(kept_file)
    try:
        # The batches read ahead each need a connection, and the head check one more.
        with (
            database_url(Settings.from_env()) as url,
            open_pool(url, max_size=READ_AHEAD + 1) as pool,
        ):
            store = PostgresEventStore(pool, upcasters=upcasters())
            prev_hash = _hash_before(pool, from_position)
            head = store.head()
            broken, last = _walk(store, from_position, prev_hash, batch_size, head)
            unmet = _unmet(pool, kept, trusted_keys)
    except psycopg.errors.UndefinedTable as error:
        raise AuditUnavailable(
            "this database has no event log; run `shoebox migrate` first"
        ) from error
    except psycopg.OperationalError as error:
        raise AuditUnavailable(f"cannot reach the database: {error}") from error
    if broken is not None:
        link, stream_id = broken
        if link.position > from_position:
            click.echo(f"positions {from_position}..{link.position - 1} verify")
        click.echo(f"BROKEN at position {link.position} (stream {stream_id}): {_what(link)}")
        raise click.exceptions.Exit(1)
    if unmet:
        for problem in unmet:
            click.echo(f"BROKEN {problem}")
        raise click.exceptions.Exit(1)
    if last is None:
        click.echo(f"OK: no events from position {from_position} on")
    else:
        count = last.position - from_position + 1
        click.echo(
            f"OK: {count} events verified, positions {from_position}..{last.position},"
            f" head hash {last.hash}"
        )
    if kept:
        click.echo(f"OK: the log extends all {len(kept)} kept checkpoints")
        if not trusted_keys:
            # Anyone who can write the kept file could have signed it with a key of their
            # own: without an anchor, the file vouches only for itself.
            click.echo(
                f"note: the keys of {kept_file} are trusted from its first line (key"
                f" {kept[0].key_id[:16]}, trust on first use); pass --trusted-key to anchor them"
            )


@audit.command("checkpoint")
@click.option(
    "--out",
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    default=None,
    help="Also append the checkpoint to this file (SHOEBOX_CHECKPOINT_FILE otherwise).",
)
def checkpoint(out: Path | None) -> None:
    """Sign the log's head now, record it in the log, and print it as a JSON line."""
    from events.merkle_store import PostgresTree
    from service.application.actor import Actor
    from service.application.checkpoints import CheckpointError, kept_line
    from service.runtime.signing import checkpoint_service, publish, publish_note

    settings = Settings.from_env()
    if out is not None:
        settings = replace(settings, checkpoint_file=out)
    try:
        with database_url(settings) as url, open_pool(url, max_size=1) as pool:
            service = checkpoint_service(
                settings,
                PostgresEventStore(pool, upcasters=upcasters()),
                utc_now,
                PostgresTree(pool),
            )
            if service is None:
                raise click.ClickException(
                    "no signing key: set SHOEBOX_SIGNING_KEY_FILE"
                    " (make one with `shoebox keys signing-key create --out FILE`)"
                )
            signed = service.sign_head(Actor(f"cli:{getpass.getuser()}", "cli"))
            publish_note(settings, service.latest_tree())
    except CheckpointError as error:
        raise click.ClickException(str(error)) from error
    except psycopg.OperationalError as error:
        raise AuditUnavailable(f"cannot reach the database: {error}") from error
    if signed is None:
        raise click.ClickException("the log is empty: there is no head to sign")
    publish(settings, signed)
    click.echo(kept_line(signed))


@audit.command("tree")
def tree() -> None:
    """Bring the log's Merkle tree up to the head now, and print its size and root.

    The checkpoint job does this before it signs; run it once by hand to backfill the tree of
    a long log before the first tree checkpoint (each batch is its own transaction, so it
    can be stopped and resumed).
    """
    import base64

    from events.merkle import root
    from events.merkle_store import PostgresTree, integrate

    settings = Settings.from_env()
    started = time.monotonic()
    try:
        with database_url(settings) as url, open_pool(url, max_size=1) as pool:
            store, nodes = PostgresEventStore(pool, upcasters=upcasters()), PostgresTree(pool)
            before = nodes.size()
            size = integrate(store, nodes, up_to=store.head())
            tree_root = root(size, nodes)
    except psycopg.OperationalError as error:
        raise AuditUnavailable(f"cannot reach the database: {error}") from error
    click.echo(
        f"tree: {size} leaves ({size - before} added in {time.monotonic() - started:.1f} s),"
        f" root {base64.b64encode(tree_root).decode()}"
    )


def _what(link: ChainBreak) -> str:
    """What is wrong at a broken link, on one line."""
    if link.kind is BreakKind.UNREADABLE:
        # A damaged value can be anything: keep the line one line.
        found = " ".join(link.found.split())
        return f"{link.expected} cannot be verified: {found}"
    return f"{link.kind} expected {link.expected}, found {link.found}"


def _kept(path: Path | None) -> list[CheckpointSigned]:
    if path is None:
        return []
    from service.application.checkpoints import CheckpointError, read_kept

    try:
        with path.open(encoding="utf-8", errors="strict") as lines:
            return read_kept(lines, str(path))
    except (CheckpointError, UnicodeDecodeError) as error:
        raise AuditUnavailable(f"the kept checkpoints: {error}") from error


def _public_keys(keys: tuple[str, ...]) -> tuple[str, ...]:
    for key in keys:
        if not _PUBLIC_KEY.fullmatch(key):
            raise click.BadParameter(f"a public key is 64 lowercase hex characters, not {key!r}")
    return keys


def _unmet(pool: Pool, kept: list[CheckpointSigned], trusted: tuple[str, ...]) -> list[str]:
    if not kept:
        return []
    from service.application.checkpoints import check_kept

    with pool.connection() as conn:
        rows = conn.execute(
            "SELECT position, hash FROM events WHERE position = ANY(%s)",
            [[c.position for c in kept]],
        ).fetchall()
    hashes = {int(position): str(found) for position, found in rows}
    return check_kept(kept, hashes.get, trusted)


def _hash_before(pool: Pool, position: int) -> str:
    """The hash that the event at `position` must carry as its prev_hash."""
    if position == 1:
        return GENESIS_HASH
    with pool.connection() as conn:
        row = conn.execute(_HASH_BEFORE, [position - 1]).fetchone()
    if row is None:
        raise AuditUnavailable(f"there is no event at position {position - 1} to start after")
    return str(row[0])


@dataclass(frozen=True, slots=True)
class _Verified:
    """The last link that verified."""

    position: int
    hash: str


def _walk(
    store: PostgresEventStore, start: int, prev_hash: str, batch_size: int, head: int
) -> tuple[tuple[ChainBreak, str] | None, _Verified | None]:
    """The first break (with its stream) and the last event verified."""
    last: _Verified | None = None
    after = start - 1
    shown_at = time.monotonic()
    # Raw rows as recorded (never upcast: the hash covers the payload as it was written),
    # read a batch ahead and rehashed without building an event object for each.
    batches = store.iter_rows(after, batch_size)
    while True:
        try:
            rows = next(batches, None)
        except (psycopg.DataError, ValueError) as error:
            # verify_rows names a damaged row itself; this is for damage the database driver
            # cannot even hand over, so the batch, not the row, is what can be named.
            unreadable = f"a row in positions {after + 1}..{after + batch_size}"
            damaged = ChainBreak(after + 1, BreakKind.UNREADABLE, unreadable, str(error))
            return (damaged, "unknown"), last
        if rows is None:
            return None, last
        link = verify_rows(rows, prev_hash, first_position=after + 1)
        if link is not None:
            found = next((row for row in rows if row[0] >= link.position), rows[0])
            return (link, found[1]), last
        last = _Verified(rows[-1][0], rows[-1][10])
        after, prev_hash = last.position, last.hash
        if time.monotonic() - shown_at >= PROGRESS_EVERY_SECONDS:
            shown_at = time.monotonic()
            click.echo(f"... verified up to position {after} of {head}", err=True)


commands: list[click.Command] = [audit]
