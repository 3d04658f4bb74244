"""What one operation costs as a table's history grows: 1x, 10x and 100x, in one run.

History is built fast, not played over HTTP: one busy table deals coup after coup through the
domain's own `decide` and `evolve` (bench/verify.py's Simulation: three seated players bet and
press Deal, the wallets' stakes and payouts beside them, a chat message every few coups), and
each coup is one append through the real `PostgresEventStore`, as the service would make it.
A hundred other tables stand idle. The table's and wallets' snapshots are taken as the service
takes them (every SNAPSHOT_EVERY events of a stream, after the append that reaches it), so a
cold load finds what it would find in production.

The database is left as a live server's would be (issue 21): the read models follow the log as
it grows, folded by the follower `shoebox projector` runs, a pass every FOLLOW_EVERY coups (not
rebuilt from position 0 at each size), and nothing is analyzed by hand. The planner has what
autovacuum gathered, which on a server with autovacuum off, as on the development machine, is
nothing at all: a manual ANALYZE after each size had hidden two reads that grew with history.

At each size the database is copied (CREATE DATABASE ... TEMPLATE) and the operations are
measured on the copy, through the real Flask app over PostgreSQL (its test client, so the
figure is the request's own cost, not a socket's), so the history that grows is never touched
by the requests. The copies are kept to the end and measured in turn, one repeat of every
operation at each size, the order rotated each repeat, so that the shared machine's bursts of
load fall on every size alike. Each figure is a median of repeats; the table printed at the
end gives each operation's median at every size and its 100x/1x ratio (goal: at most 1.25,
except the whole-history export, which must stay linear in its output with flat memory: it
runs in a process of its own so its peak RSS can be read). GET /v1/ping, which reads nothing, is
measured beside them: its ratio is the run's noise.

Run: PYTHONPATH=. .venv/bin/python -m bench.growth               # 200, 2,000, 20,000 coups
     PYTHONPATH=. .venv/bin/python -m bench.growth --repeats 15  # docs/benchmarks.md's run
     PYTHONPATH=. .venv/bin/python -m bench.growth --quick       # 20, 60, 200: a smoke test
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from bench.common import server_url, throwaway_database, with_dbname
from bench.verify import Simulation
from domain.chat import PostMessage, decide_post
from domain.shoe import ServerSeed
from domain.table import CreateTable, OpenShoe, RetireShoe, RevealShoe, TableEvent, decide
from events.migrations import apply_migrations
from events.postgres import Pool, PostgresEventStore, app_conninfo, open_pool
from events.snapshots import PostgresSnapshotStore
from events.store import EventMetadata, StreamAppend
from service.application.game.open_rounds import PostgresOpenRounds
from service.application.game.recovery import recover
from service.application.game.tables import GameService
from service.application.keys import Role, create_key
from service.application.read_models import projector
from service.application.streams import (
    TableCache,
    chat_stream,
    id_of,
    table_stream,
    to_new_event,
)
from service.application.upcasters import upcasters
from service.application.wallets import WalletCache
from service.regulator.export import build_export
from service.regulator.log_index import PostgresLogIndex
from service.runtime.settings import Settings
from service.web.api import EXTENSION
from service.web.app import create_app

ROOT = Path(__file__).resolve().parents[1]
BUSY = "BUSY"
IDLE_TABLES = 100
PLAYERS = 3
CHAT_EVERY = 4
# Coups between two passes of the projector while history is built: a live projector folds
# each coup within moments; one pass a coup would make the 100x build take half an hour.
FOLLOW_EVERY = 10
PLAY = EventMetadata(actor="bench-frontend", role="frontend")
OPS = EventMetadata(actor="bench-ops", role="ops")
GOAL = 1.25


class Clock:
    """The simulation's clock, which the store stamps each append with."""

    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


