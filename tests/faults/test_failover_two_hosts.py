"""Two API hosts behind HAProxy; one of them and the database's primary host are lost at once.

A machine room loses a machine: on it ran the PostgreSQL primary and one of Shoebox's two hosts
(its `shoebox serve`, its worker and its projector). deploy/patroni/cluster gives the database
(Patroni, etcd, HAProxy's primary port); deploy/haproxy/api.cfg, the shipped config, puts both
hosts behind one address. Before the loss, host A holds the sequencer's role (it started first)
and both hosts' workers sign checkpoints every 2 s (SHOEBOX_CHECKPOINT_INTERVAL_SECONDS).

Everything of host A and of the primary's node is SIGKILLed together. Then, through the proxy:

- writes are served again within 30 s, by host B, which was never restarted;
- every failed request meanwhile is a 503 with Retry-After (Shoebox's own, or the proxy's for
  a request cut off with host A, which carries the same problem document), never a 500. The
  one exception is a request whose answer host A had begun to send when it was killed: the
  proxy has passed its headers on and can neither finish it nor replace it, so the client sees
  it cut off, and counts it as not acknowledged (only requests in flight at the kill);
- every acknowledged write is in the new primary's log;
- the roles that run once resumed on host B by themselves: the sequencer (the head moves past
  the kill and nothing is left unsequenced, positions gapless) and the checkpoint signer (a
  checkpoint covering a position past the kill is signed);
- the live feed, reconnected through the proxy, delivers events appended after the loss;
- `shoebox audit verify` passes on the new primary.
"""

from __future__ import annotations

import os
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

import psycopg
import pytest
import redis

from tests.e2e.servers import Feed, Server, serve
from tests.faults.figures import Figures
from tests.faults.load import Load, check_books, cli_key, setup_tables
from tests.faults.load import shoebox as shoebox_process
from tests.faults.private_servers import private_redis
from tests.faults.test_failover import (
    RECOVERY_BOUND_SECONDS,
    _missing,
    cli,
    ha_cluster,
    kill,
    log_positions,
    outage_answers,
    sequenced_past,
)
from tests.ports import free_port

pytestmark = [pytest.mark.slow, pytest.mark.skipif(_missing() is not None, reason=_missing() or "")]

ROOT = Path(__file__).resolve().parents[2]
HAPROXY_DIR = ROOT / "deploy" / "haproxy"
TABLES = 4
CHECKPOINT_SECONDS = 2
CHECKPOINT_BOUND_SECONDS = 30.0
AFTER_RECOVERY_SECONDS = 3.0


@dataclass
class Host:
    """One of Shoebox's hosts: its API server, its worker and its projector."""

    name: str
    server: Server
    worker: subprocess.Popen[bytes]
    projector: subprocess.Popen[bytes]

    def processes(self) -> list[int]:
        """Every process of the host: the three commands and all their descendants."""
        roots = [self.server.process.pid, self.worker.pid, self.projector.pid]
        return [pid for root in roots for pid in _tree(root)]

    def lose(self) -> None:
        kill(self.processes())


def _tree(pid: int) -> list[int]:
    found = [pid]
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            children = (task / "children").read_text().split()
        except OSError:
            continue
        for child in children:
            found.extend(_tree(int(child)))
    return found


@contextmanager
def host(
    name: str,
    url: str,
    environment: dict[str, str],
    redis_url: str,
    logs: Path,
    expected_workers: int,
) -> Iterator[Host]:
    with ExitStack() as stack:
        server = stack.enter_context(serve(url, logs / f"{name}-serve.log", environment, workers=2))
        worker = stack.enter_context(
            shoebox_process(["worker"], environment, logs / f"{name}-worker.log")
        )
        projector = stack.enter_context(
            shoebox_process(["projector"], environment, logs / f"{name}-projector.log")
        )
        # Ready once its own rq worker is registered: the other host's already is.
        deadline = time.monotonic() + 60
        with redis.Redis.from_url(redis_url) as client:
            while client.scard("rq:workers") < expected_workers:
                assert worker.poll() is None, (logs / f"{name}-worker.log").read_text()[-2000:]
                assert time.monotonic() < deadline, f"host {name}'s worker did not start"
                time.sleep(0.2)
        yield Host(name, server, worker, projector)


