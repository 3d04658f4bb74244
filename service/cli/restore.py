"""`shoebox restore`: point-in-time recovery with pgBackRest to a named position of the log.

A restore is aimed at a position of the log, never at a wall-clock time: `recorded_at` is the
service's clock, not the commit's, and a time names no exact event. The position is mapped to
the transaction that wrote it (its `xmin`), and recovery stops just after that transaction
commits (pgBackRest's `--type=xid`, inclusive). One transaction may write a whole range of
positions (group commit, or a sequencer's batch): the log is then restored to the end of the
range holding the position asked for, and the last position kept is reported.

The database is looked up while it still answers (a bad deploy, an operator's mistake). When
it does not (the primary's disk is lost), restore a scratch copy to the latest point first,
look the position up there with `--lookup-url`, and give the result to this command.
"""

from __future__ import annotations

import getpass
import json
import shlex
import subprocess
import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Final

import click
import psycopg

from events.postgres import Pool, connect_kwargs
from service.runtime.settings import Settings

if TYPE_CHECKING:
    from service.application.restores import RestoreRecorded

# Positions one transaction wrote are consecutive (appends commit in position order), so the
# end of the range is found through the primary key from the position on. A sequencer's batch
# is far smaller than this bound.
_BATCH_BOUND: Final = 1_000_000
_TARGET = """
WITH target AS (SELECT xmin AS xid FROM events WHERE position = %(position)s)
SELECT target.xid::text, min(e.position), max(e.position)
FROM target JOIN events AS e ON e.xmin = target.xid
WHERE e.position BETWEEN %(position)s - %(bound)s AND %(position)s + %(bound)s
GROUP BY target.xid
"""
_HEAD = "SELECT coalesce(max(position), 0) FROM events"
READY_WITHIN_SECONDS: Final = 120.0


class RestoreFailed(click.ClickException):
    """The restore could not be done, or did not land where it was aimed."""

    exit_code = 2


@dataclass(frozen=True, slots=True)
class Target:
    """Where recovery is to stop: the transaction that wrote `position`, and its range."""

    position: int
    xid: str
    first_position: int
    last_position: int


def find_target(url: str, position: int) -> Target:
    """The transaction that wrote `position` on the database at `url`, and the range it wrote."""
    with psycopg.connect(url, autocommit=True, **connect_kwargs(url)) as conn:
        row = conn.execute(_TARGET, {"position": position, "bound": _BATCH_BOUND}).fetchone()
    if row is None:
        raise RestoreFailed(f"the log has no event at position {position}")
    xid, first, last = row
    return Target(position, str(xid), int(first), int(last))


def _run(command: str, *arguments: str) -> str:
    words = [*shlex.split(command), *arguments]
    done = subprocess.run(words, capture_output=True, text=True, check=False)  # noqa: S603
    if done.returncode != 0:
        raise RestoreFailed(
            f"`{shlex.join(words)}` failed ({done.returncode}):\n{done.stdout}{done.stderr}"
        )
    return done.stdout


def _head_once_promoted(url: str) -> int:
    deadline = time.monotonic() + READY_WITHIN_SECONDS
    while True:
        try:
            with psycopg.connect(url, autocommit=True, **connect_kwargs(url)) as conn:
                row = conn.execute("SELECT pg_is_in_recovery()").fetchone()
                if row is not None and not row[0]:
                    head = conn.execute(_HEAD).fetchone()
                    return int(head[0]) if head is not None else 0
        except psycopg.OperationalError:
            pass  # still starting, or replaying
        if time.monotonic() > deadline:
            raise RestoreFailed(f"the restored server was not promoted in {READY_WITHIN_SECONDS}s")
        time.sleep(0.2)