class Growth(Simulation):
    """The busy table: coup after coup, shoes opened and retired as they run out."""

    def __init__(self, start: datetime) -> None:
        super().__init__(BUSY, PLAYERS, seed=12)
        self.clock = start
        self.chat_version = 0
        self.coups = 0
        self.nonce = 0
        self.shoe: tuple[str, ServerSeed, tuple[int, ...]] | None = None
        self.shoe_periods: list[tuple[str, datetime, datetime]] = []
        self._shoe_started = start

    def setup(self) -> Iterator[tuple[list[StreamAppend], EventMetadata]]:
        """The tables, and the busy table's players seated with money."""
        for append in self.appends(0):
            yield append.streams, OPS
        for number in range(1, IDLE_TABLES + 1):
            events = [to_new_event(e) for e in _create(f"IDLE-{number}", self.clock)]
            yield [StreamAppend(table_stream(f"IDLE-{number}"), 0, events)], OPS

    def deal(self, coups: int) -> Iterator[tuple[list[StreamAppend], EventMetadata]]:
        """`coups` more coups, opening and retiring shoes as they run out."""
        for _ in range(coups):
            if self.shoe is None:
                yield self._open_shoe(), OPS
            assert self.shoe is not None
            shoe_id, seed, cards = self.shoe
            coup = self._coup(shoe_id, cards)
            self.coups += 1
            streams = coup.streams
            if self.coups % CHAT_EVERY == 0:
                streams = [*streams, self._chat()]
            yield streams, PLAY
            live = self.table.shoe if self.table is not None else None
            if live is not None and not live.can_deal:
                base = self.table_version
                events = self._decide(RetireShoe(), RevealShoe(shoe_id, seed.reveal()))
                self.shoe_periods.append((shoe_id, self._shoe_started, self.clock))
                self.shoe = None
                yield [self._appended(base, events)], OPS

    def _open_shoe(self) -> list[StreamAppend]:
        assert self.table is not None
        self.nonce += 1
        seed = ServerSeed.generate()
        client_seed = f"growth-{self.nonce}"
        shuffled = seed.shuffle(client_seed, self.nonce, self.table.settings.decks)
        shoe_id = f"{BUSY}-shoe-{self.nonce}"
        command = OpenShoe(
            shoe_id, seed.commitment, client_seed, self.nonce, self.table.settings.decks,
            shuffled.hands,
        )  # fmt: skip
        self.shoe = (shoe_id, seed, shuffled.cards)
        self._shoe_started = self._tick()
        base = self.table_version
        return [self._appended(base, self._decide(command))]

    def _chat(self) -> StreamAppend:
        assert self.table is not None
        player = self.players[self.coups % len(self.players)]
        posted = decide_post(self.table, PostMessage(player, f"coup {self.coups}"), self.clock)
        append = StreamAppend(
            chat_stream(BUSY), self.chat_version, [to_new_event(e) for e in posted]
        )
        self.chat_version += len(posted)
        return append


def _create(table_id: str, now: datetime) -> list[TableEvent]:
    return list(decide(None, CreateTable(table_id), now))


class Snapshots:
    """The busy table's and its players' snapshots, taken as the service's caches take them."""

    def __init__(self, snapshots: PostgresSnapshotStore) -> None:
        self.tables = TableCache(snapshots=snapshots)
        self.wallets = WalletCache(snapshots=snapshots)

    def after(self, growth: Growth, streams: list[StreamAppend]) -> None:
        """What the service does once an append is recorded: `put` each stream's new state."""
        for append in streams:
            if append.stream_id == table_stream(BUSY):
                self.tables.put(append.stream_id, growth.table_version, growth.table)
            elif append.stream_id.startswith("wallet:"):
                version, wallet = growth.wallets[id_of(append.stream_id)]
                self.wallets.put(append.stream_id, version, wallet)


def append_all(
    store: PostgresEventStore,
    clock: Clock,
    growth: Growth,
    appends: Iterator[tuple[list[StreamAppend], EventMetadata]],
    snapshots: Snapshots | None = None,
) -> int:
    """Append each through the store, stamped with the simulation's time; the events written."""
    written = 0
    for streams, metadata in appends:
        clock.now = growth.clock
        store.append(streams, metadata)
        if snapshots is not None:
            snapshots.after(growth, streams)
        written += sum(len(s.events) for s in streams)
    return written


