"""Where one warm keyed bet's time goes: the Python request path, the call, and the server.

    python bench/bet_time.py [--bets 300]

A throwaway database, one table of three funded, seated players (set up through a one-worker
`shoebox serve`), then bets through the app built in this process (Flask test client, no HTTP
server), each with an Idempotency-Key, as `bench/api.py --profile` plays them. For each bet:

- wall time and this process's CPU time (`time.process_time`) of the whole request;
- the same inside the store's call to PostgreSQL (`_append_batch`: pool checkout, the
  pipeline, the fetch), and the pool checkout alone;
- the keyed Deals of each round beside them (the others' and the last, which deals the coup).

Then, on the same server in the same run: a trivial one-row INSERT with and without its commit
(the flush); one bet's append called from a connection of its own in the ways the store has
called it, interleaved, and under EXPLAIN ANALYZE (the server's execution, without the flush);
and the append's parts in isolation, each repeated in one DO block (parsing, hashing, the lock,
the head, NOTIFY). Last, a cProfile of the bets by own time. CPU time and counts are the steady
figures on a shared machine; wall times are medians.

    python bench/bet_time.py --gevent   # the same, with gevent's monkey-patching, as serve runs

The append's calls and server-side parts run only with --sql: they call append_batch() as it
was before the parallel log (issue 22) and fail on today's schema. What always runs last is
a bet's CPU by stage (issue 23): parse and validate, authenticate, decide, encode the events,
append, build the answer, log, metrics, and the rest, from a cProfile taken with a CPU clock.
"""

from __future__ import annotations

import sys

if "--gevent" in sys.argv:
    # As `shoebox serve`'s gevent worker runs: patched before anything else is imported.
    from gevent import monkey

    monkey.patch_all()

import argparse
import cProfile
import os
import pstats
import re
import secrets
import statistics
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

_ROOT = Path(__file__).resolve().parent.parent
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

import psycopg  # noqa: E402

from bench.api import (  # noqa: E402
    ROUND_BETS,
    Client,
    Keys,
    issue_keys,
    player_ids,
    serving,
    set_up_tables,
)
from bench.common import server_url, throwaway_database  # noqa: E402
from events.migrations import apply_migrations  # noqa: E402
from events.postgres import PostgresEventStore  # noqa: E402

_TRIVIAL: Final = "INSERT INTO bench_flush (note) VALUES ('x')"
_FRESH_SQL: Final = r"""
CREATE OR REPLACE FUNCTION fresh(d text, n integer) RETURNS text LANGUAGE sql AS $$
    SELECT regexp_replace(regexp_replace(d, '"stream_id":"([^"]*)"',
                                         '"stream_id":"\1-f' || n || '"', 'g'),
                          '"version":\d+', '"version":1', 'g')
$$"""


# A served bet's stages, each the cumulative CPU of the functions named (file suffix, name)
# under a CPU-clocked cProfile; `less` names stages counted inside this one, taken out of it.
STAGES: Final = (
    ("parse and validate the body", (("webargs/core.py", "parse"),), ()),
    ("authenticate (key lookup, roles)", (("service/web/auth.py", "authenticate_request"),), ()),
    (
        "decide (load the table from cache, the rules, the plan)",
        (("service/application/game/tables.py", "prepare"),),
        ("encode the events",),
    ),
    ("encode the events", (("events/postgres.py", "append_documents"),), ()),
    (
        "append (group commit, the call, the receipt)",
        (("service/runtime/metrics.py", "append"),),
        ("encode the events", "metrics: events"),
    ),
    (
        "build the answer (outcome, schema dump, JSON, stored form)",
        (
            ("service/web/idempotency.py", "respond"),
            ("service/web/idempotency.py", "_stored_response"),
        ),
        (),
    ),
    (
        "log (the request's one JSON line)",
        (("service/web/operations.py", "_log_request"),),
        ("metrics",),
    ),
    (
        "metrics: request histogram",
        (("prometheus_client/metrics.py", "observe"), ("prometheus_client/metrics.py", "labels")),
        (),
    ),
    ("metrics: events counter", (("service/runtime/metrics.py", "record_appended"),), ()),
)