@contextmanager
def api_proxy(hosts: list[Host], log: Path) -> Iterator[str]:
    """deploy/haproxy/api.cfg in front of the hosts; the base URL clients use."""
    port = free_port()
    environment = {
        **os.environ,
        "SHOEBOX_API_BIND": f"127.0.0.1:{port}",
        "SHOEBOX_API1": f"127.0.0.1:{hosts[0].server.port}",
        "SHOEBOX_API2": f"127.0.0.1:{hosts[1].server.port}",
        "SHOEBOX_HAPROXY_DIR": str(HAPROXY_DIR),
    }
    with log.open("ab") as sink:
        proxy = subprocess.Popen(
            ["haproxy", "-db", "-f", str(HAPROXY_DIR / "api.cfg")],
            env=environment,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 15
        while True:
            assert proxy.poll() is None, log.read_text()
            try:
                with urllib.request.urlopen(f"{base}/healthz", timeout=2):
                    break
            except OSError:
                assert time.monotonic() < deadline, "HAProxy did not start"
                time.sleep(0.1)
        yield base
    finally:
        proxy.terminate()
        try:
            proxy.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proxy.kill()
            proxy.wait()


def sequencer_holder(url: str) -> tuple[str, int] | None:
    """The host name and pid of the process whose session holds the sequencer's lock."""
    with psycopg.connect(url, connect_timeout=3) as conn:
        row = conn.execute(
            "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a USING (pid)"
            " WHERE l.locktype = 'advisory' AND l.granted AND l.classid = 0"
            " AND l.objid = hashtext('shoebox_sequencer')::oid"
        ).fetchone()
    if row is None:
        return None
    # service/runtime/sequencing.py names the session `shoebox sequencer HOST PID`.
    *_, name, pid = str(row[0]).split()
    return name, int(pid)


def latest_checkpoint(url: str) -> int:
    """The greatest position a CheckpointSigned in the log has signed; 0 if none."""
    with psycopg.connect(url, connect_timeout=3) as conn:
        row = conn.execute(
            "SELECT coalesce(max((payload->>'position')::bigint), 0) FROM events"
            " WHERE type = 'CheckpointSigned'"
        ).fetchone()
    assert row is not None
    return int(row[0])


def test_one_api_host_and_the_primary_lost_together_the_other_host_serves_and_takes_the_roles(
    tmp_path: Path,
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    key = tmp_path / "signing.key"
    with ha_cluster(logs) as cluster, private_redis(tmp_path / "redis") as redis_server:
        url = cluster.url
        created = cli(url, "keys", "signing-key", "create", "--out", str(key))
        assert created.exit_code == 0, created.output
        ops, frontend = cli_key(url, "ops"), cli_key(url, "frontend")
        environment = {
            **os.environ,
            "DATABASE_URL": url,
            "REDIS_URL": redis_server.url,
            "SHOEBOX_RATE_LIMIT_PER_SECOND": "0",
            "SHOEBOX_SIGNING_KEY_FILE": str(key),
            "SHOEBOX_CHECKPOINT_INTERVAL_SECONDS": str(CHECKPOINT_SECONDS),
        }
        environment.pop("SHOEBOX_APP_DATABASE_URL", None)
        with host("a", url, environment, redis_server.url, logs, 1) as a:
            # Host A started alone, so the sequencer's role is its; host B stands by.
            deadline = time.monotonic() + 15
            while (holder := sequencer_holder(url)) is None:
                assert time.monotonic() < deadline, "no process took the sequencer's role"
                time.sleep(0.2)
            assert holder[1] in a.processes(), holder
            with (
                host("b", url, environment, redis_server.url, logs, 2) as b,
                api_proxy([a, b], logs / "haproxy.log") as base,
            ):
                pairs = setup_tables(base, ops, frontend, TABLES)
                load = Load(frontend)
                load.base = base
                load.start(pairs)
                try:
                    load.wait_for(lambda s: s.acknowledged, after=time.monotonic(), within=15)
                    deadline = time.monotonic() + CHECKPOINT_BOUND_SECONDS
                    while latest_checkpoint(url) == 0:
                        assert time.monotonic() < deadline, "no checkpoint signed before the loss"
                        time.sleep(0.5)
                    lost_node = cluster.primary()
                    _, _, head_at_kill, _ = log_positions(url)
                    losing = time.monotonic()
                    cluster.lose_host(lost_node)
                    a.lose()
                    killed = time.monotonic()
                    first = load.wait_for(
                        lambda s: s.acknowledged, after=killed, within=RECOVERY_BOUND_SECONDS
                    )
                    time.sleep(AFTER_RECOVERY_SECONDS)
                finally:
                    load.finish()

                # The feed, through the proxy, now reaches host B and delivers what is new.
                proxied = replace(b.server, base=base)
                feed = Feed(proxied, f"/v1/feed?after={head_at_kill}", ops)
                try:
                    assert feed.status == 200
                    (message,) = feed.events(1, timeout=15)
                    assert message.id is not None
                    assert int(message.id) > head_at_kill
                finally:
                    feed.close()

                assert b.server.process.poll() is None, "host B's serve exited"
                assert b.worker.poll() is None, (logs / "b-worker.log").read_text()[-2000:]
                assert b.projector.poll() is None, (logs / "b-projector.log").read_text()[-2000:]

                # The sequencer's role resumed on host B, the only one left.
                sequenced_past(url, head_at_kill)
                holder = sequencer_holder(url)
                assert holder is not None, "nobody holds the sequencer's role"
                assert holder[1] in b.processes(), holder

                # So did the checkpoint signer's: a checkpoint past the kill, signed by B.
                deadline = time.monotonic() + CHECKPOINT_BOUND_SECONDS
                while (signed := latest_checkpoint(url)) <= head_at_kill:
                    assert time.monotonic() < deadline, (head_at_kill, signed)
                    time.sleep(0.5)

        sent, statuses = list(load.sent), load.statuses
        outage, refused = outage_answers(load, killed, first, api_lost=(losing, killed))
        # The proxy's 503s too are Shoebox's problem document, not an HTML page.
        problems = [s for s in refused if not isinstance(s.document, dict)]
        assert problems == [], problems[:3]

        acknowledged = load.acknowledged
        _, found = check_books(url, acknowledged)
        assert found == len(acknowledged)
        verified = cli(url, "audit", "verify")
        assert verified.exit_code == 0, verified.output

    print(
        f"\ntwo API hosts, host A and the primary ({lost_node}) lost together: first write"
        f" served {first.finished - killed:.1f} s after the loss; {len(outage)} requests"
        f" meanwhile, {len(refused)} answered 503 with Retry-After, 0 with 500; sent {len(sent)},"
        f" acknowledged {len(acknowledged)}, found {found}; checkpoint signed up to {signed}"
        f" (head at the loss {head_at_kill}); statuses {statuses}"
    )
    Figures(
        "an API host and the primary's host lost together (two hosts behind HAProxy)",
        sent=len(sent),
        acknowledged=len(acknowledged),
        found_in_log=found,
    ).record()