@dataclass
class Figures:
    """Each operation's samples in seconds, by size."""

    samples: dict[str, dict[str, list[float]]] = field(default_factory=dict)

    def add(self, operation: str, size: str, seconds: float) -> None:
        self.samples.setdefault(operation, {}).setdefault(size, []).append(seconds)

    def median(self, operation: str, size: str) -> float | None:
        found = self.samples.get(operation, {}).get(size)
        return statistics.median(found) if found else None


class Client:
    """The real app over one database, and a key per role."""

    def __init__(self, database: str, keys: dict[Role, str]) -> None:
        self.app = create_app(Settings(database_url=database), pool_size=4)
        self.client = self.app.test_client()
        self.keys = keys

    def call(self, method: str, path: str, role: Role, body: Any = None, *, allow: int = 0) -> Any:
        headers = {"Authorization": f"Bearer {self.keys[role]}"}
        response = self.client.open(path, method=method, headers=headers, json=body)
        if response.status_code >= 400 and response.status_code != allow:
            raise RuntimeError(f"{method} {path}: {response.status_code} {response.get_data()!r}")
        return response.get_json()

    def close(self) -> None:
        self.app.extensions[EXTENSION].close()


def timed(run: Callable[[], object]) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


@dataclass
class Size:
    """One size's copy of the history, measured in turn with the others."""

    label: str
    copy: str
    database: str
    # The simulation as the copy holds it, dealing on as the projector's coups are appended.
    twin: Growth
    # The shoe looked up and exported: the last complete one when the copy was taken.
    shoe: tuple[str, datetime, datetime]
    coups: int
    end: datetime


def measure_projector(
    figures: Figures, size: Size, pool: Pool, follower: projector.ProjectionFollower
) -> None:
    """The projector catching up on one new coup of the busy table, appended as it deals on.

    Before any request at this size: the simulation's next coup names the versions it dealt
    from, which a request's bet would have moved on. The pool and the follower are the size's
    own, kept from turn to turn as a running projector's are: new connections' first queries
    (catalog lookups, plans) cost the same at every size and would only dilute the ratio.
    """
    clock = Clock(size.twin.clock)
    store = PostgresEventStore(pool, clock)
    append_all(store, clock, size.twin, size.twin.deal(1))
    figures.add("projector: catch up one coup", size.label, timed(follower.run_until_caught_up))


def deal_following(
    store: PostgresEventStore,
    clock: Clock,
    growth: Growth,
    coups: int,
    snapshots: Snapshots,
    follower: projector.ProjectionFollower,
) -> tuple[int, float]:
    """`coups` more coups, the projector following every FOLLOW_EVERY: the events written, and
    the seconds the projector took."""
    written, following = 0, 0.0
    while coups > 0:
        chunk = min(coups, FOLLOW_EVERY)
        written += append_all(store, clock, growth, growth.deal(chunk), snapshots)
        coups -= chunk
        following += timed(follower.run_until_caught_up)
    return written, following