def stage_costs(stats: pstats.Stats, bets: int) -> list[tuple[str, float]]:
    """CPU ms a bet of each stage, from a profile of `bets` bets taken with a CPU clock."""
    table: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    raw: dict[str, float] = {}
    for label, functions, _ in STAGES:
        total = 0.0
        for (filename, _, name), (_, _, _, cumulative, callers) in table.items():
            del callers
            if any(filename.endswith(suffix) and name == wanted for suffix, wanted in functions):
                total += cumulative
        raw[label] = total
    costs = []
    for label, _, less in STAGES:
        own = raw[label] - sum(
            raw[other] for other in raw if any(other.startswith(prefix) for prefix in less)
        )
        costs.append((label, max(own, 0.0) / bets * 1000))
    return costs


class Clocks:
    """Accumulated wall and CPU seconds of one stage, and how often it ran."""

    def __init__(self) -> None:
        self.wall: list[float] = []
        self.cpu: list[float] = []

    @contextmanager
    def timing(self) -> Iterator[None]:
        """Time the block into this stage."""
        wall, cpu = time.perf_counter(), time.process_time()
        try:
            yield
        finally:
            self.cpu.append(time.process_time() - cpu)
            self.wall.append(time.perf_counter() - wall)


def _wrap(clocks: Clocks, function: Callable[..., Any]) -> Callable[..., Any]:
    def timed(*args: Any, **kwargs: Any) -> Any:
        with clocks.timing():
            return function(*args, **kwargs)

    return timed


def median_ms(values: list[float]) -> float:
    """The median in milliseconds (0 for none)."""
    return statistics.median(values) * 1000 if values else 0.0


def mean_ms(values: list[float], per: int) -> float:
    """The sum in milliseconds, spread over `per`."""
    return sum(values) / per * 1000 if per else 0.0


