"""The failover drill: the primary's host is lost under load, Patroni promotes its standby.

deploy/patroni/cluster starts a private cluster on loopback ports (1 etcd, 3 PostgreSQL 15 under
Patroni in strict synchronous mode, HAProxy); never the shared PostgreSQL. `shoebox serve` and
`shoebox worker` run against HAProxy's primary port, threads play rounds, and then the primary's
host is lost: its Patroni, its postmaster and every PostgreSQL process of that node are
SIGKILLed at once, so nothing on it restarts anything. Then:

- Patroni promotes the synchronous standby, on another node, once the leader key expires;
- Shoebox serves writes again within 30 s of the kill, without being restarted;
- while there is no primary, every request that fails is a 503 with Retry-After, never a 500,
  never cut off or left to the client's timeout;
- every request acknowledged with a 2xx, before, during and after, is in the log of the new
  primary (synchronous replication: nothing acknowledged is lost);
- the sequencer role resumed on its own: positions moved past the head at the kill, no
  append is left unsequenced, and the positions are gapless;
- `shoebox audit verify` passes on the new primary;
- `shoebox serve` reads from HAProxy's replica port (DATABASE_READ_URL), and reads sending back
  their write's `Shoebox-Consistency` token, before, during and after the failover, never
  miss that write when exact (a table just created) and never answer 500; a read model's
  (a statement) is stale only when answered by the primary after its 2 s wait ran out, as
  docs/api.md allows (tests/faults/tokened_reads.py).

With no synchronous standby at all: tests/faults/test_failover_no_standby.py.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis
from click.testing import CliRunner
from psycopg import sql

from events.migrations import apply_migrations
from service.cli import main
from tests.e2e.servers import serve
from tests.faults.figures import Figures
from tests.faults.load import (
    REQUEST_TIMEOUT_SECONDS,
    Load,
    Sent,
    check_books,
    cli_key,
    setup_tables,
    shoebox,
)
from tests.faults.private_servers import private_redis
from tests.faults.tokened_reads import TokenedReads
from tests.ports import port_block

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "deploy" / "patroni" / "cluster"
CLUSTER_PORTS = 25  # deploy/patroni/cluster's layout from its base port
PG15 = Path("/usr/lib/postgresql/15/bin")
TABLES = 3
RECOVERY_BOUND_SECONDS = 30.0
AFTER_RECOVERY_SECONDS = 3.0
SEQUENCER_BOUND_SECONDS = 30.0
REPLICAS = ("replica", "sync_standby")


def _missing() -> str | None:
    for command in ("patroni", "etcd", "haproxy"):
        if shutil.which(command) is None:
            return f"{command} is not installed (`make ha-packages` installs Debian's)"
    if not (PG15 / "postgres").is_file():
        return f"Debian's PostgreSQL 15 is not in {PG15} (`make ha-packages` installs it)"
    if os.geteuid() == 0:
        try:
            import pwd

            pwd.getpwnam("postgres")
        except KeyError:
            return "as root, the nodes run as Debian's `postgres` account, which is missing"
    return None


pytestmark = [pytest.mark.slow, pytest.mark.skipif(_missing() is not None, reason=_missing() or "")]


@dataclass(frozen=True, slots=True)
class Cluster:
    root: Path
    state: dict[str, Any]

    @property
    def read_url(self) -> str:
        """HAProxy's replica port: a running streaming standby, balanced."""
        return f"postgresql://postgres@127.0.0.1:{self.state['ports']['replica']}/shoebox"

    @property
    def server_url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.state['ports']['primary']}/postgres"

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.state['ports']['primary']}/shoebox"

    def node_of_port(self, port: int) -> str:
        nodes: dict[str, dict[str, int]] = self.state["ports"]["nodes"]
        (name,) = [name for name, node in nodes.items() if node["postgres"] == port]
        return name

    def primary(self) -> str:
        """The node HAProxy's primary port reaches now."""
        with psycopg.connect(self.server_url, connect_timeout=3) as conn:
            row = conn.execute("SELECT inet_server_port()").fetchone()
        assert row is not None
        return self.node_of_port(int(row[0]))

    def members(self) -> dict[str, dict[str, Any]]:
        """Patroni's view, by member name."""
        answer = subprocess.run(
            [str(CLUSTER), "status", str(self.root)],
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        )
        return {m["name"]: m for m in json.loads(answer.stdout)}

    def postgres_processes(self, name: str) -> list[int]:
        """A node's postmaster and the postmaster's children."""
        postmaster = int((self.root / name / "data" / "postmaster.pid").read_text().split()[0])
        children = Path(f"/proc/{postmaster}/task/{postmaster}/children").read_text().split()
        return [postmaster, *(int(child) for child in children)]

    def lose_host(self, name: str) -> None:
        """SIGKILL the node's Patroni and all its PostgreSQL: nothing on it restarts anything."""
        kill([int(self.state["pids"][name]), *self.postgres_processes(name)])

    def lose_postgres(self, name: str) -> None:
        """SIGKILL the node's PostgreSQL only: its Patroni lives on and sees the crash."""
        kill(self.postgres_processes(name))