def measure(figures: Figures, size: Size, keys: dict[Role, str], repeats: int) -> None:
    """Every request and the export at one size, on a database they may write to."""
    database, label = size.database, size.label
    conninfo = app_conninfo(database, environ={})
    with open_pool(conninfo, max_size=6) as pool:
        store = PostgresEventStore(pool, Clock(size.end))
        player = size.twin.players[0]
        bet = {"player_id": player, "spot": "banker", "stake_pence": 100}
        bets = f"/v1/tables/{BUSY}/bets"
        # Taking the bet back may find the round gone: when a cold load outlasts the 15 s
        # window, the next request closes it with nobody in play and the stake comes back.
        withdraw = f"{bets}/{player}"
        # Cold: a new app, with empty caches, for each sample.
        for _ in range(repeats):
            state = Client(database, keys)
            path = f"/v1/tables/{BUSY}/state"
            figures.add(
                "cold GET /state", label, timed(partial(state.call, "GET", path, Role.FRONTEND))
            )
            state.close()
            cold = Client(database, keys)
            first_bet = partial(cold.call, "POST", bets, Role.FRONTEND, bet)
            figures.add("cold first bet", label, timed(first_bet))
            cold.call("DELETE", withdraw, Role.FRONTEND, allow=409)
            cold.close()
            # A balance as a new process reads it: the wallet's newest snapshot and the
            # events after it, never the read model (docs/api.md, "Which reads are exact").
            balance = Client(database, keys)
            figures.add(
                "cold GET /wallets/{player}", label,
                timed(partial(balance.call, "GET", f"/v1/wallets/{player}", Role.FRONTEND)),
            )  # fmt: skip
            balance.close()
            # A recovery sweep as a worker's first: a new service, nothing cached, over the
            # index of open rounds and the snapshots, as service/runtime/jobs.py wires it.
            fresh = PostgresEventStore(pool, _now, upcasters())
            games = GameService(fresh, _now, snapshots=PostgresSnapshotStore(pool, _now))
            open_rounds = PostgresOpenRounds(pool, upcasters())
            figures.add(
                "recovery sweep", label, timed(partial(recover, fresh, games, _now, open_rounds))
            )
        warm = Client(database, keys)
        shoe_id, start, end = size.shoe
        # The shoe being dealt: opened by the projector's first coup at this size (each size
        # ends on a whole shoe), so it has dealt as many coups at every size.
        assert size.twin.shoe is not None
        open_shoe = size.twin.shoe[0]
        # The movements of the history's last hour, every operator's, as a regulator pages them.
        hour = (size.end - timedelta(hours=1)).isoformat().replace("+00:00", "Z")
        reads = {
            "significant events, first page": (
                "/v1/audit/significant-events?limit=50", Role.REGULATOR,
            ),
            "shoe lookup": (f"/v1/shoes/{shoe_id}", Role.REGULATOR),
            "open shoe lookup": (f"/v1/shoes/{open_shoe}", Role.REGULATOR),
            "wallet movements, a page": (
                f"/v1/wallet-movements?from={hour}&limit=50", Role.REGULATOR,
            ),
            "chat, a page": (f"/v1/tables/{BUSY}/chat?limit=50", Role.FRONTEND),
            "a player's rounds, a page": (f"/v1/players/{player}/rounds?limit=20", Role.FRONTEND),
            "invariants check": ("/v1/ops/invariants", Role.OPS),
        }  # fmt: skip
        for path, role in reads.values():
            warm.call("GET", path, role)
        warm.call("POST", bets, Role.FRONTEND, bet)
        warm.call("DELETE", withdraw, Role.FRONTEND, allow=409)
        index = PostgresLogIndex(pool)
        warm.call("GET", "/v1/ping", Role.FRONTEND)
        for _ in range(repeats):
            figures.add(
                "GET /v1/ping (noise baseline)", label,
                timed(partial(warm.call, "GET", "/v1/ping", Role.FRONTEND)),
            )  # fmt: skip
            figures.add(
                "warm bet", label, timed(lambda: warm.call("POST", bets, Role.FRONTEND, bet))
            )
            warm.call("DELETE", withdraw, Role.FRONTEND, allow=409)
            for name, (path, role) in reads.items():
                figures.add(name, label, timed(partial(warm.call, "GET", path, role)))
            figures.add(
                "export of one shoe", label,
                timed(lambda: sum(1 for _ in build_export(store, BUSY, start, end, index))),
            )  # fmt: skip
        warm.close()


def _now() -> datetime:
    return datetime.now(UTC)


