"""A full multi-player round over HTTP: real gunicorn, a real rq worker, PostgreSQL and Redis.

Four players share a table. Alice and Bob bet and press Deal, Carol bets and passes, Dave bets
and never acts: the betting window closes on him, and the real worker (not a request) excludes
him and deals. Every payout is checked against figures worked out by hand from the rules:
Player 1:1, Banker 1:1 less 5% commission on the win, Tie 8:1, Player and Banker push on a tie.
"""

import json
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
import redis

from events.postgres import PostgresEventStore, open_pool
from events.store import EventMetadata
from service.application.keys import Role, create_key
from tests.ports import listening_socket, port_of

START_TIMEOUT_SECONDS = 90.0  # starting at all, on a loaded machine: not a speed bound
SHOEBOX = Path(sys.executable).with_name("shoebox")
WINDOW_SECONDS = 3
DEPOSIT = 10_000
CLAIM_KEY = "shoebox:e2e-claim"

# What each bet returns, stake included, for each outcome; worked out by hand, not by the code
# under test. (stake, spot) -> {outcome: (payout, commission)}.
HAND_CHECKED: dict[tuple[int, str], dict[str, tuple[int, int]]] = {
    # £10 on Player: wins 1:1 (£20 back), loses, or pushes on a tie (£10 back).
    (1_000, "player"): {"player": (2_000, 0), "banker": (0, 0), "tie": (1_000, 0)},
    # £5 on Tie: 8:1 (£45 back with the stake), else lost.
    (500, "tie"): {"player": (0, 0), "banker": (0, 0), "tie": (4_500, 0)},
    # £20 on Banker: 1:1 less 5% of the £20 win (£1): £39 back; pushes on a tie.
    (2_000, "banker"): {"player": (0, 0), "banker": (3_900, 100), "tie": (2_000, 0)},
}
BACCARAT_VALUE = {"A": 1, "T": 0, "J": 0, "Q": 0, "K": 0} | {str(n): n for n in range(2, 10)}


@dataclass(frozen=True, slots=True)
class Client:
    """A tiny JSON-over-HTTP client holding one API key."""

    base: str
    key: str

    def call(self, method: str, path: str, body: object = None) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(f"{self.base}/v1{path}", data=data, method=method)
        request.add_header("Authorization", f"Bearer {self.key}")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read())

    def ok(self, method: str, path: str, body: object = None) -> Any:
        status, answer = self.call(method, path, body)
        assert status in (200, 201), (method, path, status, answer)
        return answer


@pytest.fixture
def redis_url() -> Iterator[str]:
    """A Redis database of this test's own, claimed atomically and emptied afterwards."""
    base = urlsplit(os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/0")
    token = secrets.token_hex(8)
    for db in range(15, 0, -1):
        url = urlunsplit(base._replace(path=f"/{db}"))
        connection = redis.Redis.from_url(url)
        if connection.set(CLAIM_KEY, token, nx=True, ex=3600):
            if connection.dbsize() == 1:
                try:
                    yield url
                finally:
                    connection.flushdb()
                    connection.close()
                return
            connection.delete(CLAIM_KEY)
        connection.close()
    pytest.fail("no empty Redis database to claim among 1 to 15")


def start(
    arguments: list[str], environment: dict[str, str], pass_fds: tuple[int, ...] = ()
) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [str(SHOEBOX), *arguments],
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        pass_fds=pass_fds,
    )


def stop(process: subprocess.Popen[bytes]) -> str:
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=20)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    output = process.stdout.read().decode() if process.stdout else ""
    if process.stdout is not None:
        process.stdout.close()
    return output