def kill(pids: list[int]) -> None:
    for pid in pids:
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@contextmanager
def ha_cluster(logs: Path) -> Iterator[Cluster]:
    # Under /tmp, short: the nodes' sockets live in it; readable by the nodes' account.
    root = Path(tempfile.mkdtemp(prefix="sbx-ha-", dir="/tmp"))
    root.chmod(0o755)
    ports = ExitStack()
    try:
        base = ports.enter_context(port_block(CLUSTER_PORTS))
        started = subprocess.run(
            [str(CLUSTER), "up", str(root), "--base-port", str(base)],
            capture_output=True,
            text=True,
            check=False,
            timeout=180,
        )
        assert started.returncode == 0, started.stdout + started.stderr
        cluster = Cluster(root, json.loads((root / "cluster.json").read_text()))
        with psycopg.connect(cluster.server_url, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier("shoebox")))
        apply_migrations(cluster.url)
        yield cluster
    finally:
        try:
            subprocess.run([str(CLUSTER), "down", str(root)], check=False, timeout=120)
        finally:
            logs.mkdir(parents=True, exist_ok=True)
            for log in root.glob("**/*.log"):
                shutil.copy(log, logs / f"{log.parent.name}-{log.name}")
            shutil.rmtree(root, ignore_errors=True)
            ports.close()


def sequenced_past(url: str, head_at_kill: int) -> None:
    """Wait (bounded) until the sequencer's role, resumed by itself, has moved the head past the
    kill and placed every acknowledged append; the positions must be gapless."""
    deadline = time.monotonic() + SEQUENCER_BOUND_SECONDS
    while True:
        count, least, head, unsequenced = log_positions(url)
        if head > head_at_kill and unsequenced == 0:
            break
        assert time.monotonic() < deadline, (head_at_kill, head, unsequenced)
        time.sleep(0.2)
    assert count == head - least + 1, "the positions have a gap"


# What a client sees of a request whose server was killed while answering it.
CUT_OFF = frozenset({"IncompleteRead", "RemoteDisconnected", "ConnectionResetError"})


