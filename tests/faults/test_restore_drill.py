"""The restore drill: pgBackRest backups, then a point-in-time restore to a named log position.

On a private Debian PostgreSQL 15 (Debian's pgBackRest 2.45 cannot back up the embedded
PostgreSQL 18) on a loopback port, archiving its WAL to a private repository with
deploy/pgbackrest's own files: Shoebox plays rounds; a full backup; more play; an incremental
backup; more play, with checkpoints signed and kept in a JSON Lines file. Then
deploy/pgbackrest/shoebox-pitr restores the cluster to the position that a kept checkpoint
signed, Shoebox serves on the restored cluster, and `shoebox audit verify --checkpoint`
passes over the checkpoints signed at or before it and reports the later one as a cut log.

The position is mapped to a recovery target through the transaction that wrote it, never a
wall-clock time; one transaction may write a range of positions, so the drill checks that the
restore reports, and keeps, exactly the end of the range.
"""

from __future__ import annotations

import json
import os
import secrets
import shlex
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner
from psycopg import sql

from events.migrations import apply_migrations
from service.cli import main
from service.embedded.postgres import _grant_search, _postgres_account
from service.embedded.processes import Account, free_port, run_as
from tests.e2e.servers import SHOEBOX, serve
from tests.faults.load import Load, cli_key, setup_tables

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy" / "pgbackrest"
PG15 = Path("/usr/lib/postgresql/15/bin")
ENVIRONMENT = {"SHOEBOX_RATE_LIMIT_PER_SECOND": "0", "REDIS_URL": ""}
TABLES = 2


def _missing() -> str | None:
    if shutil.which("pgbackrest") is None:
        return "pgbackrest is not installed (`make pgbackrest` installs Debian's)"
    if not (PG15 / "postgres").is_file():
        return f"Debian's PostgreSQL 15 is not in {PG15} (`make pgbackrest` installs it)"
    if os.geteuid() == 0 and shutil.which("runuser") is None:
        return "runuser (util-linux) is needed to run PostgreSQL 15 as an unprivileged account"
    return None


pytestmark = [pytest.mark.slow, pytest.mark.skipif(_missing() is not None, reason=_missing() or "")]


class Pitr:
    """A private PostgreSQL 15 cluster archiving to a private pgBackRest repository."""

    def __init__(self, scratch: Path, account: Account | None) -> None:
        self.scratch = scratch
        self.account = account
        self.pgdata = scratch / "pgdata"
        self.config = scratch / "pgbackrest.conf"
        self.port = free_port()
        self.log = scratch / "postgres.log"

    @property
    def server_url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/shoebox"

    def as_owner(self, *command: str | Path) -> str:
        """A command line that runs `command` as the cluster's owner."""
        words = [str(word) for word in command]
        if self.account is not None:
            words = ["runuser", "-u", _account_name(), "--", *words]
        return shlex.join(words)

    def run(self, *command: str | Path, timeout: float = 120) -> str:
        code, output = run_as(
            self.account, command, cwd=self.scratch, timeout=timeout, log_path=self.log
        )
        assert code == 0, f"{command}: {output}"
        return output

    def create(self) -> None:
        for name in ("repo", "log", "lock", "spool", "socket"):
            (self.scratch / name).mkdir()
        values = {
            "REPO": self.scratch / "repo",
            "CIPHER_PASS": secrets.token_urlsafe(24),
            "LOG": self.scratch / "log",
            "LOCK": self.scratch / "lock",
            "SPOOL": self.scratch / "spool",
            "PGDATA": self.pgdata,
            "PORT": self.port,
            "SOCKET": self.scratch / "socket",
            "CONFIG": self.config,
        }
        self.config.write_text(_fill(DEPLOY / "pgbackrest.conf", values))
        self.config.chmod(0o600)
        self._hand_over()
        self.run(
            PG15 / "initdb",
            "--pgdata",
            self.pgdata,
            "--username",
            "postgres",
            "--auth",
            "trust",
            "--encoding",
            "UTF8",
            "--no-locale",
        )
        with (self.pgdata / "postgresql.conf").open("a") as conf:
            conf.write(
                f"\nport = {self.port}\nlisten_addresses = '127.0.0.1'\n"
                f"unix_socket_directories = '{self.scratch / 'socket'}'\n"
            )
            conf.write(_fill(DEPLOY / "postgresql.conf", values))
        self.start()
        self.pgbackrest("stanza-create")
        with psycopg.connect(self.server_url, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier("shoebox")))
        apply_migrations(self.url)

    def _hand_over(self) -> None:
        if self.account is None:
            return
        for path in [self.scratch, *self.scratch.rglob("*")]:
            os.chown(path, self.account.uid, self.account.gid)
        _grant_search(self.scratch)

    def start_command(self) -> str:
        return self.as_owner(
            PG15 / "pg_ctl", "--pgdata", self.pgdata, "--log", self.log, "--wait", "start"
        )

    def stop_command(self) -> str:
        return self.as_owner(
            PG15 / "pg_ctl", "--pgdata", self.pgdata, "--mode", "fast", "--wait", "stop"
        )

    def start(self) -> None:
        self.run(PG15 / "pg_ctl", "--pgdata", self.pgdata, "--log", self.log, "--wait", "start")

    def stop(self) -> None:
        if (self.pgdata / "postmaster.pid").exists():
            self.run(PG15 / "pg_ctl", "--pgdata", self.pgdata, "--mode", "fast", "--wait", "stop")

    def pgbackrest(self, *arguments: str) -> str:
        return self.run("pgbackrest", f"--config={self.config}", "--stanza=shoebox", *arguments)


