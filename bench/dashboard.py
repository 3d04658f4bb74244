"""What one refresh of the ops dashboard costs at 10 tables and at 200, before and after issue 21.

Before, the dashboard's backend listed the tables and then asked the API five things a table
(the live state, the statistics, the ledger, the latest rounds, besides the listing): its cost
grew with the tables. Now it reads one page of the overview read model (GET /v1/ops/tables),
one statement for up to 200 tables. Both are measured in the same run over the same
databases: "before" replays the old backend's exact calls, which the API still answers.

Each table has a seated player and has dealt COUPS coups (so its roads, ledger and rounds are
not empty), played through the real Flask app over PostgreSQL (its test client: the figure is
the request's own cost, not a socket's); the read models are caught up before anything is
measured. Repeats are interleaved across the operations and sizes, so that the shared
machine's bursts of load fall on all alike; each figure is a median. Statements are counted
as psycopg sends them. GET /v1/ping, which reads nothing, is measured beside them: its ratio
is the run's noise.

Run: PYTHONPATH=. .venv/bin/python -m bench.dashboard               # docs/benchmarks.md's run
     PYTHONPATH=. .venv/bin/python -m bench.dashboard --quick       # a smoke test
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

import psycopg
from flask.testing import FlaskClient

from bench.common import server_url, throwaway_database, uptime
from events.migrations import apply_migrations
from events.postgres import Pool, PostgresEventStore, app_conninfo, open_pool
from events.store import EventMetadata, utc_now
from service.application.keys import Role, create_key
from service.application.read_models import projector
from service.application.read_models.queries import ProjectionService
from service.runtime.settings import Settings
from service.web.app import create_app

SIZES = (10, 200)
COUPS = 2
OPERATOR = EventMetadata(actor="cli:bench", role="cli")


@dataclass
class Casino:
    """An app over a database of `tables` tables, with a signed-in dashboard session."""

    tables: int
    pool: Pool
    client: FlaskClient
    keys: dict[Role, str]
    dashboard: FlaskClient
    seconds: dict[str, list[float]] = field(default_factory=dict)
    statements: dict[str, list[int]] = field(default_factory=dict)

    def get(self, path: str, role: Role = Role.OPS) -> Any:
        answer = self.client.get(path, headers={"Authorization": f"Bearer {self.keys[role]}"})
        assert answer.status_code == 200, (path, answer.get_data(as_text=True)[:300])
        return answer.get_json()

    def post(self, path: str, body: object, role: Role = Role.OPS) -> Any:
        answer = self.client.post(
            path, json=body, headers={"Authorization": f"Bearer {self.keys[role]}"}
        )
        assert answer.status_code in (200, 201), (path, answer.get_data(as_text=True)[:300])
        return answer.get_json()


def build(database: str, tables: int) -> tuple[Casino, Callable[[], None]]:
    apply_migrations(database)
    pool = open_pool(app_conninfo(database, environ={}), max_size=8)
    store = PostgresEventStore(pool, utc_now)
    keys = {role: create_key(store, f"bench {role.value}", role, OPERATOR).secret for role in Role}
    # No rate limit: the old backend's 801 calls a refresh at 200 tables would be refused (429)
    # by the ops key's limit of 200 a second, bursts of 400; the bench measures their cost.
    settings = Settings(rate_limit_per_second=0)
    app = create_app(settings, store=store, projections=ProjectionService(pool, utc_now))
    casino = Casino(tables, pool, app.test_client(), keys, app.test_client())
    for number in range(tables):
        table = f"T{number}"
        player = f"p{number}"
        casino.post("/v1/tables", {"table_id": table})
        casino.post(f"/v1/wallets/{player}/deposits", {"amount_pence": 100_000, "reason": "b"})
        casino.post(f"/v1/tables/{table}/seats", {"player_id": player, "seat": 1}, Role.FRONTEND)
        for _ in range(COUPS):
            bet = {"player_id": player, "spot": "banker", "stake_pence": 100}
            casino.post(f"/v1/tables/{table}/bets", bet, Role.FRONTEND)
            casino.post(f"/v1/tables/{table}/deal", {"player_id": player}, Role.FRONTEND)
    projector.catch_up(pool)
    sign_in(casino)
    return casino, pool.close


def sign_in(casino: Casino) -> None:
    page = casino.dashboard.get("/dashboard").get_data(as_text=True)
    token = page.split('name="form_token" value="')[1].split('"')[0]
    casino.dashboard.post(
        "/dashboard/sign-in", data={"form_token": token, "key": casino.keys[Role.OPS]}
    )


def before(casino: Casino) -> None:
    """The old backend's calls for one refresh: the listing, then four calls a table."""
    for settings in casino.get("/v1/tables")["tables"]:
        table = settings["table_id"]
        casino.get(f"/v1/tables/{table}/state")
        casino.get(f"/v1/tables/{table}/statistics")
        casino.get(f"/v1/tables/{table}/ledger")
        casino.get(f"/v1/tables/{table}/rounds?limit=100")
    casino.get("/v1/ops/projections")


