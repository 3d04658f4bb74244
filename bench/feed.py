"""Measure the live feed under a real `shoebox serve`: 500 SSE clients while bets are taken.

Run as `.venv/bin/python bench/feed.py [--clients 500] [--tables 50] [--seconds 15]` against
the PostgreSQL server in DATABASE_URL (default postgresql://postgres@127.0.0.1:5432/postgres);
it makes a database of its own, starts `shoebox serve` (gevent workers) on a loopback port,
and drops both at the end. Everything stays on 127.0.0.1, and every phase is bounded in time.

1. Throughput: one thread per table plays whole rounds (bench/api.py's `play`) as fast as
   the server answers, for S seconds, without feed clients and then with them, twice each
   in turn; the bets taken a second (median of the two) is each phase's figure.
2. Delivery: with the clients still connected, the same threads play at a steady pace (each
   table a bet or Deal every --interval seconds, a load the server takes without queueing),
   so that the time from an event's `recorded_at` to its arrival is the feed's own delay and
   not the wait of a saturated server's bets.

The clients are one asyncio process (this file with `--client-process`): C feeds, C/T per
table. It reports, for every event each client received, when and how long after its
`recorded_at` it arrived, and its own CPU time. Passes when the bet rate with clients is
within 20% of the rate without, every client received every event of its table that committed
while it listened (checked against the log), and delivery's 99th percentile is under 250 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Final

_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(_ROOT))

import orjson  # noqa: E402
import psycopg  # noqa: E402

from bench.api import (  # noqa: E402
    ROUND_BETS,
    Client,
    Keys,
    Sample,
    await_workers,
    issue_keys,
    measure,
    percentile,
    player_ids,
    run_clients,
    serving,
    set_up_tables,
)
from bench.common import server_url, throwaway_database  # noqa: E402
from events.migrations import apply_migrations  # noqa: E402

GOAL_THROUGHPUT: Final = 0.8
GOAL_P99_SECONDS: Final = 0.25
CONNECT_TIMEOUT_SECONDS: Final = 60.0
DRAIN_SECONDS: Final = 2.0


# The client process: C feeds on one event loop.


async def _follow(
    port: int, secret: str, table_id: str, after: int, found: dict[str, Any], ready: asyncio.Event
) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    request = (
        f"GET /v1/tables/{table_id}/feed?after={after} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Authorization: Bearer {secret}\r\nAccept: text/event-stream\r\n\r\n"
    )
    writer.write(request.encode())
    await writer.drain()
    status = await reader.readline()
    if b" 200 " not in status:
        raise RuntimeError(f"feed for {table_id} answered {status!r}")
    while (await reader.readline()) not in (b"\r\n", b""):
        pass  # the response's headers
    ready.set()
    latencies: list[float] = found["latencies"]
    ids: list[int] = found["ids"]
    # Chunked transfer encoding: size lines and CRLFs between the SSE lines are skipped,
    # since no SSE line of ours is a bare hex number.
    event_id = None
    try:
        while True:
            line = await reader.readline()
            if not line:
                return
            if line.startswith(b"id: "):
                event_id = int(line[4:])
            elif line.startswith(b"data: ") and event_id is not None:
                received = time.time()
                recorded = orjson.loads(line[6:])["recorded_at"]
                latencies.append(received - datetime.fromisoformat(recorded).timestamp())
                found["received"].append(received)
                ids.append(event_id)
                event_id = None
    finally:
        writer.close()


async def _clients(
    port: int, secret: str, table_ids: list[str], per_table: int, after: int
) -> None:
    results: list[dict[str, Any]] = []
    tasks = []
    readies = []
    for table_id in table_ids:
        for _ in range(per_table):
            found: dict[str, Any] = {
                "table_id": table_id,
                "latencies": [],
                "received": [],
                "ids": [],
            }
            ready = asyncio.Event()
            results.append(found)
            readies.append(ready)
            tasks.append(asyncio.create_task(_follow(port, secret, table_id, after, found, ready)))
    await asyncio.wait_for(asyncio.gather(*(r.wait() for r in readies)), CONNECT_TIMEOUT_SECONDS)
    started_cpu = resource.getrusage(resource.RUSAGE_SELF)
    started = time.monotonic()
    print("ready", flush=True)
    # Until the parent says stop (a line on stdin) or hangs up.
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    wall = time.monotonic() - started
    ended_cpu = resource.getrusage(resource.RUSAGE_SELF)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    cpu = (ended_cpu.ru_utime - started_cpu.ru_utime) + (ended_cpu.ru_stime - started_cpu.ru_stime)
    print(json.dumps({"cpu_seconds": cpu, "wall_seconds": wall, "clients": results}), flush=True)


# The parent: the server, the play, and the verdict.


def _head(database_url: str) -> int:
    with psycopg.connect(database_url) as conn:
        row = conn.execute("SELECT coalesce(max(position), 0) FROM events").fetchone()
    return int(row[0]) if row else 0


def _expected(database_url: str, table_id: str, after: int, until: int) -> list[int]:
    with psycopg.connect(database_url) as conn:
        rows = conn.execute(
            "SELECT position FROM events WHERE stream_id = ANY(%s) AND position > %s"
            " AND position <= %s ORDER BY position",
            [[f"table:{table_id}", f"chat:{table_id}"], after, until],
        ).fetchall()
    return [int(row[0]) for row in rows]


def _bet_rate(port: int, keys: Keys, table_ids: Sequence[str], seconds: float) -> float:
    merged, elapsed, _ = measure(port, keys, table_ids, seconds, idempotency=False)
    return len(merged.bet_latencies) / elapsed


def _paced(
    port: int, keys: Keys, table_ids: Sequence[str], seconds: float, interval: float
) -> None:
    """Each table a request every `interval` seconds: a bet, or a Deal once its bets are in."""

    def pace(client: Client, table_id: str) -> Sample:
        players = player_ids(table_id)
        stop_at = time.monotonic() + seconds
        # Spread the tables' requests over the interval rather than all at its start.
        time.sleep(interval * (hash(table_id) % 1000) / 1000)
        while time.monotonic() < stop_at:
            for seat, spot, stake in ROUND_BETS:
                bet = {"player_id": players[seat], "spot": spot, "stake_pence": stake}
                client.ok("POST", f"/tables/{table_id}/bets", bet)
                time.sleep(interval)
            for player_id in players:
                client.ok("POST", f"/tables/{table_id}/deal", {"player_id": player_id})
                time.sleep(interval)
        return Sample()

    work = [lambda client, t=table_id: pace(client, t) for table_id in table_ids]
    run_clients(port, keys.frontend, False, work)


def run(clients: int, tables: int, seconds: float, workers: int, interval: float) -> dict[str, Any]:
    """Both phases; the figures."""
    with throwaway_database(server_url(), "bench_feed") as database_url:
        apply_migrations(database_url)
        keys = issue_keys(database_url)
        with serving(database_url, workers, 1) as port:
            await_workers(port, keys, workers)
            table_ids = set_up_tables(port, keys, tables, "feed")
            _bet_rate(port, keys, table_ids, min(3.0, seconds))  # warm up every worker
            without = [_bet_rate(port, keys, table_ids, seconds)]
            after = _head(database_url)
            client = subprocess.Popen(
                [
                    sys.executable,
                    __file__,
                    "--client-process",
                    str(port),
                    keys.frontend,
                    str(after),
                    str(clients // tables),
                    *table_ids,
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            assert client.stdin is not None
            assert client.stdout is not None
            try:
                line = client.stdout.readline()
                if line.strip() != "ready":
                    raise RuntimeError(f"the client process did not connect: {line!r}")
                with_clients = [_bet_rate(port, keys, table_ids, seconds)]
                # The clients stay connected, and idle, while the baseline is measured again.
                without.append(_bet_rate(port, keys, table_ids, seconds))
                with_clients.append(_bet_rate(port, keys, table_ids, seconds))
                time.sleep(DRAIN_SECONDS)  # the saturated phases' last events arrive
                paced_from = time.time()
                _paced(port, keys, table_ids, seconds, interval)
                paced_to = time.time()
                until = _head(database_url)
                time.sleep(DRAIN_SECONDS)  # the last events reach every client
                client.stdin.write("stop\n")
                client.stdin.flush()
                report = json.loads(client.stdout.readline())
            finally:
                client.kill()
                client.wait()
            expected = {t: _expected(database_url, t, after, until) for t in table_ids}
    everything = [x for c in report["clients"] for x in c["latencies"]]
    latencies = [
        latency
        for c in report["clients"]
        for latency, received in zip(c["latencies"], c["received"], strict=True)
        if paced_from <= received - latency <= paced_to
    ]
    complete = sum(
        1
        for c in report["clients"]
        if [i for i in c["ids"] if i <= until] == expected[c["table_id"]]
    )
    return {
        "clients": len(report["clients"]),
        "tables": tables,
        "workers": workers,
        "seconds": seconds,
        "bets_per_second_without": round(statistics.median(without), 1),
        "bets_per_second_with": round(statistics.median(with_clients), 1),
        "ratio": round(statistics.median(with_clients) / statistics.median(without), 3),
        "events_delivered": len(everything),
        "paced_interval_seconds": interval,
        "paced_events_delivered": len(latencies),
        "clients_complete": complete,
        "p50_ms": round(percentile(latencies, 0.50) * 1000, 1),
        "p99_ms": round(percentile(latencies, 0.99) * 1000, 1),
        "max_ms": round(max(latencies) * 1000, 1),
        "client_cpu_percent": round(100 * report["cpu_seconds"] / report["wall_seconds"], 1),
        "cpus": os.cpu_count(),
    }


def main(argv: Sequence[str] | None = None) -> None:
    """Parse the command line, run, print the figures and the verdict."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments[:1] == ["--client-process"]:
        port, secret, after, per_table, *table_ids = arguments[1:]
        asyncio.run(_clients(int(port), secret, table_ids, int(per_table), int(after)))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=500)
    parser.add_argument("--tables", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--interval", type=float, default=0.5, help="paced phase, per table")
    options = parser.parse_args(arguments)
    if not 0 < options.clients <= 5000 or not 0 < options.tables <= options.clients:
        parser.error("1 to 5000 clients, and at most one table a client")
    if not 0 < options.seconds <= 120:
        parser.error("--seconds is bounded: at most 120")
    figures = run(
        options.clients, options.tables, options.seconds, options.workers, options.interval
    )
    print(json.dumps(figures, indent=2))
    passed = (
        figures["ratio"] >= GOAL_THROUGHPUT
        and figures["p99_ms"] <= GOAL_P99_SECONDS * 1000
        and figures["clients_complete"] == figures["clients"]
    )
    print("PASS" if passed else "FAIL", file=sys.stderr)
    if not passed:
        sys.exit(1)


if __name__ == "__main__":
    main()