@click.command("restore")
@click.option("--position", type=click.IntRange(min=1), required=True, help="Keep this position.")
@click.option("--stanza", default="shoebox", show_default=True, help="pgBackRest's stanza.")
@click.option(
    "--config",
    "config_file",
    default="/etc/pgbackrest/pgbackrest.conf",
    show_default=True,
    help="pgBackRest's configuration (deploy/pgbackrest/pgbackrest.conf).",
)
@click.option(
    "--pgbackrest",
    "pgbackrest",
    default="pgbackrest",
    show_default=True,
    help="How to run pgBackRest as the cluster's owner: `runuser -u postgres -- pgbackrest`.",
)
@click.option("--stop", "stop_command", required=True, help="Stops the PostgreSQL cluster.")
@click.option("--start", "start_command", required=True, help="Starts the PostgreSQL cluster.")
@click.option(
    "--lookup-url",
    default=None,
    help="Where to look the position up (DATABASE_URL otherwise): the live primary, or a"
    " scratch copy restored to its latest point.",
)
@click.option(
    "--archive-first/--no-archive-first",
    default=True,
    show_default=True,
    help="Archive the running cluster's current WAL before stopping it; off when it is gone.",
)
@click.option(
    "--record/--no-record",
    default=True,
    show_default=True,
    help="Append LogRestored and retire every open shoe once restored (before play resumes).",
)
@click.option(
    "--reason",
    default="point-in-time restore",
    show_default=True,
    help="Why the log was restored, recorded in LogRestored for the regulator.",
)
@click.option("--dry-run", is_flag=True, help="Print the recovery target and change nothing.")
def restore(
    position: int,
    stanza: str,
    config_file: str,
    pgbackrest: str,
    stop_command: str,
    start_command: str,
    lookup_url: str | None,
    archive_first: bool,
    record: bool,
    reason: str,
    dry_run: bool,
) -> None:
    """Restore the cluster to just after the transaction that wrote --position.

    Looks the position up, stops the cluster, has pgBackRest restore it (delta) with recovery
    to that transaction inclusive and promotion, starts it, and checks the restored head.
    Prints one JSON line: the position asked for, the transaction, the last position kept.
    Play must not resume until the restore is recorded (docs/operations.md).
    """
    url = Settings.from_env().database_url
    if not url:
        raise click.UsageError("set DATABASE_URL to the cluster being restored")
    target = find_target(lookup_url or url, position)
    click.echo(json.dumps({"recovery_target": asdict(target)}), err=True)
    if dry_run:
        return
    started = time.monotonic()
    if archive_first:
        # The WAL written since the last switch is still in pg_wal, which a restore empties:
        # `check` switches to a new segment and waits until the old one is archived.
        _run(pgbackrest, f"--config={config_file}", f"--stanza={stanza}", "check")
    _run(stop_command)
    _run(
        pgbackrest,
        f"--config={config_file}",
        f"--stanza={stanza}",
        "--delta",
        "--type=xid",
        f"--target={target.xid}",
        "--target-action=promote",
        "restore",
    )
    _run(start_command)
    head = _head_once_promoted(url)
    seconds = time.monotonic() - started
    if head != target.last_position:
        raise RestoreFailed(
            f"recovery was aimed at position {target.last_position} (transaction"
            f" {target.xid}) but the restored log ends at {head}"
        )
    outcome: dict[str, object] = {
        "restored": True,
        "position": position,
        "xid": target.xid,
        "last_position_kept": head,
        "seconds": round(seconds, 1),
    }
    if record:
        placed, recorded = _record(url, head, target.xid, reason)
        outcome["log_restored"] = {
            "restore_id": recorded.restored.restore_id,
            "last_position_kept": recorded.restored.last_position_kept,
            "events_placed_after_recovery": placed,
            "last_checkpoint_position": recorded.restored.last_checkpoint_position,
            "tables_retired": list(recorded.tables),
        }
        settings = Settings.from_env()
        if settings.seamless_wallets:
            # The wallets hold calls made after the restore point: reconciled from it, the
            # lost debits' rollbacks owed, the rest flagged (docs/wallets.md).
            from service.cli.wallet import _pool, restore_point, wallets_after_restore

            with _pool(settings) as pool:
                since = restore_point(pool)
                assert since is not None  # recorded just now
                outcome["wallets_flagged"] = wallets_after_restore(settings, pool, since, err=True)
    click.echo(json.dumps(outcome))


def place_queued_appends(pool: Pool) -> int:
    """Sequence what the queue holds, with no sequencer running; the events placed."""
    from events.postgres import one_statement
    from events.sequencer import place_queued

    with one_statement(pool) as conn:
        return place_queued(conn)


def _record(url: str, head: int, xid: str, reason: str) -> tuple[int, RestoreRecorded]:
    """Record the restore at `head`; first the events placed from the kept queue, if any.

    Recovery keeps every append committed before its target, and the lost timeline may not
    have sequenced them all by then: they wait in the queue, acknowledged. They are placed
    now, after the recovered head and before LogRestored, which names both ends.
    """
    from events.postgres import PostgresEventStore, open_pool
    from events.store import utc_now
    from service.application.actor import Actor
    from service.application.restores import RestoreNotRecordableError, record_restore
    from service.application.upcasters import upcasters
    from service.runtime.seamless_wiring import owed_calls

    settings = Settings.from_env()
    try:
        with open_pool(url, max_size=2) as pool:
            placed = place_queued_appends(pool)
            return placed, record_restore(
                PostgresEventStore(pool, upcasters=upcasters()),
                utc_now,
                Actor(f"cli:{getpass.getuser()}", "cli"),
                last_position_kept=head + placed,
                recovered_head=head,
                recovery_target=f"xid {xid}",
                reason=reason,
                seamless=settings.is_seamless,
                owed=owed_calls(settings, pool),
            )
    except RestoreNotRecordableError as error:
        raise RestoreFailed(str(error)) from error


commands: list[click.Command] = [restore]