def whole_export(database: str, start: datetime, end: datetime) -> tuple[float, int, int]:
    """The busy table's whole history exported in a process of its own: seconds, lines, peak
    RSS in KiB."""
    code = (
        "import sys, time\n"
        "from datetime import datetime\n"
        "from events.postgres import PostgresEventStore, app_conninfo, open_pool\n"
        "from service.regulator.export import build_export\n"
        "from service.regulator.log_index import PostgresLogIndex\n"
        "with open_pool(app_conninfo(sys.argv[1], environ={})) as pool:\n"
        "    began = time.perf_counter()\n"
        "    lines = 0\n"
        "    store = PostgresEventStore(pool)\n"
        "    for line in build_export(store, sys.argv[2], datetime.fromisoformat(sys.argv[3]),"
        " datetime.fromisoformat(sys.argv[4]), PostgresLogIndex(pool)):\n"
        "        lines += 1\n"
        "    took = time.perf_counter() - began\n"
        # VmHWM, not getrusage's ru_maxrss: Linux carries ru_maxrss over from the parent at
        # fork, and this bench's parent holds the 100x table in its caches by then.
        "peak = next(l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM'))\n"
        "print(took, lines, peak)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, database, BUSY, start.isoformat(), end.isoformat()],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    seconds, lines, rss = result.stdout.split()
    return float(seconds), int(lines), int(rss)


def autoanalyzed(database: str) -> str:
    """Whether autovacuum runs on the server, and how many of the tables it has analyzed."""
    with psycopg.connect(database, autocommit=True) as conn:
        setting = conn.execute("SHOW autovacuum").fetchone()
        counts = conn.execute(
            "SELECT count(*) FILTER (WHERE last_autoanalyze IS NOT NULL), count(*)"
            " FROM pg_stat_user_tables WHERE relname = 'events' OR relname LIKE 'proj%'"
        ).fetchone()
    assert setting is not None
    assert counts is not None
    return f"{setting[0]}, {counts[0]} of {counts[1]} tables auto-analyzed"


def copy_database(admin: str, source: str, target: str) -> None:
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(
            sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                sql.Identifier(target), sql.Identifier(source)
            )
        )


