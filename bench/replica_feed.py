"""The live feed's fan-out and GET state through `shoebox serve`, from the primary alone, one
replica and two, in one run, with the replicas' lag while bets are taken.

Run as `.venv/bin/python bench/replica_feed.py [--seconds 10] [--repeats 2] [--clients 40]
[--tables 4]`. It starts a private primary and two hot standbys (pg_basebackup -R,
tests/faults/private_servers.py) on loopback ports, and stops and removes them at the end;
the shared PostgreSQL is never touched. Four `shoebox serve` processes run over them:

- `primary`: one process, two gevent workers, no DATABASE_READ_URL;
- `1 replica`: one process, two workers, DATABASE_READ_URL the first standby;
- `2 replicas`: two processes, one worker each, each with DATABASE_READ_URL one standby, and
  the clients, readers and writers split between them.

Two API processes, one a replica, rather than HAProxy's replica port: HAProxy balances each
*connection*, and a process's feed follows the log on the one connection of its tail, so a
balanced URL would put each worker's tail on a standby chosen at its start and a client's
replica would depend on which worker accepted it. One process a replica is what the cluster's
API hosts do (each host near its own standby) and makes each standby's share exact. Each
topology gets two workers in all, so the API's share of the two cores stays the same.

In each phase (S seconds, topologies taking turns, R rounds), C SSE clients (one asyncio
process a server, bench/feed.py's `--client-process`, C/T a table) follow
`GET /v1/tables/{t}/feed` while one writer thread a table plays whole rounds through the API
(five bets, then Deal for each seat) at a steady pace, and two reader threads call
`GET /v1/tables/{t}/state`. Meanwhile the primary's `pg_stat_replication.replay_lag` is
sampled every 20 ms. Reported:

- delivered events a second (all clients), and each bet's delivery latency: from its writer's
  201 to a client's receipt of its BetPlaced (the k-th bet answered at a table is the k-th
  BetPlaced in its stream: one writer a table, in turn);
- whether every client received exactly its table's events in the log over the phase, in
  order, none missing, none twice;
- GET state a second, and which pool served them (`Shoebox-Read-Pool`);
- the standbys' replay lag, p50 / p99.

On a 2-core machine the standbys, the API processes, the clients and this script share the
cores: the rates show that replicas serve correctly and what they cost in latency and lag,
not how reads scale with replicas.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(_ROOT))

from bench.api import (  # noqa: E402
    ROUND_BETS,
    Client,
    Keys,
    issue_keys,
    player_ids,
    set_up_tables,
)
from bench.common import uptime  # noqa: E402
from bench.feed import _expected, _head  # noqa: E402
from bench.replica_reads import _lag_sampler, _percentile  # noqa: E402
from domain.round import BetPlaced  # noqa: E402
from tests.e2e.servers import Server, serve  # noqa: E402
from tests.faults.private_servers import (  # noqa: E402
    private_postgres,
    private_redis,
    private_replica,
)

FEED_CLIENT = _ROOT / "bench" / "feed.py"
READERS = 2
DRAIN_SECONDS = 2.0
_COUNTING = threading.Lock()


@dataclass
class Phase:
    """What one topology's phase measured."""

    seconds: float
    events: int = 0
    clients: int = 0
    complete: int = 0
    bets: int = 0
    latencies_ms: list[float] = field(default_factory=list)
    reads: int = 0
    read_pools: dict[str, int] = field(default_factory=dict)
    errors: int = 0
    lags_ms: list[float] = field(default_factory=list)


def _bet_positions(database_url: str, table_id: str, after: int, until: int) -> list[int]:
    with psycopg.connect(database_url) as conn:
        rows = conn.execute(
            "SELECT position FROM events WHERE stream_id = %s AND type = %s"
            " AND position > %s AND position <= %s ORDER BY position",
            [f"table:{table_id}", BetPlaced.type, after, until],
        ).fetchall()
    return [int(row[0]) for row in rows]


def _writer(
    port: int, keys: Keys, table_id: str, stop: threading.Event, interval: float
) -> list[float]:
    """Whole rounds at one table, a request every `interval`; each bet's answer time."""
    client = Client(port, keys.frontend, idempotency=False)
    answered: list[float] = []
    players = player_ids(table_id)
    try:
        while not stop.is_set():
            for seat, spot, stake in ROUND_BETS:
                bet = {"player_id": players[seat], "spot": spot, "stake_pence": stake}
                client.ok("POST", f"/tables/{table_id}/bets", bet)
                answered.append(time.time())
                stop.wait(interval)
            for player_id in players:
                client.ok("POST", f"/tables/{table_id}/deal", {"player_id": player_id})
                stop.wait(interval)
    finally:
        client.close()
    return answered