@pytest.fixture
def shoebox(database_url: str, redis_url: str) -> Iterator[str]:
    """`shoebox serve`, `shoebox worker` and `shoebox projector` on one database and Redis."""
    environment = {**os.environ, "DATABASE_URL": database_url, "REDIS_URL": redis_url}
    environment.pop("SHOEBOX_APP_DATABASE_URL", None)
    # The server accepts on our socket, which we close once it holds its own copy.
    with listening_socket() as listener:
        base = f"http://127.0.0.1:{port_of(listener)}"
        server = start(
            ["serve", "--bind", f"fd://{listener.fileno()}", "--workers", "2", "--threads", "2"],
            environment,
            pass_fds=(listener.fileno(),),
        )
    worker = projector = None
    try:
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while True:
            assert server.poll() is None, server.stdout.read().decode() if server.stdout else ""
            try:
                with urllib.request.urlopen(f"{base}/v1/ping", timeout=2):
                    break
            except urllib.error.HTTPError:
                break  # a 401: it is up, and has migrated
            except (ConnectionError, TimeoutError, urllib.error.URLError):
                # Refused, or queued on our listening socket past the timeout while it starts.
                assert time.monotonic() < deadline, "shoebox serve did not start listening"
                time.sleep(0.1)
        worker = start(["worker"], environment)
        # Balances, statements and round history are read models that the projector keeps.
        projector = start(["projector", "--poll-interval", "0.2"], environment)
        yield base
    finally:
        stopped = [(process, stop(process)) for process in (server, worker, projector) if process]
        for process, output in stopped:
            assert process.returncode == 0, output


def await_sequenced(client: Client, round_id: str, timeout: float = 20.0) -> None:
    """Wait until the round's settlement is in the log's order. The table's state shows it once
    committed; the read models follow only what the sequencer has placed, a few ms later, and
    a lag of 0 before then would be a lag behind a log without it."""
    deadline = time.monotonic() + timeout
    while True:
        status, found = client.call("GET", f"/rounds/{round_id}")
        if status == 200 and found["status"] == "settled":
            return
        assert time.monotonic() < deadline, f"round {round_id} was not projected settled in time"
        time.sleep(0.1)


def await_projections(client: Client, timeout: float = 20.0) -> None:
    """Wait until every read model has caught up with the log (they lag by milliseconds)."""
    deadline = time.monotonic() + timeout
    while True:
        projections = client.ok("GET", "/ops/projections")["projections"]
        if all(projection["lag_events"] == 0 for projection in projections):
            return
        assert time.monotonic() < deadline, f"projections did not catch up: {projections}"
        time.sleep(0.1)


def api_key(database_url: str, role: Role) -> str:
    with open_pool(database_url, max_size=1) as pool:
        issued = create_key(
            PostgresEventStore(pool),
            f"e2e-{role.value}",
            role,
            EventMetadata(actor="e2e", role="cli"),
        )
    return issued.secret


def total(cards: list[dict[str, Any]], hand: str) -> int:
    return sum(BACCARAT_VALUE[card["card"][0]] for card in cards if card["hand"] == hand) % 10


def await_round_over(client: Client, table_id: str, round_id: str, timeout: float) -> None:
    """Wait until the table has moved past `round_id`, by reads alone (a read never writes)."""
    deadline = time.monotonic() + timeout
    while True:
        state = client.ok("GET", f"/tables/{table_id}/state")
        if state["round_id"] != round_id or state["phase"] in ("settled", "idle"):
            return
        assert time.monotonic() < deadline, f"nobody closed round {round_id}'s window in time"
        time.sleep(0.1)