def drop_database(admin: str, name: str) -> None:
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="75, 225 and 750 coups, 3 repeats")
    parser.add_argument("--base", type=int, default=200, help="coups at 1x (default 200)")
    parser.add_argument("--repeats", type=int, default=7)
    options = parser.parse_args(argv)
    sizes = (
        [20, 60, 200] if options.quick else [options.base, options.base * 10, options.base * 100]
    )
    labels = ["1x", "3x", "10x"] if options.quick else ["1x", "10x", "100x"]
    repeats = 3 if options.quick else options.repeats
    admin = server_url()
    figures = Figures()
    exports: list[tuple[str, int, float, int, int]] = []
    began = time.perf_counter()
    with throwaway_database(admin, "growth") as database:
        apply_migrations(database)
        name = str(psycopg.conninfo.conninfo_to_dict(database)["dbname"])
        # The simulation's time runs in the past, up to a second a coup, so that the requests
        # measured at the real time find every window of its rounds long closed.
        start = _now() - timedelta(seconds=sizes[-1] * 2 + 86_400)
        growth = Growth(start)
        events = 0
        keys: dict[Role, str] = {}
        conninfo = app_conninfo(database, environ={})
        built = 0
        measured: list[Size] = []
        for size, label in zip(sizes, labels, strict=True):
            with open_pool(conninfo, max_size=4) as pool:
                clock = Clock(growth.clock)
                store = PostgresEventStore(pool, clock)
                # New caches for each size, as a service restarted between them would have.
                snapshots = Snapshots(PostgresSnapshotStore(pool, clock))
                building = time.perf_counter()
                before = events
                following = projector.follower(pool, listen=False)
                if built == 0:
                    events += append_all(store, clock, growth, growth.setup(), snapshots)
                    for role in (Role.FRONTEND, Role.REGULATOR, Role.OPS):
                        keys[role] = create_key(store, f"growth {role.value}", role, OPS).secret
                written, caught = deal_following(
                    store, clock, growth, size - built, snapshots, following
                )
                events += written
                # End on a whole shoe, so the last shoe looked up and exported is complete.
                while not growth.shoe_periods or growth.shoe is not None:
                    written, took = deal_following(store, clock, growth, 1, snapshots, following)
                    events += written
                    caught += took
                built = growth.coups
                wrote = time.perf_counter() - building - caught
            # No ANALYZE: a live database has the statistics autovacuum gathered, if any.
            analyzed = autoanalyzed(database)
            print(
                f"{label}: {growth.coups:,} coups, {events:,} events; appended in {wrote:.1f} s"
                f" ({(events - before) / max(wrote, 1e-9):,.0f} events/s), projector followed"
                f" in {caught:.1f} s; autovacuum {analyzed}; {growth.players[0]}'s wallet at"
                f" version {growth.wallets[growth.players[0]][0]:,}",
                file=sys.stderr,
            )
            copy_name = f"{name}_{label}"
            copy_database(admin, name, copy_name)
            measured.append(
                Size(
                    label, copy_name, with_dbname(database, copy_name), copy.deepcopy(growth),
                    growth.shoe_periods[-1], growth.coups, growth.clock,
                )
            )  # fmt: skip
        try:
            # One repeat of every operation at each size in turn, the order rotated each
            # repeat: a burst of load on the shared machine then falls on every size alike,
            # where measuring the sizes one after another put it on whichever ran then.
            turns = [
                measured[r % len(measured) :] + measured[: r % len(measured)]
                for r in range(repeats)
            ]
            with ExitStack() as stack:
                pools = {
                    m.label: stack.enter_context(
                        open_pool(app_conninfo(m.database, environ={}), max_size=6)
                    )
                    for m in measured
                }
                followers = {
                    label: projector.follower(pool_now, listen=False)
                    for label, pool_now in pools.items()
                }
                for following_now in followers.values():
                    following_now.run_until_caught_up()  # nothing to apply: connections open
                for turn in turns:
                    for size_now in turn:
                        measure_projector(
                            figures, size_now, pools[size_now.label], followers[size_now.label]
                        )
            for turn in turns:
                for size_now in turn:
                    measure(figures, size_now, keys, 1)
            for size_now in measured:
                seconds, lines, rss = whole_export(size_now.database, start, size_now.end)
                exports.append((size_now.label, size_now.coups, seconds, lines, rss))
        finally:
            for size_now in measured:
                drop_database(admin, size_now.copy)
    print(f"\nbuilt and measured in {time.perf_counter() - began:.0f} s\n")
    print(render(figures, labels))
    print()
    print("| whole-history export | coups | lines | seconds | lines/s | peak RSS |")
    print("|---|---:|---:|---:|---:|---:|")
    for label, coups, seconds, lines, rss in exports:
        print(
            f"| {label} | {coups:,} | {lines:,} | {seconds:.2f} | {lines / seconds:,.0f} |"
            f" {rss / 1024:.0f} MiB |"
        )
    return 0


def render(figures: Figures, labels: list[str]) -> str:
    """The medians in ms at each size, the ratio of the last to the first, and the worst."""
    head = "| operation | " + " | ".join(labels) + f" | {labels[-1]}/{labels[0]} | goal |"
    rows = [head, "|---|" + "---:|" * len(labels) + "---:|---|"]
    worst: tuple[float, str] | None = None
    for operation in figures.samples:
        medians = [figures.median(operation, label) for label in labels]
        first, last = medians[0], medians[-1]
        ratio = last / first if first and last else float("nan")
        if worst is None or ratio > worst[0]:
            worst = (ratio, operation)
        cells = " | ".join("-" if m is None else f"{m * 1000:.1f} ms" for m in medians)
        verdict = "met" if ratio <= GOAL else "**missed**"
        rows.append(f"| {operation} | {cells} | {ratio:.2f} | {verdict} |")
    if worst is not None:
        rows.append(f"\ngrows most: {worst[1]} (x{worst[0]:.2f})")
    return "\n".join(rows)


if __name__ == "__main__":
    sys.exit(main())