def _reader(
    ports: Sequence[int], keys: Keys, tables: Sequence[str], stop: threading.Event, found: Phase
) -> None:
    connections = [http.client.HTTPConnection("127.0.0.1", p, timeout=30) for p in ports]
    headers = {"Authorization": f"Bearer {keys.frontend}"}
    n = 0
    lock = _COUNTING
    try:
        while not stop.is_set():
            connection = connections[n % len(connections)]
            connection.request("GET", f"/v1/tables/{tables[n % len(tables)]}/state", None, headers)
            response = connection.getresponse()
            response.read()
            n += 1
            pool = response.getheader("Shoebox-Read-Pool", "primary")
            with lock:
                if response.status != 200:
                    found.errors += 1
                    continue
                found.reads += 1
                found.read_pools[pool] = found.read_pools.get(pool, 0) + 1
    finally:
        for connection in connections:
            connection.close()


@contextmanager
def _feed_clients(
    port: int, secret: str, after: int, per_table: int, tables: Sequence[str]
) -> Iterator[subprocess.Popen[str]]:
    process = subprocess.Popen(
        [
            sys.executable,
            str(FEED_CLIENT),
            "--client-process",
            str(port),
            secret,
            str(after),
            str(per_table),
            *tables,
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        yield process
    finally:
        process.kill()
        process.wait()


def _phase(
    database_url: str,
    ports: Sequence[int],
    keys: Keys,
    tables: Sequence[str],
    clients: int,
    seconds: float,
    interval: float,
) -> Phase:
    found = Phase(seconds)
    after = _head(database_url)
    per_table = max(1, clients // len(tables) // len(ports))
    with ExitStack() as stack:
        processes = [
            stack.enter_context(_feed_clients(p, keys.frontend, after, per_table, tables))
            for p in ports
        ]
        for process in processes:
            assert process.stdout is not None
            line = process.stdout.readline()
            if line.strip() != "ready":
                raise RuntimeError(f"a feed client process did not connect: {line!r}")
        stop = threading.Event()
        lag_stop = threading.Event()
        answers: dict[str, list[float]] = {}

        def write(index: int, table_id: str) -> None:
            answers[table_id] = _writer(ports[index % len(ports)], keys, table_id, stop, interval)

        threads = [threading.Thread(target=write, args=(i, t)) for i, t in enumerate(tables)] + [
            threading.Thread(target=_reader, args=(ports, keys, tables, stop, found))
            for _ in range(READERS)
        ]
        sampler = threading.Thread(
            target=_lag_sampler, args=(database_url, lag_stop, found.lags_ms)
        )
        sampler.start()
        for thread in threads:
            thread.start()
        time.sleep(seconds)
        stop.set()
        for thread in threads:
            thread.join()
        time.sleep(DRAIN_SECONDS)  # the sequencer positions the last bets; they reach clients
        lag_stop.set()
        sampler.join()
        until = _head(database_url)
        time.sleep(DRAIN_SECONDS)
        reports = []
        for process in processes:
            assert process.stdin is not None
            assert process.stdout is not None
            process.stdin.write("stop\n")
            process.stdin.flush()
            reports.append(json.loads(process.stdout.readline()))
    expected = {t: _expected(database_url, t, after, until) for t in tables}
    bets = {t: _bet_positions(database_url, t, after, until) for t in tables}
    for report in reports:
        for client in report["clients"]:
            table_id = client["table_id"]
            found.clients += 1
            found.events += len(client["ids"])
            if [i for i in client["ids"] if i <= until] == expected[table_id]:
                found.complete += 1
            received = dict(zip(client["ids"], client["received"], strict=True))
            for position, answered in zip(bets[table_id], answers[table_id], strict=False):
                if position in received:
                    found.latencies_ms.append((received[position] - answered) * 1000)
    found.bets = sum(len(a) for a in answers.values())
    if found.bets != sum(len(b) for b in bets.values()):
        raise RuntimeError("a bet answered 201 is not in the log, or the log has one more")
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--clients", type=int, default=40, help="feed clients a topology")
    parser.add_argument("--tables", type=int, default=4)
    parser.add_argument("--interval", type=float, default=0.05, help="a writer's pace, s")
    parser.add_argument(
        "--redis",
        action="store_true",
        help="also the replicas' feeds woken by the sequencer's signal on a private Redis",
    )
    options = parser.parse_args()
    if not 0 < options.seconds <= 120 or not 0 < options.clients <= 2000:
        parser.error("at most 120 s a phase and 2000 clients")
    with ExitStack() as stack:
        logs = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="shoebox-bench-")))
        primary = stack.enter_context(private_postgres(logs))
        replicas = [stack.enter_context(private_replica(primary, logs)) for _ in range(2)]
        common = {"SHOEBOX_RATE_LIMIT_PER_SECOND": "0", "REDIS_URL": ""}
        redis_url = ""
        if options.redis:
            redis = stack.enter_context(private_redis(logs / "redis"))
            redis_url = redis.url

        def server(name: str, workers: int, read_url: str | None, redis: bool = False) -> Server:
            environment = dict(common)
            if read_url is not None:
                environment["DATABASE_READ_URL"] = read_url
            if redis:
                environment["REDIS_URL"] = redis_url
            return stack.enter_context(
                serve(primary.url, logs / f"{name}.log", environment, workers=workers)
            )

        # Started first, the primary's server takes the sequencer's role and keeps it for the
        # run; with --redis it is the one that publishes the head.
        topologies = {"primary": [server("primary", 2, None, options.redis)]}
        time.sleep(2)
        topologies["1 replica"] = [server("one", 2, replicas[0].url)]
        topologies["2 replicas"] = [
            server("two-a", 1, replicas[0].url),
            server("two-b", 1, replicas[1].url),
        ]
        if options.redis:
            topologies["1 replica, Redis wake"] = [server("one-r", 2, replicas[0].url, True)]
            topologies["2 replicas, Redis wake"] = [
                server("two-a-r", 1, replicas[0].url, True),
                server("two-b-r", 1, replicas[1].url, True),
            ]
        ports = {name: [s.port for s in servers] for name, servers in topologies.items()}
        keys = issue_keys(primary.url)
        tables = set_up_tables(ports["primary"][0], keys, options.tables, "rf")
        results: dict[str, list[Phase]] = {name: [] for name in topologies}
        for _ in range(options.repeats):
            for name in topologies:
                results[name].append(
                    _phase(
                        primary.url,
                        ports[name],
                        keys,
                        tables,
                        options.clients,
                        options.seconds,
                        options.interval,
                    )
                )
    _print(results, options)