def outage_answers(
    load: Load, killed: float, first: Sent, api_lost: tuple[float, float] | None = None
) -> tuple[list[Sent], list[Sent]]:
    """Check every answer of a failover's load; the requests of the outage, and its 503s.

    No 500; every request answered (nothing reset, cut off or left to the client's timeout);
    between the kill and the first write served again each failure a 503 with Retry-After;
    and writes acknowledged after it.

    `api_lost` (from, to) is when an API host was killed, if one was: a request already in
    flight then may be cut off, as no proxy can finish or replace an answer whose server died
    halfway through sending it (gunicorn writes the headers and the body separately). Such a
    request is not acknowledged, and the books check holds for it like any other. Every request
    sent after the kill must still be answered whole.
    """
    sent, statuses = list(load.sent), load.statuses
    assert 500 not in statuses, statuses
    unanswered = [s for s in sent if not isinstance(s.status, int)]
    if api_lost is not None:
        losing, lost = api_lost
        unanswered = [
            s
            for s in unanswered
            if not (s.started < lost and s.finished >= losing and s.status in CUT_OFF)
        ]
    assert unanswered == [], [(s.path, s.status, s.started, s.finished) for s in unanswered][:5]
    assert max(s.finished - s.started for s in sent) < REQUEST_TIMEOUT_SECONDS
    outage = [s for s in sent if s.finished > killed and s.started < first.started]
    failed = [s for s in outage if isinstance(s.status, int) and s.status >= 500]
    refused = [s for s in failed if s.status == 503 and int(s.retry_after or 0) > 0]
    assert refused == failed, [(s.path, s.status, s.retry_after) for s in failed][:5]
    assert refused, "no request was refused while there was no primary"
    after = [s for s in sent if s.started >= first.finished]
    assert any(s.acknowledged for s in after), statuses
    return outage, refused


def cli(url: str, *arguments: str) -> Any:
    return CliRunner().invoke(main, list(arguments), env={"DATABASE_URL": url})


def worker_ready(worker: subprocess.Popen[bytes], redis_url: str, log: Path) -> None:
    """Wait until the worker has started (its RQ worker registered in Redis): the drill is of
    a running service losing its primary, not of one starting."""
    deadline = time.monotonic() + 60
    with redis.Redis.from_url(redis_url) as client:
        while not client.scard("rq:workers"):
            assert worker.poll() is None, log.read_text()[-2000:]
            assert time.monotonic() < deadline, "the worker did not start"
            time.sleep(0.2)


def log_positions(url: str) -> tuple[int, int, int, int]:
    """The log's count, least and greatest position, and the appends not yet sequenced."""
    with psycopg.connect(url, connect_timeout=3) as conn:
        row = conn.execute(
            "SELECT count(*), coalesce(min(position), 0), coalesce(max(position), 0),"
            " (SELECT count(*) FROM unsequenced_events) FROM events"
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1]), int(row[2]), int(row[3])


def test_the_primary_host_lost_under_load_fails_over_losing_nothing_acknowledged(
    tmp_path: Path,
) -> None:
    drill(tmp_path, whole_host=True)