def _account_name() -> str:
    import pwd

    from service.embedded.postgres import POSTGRES_ACCOUNT

    return pwd.getpwnam(POSTGRES_ACCOUNT).pw_name


def _fill(template: Path, values: dict[str, Any]) -> str:
    text = template.read_text()
    for name, value in values.items():
        text = text.replace(f"@{name}@", str(value))
    assert "@" not in "".join(
        line for line in text.splitlines() if not line.lstrip().startswith("#")
    ), f"{template} has a placeholder left"
    return text


@contextmanager
def pitr_cluster(logs: Path) -> Iterator[Pitr]:
    # Under /tmp, short: the socket's path must fit in 107 bytes, and pytest's root may be
    # private (0700) to the unprivileged account.
    scratch = Path(tempfile.mkdtemp(prefix="sbx-pitr-", dir="/tmp"))
    cluster = Pitr(scratch, _postgres_account())
    try:
        cluster.create()
        yield cluster
    finally:
        try:
            cluster.stop()
        finally:
            logs.mkdir(parents=True, exist_ok=True)
            for log in [cluster.log, *scratch.glob("log/*.log")]:
                if log.exists():
                    shutil.copy(log, logs / log.name)
            shutil.rmtree(scratch, ignore_errors=True)


def play(base: str, frontend: str, pairs: list[tuple[str, str]], rounds: int) -> int:
    """Play `rounds` rounds at each table; the requests acknowledged."""
    load = Load(frontend)
    load.base = base
    acknowledged = 0
    for _ in range(rounds):
        for table, player in pairs:
            bet = {"player_id": player, "spot": "banker", "stake_pence": 100}
            acknowledged += load.request("POST", f"/v1/tables/{table}/bets", bet).acknowledged
            dealt = load.request("POST", f"/v1/tables/{table}/deal", {"player_id": player})
            acknowledged += dealt.acknowledged
    return acknowledged


def cli(url: str, *arguments: str, **env: str) -> Any:
    return CliRunner().invoke(main, list(arguments), env={"DATABASE_URL": url, **env})


def sign(url: str, key: Path, kept: Path) -> dict[str, Any]:
    signed = cli(url, "audit", "checkpoint", "--out", str(kept), SHOEBOX_SIGNING_KEY_FILE=str(key))
    assert signed.exit_code == 0, signed.output
    line: dict[str, Any] = json.loads(signed.stdout)
    return line


def backup_sizes(cluster: Pitr) -> list[tuple[str, int, int]]:
    """Each backup's type, database size and size in the repository (bytes)."""
    (stanza,) = json.loads(cluster.pgbackrest("info", "--output=json"))
    return [
        (b["type"], int(b["info"]["size"]), int(b["info"]["repository"]["delta"]))
        for b in stanza["backup"]
    ]