def sql_parts(database_url: str, documents: str, repeats: int) -> list[tuple[str, float]]:
    """Server-side ms of a bet's append and its parts, each repeated in one rolled-back DO."""
    parts = {
        "append_batch() of the bet's documents, no commit": (
            "PERFORM * FROM append_batch(ARRAY[fresh(d, i)], ARRAY[NULL::text],"
            " ARRAY[NULL::text], ARRAY[NULL::text]);"
        ),
        "the same with a key and a 1 kB response": (
            "PERFORM * FROM append_batch(ARRAY[fresh(d, i)], ARRAY['k' || i || random()::text],"
            " ARRAY['f'], ARRAY[r]);"
        ),
        "fresh(): the documents on new streams (in both appends above)": "d2 := fresh(d, i);",
        "string_to_array and 2 jsonb parses": (
            "p := string_to_array(d, E'\\n'); j := (p[1] || '0' || p[2])::jsonb;"
            " j := (p[3] || '0' || p[4])::jsonb;"
        ),
        "2 SHA-256 links (convert_to, encode hex)": (
            "p := string_to_array(d, E'\\n');"
            " h := encode(sha256(convert_to(repeat('0', 64) || p[1] || '1' || p[2], 'UTF8')),"
            " 'hex');"
            " h := encode(sha256(convert_to(h || p[3] || '2' || p[4], 'UTF8')), 'hex');"
        ),
        "LOCK TABLE events IN EXCLUSIVE MODE": "LOCK TABLE public.events IN EXCLUSIVE MODE;",
        "the head (last row by position)": (
            "SELECT position INTO n FROM public.events ORDER BY position DESC LIMIT 1;"
        ),
        "pg_notify": "PERFORM pg_notify('bench_nobody', i::text);",
    }
    results: list[tuple[str, float]] = []
    with psycopg.connect(database_url) as conn:
        conn.execute(_FRESH_SQL)
        conn.commit()
        for label, body in parts.items():
            block = f"""
            DO $bench$
            DECLARE d text := %(d)s; r text := %(r)s; p text[]; j jsonb; h text; n bigint; d2 text;
                    started timestamptz;
            BEGIN
                started := clock_timestamp();
                FOR i IN 1 .. {repeats} LOOP
                    {body}
                END LOOP;
                RAISE NOTICE '%', extract(epoch FROM clock_timestamp() - started);
            END
            $bench$"""
            notices: list[str] = []

            def keep(diagnostic: psycopg.errors.Diagnostic, into: list[str] = notices) -> None:
                into.append(diagnostic.message_primary or "")

            conn.add_notice_handler(keep)
            response = '{"status":201,"body":"' + "x" * 1000 + '"}'
            conn.execute(
                block.replace("%(d)s", _literal(documents)).replace("%(r)s", _literal(response))
            )
            conn.rollback()
            results.append((label, float(notices[-1]) / repeats * 1000))
    return results


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _process_cpu(pid: int) -> float:
    """Seconds of CPU (user and system) a process has used, from /proc."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def served_cpu(database_url: str, keys: Keys, rounds: int) -> tuple[float, float]:
    """CPU ms a request of a one-worker `shoebox serve` (gevent): a round's, and a ping's.

    The worker's own CPU time over whole rounds (five keyed bets and three keyed Deals, one
    client over HTTP), then over as many pings: a count of the work, not of the waits, so
    the machine's neighbours move it far less than they move latency.
    """
    with serving(database_url, 1, 1) as port:
        table_id = set_up_tables(port, keys, 1, secrets.token_hex(3))[0]
        masters = subprocess.run(
            ["pgrep", "-f", f"serve --bind 127.0.0.1:{port}"], capture_output=True, text=True
        ).stdout.split()
        workers = subprocess.run(
            ["pgrep", "-P", masters[0]], capture_output=True, text=True
        ).stdout.split()
        worker = int(workers[0])
        client = Client(port, keys.frontend, idempotency=True)
        try:
            play_rounds(client, table_id, 3)  # warm
            before = _process_cpu(worker)
            requests = play_rounds(client, table_id, rounds)
            per_request = (_process_cpu(worker) - before) / requests * 1000
            before = _process_cpu(worker)
            for _ in range(requests):
                client.ok("GET", "/ping")
            per_ping = (_process_cpu(worker) - before) / requests * 1000
        finally:
            client.close()
    return per_request, per_ping


def play_rounds(client: Client, table_id: str, rounds: int) -> int:
    """Play `rounds` whole rounds at one table; the number of requests made."""
    players = player_ids(table_id)
    for _ in range(rounds):
        for seat, spot, stake in ROUND_BETS:
            body = {"player_id": players[seat], "spot": spot, "stake_pence": stake}
            client.ok("POST", f"/tables/{table_id}/bets", body)
        for player_id in players:
            client.ok("POST", f"/tables/{table_id}/deal", {"player_id": player_id})
    return rounds * (len(ROUND_BETS) + len(players))


def fresh(documents: str, n: int) -> str:
    """The bet's documents on streams of their own, at version 1: an append that succeeds."""
    lines = documents.split("\n")
    for i in range(1, len(lines), 2):
        lines[i] = re.sub(r'"stream_id":"([^"]*)"', rf'"stream_id":"\1-f{n}"', lines[i])
        lines[i] = re.sub(r'"version":\d+', '"version":1', lines[i])
    return "\n".join(lines)


