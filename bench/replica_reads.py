"""Reads from replicas beside the primary alone, in one run, and the replicas' lag under writes.

Run as `.venv/bin/python bench/replica_reads.py [--seconds 8] [--repeats 2]`. It starts a
private primary and two hot standbys (pg_basebackup -R, tests/faults/private_servers.py) on
loopback ports under the system's temporary directory, and stops and removes them at the
end; the shared PostgreSQL is never touched. Three API apps run in this process over them:

- `primary`: no DATABASE_READ_URL, every read on the primary;
- `1 replica`: DATABASE_READ_URL the first standby;
- `2 replicas`: DATABASE_READ_URL both, as one libpq multi-host URL with
  `load_balance_hosts=random` (what HAProxy's replica port does in the cluster).

Each phase runs, for S seconds, four threads reading `GET /v1/tables/{t}/state` without a
token and two threads that each deposit and then read the table back with the deposit's
`Shoebox-Consistency` token (read-your-writes). Phases rotate R times; each figure is the
median over the rotations. Meanwhile a sampler reads `pg_stat_replication.replay_lag` on the
primary every 20 ms (the standbys' lag while writes go on).

On a 2-core machine the servers and the one Python process share the cores, and the GIL
bounds the reads: the read rates show that the replicas serve and what routing costs, not
how reads scale with replicas. The lag and the tokened reads' waits are the figures to read.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import psycopg

_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(_ROOT))

from bench.common import uptime  # noqa: E402
from events.store import EventMetadata  # noqa: E402
from service.application.keys import Role, create_key  # noqa: E402
from service.runtime.consistency import HEADER  # noqa: E402
from service.runtime.container import Container  # noqa: E402
from service.runtime.settings import Settings  # noqa: E402
from service.web.api import EXTENSION  # noqa: E402
from service.web.app import create_app  # noqa: E402
from service.web.consistency import READ_POOL_HEADER  # noqa: E402
from tests.faults.private_servers import (  # noqa: E402
    PrivatePostgres,
    private_postgres,
    private_replica,
)

CLI = EventMetadata(actor="cli:bench", role="cli")
READERS = 4
WRITERS = 2


@dataclass
class Phase:
    """What one phase of one topology counted."""

    reads: int = 0
    writes: int = 0
    tokened_ms: list[float] = field(default_factory=list)
    tokened_pools: dict[str, int] = field(default_factory=dict)
    read_pools: dict[str, int] = field(default_factory=dict)
    errors: int = 0
    statuses: dict[int, int] = field(default_factory=dict)


def _multi_host(replicas: list[PrivatePostgres]) -> str:
    hosts = ",".join("127.0.0.1" for _ in replicas)
    ports = ",".join(str(r.port) for r in replicas)
    return (
        f"host={hosts} port={ports} dbname=shoebox user=postgres"
        " load_balance_hosts=random target_session_attrs=standby"
    )


@contextmanager
def _app(settings: Settings) -> Iterator[tuple[Any, Container]]:
    app = create_app(settings, pool_size=8)
    wiring = app.extensions[EXTENSION]
    assert isinstance(wiring, Container)
    try:
        yield app, wiring
    finally:
        wiring.close()


def _phase(app: Any, keys: dict[Role, str], seconds: float, round_no: int, name: str) -> Phase:
    found = Phase()
    lock = threading.Lock()
    stop = time.monotonic() + seconds
    auth = {"Authorization": f"Bearer {keys[Role.OPS]}"}

    def reader() -> None:
        client = app.test_client()
        while time.monotonic() < stop:
            response = client.get("/v1/tables/BENCH/state", headers=auth)
            with lock:
                if response.status_code != 200:
                    found.errors += 1
                    found.statuses[response.status_code] = (
                        found.statuses.get(response.status_code, 0) + 1
                    )
                    continue
                found.reads += 1
                pool = response.headers.get(READ_POOL_HEADER, "primary")
                found.read_pools[pool] = found.read_pools.get(pool, 0) + 1

    def writer(number: int) -> None:
        client = app.test_client()
        player = f"w{round_no}-{name.replace(' ', '')}-{number}"
        body = {"amount_pence": 1, "reason": "bench"}
        while time.monotonic() < stop:
            written = client.post(f"/v1/wallets/{player}/deposits", json=body, headers=auth)
            if written.status_code != 201:
                with lock:
                    found.errors += 1
                continue
            token = written.headers[HEADER]
            started = time.perf_counter()
            read = client.get("/v1/tables/BENCH/state", headers={**auth, HEADER: token})
            waited = (time.perf_counter() - started) * 1000
            with lock:
                found.writes += 1
                if read.status_code != 200:
                    found.errors += 1
                    continue
                found.tokened_ms.append(waited)
                pool = read.headers.get(READ_POOL_HEADER, "primary")
                found.tokened_pools[pool] = found.tokened_pools.get(pool, 0) + 1

    threads = [threading.Thread(target=reader) for _ in range(READERS)]
    threads += [threading.Thread(target=writer, args=(n,)) for n in range(WRITERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return found


def _lag_sampler(primary_url: str, stop: threading.Event, lags: list[float]) -> None:
    with psycopg.connect(primary_url, autocommit=True) as conn:
        while not stop.is_set():
            rows = conn.execute(
                "SELECT extract(epoch FROM replay_lag)::float8 FROM pg_stat_replication"
                " WHERE replay_lag IS NOT NULL"
            ).fetchall()
            lags.extend(float(row[0]) * 1000 for row in rows)
            stop.wait(0.02)


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * share))] if ordered else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--repeats", type=int, default=2)
    options = parser.parse_args()
    with ExitStack() as stack:
        logs = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="shoebox-bench-")))
        primary = stack.enter_context(private_postgres(logs))
        replicas = [stack.enter_context(private_replica(primary, logs)) for _ in range(2)]
        # One key does all of it: no rate limit, which would answer most of it 429.
        base = Settings(database_url=primary.url, rate_limit_per_second=0)
        topologies = {
            "primary": base,
            "1 replica": replace(base, database_read_url=replicas[0].url),
            "2 replicas": replace(base, database_read_url=_multi_host(replicas)),
        }
        apps = {name: stack.enter_context(_app(s)) for name, s in topologies.items()}
        first_app, first_wiring = apps["primary"]
        keys = {r: create_key(first_wiring.store, r.value, r, CLI).secret for r in Role}
        client = first_app.test_client()
        auth = {"Authorization": f"Bearer {keys[Role.OPS]}"}
        table = {"table_id": "BENCH", "seats": 7, "decks": 8, "minimum_pence": 100}
        created = client.post("/v1/tables", json={**table, "maximum_pence": 1000}, headers=auth)
        assert created.status_code == 201, created.get_json()
        # Every app's replica holds the table before the phases begin.
        for app, _wiring in apps.values():
            app.test_client().get(
                "/v1/tables/BENCH", headers={**auth, HEADER: created.headers[HEADER]}
            )

        results: dict[str, list[Phase]] = {name: [] for name in apps}
        lags: list[float] = []
        stop = threading.Event()
        sampler = threading.Thread(target=_lag_sampler, args=(primary.url, stop, lags))
        sampler.start()
        try:
            for round_no in range(options.repeats):
                for name, (app, _wiring) in apps.items():
                    phase = _phase(app, keys, options.seconds, round_no, name)
                    results[name].append(phase)
        finally:
            stop.set()
            sampler.join()

    print(
        f"# bench/replica_reads.py, {options.repeats} x {options.seconds:g} s a phase; {uptime()}"
    )
    print()
    print(
        "| reads from | untokened GET state /s | writes /s | tokened read after a write,"
        " p50 / p99 ms | tokened reads by pool | untokened reads by pool | errors |"
    )
    print("|---|---|---|---|---|---|---|")
    for name, phases in results.items():
        reads = statistics.median(p.reads / options.seconds for p in phases)
        writes = statistics.median(p.writes / options.seconds for p in phases)
        waits = [ms for p in phases for ms in p.tokened_ms]
        tokened: dict[str, int] = {}
        untokened: dict[str, int] = {}
        for p in phases:
            for pool, count in p.tokened_pools.items():
                tokened[pool] = tokened.get(pool, 0) + count
            for pool, count in p.read_pools.items():
                untokened[pool] = untokened.get(pool, 0) + count
        print(
            f"| {name} | {reads:.0f} | {writes:.0f} |"
            f" {_percentile(waits, 0.5):.1f} / {_percentile(waits, 0.99):.1f} |"
            f" {tokened} | {untokened} | {sum(p.errors for p in phases)} |"
        )
    print()
    print(
        f"replay lag on the primary's pg_stat_replication, both standbys, {len(lags)} samples:"
        f" p50 {_percentile(lags, 0.5):.1f} ms, p99 {_percentile(lags, 0.99):.1f} ms,"
        f" max {max(lags, default=float('nan')):.1f} ms"
    )


if __name__ == "__main__":
    main()
