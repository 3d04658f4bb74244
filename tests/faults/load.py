"""Concurrent rounds against a real server, every request recorded, and the books checked after.

Threads play rounds at tables of their own (Load: a bet, then Deal; Watchers: a bet, then only
reading the table's state until its window has been closed and dealt by someone else), each
request with its own X-Request-Id and a client timeout, so that a fault test can say what was
sent, what was answered how and when, and find every 2xx in the log.
"""

from __future__ import annotations

import http.client
import json
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from click.testing import CliRunner

from events.postgres import PostgresEventStore, app_conninfo, open_pool
from events.sequencer import place_queued
from service.cli import main
from tests.faults.figures import count_found
from tests.stateful import Books

SHOEBOX = Path(sys.executable).with_name("shoebox")
REQUEST_TIMEOUT_SECONDS = 10.0
PLAY_LIMIT_SECONDS = 90.0
ROUND_BOUND_SECONDS = 45.0  # a round ends at all, through kills and restarts on a loaded machine
# A round's phases once it is over (the table's state keeps its round id until the next one).
OVER = ("idle", "settled", "ended_without_play")


@dataclass(frozen=True, slots=True)
class Sent:
    """One request as the client saw it: when, what came back, and how long it took."""

    method: str
    path: str
    request_id: str
    status: int | str  # the status, or the name of the error (refused, reset, timed out, cut off)
    retry_after: str | None
    started: float  # time.monotonic()
    finished: float
    document: Any = None  # the decoded JSON body, if any

    @property
    def acknowledged(self) -> bool:
        return isinstance(self.status, int) and 200 <= self.status < 300


class Load:
    """Concurrent rounds, one thread a table, against whichever server `base` names."""

    def __init__(self, frontend: str, *, deal: bool = True) -> None:
        self.frontend = frontend
        self.deal = deal
        self.base = ""
        # A client's patience: a request not answered within it is recorded as timed out.
        self.timeout = REQUEST_TIMEOUT_SECONDS
        self.sent: list[Sent] = []
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []

    @property
    def acknowledged(self) -> list[str]:
        with self.lock:
            return [s.request_id for s in self.sent if s.acknowledged]

    @property
    def statuses(self) -> dict[int | str, int]:
        counted: dict[int | str, int] = {}
        with self.lock:
            for s in self.sent:
                counted[s.status] = counted.get(s.status, 0) + 1
        return counted

    def request(self, method: str, path: str, body: object, secret: str | None = None) -> Sent:
        host, _, port = self.base.removeprefix("http://").partition(":")
        request_id = uuid.uuid4().hex
        headers = {
            "Authorization": f"Bearer {secret or self.frontend}",
            "Content-Type": "application/json",
            "X-Request-Id": request_id,
        }
        connection = http.client.HTTPConnection(host, int(port), timeout=self.timeout)
        started = time.monotonic()
        status: int | str
        retry_after, document = None, None
        try:
            payload = None if body is None else json.dumps(body).encode()
            connection.request(method, path, payload, headers)
            response = connection.getresponse()
            text = response.read()
            status, retry_after = response.status, response.getheader("Retry-After")
            try:
                document = json.loads(text) if text.strip() else None
            except ValueError:  # not JSON: kept as sent, for the assertion that shows it
                document = text.decode(errors="replace")
        # Refused, reset, timed out, or cut off mid-answer (IncompleteRead, a killed server):
        # not acknowledged.
        except (OSError, http.client.HTTPException) as error:
            status = type(error).__name__
        finally:
            connection.close()
        finished = time.monotonic()
        sent = Sent(method, path, request_id, status, retry_after, started, finished, document)
        if method != "GET":  # reads are polls, not the load
            with self.lock:
                self.sent.append(sent)
        if not sent.acknowledged:
            time.sleep(0.05)  # a client backs off a little after a refusal
        return sent

    def play(self, table: str, player: str) -> None:
        deadline = time.monotonic() + PLAY_LIMIT_SECONDS  # bounded, whatever the server does
        while not self.stop.is_set() and time.monotonic() < deadline:
            bet = {"player_id": player, "spot": "banker", "stake_pence": 100}
            self.request("POST", f"/v1/tables/{table}/bets", bet)
            if self.deal:
                self.request("POST", f"/v1/tables/{table}/deal", {"player_id": player})
            else:
                time.sleep(0.1)

    def start(self, pairs: list[tuple[str, str]]) -> None:
        """One thread a (table, player) pair, playing until `finish`."""
        self.threads = [threading.Thread(target=self.play, args=pair) for pair in pairs]
        for thread in self.threads:
            thread.start()

    def finish(self) -> None:
        """Stop playing and wait for every thread; each request is bounded by its timeout."""
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=2 * REQUEST_TIMEOUT_SECONDS)
        assert not any(thread.is_alive() for thread in self.threads), "a player hung"

    def wait_for(self, predicate: Callable[[Sent], bool], after: float, within: float) -> Sent:
        """The first request started after `after` that satisfies `predicate`, within `within` s."""
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            with self.lock:
                for sent in self.sent:
                    if sent.started >= after and predicate(sent):
                        return sent
            time.sleep(0.1)
        raise AssertionError(f"nothing matched within {within:g} s; statuses {self.statuses}")


def companion(player: str) -> str:
    """The second player at a player's table (setup_tables with companions)."""
    return f"q{player.removeprefix('p')}"