@pytest.mark.slow
def test_four_players_one_pass_one_timeout_dealt_by_the_worker_and_paid_by_the_rules(
    shoebox: str, database_url: str, redis_url: str
) -> None:
    ops = Client(shoebox, api_key(database_url, Role.OPS))
    front = Client(shoebox, api_key(database_url, Role.FRONTEND))
    regulator = Client(shoebox, api_key(database_url, Role.REGULATOR))
    table_id = f"e2e-{secrets.token_hex(4)}"
    players = ["alice", "bob", "carol", "dave"]

    created = ops.ok(
        "POST",
        "/tables",
        {
            "table_id": table_id,
            "seats": 5,
            "decks": 8,
            "minimum_pence": 500,
            "maximum_pence": 50_000,
            "betting_window_ms": WINDOW_SECONDS * 1000,
        },
    )
    assert created["betting_window_ms"] == WINDOW_SECONDS * 1000
    for seat, player in enumerate(players, start=1):
        moved = ops.ok(
            "POST", f"/wallets/{player}/deposits", {"amount_pence": DEPOSIT, "reason": "e2e float"}
        )
        assert moved["available_pence"] == DEPOSIT
        front.ok("POST", f"/tables/{table_id}/seats", {"player_id": player, "seat": seat})

    bets = [("alice", "player", 1_000), ("alice", "tie", 500), ("bob", "banker", 2_000)]
    bets += [("carol", "player", 1_000), ("dave", "banker", 500)]
    first = front.ok(
        "POST",
        f"/tables/{table_id}/bets",
        {"player_id": "alice", "spot": "player", "stake_pence": 1_000},
    )
    round_id = first["round_id"]
    assert first["shoe_opened"] is not None
    for player, spot, stake in bets[1:]:
        placed = front.ok(
            "POST",
            f"/tables/{table_id}/bets",
            {"player_id": player, "spot": spot, "stake_pence": stake},
        )
        assert placed["round_id"] == round_id
    for player in ("alice", "bob"):
        pressed = front.ok("POST", f"/tables/{table_id}/deal", {"player_id": player})
        assert pressed["coup"] is None  # Carol and Dave have not acted yet
    passed = front.ok("POST", f"/tables/{table_id}/pass", {"player_id": "carol"})
    assert [(r["player_id"], r["stake_pence"], r["reason"]) for r in passed["returned"]] == [
        ("carol", 1_000, "passed")
    ]
    assert passed["coup"] is None  # Dave still holds the round up
    state = front.ok("GET", f"/tables/{table_id}/state")
    assert state["phase"] == "betting"
    assert {seat["player_id"]: seat["action"] for seat in state["seats"] if seat["player_id"]} == {
        "alice": "pressed_deal",
        "bob": "pressed_deal",
        "carol": "passed",
        "dave": "pending",
    }

    # Nobody writes to the table now: only the worker's window timer, or the projector's
    # sweeper, can close the window and deal; whichever is first, the other finds nothing due.
    await_round_over(front, table_id, round_id, timeout=WINDOW_SECONDS + 10)

    await_sequenced(regulator, round_id)
    await_projections(regulator)
    (played,) = [
        r
        for r in regulator.ok("GET", "/players/alice/rounds")["rounds"]
        if r["round_id"] == round_id
    ]
    cards = played["cards"]
    assert 4 <= len(cards) <= 6
    assert played["player_total"] == total(cards, "player")
    assert played["banker_total"] == total(cards, "banker")
    player_total, banker_total = played["player_total"], played["banker_total"]
    outcome = (
        "player"
        if player_total > banker_total
        else "banker"
        if banker_total > player_total
        else "tie"
    )
    assert played["outcome"] == outcome

    # Every settlement, by hand; Carol's and Dave's stakes came back unplayed.
    expected: dict[str, int] = {}
    for player, spot, stake in bets:
        if player in ("carol", "dave"):
            continue
        payout, commission = HAND_CHECKED[(stake, spot)][outcome]
        expected[player] = expected.get(player, DEPOSIT) + payout - stake
        statement = regulator.ok("GET", f"/wallets/{player}/statement")["entries"]
        credited = [
            e
            for e in statement
            if e["type"] == "PayoutCredited" and e["round_id"] == round_id and e["spot"] == spot
        ]
        assert [(e["stake_pence"], e["payout_pence"], e["commission_pence"]) for e in credited] == [
            (stake, payout, commission)
        ]
    expected["carol"] = DEPOSIT
    expected["dave"] = DEPOSIT
    for player in players:
        balance = front.ok("GET", f"/wallets/{player}")
        assert (balance["available_pence"], balance["reserved_pence"]) == (expected[player], 0), (
            player
        )

    dave = regulator.ok("GET", "/wallets/dave/statement")["entries"]
    returned = [e for e in dave if e["type"] == "StakeReturned" and e["round_id"] == round_id]
    assert [(e["stake_pence"], e["reason"]) for e in returned] == [(500, "excluded")]

    # The worker's append was the table's own, and it excluded Dave for timing out.
    with open_pool(database_url, max_size=1) as pool:
        store = PostgresEventStore(pool)
        table_events = store.read_stream(f"table:{table_id}")
    excluded = [e for e in table_events if e.type == "PlayerExcluded"]
    assert [
        (e.payload["player_id"], e.payload["reason"])
        for e in excluded
        if e.payload["round_id"] == round_id
    ] == [("dave", "timed_out")]
    assert {e.metadata.actor for e in excluded} == {"shoebox"}
    # Someone played, so the next round opened at once, its window scheduled in turn.
    state = front.ok("GET", f"/tables/{table_id}/state")
    assert state["round_id"] != round_id