def call_styles(database_url: str, documents: str, calls: int) -> list[tuple[str, float, float]]:
    """Wall p50 and client CPU ms of one append, called in different ways, interleaved."""
    from events.postgres import _APPEND_BATCH

    # The store's earlier forms (before migration 0013), spelled here to measure them beside
    # the one statement it sends now.
    append_4 = (
        "SELECT first_position, last_position, replayed_result, replayed_response, error_code,"
        " error_detail FROM append_batch(%b::text[], %b::text[], %b::text[], %b::text[])"
    )
    bound_waits = (
        "SELECT set_config('lock_timeout', %s, false), set_config('statement_timeout', %s, false)"
    )
    reset_waits = (
        "SELECT set_config('lock_timeout', NULL, false),"
        " set_config('statement_timeout', NULL, false)"
    )

    response = '{"status":201,"body":"' + "x" * 1000 + '"}'
    counter = iter(range(10**9))

    def columns() -> list[list[str | None]]:
        n = next(counter)
        return [[fresh(documents, n)], [f"style-{n}-{secrets.token_hex(4)}"], ["f"], [response]]

    def pipelined(conn: psycopg.Connection[Any]) -> None:
        # As the store called it before: the waits set, the append, and two RESETs.
        with conn.pipeline():
            conn.execute(bound_waits, ["2000", "5000"], prepare=False)
            cursor = conn.execute(append_4, columns(), prepare=False)
            conn.execute("RESET lock_timeout", prepare=False)
            conn.execute("RESET statement_timeout", prepare=False)
        cursor.fetchall()

    def pipelined_3(conn: psycopg.Connection[Any]) -> None:
        # As the store calls it now: the waits set, the append, one reset of both.
        with conn.pipeline():
            waits = conn.cursor()
            waits.execute(bound_waits, ["2000", "5000"], prepare=False)
            cursor = conn.execute(append_4, columns(), prepare=False)
            waits.execute(reset_waits, prepare=False)
        cursor.fetchall()

    def single(conn: psycopg.Connection[Any]) -> None:
        conn.execute(append_4, columns(), prepare=False).fetchall()

    def bounded(conn: psycopg.Connection[Any]) -> None:
        # As the store calls it now: one statement, the lock's bound its last argument.
        conn.execute(_APPEND_BATCH, [*columns(), "2000ms"], prepare=False).fetchall()

    executions: list[float] = []

    def explained(conn: psycopg.Connection[Any]) -> None:
        plan = conn.execute(
            "EXPLAIN (ANALYZE, FORMAT JSON) " + append_4, columns(), prepare=False
        ).fetchone()
        assert plan is not None
        executions.append(plan[0][0]["Execution Time"] / 1000)

    def trivial(conn: psycopg.Connection[Any]) -> None:
        conn.execute(_TRIVIAL)

    styles: dict[str, Callable[[psycopg.Connection[Any]], None]] = {
        "append: pipeline of 4 (SET waits, append, 2 RESETs)": pipelined,
        "append: pipeline of 3 (SET waits, append, one reset of both)": pipelined_3,
        "append: the one statement alone": single,
        "append: one statement bounding its own lock (migration 0013)": bounded,
        "one-row INSERT, autocommit": trivial,
        "append: EXPLAIN ANALYZE of the statement (its commit included)": explained,
    }
    took: dict[str, Clocks] = {label: Clocks() for label in styles}
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS bench_flush (id serial PRIMARY KEY, note text)")
        for _ in range(calls):
            for label, style in styles.items():
                with took[label].timing():
                    style(conn)
    return [
        *((label, median_ms(c.wall), mean_ms(c.cpu, len(c.cpu))) for label, c in took.items()),
        ("append: server execution (EXPLAIN ANALYZE's Execution Time)", median_ms(executions), 0.0),
    ]