def _print(results: dict[str, list[Phase]], options: Any) -> None:
    print(
        f"# bench/replica_feed.py, {options.repeats} x {options.seconds:g} s a phase,"
        f" {options.clients} feed clients over {options.tables} tables,"
        f" a writer request every {options.interval:g} s a table"
        f"; {uptime()}; {os.cpu_count()} CPUs"
    )
    print()
    print(
        "| reads from | feed events delivered /s | bet to client p50 / p99 ms | clients complete"
        " | bets /s | GET state /s | state reads by pool | errors | replay lag p50 / p99 ms |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for name, phases in results.items():
        delivered = statistics.median(p.events / p.seconds for p in phases)
        latencies = [ms for p in phases for ms in p.latencies_ms]
        pools: dict[str, int] = {}
        for p in phases:
            for pool, count in p.read_pools.items():
                pools[pool] = pools.get(pool, 0) + count
        lags = [ms for p in phases for ms in p.lags_ms]
        print(
            f"| {name} | {delivered:.0f} |"
            f" {_percentile(latencies, 0.5):.1f} / {_percentile(latencies, 0.99):.1f} |"
            f" {sum(p.complete for p in phases)} of {sum(p.clients for p in phases)} |"
            f" {statistics.median(p.bets / p.seconds for p in phases):.0f} |"
            f" {statistics.median(p.reads / p.seconds for p in phases):.0f} |"
            f" {pools} | {sum(p.errors for p in phases)} |"
            f" {_percentile(lags, 0.5):.1f} / {_percentile(lags, 0.99):.1f} |"
        )
    print()
    print(
        "Throughput columns show correctness and lag only: the standbys, API processes and"
        " clients share this machine's cores."
    )


if __name__ == "__main__":
    main()