def after_api(casino: Casino) -> None:
    """One page of the overview: every table."""
    assert len(casino.get("/v1/ops/tables")["tables"]) == casino.tables


def after_dashboard(casino: Casino) -> None:
    """The dashboard backend's whole refresh, as the page asks for it."""
    answer = casino.dashboard.get("/dashboard/api/overview")
    assert answer.status_code == 200, answer.get_data(as_text=True)[:300]
    assert len(answer.get_json()["tables"]) == casino.tables


def ping(casino: Casino) -> None:
    casino.get("/v1/ping")


OPERATIONS: dict[str, Callable[[Casino], None]] = {
    "before: listing + 4 calls a table (the old backend)": before,
    "after: GET /v1/ops/tables": after_api,
    "after: GET /dashboard/api/overview (whole refresh)": after_dashboard,
    "GET /v1/ping (noise)": ping,
}


@contextmanager
def counted() -> Iterator[list[int]]:
    sent = [0]
    original = psycopg.Cursor.execute

    def counting(cursor: Any, *args: Any, **kwargs: Any) -> Any:
        sent[0] += 1
        return original(cursor, *args, **kwargs)

    setattr(psycopg.Cursor, "execute", counting)  # noqa: B010 - instrumentation for the block
    try:
        yield sent
    finally:
        setattr(psycopg.Cursor, "execute", original)  # noqa: B010


def measure(casinos: list[Casino], repeats: int) -> None:
    names = list(OPERATIONS)
    for repeat in range(repeats):
        # Rotated each repeat, so no operation always runs first after a quiet moment.
        shift = repeat % len(names)
        for name in names[shift:] + names[:shift]:
            for casino in casinos if repeat % 2 == 0 else list(reversed(casinos)):
                with counted() as sent:
                    started = time.perf_counter()
                    OPERATIONS[name](casino)
                    elapsed = time.perf_counter() - started
                casino.seconds.setdefault(name, []).append(elapsed)
                casino.statements.setdefault(name, []).append(sent[0])


def report(casinos: list[Casino], repeats: int) -> None:
    small, large = casinos
    print(f"\nbench/dashboard.py: {repeats} repeats, {COUPS} coups a table; {uptime()}\n")
    print(
        f"| operation | {small.tables} tables, ms | {large.tables} tables, ms"
        f" | {large.tables}/{small.tables} | statements at {small.tables}"
        f" | statements at {large.tables} |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for name in OPERATIONS:
        a = statistics.median(small.seconds[name]) * 1000
        b = statistics.median(large.seconds[name]) * 1000
        sa = statistics.median(small.statements[name])
        sb = statistics.median(large.statements[name])
        print(f"| {name} | {a:.1f} | {b:.1f} | {b / a:.2f} | {sa:g} | {sb:g} |")
    old, new = (
        statistics.median(large.seconds[n]) for n in list(OPERATIONS)[:3:2]
    )  # the old backend and the new dashboard refresh
    print(f"\nAt {large.tables} tables the dashboard's refresh takes {old / new:.1f}x less time.")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--quick", action="store_true", help="3 and 12 tables, 3 repeats")
    options = parser.parse_args()
    sizes, repeats = ((3, 12), 3) if options.quick else (SIZES, options.repeats)
    with ExitStack() as stack:
        casinos = []
        for tables in sizes:
            database = stack.enter_context(throwaway_database(server_url(), "bench_dashboard"))
            casino, close = build(database, tables)
            stack.callback(close)
            casinos.append(casino)
            print(f"built {tables} tables", flush=True)
        measure(casinos, repeats)
        report(casinos, repeats)


if __name__ == "__main__":
    main()