def drill(tmp_path: Path, *, whole_host: bool) -> None:
    """The drill: the primary's host lost (`whole_host`), or its PostgreSQL only."""
    with ha_cluster(tmp_path / "logs") as cluster, private_redis(tmp_path / "redis") as redis:
        url = cluster.url
        ops, frontend = cli_key(url, "ops"), cli_key(url, "frontend")
        environment = {
            **os.environ,
            "DATABASE_URL": url,
            "REDIS_URL": redis.url,
            "SHOEBOX_RATE_LIMIT_PER_SECOND": "0",
            # Reads from HAProxy's replica port, as the cluster's API hosts read (issue 26).
            "DATABASE_READ_URL": cluster.read_url,
        }
        environment.pop("SHOEBOX_APP_DATABASE_URL", None)
        environment.pop("SHOEBOX_APP_DATABASE_READ_URL", None)
        with (
            serve(url, tmp_path / "serve.log", environment, workers=2) as server,
            shoebox(["worker"], environment, tmp_path / "worker.log") as worker,
            # The read models a tokened statement waits for (tests/faults/tokened_reads.py).
            shoebox(["projector"], environment, tmp_path / "projector.log"),
        ):
            pairs = setup_tables(server.base, ops, frontend, TABLES)
            worker_ready(worker, redis.url, tmp_path / "worker.log")
            load = Load(frontend)
            load.base = server.base
            load.start(pairs)
            readers = [TokenedReads(server.base, ops, "reader", k) for k in ("table", "statement")]
            for reader in readers:
                reader.start()
            try:
                load.wait_for(lambda s: s.acknowledged, after=time.monotonic(), within=15)
                time.sleep(2.0)
                lost = cluster.primary()
                standby = next(
                    name for name, m in cluster.members().items() if m["role"] == "sync_standby"
                )
                _, _, head_at_kill, _ = log_positions(url)
                if whole_host:
                    cluster.lose_host(lost)
                else:
                    cluster.lose_postgres(lost)
                killed = time.monotonic()
                first = load.wait_for(
                    lambda s: s.acknowledged, after=killed, within=RECOVERY_BOUND_SECONDS
                )
                time.sleep(AFTER_RECOVERY_SECONDS)
            finally:
                load.finish()
                for reader in readers:
                    reader.finish()
            assert server.process.poll() is None, "shoebox serve exited"
            assert worker.poll() is None, (tmp_path / "worker.log").read_text()[-2000:]

            promoted = cluster.primary()
            assert promoted == standby != lost, (lost, standby, promoted)
            if not whole_host:
                # Its Patroni lived: it rewinds its PostgreSQL and follows the new primary.
                rejoined = time.monotonic() + SEQUENCER_BOUND_SECONDS
                while cluster.members().get(lost, {}).get("role") not in REPLICAS:
                    assert time.monotonic() < rejoined, cluster.members()
                    time.sleep(0.5)

            # The sequencer role passed to a surviving process on its own: the head moves past
            # where it was at the kill and every acknowledged append is placed, without help.
            sequenced_past(url, head_at_kill)

        sent, statuses = list(load.sent), load.statuses
        outage, refused = outage_answers(load, killed, first)

        # Read-your-writes held through it: an exact read with a write's token always saw the
        # write, whichever node answered; none answered 500; some came after the failover. A
        # read model's may be behind only once its 2 s ran out, answered by the primary.
        reads = [r for reader in readers for r in reader.reads]
        writes = [w for reader in readers for w in reader.writes]
        read_statuses = dict(Counter(f"{r.kind} {r.status}" for r in reads))
        assert not [r for r in reads if r.stale and r.kind == "table"], read_statuses
        late = [r for r in reads if r.stale]
        assert all(r.pool == "primary" for r in late), late[:5]
        assert all(r.status != 500 for r in reads), read_statuses
        assert 500 not in writes, writes
        assert any(
            r.kind == "table" and r.status == 200 and r.started > first.finished for r in reads
        ), read_statuses
        after_failover = [r for r in reads if r.started > first.finished]
        late_after = sum(1 for r in late if r.started > first.finished)
        pools = {str(r.pool): sum(1 for x in reads if x.pool == r.pool) for r in reads}

        acknowledged = load.acknowledged
        _, found = check_books(url, acknowledged)
        verified = cli(url, "audit", "verify")
        assert verified.exit_code == 0, verified.output

    seconds = first.finished - killed
    fault = "the primary's host lost" if whole_host else "the primary's PostgreSQL killed"
    print(
        f"\nfailover, {fault}: {lost} lost, {promoted} promoted; first write served"
        f" {seconds:.1f} s after the kill; {len(outage)} requests meanwhile,"
        f" {len(refused)} answered 503 with Retry-After, 0 with 500; sent {len(sent)},"
        f" acknowledged {len(acknowledged)}, found in the log {found}; statuses {statuses};"
        f" verify: {verified.output.strip().splitlines()[-1]}; tokened reads {read_statuses},"
        f" by pool {pools}; stale: 0 exact, {len(late)} statements ({late_after} after the"
        f" first write served again, of {len(after_failover)} reads)"
    )
    Figures(
        f"{fault} (Patroni failover)",
        sent=len(sent),
        acknowledged=len(acknowledged),
        found_in_log=found,
    ).record()
