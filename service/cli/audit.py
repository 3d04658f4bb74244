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
            lost: list[str] = []
            unmet = _unmet(pool, store, kept, trusted_keys, lost)
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
    for why in lost:
        # A significant event, not a failure: the restore is itself in the log, and says so.
        click.echo(why)
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
    if kept and lost:
        click.echo(
            f"OK: the log extends the {len(kept) - len(lost)} other kept checkpoints;"
            f" {len(lost)} lost by a recorded restore"
        )
    elif kept:
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


@audit.command("record-loss")
@click.option(
    "--checkpoint",
    "kept_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    required=True,
    help="Signed checkpoints kept outside the database (SHOEBOX_CHECKPOINT_FILE, a regulator's).",
)
@click.option("--reason", required=True, help="Why the log lost its tail, for the record.")
@click.option(
    "--force",
    is_flag=True,
    help="Record a loss the kept checkpoints do not show (writes lost after the last one).",
)
@click.option("--dry-run", is_flag=True, help="Say what was lost and record nothing.")
def record_loss_command(kept_file: Path, reason: str, force: bool, dry_run: bool) -> None:
    """After a failover that lost data: record it in the log, and retire the open shoes.

    Run it with every Shoebox process stopped, before play resumes: it compares the log with
    the checkpoints kept outside it, and appends LogRestored at the log's head (what was kept),
    retiring and revealing every open shoe and voiding its round, as after a restore. Exit 0
    when recorded or nothing was lost, 1 when the log was rewritten rather than cut.
    """
    from service.application.actor import Actor
    from service.application.restores import (
        RestoreNotRecordableError,
        continuity,
        record_loss,
    )

    kept = _kept(kept_file)
    try:
        with database_url(Settings.from_env()) as url, open_pool(url, max_size=2) as pool:
            store = PostgresEventStore(pool, upcasters=upcasters())
            standing = continuity(store, kept)
            for why in standing.explained:
                click.echo(why)
            for lost in standing.lost:
                click.echo(
                    f"checkpoint at position {lost.position}: LOST (the log ends at"
                    f" {standing.head})"
                )
            if dry_run:
                if standing.rewritten:
                    positions = ", ".join(str(c.position) for c in standing.rewritten)
                    click.echo(f"REWRITTEN: the log holds other events at {positions}")
                    raise click.exceptions.Exit(1)
                return
            try:
                from service.cli.restore import place_queued_appends
                from service.runtime.seamless_wiring import owed_calls

                settings = Settings.from_env()
                recorded = record_loss(
                    store,
                    utc_now,
                    Actor(f"cli:{getpass.getuser()}", "cli"),
                    kept=kept,
                    reason=reason,
                    force=force,
                    seamless=settings.is_seamless,
                    owed=owed_calls(settings, pool),
                    place_queued=lambda: place_queued_appends(pool),
                )
            except RestoreNotRecordableError as error:
                click.echo(f"REWRITTEN: {error}", err=True)
                raise click.exceptions.Exit(1) from None
    except psycopg.OperationalError as error:
        raise AuditUnavailable(f"cannot reach the database: {error}") from error
    if recorded is None:
        click.echo(
            f"nothing recorded: the log (head {standing.head}) extends every kept checkpoint"
            " not already explained (--force records a loss they do not show)"
        )
        return
    retired = ", ".join(recorded.tables) or "none"
    click.echo(
        f"recorded LogRestored {recorded.restored.restore_id}: the log kept to position"
        f" {recorded.restored.last_position_kept}; shoes retired at tables: {retired}"
    )
    settings = Settings.from_env()
    if settings.seamless_wallets:
        # The wallets hold calls made in the lost tail: reconciled from the restore point,
        # the lost debits' rollbacks owed, the rest flagged (docs/wallets.md).
        from service.cli.wallet import _pool, restore_point, wallets_after_restore

        with _pool(settings) as wallet_pool:
            since = restore_point(wallet_pool)
            assert since is not None  # recorded just now
            if wallets_after_restore(settings, wallet_pool, since):
                click.echo("FLAGGED: see above; the operator settles these with the casino")


def refuse_to_start_on_cut_log(settings: Settings, url: str) -> None:
    """Stop a process before it starts on a log that lost checkpoints nobody recorded.

    The checkpoints the workers publish to SHOEBOX_CHECKPOINT_FILE are the log's memory of
    itself outside the database: a log that no longer extends them was cut (a failover to a
    standby that lacked the primary's last commits, a restore by other means than `shoebox
    restore`). Playing on would deal the lost rounds' cards again from their shoes.
    """
    path = settings.checkpoint_file
    if path is None or not path.is_file():
        return
    from service.application.restores import continuity

    last = _last_kept(path)
    if last is None:
        return
    with open_pool(url, max_size=1) as pool:
        standing = continuity(PostgresEventStore(pool, upcasters=upcasters()), [last])
    if standing.cut:
        raise click.ClickException(
            f"the log (head {standing.head}) does not extend the last checkpoint in {path}"
            f" (position {last.position}): it lost its tail, or was rewritten. Stop every"
            f" Shoebox process and run `shoebox audit record-loss --checkpoint {path}"
            ' --reason ...` before play resumes (docs/operations.md, "A failover that lost'
            ' data")'
        )


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


_TAIL_BYTES = 64 * 1024


def _last_kept(path: Path) -> CheckpointSigned | None:
    """The file's last checkpoint, read from its end: a year of them is a few hundred MB, and
    a process's start must not cost more as the file grows."""
    from service.application.checkpoints import CheckpointError, read_kept

    with path.open("rb") as kept:
        size = kept.seek(0, 2)
        kept.seek(max(0, size - _TAIL_BYTES))
        tail = kept.read().decode("utf-8", errors="replace")
    lines = [line for line in tail.splitlines() if line.strip()]
    if not lines:
        return None
    try:
        (last,) = read_kept(lines[-1:], f"{path} (last line)")
    except CheckpointError as error:
        raise AuditUnavailable(f"the kept checkpoints: {error}") from error
    return last


def _public_keys(keys: tuple[str, ...]) -> tuple[str, ...]:
    for key in keys:
        if not _PUBLIC_KEY.fullmatch(key):
            raise click.BadParameter(f"a public key is 64 lowercase hex characters, not {key!r}")
    return keys


def _unmet(
    pool: Pool,
    store: PostgresEventStore,
    kept: list[CheckpointSigned],
    trusted: tuple[str, ...],
    lost: list[str],
) -> list[str]:
    if not kept:
        return []
    from service.application.checkpoints import check_kept
    from service.application.restores import lost_by_restore, restores

    recorded = restores(store)
    named = [(p, r) for p, r in recorded if r.last_checkpoint_position is not None]

    with pool.connection() as conn:
        rows = conn.execute(
            "SELECT position, hash FROM events WHERE position = ANY(%s)",
            [[c.position for c in kept] + [r.last_checkpoint_position for _, r in named]],
        ).fetchall()
    hashes = {int(position): str(found) for position, found in rows}
    # A restore's record must itself be true: the checkpoint it says the log extends is there.
    false_claims = [
        f"restore recorded at position {at}: it names the checkpoint at position"
        f" {r.last_checkpoint_position} with hash {r.last_checkpoint_hash}, which the log"
        " does not hold"
        for at, r in named
        if r.last_checkpoint_position is not None
        and hashes.get(r.last_checkpoint_position) != r.last_checkpoint_hash
    ]
    return false_claims + check_kept(
        kept,
        hashes.get,
        trusted,
        explained=lambda checkpoint: lost_by_restore(checkpoint, recorded),
        lost=lost,
    )


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