def flush_ms(database_url: str, commits: int) -> tuple[float, float]:
    """Median ms of an autocommit one-row INSERT, and of one in a transaction rolled back."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS bench_flush (id serial PRIMARY KEY, note text)")
        committed: list[float] = []
        for _ in range(commits):
            started = time.perf_counter()
            conn.execute(_TRIVIAL)
            committed.append(time.perf_counter() - started)
    with psycopg.connect(database_url) as conn:
        rolled: list[float] = []
        for _ in range(commits):
            started = time.perf_counter()
            conn.execute(_TRIVIAL)
            rolled.append(time.perf_counter() - started)
            conn.rollback()
    return median_ms(committed), median_ms(rolled)


def main(argv: list[str] | None = None) -> None:
    """Run the breakdown and print it as Markdown."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--bets", type=int, default=300)
    parser.add_argument("--top", type=int, default=25, help="cProfile lines by own time")
    parser.add_argument("--dump", type=Path, help="also write the profile's stats here")
    parser.add_argument("--gevent", action="store_true", help="as the gevent worker runs")
    parser.add_argument(
        "--sql",
        action="store_true",
        help="also the append's calls and server-side parts (written for the append_batch of"
        " before the parallel log, issue 22: they fail on today's schema)",
    )
    parser.add_argument(
        "--served-rounds", type=int, default=100, help="rounds through `shoebox serve`; 0: none"
    )
    args = parser.parse_args(argv)
    if args.gevent:
        from service.cli.serve import cooperate_with_gevent

        cooperate_with_gevent()

    from service.runtime.settings import Settings
    from service.web.app import create_app

    with throwaway_database(server_url(), prefix="bench_bet") as database_url:
        apply_migrations(database_url)
        keys = issue_keys(database_url)
        served = served_cpu(database_url, keys, args.served_rounds) if args.served_rounds else None
        with serving(database_url, 1, 1) as port:
            table_id = set_up_tables(port, keys, 1, secrets.token_hex(3))[0]

        app = create_app(Settings(database_url=database_url, rate_limit_per_second=0), pool_size=2)
        client = app.test_client()
        players = player_ids(table_id)
        headers = {"Authorization": f"Bearer {keys.frontend}"}
        request_clocks, call_clocks, checkout_clocks = Clocks(), Clocks(), Clocks()
        # A round's deals, as bench/api.py plays them (keyed): the others', and the last (the coup).
        deal_clocks = (Clocks(), Clocks())
        documents: list[str] = []

        def one_round(timed: bool, profiler: cProfile.Profile | None = None) -> int:
            placed = 0
            for seat, spot, stake in ROUND_BETS:
                body = {"player_id": players[seat], "spot": spot, "stake_pence": stake}
                keyed = {**headers, "Idempotency-Key": secrets.token_hex(12)}
                if profiler is not None:
                    profiler.enable()
                if timed:
                    with request_clocks.timing():
                        answer = client.post(
                            f"/v1/tables/{table_id}/bets", json=body, headers=keyed
                        )
                else:
                    answer = client.post(f"/v1/tables/{table_id}/bets", json=body, headers=keyed)
                if profiler is not None:
                    profiler.disable()
                if answer.status_code != 201:
                    raise RuntimeError(f"bet answered {answer.status_code}: {answer.get_json()}")
                placed += 1
            for player_id in players:
                answer = client.post(
                    f"/v1/tables/{table_id}/deal", json={"player_id": player_id}, headers=headers
                )
                if answer.status_code != 200:
                    raise RuntimeError(f"deal answered {answer.status_code}")
            return placed

        one_round(False)
        one_round(False)
        # Instrument the store's call and the pool's checkout from now on (the group commit
        # holds the bound method, so the instance's sender is replaced).
        from service.web.api import EXTENSION

        store: PostgresEventStore = app.extensions[EXTENSION].store
        group = store._group
        assert group is not None
        original_send = group._send
        pool = store._pool
        original_connection = pool.connection
        in_bet = {"on": False}

        @contextmanager
        def timed_connection(*a: Any, **k: Any) -> Iterator[Any]:
            if not in_bet["on"]:
                with original_connection(*a, **k) as conn:
                    yield conn
                return
            with checkout_clocks.timing():
                manager = original_connection(*a, **k)
                conn = manager.__enter__()
            try:
                yield conn
            finally:
                manager.__exit__(None, None, None)

        def timed_send(batch: Any) -> None:
            if not in_bet["on"]:
                return original_send(batch)
            if not documents:
                documents.append(batch[0].documents)
            with call_clocks.timing():
                return original_send(batch)

        group._send = timed_send
        pool.connection = timed_connection  # type: ignore[method-assign]
        placed = 0
        while placed < args.bets:
            # Only the bets' calls are timed: the deals append too.
            in_bet["on"] = True
            for seat, spot, stake in ROUND_BETS:
                body = {"player_id": players[seat], "spot": spot, "stake_pence": stake}
                keyed = {**headers, "Idempotency-Key": secrets.token_hex(12)}
                with request_clocks.timing():
                    answer = client.post(f"/v1/tables/{table_id}/bets", json=body, headers=keyed)
                if answer.status_code != 201:
                    raise RuntimeError(f"bet answered {answer.status_code}")
                placed += 1
            in_bet["on"] = False
            for n, player_id in enumerate(players):
                keyed = {**headers, "Idempotency-Key": secrets.token_hex(12)}
                with deal_clocks[n == len(players) - 1].timing():
                    client.post(
                        f"/v1/tables/{table_id}/deal", json={"player_id": player_id}, headers=keyed
                    )
        group._send = original_send
        del pool.connection
        ping_clocks = Clocks()
        for _ in range(args.bets):
            with ping_clocks.timing():
                client.get("/v1/ping", headers=headers)
        committed, rolled = flush_ms(database_url, 300)
        parts: list[tuple[str, float]] = []
        styles: list[tuple[str, float, float]] = []
        if args.sql and documents:
            parts = sql_parts(database_url, documents[0], 300)
            styles = call_styles(database_url, documents[0], args.bets)

        profiler = cProfile.Profile(time.process_time)
        profiled = 0
        while profiled < args.bets:
            profiled += one_round(False, profiler)

    bets = len(request_clocks.wall)
    if served is not None:
        per_request, per_ping = served
        print(
            f"Through a one-worker `shoebox serve` (gevent), {args.served_rounds} rounds:"
            f" the worker's CPU {per_request:.2f} ms a request of a round (5 bets, 3 Deals),"
            f" {per_ping:.2f} ms a ping\n"
        )
    print(f"{bets} warm keyed bets in-process\n")
    print("| stage | wall p50 ms | CPU ms a bet (mean) |")
    print("|:--|--:|--:|")
    print(
        f"| whole request (test client) | {median_ms(request_clocks.wall):.2f} |"
        f" {mean_ms(request_clocks.cpu, bets):.2f} |"
    )
    print(
        f"| the call to PostgreSQL (_append_batch) | {median_ms(call_clocks.wall):.2f} |"
        f" {mean_ms(call_clocks.cpu, bets):.2f} |"
    )
    print(
        f"| of which pool checkout | {median_ms(checkout_clocks.wall):.2f} |"
        f" {mean_ms(checkout_clocks.cpu, bets):.2f} |"
    )
    print(
        f"| ping (test client) | {median_ms(ping_clocks.wall):.2f} |"
        f" {mean_ms(ping_clocks.cpu, len(ping_clocks.cpu)):.2f} |"
    )
    for label, clocks in zip(
        ("a Deal that waits for others", "the Deal that deals the coup"), deal_clocks, strict=True
    ):
        print(
            f"| {label} (keyed) | {median_ms(clocks.wall):.2f} |"
            f" {mean_ms(clocks.cpu, len(clocks.cpu)):.2f} |"
        )
    print(f"| one-row INSERT, autocommit (its flush) | {committed:.2f} | |")
    print(f"| one-row INSERT, no commit | {rolled:.2f} | |")
    print()
    if styles or parts:
        print("One append called in different ways from a connection of its own, interleaved:\n")
        print("| call | wall p50 ms | client CPU ms (mean) |")
        print("|:--|--:|--:|")
        for label, wall, cpu in styles:
            print(f"| {label} | {wall:.2f} | {cpu:.2f} |")
        print()
        print("Server-side parts, each 300 times in one DO block, ms each:\n")
        print("| part | ms |")
        print("|:--|--:|")
        for label, ms in parts:
            print(f"| {label} | {ms:.3f} |")
        print()
    stats = pstats.Stats(profiler)
    profiled_total = sum(row[2] for row in stats.stats.values())  # type: ignore[attr-defined]
    print(
        f"A bet's CPU by stage: {profiled} bets under cProfile with a CPU clock (its own"
        " overhead inflates every stage alike; compare stages, and the unprofiled whole"
        " request above):\n"
    )
    print("| stage | CPU ms a bet (profiled) | share |")
    print("|:--|--:|--:|")
    per_bet_total = profiled_total / profiled * 1000
    counted = 0.0
    for label, ms in stage_costs(stats, profiled):
        counted += ms
        print(f"| {label} | {ms:.3f} | {ms / per_bet_total:.0%} |")
    rest = per_bet_total - counted
    print(
        f"| the rest (Flask, routing, hooks, WSGI, test client) | {rest:.3f}"
        f" | {rest / per_bet_total:.0%} |"
    )
    print(f"| whole bet (profiled) | {per_bet_total:.3f} | 100% |")
    print()
    if args.dump is not None:
        stats.dump_stats(args.dump)
    stats.sort_stats("tottime").print_stats(args.top)


if __name__ == "__main__":
    main()