def test_a_restore_to_a_named_position_keeps_every_checkpoint_signed_up_to_it(
    tmp_path: Path,
) -> None:
    started = time.monotonic()
    key, kept = tmp_path / "signing.key", tmp_path / "kept.jsonl"
    with pitr_cluster(tmp_path / "logs") as cluster:
        url = cluster.url
        made = cli(url, "keys", "signing-key", "create", "--out", str(key))
        assert made.exit_code == 0, made.output
        ops, frontend = cli_key(url, "ops"), cli_key(url, "frontend")
        with serve(url, tmp_path / "serve.log", ENVIRONMENT, workers=1) as server:
            pairs = setup_tables(server.base, ops, frontend, TABLES)
            assert play(server.base, frontend, pairs, 5) > 0
            cluster.pgbackrest("--type=full", "backup")
            assert play(server.base, frontend, pairs, 5) > 0
            cluster.pgbackrest("--type=incr", "backup")
            checkpoints = []
            for _ in range(3):
                assert play(server.base, frontend, pairs, 3) > 0
                checkpoints.append(sign(url, key, kept))
            assert play(server.base, frontend, pairs, 2) > 0
        sizes = backup_sizes(cluster)
        assert [kind for kind, _, _ in sizes] == ["full", "incr"]
        with psycopg.connect(url) as conn:
            row = conn.execute("SELECT max(position) FROM events").fetchone()
        assert row is not None
        head_before = int(row[0])

        # Restore to the position the second checkpoint signed.
        position = int(checkpoints[1]["position"])
        env = {
            **os.environ,
            "DATABASE_URL": url,
            "SHOEBOX": str(SHOEBOX),
            "PGBACKREST": cluster.as_owner("pgbackrest"),
            "PGBACKREST_CONFIG": str(cluster.config),
            "PG_STOP": cluster.stop_command(),
            "PG_START": cluster.start_command(),
        }
        restored = subprocess.run(
            [str(DEPLOY / "shoebox-pitr"), str(position)],
            env=env,
            cwd=cluster.scratch,
            capture_output=True,
            text=True,
            check=False,
            timeout=300,
        )
        assert restored.returncode == 0, restored.stdout + restored.stderr
        outcome = json.loads(restored.stdout.strip().splitlines()[-1])
        target = json.loads(restored.stderr.strip().splitlines()[-1])["recovery_target"]
        last_kept = int(outcome["last_position_kept"])
        assert target["first_position"] <= position <= last_kept == target["last_position"]
        assert last_kept < int(checkpoints[2]["position"]) <= head_before

        # Any position of the range maps to the same transaction, hence to the same end.
        first = int(target["first_position"])
        looked_up = cli(
            url, "restore", "--position", str(first), "--stop", "-", "--start", "-", "--dry-run"
        )
        assert looked_up.exit_code == 0, looked_up.output
        again = json.loads(looked_up.output.strip().splitlines()[-1])["recovery_target"]
        assert (again["xid"], again["last_position"]) == (target["xid"], last_kept)

        # The restore is recorded before play resumes: LogRestored names the last position
        # kept and the last checkpoint it extends; every open shoe is retired and revealed.
        recorded = outcome["log_restored"]
        # The second checkpoint signed `position`, but its own CheckpointSigned came after it
        # and was not kept: the last checkpoint recorded in the restored log is the first.
        # The kept second one is extended all the same (below).
        assert recorded["last_checkpoint_position"] == checkpoints[0]["position"]
        assert sorted(recorded["tables_retired"]) == sorted(table for table, _ in pairs)
        with psycopg.connect(url) as conn:
            types = [
                str(t)
                for (t,) in conn.execute(
                    "SELECT type FROM events WHERE position > %s ORDER BY position", [last_kept]
                )
            ]
        # Appends committed before the target that the lost timeline had not sequenced yet
        # are placed first (rarely any: they must commit within a batch's few milliseconds).
        placed = int(recorded["events_placed_after_recovery"])
        assert recorded["last_position_kept"] == last_kept + placed
        assert types[placed] == "LogRestored"
        assert types.count("ShoeRetired") == types.count("ShoeRevealed") == TABLES

        kept_lines = kept.read_text().splitlines()
        up_to = tmp_path / "kept-up-to-n.jsonl"
        up_to.write_text("\n".join(kept_lines[:2]) + "\n")
        verified = cli(url, "audit", "verify", "--checkpoint", str(up_to))
        assert verified.exit_code == 0, verified.output
        assert "extends all 2 kept checkpoints" in verified.output

        # Shoebox serves on the restored cluster; its tables stay suspended until ops reopen
        # them, then play goes on with a new shoe and new checkpoints.
        with serve(url, tmp_path / "serve-restored.log", ENVIRONMENT, workers=1) as server:
            load = Load(frontend)
            load.base = server.base
            for table, _ in pairs:
                body = {"reason": "restore recorded; resumed"}
                reopened = load.request("POST", f"/v1/tables/{table}/reopenings", body, ops)
                assert reopened.status == 201, reopened
            assert play(server.base, frontend, pairs, 3) > 0
            kept_after = sign(url, key, kept)
        assert int(kept_after["position"]) > last_kept

        # The checkpoint lost by the recorded restore is reported as such, the others extend.
        lost = cli(url, "audit", "verify", "--checkpoint", str(kept))
        assert lost.exit_code == 0, lost.output
        assert f"checkpoint at position {checkpoints[2]['position']}: LOST by the restore" in (
            lost.output
        )
        assert "extends the 3 other kept checkpoints; 1 lost by a recorded restore" in lost.output

    print(
        f"\nrestore drill: position {position} (transaction {target['xid']}, positions"
        f" {target['first_position']}..{last_kept}), head before {head_before};"
        + "".join(
            f" {kind} backup {size / 1e6:.1f} MB ({delta / 1e3:.0f} kB in the repository);"
            for kind, size, delta in sizes
        )
        + f" restore {outcome['seconds']} s; drill {time.monotonic() - started:.0f} s;"
        f" verify: {' / '.join(lost.output.strip().splitlines()[-3:])}"
    )