class Watchers(Load):
    """Two players a table: both bet, one presses Deal, and they watch until the round is over.

    The other never acts, so the round waits for its betting window: whoever closes it (the RQ
    job, the sweeper, recovery) excludes the silent player, returning that stake, and deals for
    the one who pressed Deal. Reading the state closes nothing, so no player's request does.
    """

    def __init__(self, frontend: str) -> None:
        super().__init__(frontend, deal=False)
        self.rounds: list[tuple[str, float, float | None]] = []  # round, bet's time, seen over

    def play(self, table: str, player: str) -> None:
        deadline = time.monotonic() + PLAY_LIMIT_SECONDS
        while not self.stop.is_set() and time.monotonic() < deadline:
            bet = {"player_id": player, "spot": "banker", "stake_pence": 100}
            placed = self.request("POST", f"/v1/tables/{table}/bets", bet)
            if not placed.acknowledged:
                continue
            round_id = str(placed.document["round_id"])
            silent = {**bet, "player_id": companion(player), "spot": "player"}
            self.request("POST", f"/v1/tables/{table}/bets", silent)
            self.request("POST", f"/v1/tables/{table}/deal", {"player_id": player})
            over: float | None = None
            watch_until = time.monotonic() + ROUND_BOUND_SECONDS
            while time.monotonic() < watch_until:
                state = self.request("GET", f"/v1/tables/{table}/state", None)
                # Only a state read says anything: a refused read is no sign of a round's end.
                document = state.document if state.status == 200 else {"round_id": round_id}
                if document.get("round_id") != round_id or document.get("phase") in OVER:
                    over = time.monotonic()
                    break
                time.sleep(0.1)
            with self.lock:
                self.rounds.append((round_id, placed.finished, over))
            if over is None:  # never closed: the assertion names it; stop this table
                return


@contextmanager
def shoebox(
    arguments: list[str], environment: dict[str, str], log: Path
) -> Iterator[subprocess.Popen[bytes]]:
    """A `shoebox` command running beside the test; stopped with SIGTERM (then SIGKILL) after."""
    with log.open("ab") as sink:
        child = subprocess.Popen(
            [str(SHOEBOX), *arguments], env=environment, stdout=sink, stderr=subprocess.STDOUT
        )
    try:
        yield child
    finally:
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
        try:
            child.wait(timeout=15)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


def cli_key(database_url: str, role: str) -> str:
    """A new API key's secret, made with the CLI as an operator would."""
    created = CliRunner().invoke(
        main,
        ["keys", "create", "--role", role, "--name", f"fault-{role}"],
        env={"DATABASE_URL": database_url},
    )
    assert created.exit_code == 0, created.output
    return str(created.stdout.strip().splitlines()[-1])


def setup_tables(
    base: str,
    ops: str,
    frontend: str,
    tables: int,
    window_ms: int | None = None,
    companions: bool = False,
) -> list[tuple[str, str]]:
    """`tables` tables, each with a funded player seated (and a companion, if asked): the
    (table, player) pairs."""
    load = Load(ops)
    load.base = base
    pairs = [(f"K{n}", f"p{n}") for n in range(tables)]
    for table, first in pairs:
        body: dict[str, object] = {
            "table_id": table,
            "seats": 7,
            "decks": 8,
            "minimum_pence": 100,
            "maximum_pence": 250_000,
        }
        if window_ms is not None:
            body["betting_window_ms"] = window_ms
        created = load.request("POST", "/v1/tables", body)
        assert created.status == 201, created
        players = [first, companion(first)] if companions else [first]
        for seat, player in enumerate(players, start=1):
            deposit = {"amount_pence": 1_000_000, "reason": "fault float"}
            assert load.request("POST", f"/v1/wallets/{player}/deposits", deposit).status == 201
            sit = {"player_id": player, "seat": seat}
            seated = load.request("POST", f"/v1/tables/{table}/seats", sit, frontend)
            assert seated.status == 201, seated
    return pairs


def check_books(database_url: str, acknowledged: list[str]) -> tuple[Books, int]:
    """Follow the whole log: the chain verifies, each stake settles once, money is conserved.

    Returns the books and how many of the acknowledged request ids are in the log.
    """
    # Appends acknowledged as durable but not yet sequenced when the fault killed every
    # sequencer (or when the server was stopped) are waiting in unsequenced_events: the next
    # process to take the role places them, as this does, before the log is read by position.
    # It waits for the role's lock: a stopped server's backend can hold it for a moment after
    # its process has gone, and the store's inline sequence() gives up at once when the lock
    # is taken, which once left an acknowledged append unplaced and read as lost.
    with psycopg.connect(app_conninfo(database_url, environ={}), autocommit=True) as conn:
        place_queued(conn)
    with open_pool(app_conninfo(database_url, environ={}), max_size=2) as pool:
        store = PostgresEventStore(pool)
        books = Books()
        books.follow(store)  # verifies the chain; settles each stake exactly once
        found = count_found(acknowledged, store)
    balances = sum(books.available.values()) + sum(books.reserved.values())
    assert books.credits == balances + books.house_net, "money is not conserved"
    # No round half-applied: a table's stakes are open in one round at most, its current one.
    open_rounds = {(table, round_id) for (_, table, round_id, _) in books.open_stakes}
    assert len(open_rounds) == len({table for table, _ in open_rounds}), open_rounds
    return books, found
