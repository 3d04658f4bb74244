"""A bet's latency through `shoebox serve` with a seamless operator, beside the internal wallet.

Part of bench/api.py (`--seamless BETS`, 0 for none), in the same run as its other figures.
The reference operator wallet runs as its own process on a throwaway database; a second
`shoebox serve` (the same workers as the main measurement) on the run's database is given it
as the seamless operator `acme` (SHOEBOX_SEAMLESS_WALLETS_FILE). Every repeat, each contender
places BETS sequential bets of 1 pound on banker through HTTP, at a fresh table of its own, the
contenders in rotating order:

- `internal` (the baseline): a player of the default operator, the stake reserved from
  Shoebox's own wallet in the bet's append;
- `seamless`: a player of `acme`, each bet waiting for the reference wallet's debit (a signed
  HTTP call to a wallet on this machine, which writes its own PostgreSQL row);
- `seamless, wallet +5 ms`: the same, the wallet holding each debit's answer 5 ms more (its
  `delay` fault): a wallet that answers in 5 ms plus its own work.

Each figure is the median, over the repeats, of each repeat's median bet latency.
"""

from __future__ import annotations

import http.client
import json
import secrets
import statistics
import tempfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from bench.common import reference_wallet, rotations, server_url, throwaway_database
from events.postgres import PostgresEventStore, open_pool
from events.store import EventMetadata
from service.application.keys import Role, create_key

OPERATOR: Final = "acme"
SECRET: Final = "bench-secret-" + "0" * 24
ADMIN: Final = "bench-admin-" + secrets.token_hex(6)
WINDOW_MS: Final = 300_000
DELAY_MS: Final = 5
INTERNAL: Final = "internal"
SEAMLESS: Final = "seamless"
DELAYED: Final = f"seamless, wallet +{DELAY_MS} ms"
CONTENDERS: Final = (INTERNAL, SEAMLESS, DELAYED)
CLI: Final = EventMetadata(actor="bench", role="cli")


@dataclass(slots=True)
class SeamlessLatency:
    """Each contender's per-repeat median bet latency, in seconds."""

    bets: int
    repeats: int
    medians: dict[str, list[float]] = field(
        default_factory=lambda: {name: [] for name in CONTENDERS}
    )
    p95s: dict[str, list[float]] = field(default_factory=lambda: {name: [] for name in CONTENDERS})

    def render(self) -> str:
        """A markdown table: median and p95 milliseconds a bet, and the ratio to internal."""
        base = statistics.median(self.medians[INTERNAL])
        lines = [
            f"Bet latency through HTTP, {self.bets} sequential bets a contender, medians of"
            f" {self.repeats} repeats (a seamless operator against the reference wallet on"
            " this machine):",
            "",
            "| bet | median ms | p95 ms | x internal |",
            "|:--|--:|--:|--:|",
        ]
        for name in CONTENDERS:
            median = statistics.median(self.medians[name])
            p95 = statistics.median(self.p95s[name])
            lines.append(
                f"| {name} | {median * 1000:.2f} | {p95 * 1000:.2f} | {median / base:.2f} |"
            )
        return "\n".join(lines)


def _admin(url: str, method: str, path: str, document: object = None) -> Any:
    """The reference wallet's /admin endpoints, for the casino's side of the set-up."""
    host, port = url.split("//", 1)[1].split("/", 1)[0].split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    body = None if document is None else json.dumps(document)
    headers = {"Authorization": f"Bearer {ADMIN}", "Content-Type": "application/json"}
    try:
        connection.request(method, path, body, headers)
        return json.loads(connection.getresponse().read() or b"{}")
    finally:
        connection.close()


@contextmanager
def _wallets_file(url: str) -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="bench-wallets-") as directory:
        path = Path(directory) / "wallets.toml"
        path.write_text(
            f'[operators.{OPERATOR}]\nbase_url = "{url}"\nkey_id = "k1"\n'
            f'secret = "{SECRET}"\ncurrency = "GBP"\n'
        )
        yield path


@contextmanager
def _connected(client: Callable[[int, str], Any], port: int, secret: str) -> Iterator[Any]:
    connection = client(port, secret)
    try:
        yield connection
    finally:
        connection.close()


def seamless_latency(
    database_url: str,
    serve: Callable[[Mapping[str, str]], AbstractContextManager[int]],
    client: Callable[[int, str], Any],
    bets: int,
    repeats: int,
) -> SeamlessLatency:
    """Measure the three contenders; `serve(env)` starts `shoebox serve` with extra
    environment and yields its port; `client(port, secret)` is bench/api.py's Client."""
    result = SeamlessLatency(bets, repeats)
    with open_pool(database_url, max_size=1) as pool:
        store = PostgresEventStore(pool)
        ops = create_key(store, "bench-seamless-ops", Role.OPS, CLI).secret
        lobby = create_key(store, "bench-lobby", Role.FRONTEND, CLI).secret
        casino = create_key(store, "bench-acme", Role.FRONTEND, CLI, operator=OPERATOR).secret
    with (
        throwaway_database(server_url(), "bench_api_wallet") as wallet_database,
        reference_wallet(wallet_database, SECRET, ADMIN) as url,
        _wallets_file(url) as wallets,
        serve({"SHOEBOX_SEAMLESS_WALLETS_FILE": str(wallets)}) as port,
    ):
        admin_base = url.removesuffix("/wallet")
        run = secrets.token_hex(3)
        player = f"w{run}"
        _admin(
            admin_base,
            "POST",
            "/admin/players",
            {
                "player_id": player,
                "currency": "GBP",
                "deposit": 10**12,
            },
        )
        token = _admin(
            admin_base, "POST", "/admin/sessions", {"player_id": player, "ttl_seconds": 86_400}
        )["session_token"]
        # A connection a step: gunicorn closes one left idle between steps.
        with _connected(client, port, casino) as casino_client:
            casino_client.ok("POST", "/sessions", {"player_id": player, "token": token})
        internal_player = f"i{run}"
        with _connected(client, port, ops) as ops_client:
            ops_client.ok(
                "POST",
                f"/wallets/{internal_player}/deposits",
                {"amount_pence": 10**10, "reason": "bench float"},
            )
        tables = [0]

        def place(name: str, count: int) -> list[float]:
            tables[0] += 1
            table_id = f"S{run}t{tables[0]}"
            with _connected(client, port, ops) as ops_client:
                body = {"table_id": table_id, "seats": 3, "betting_window_ms": WINDOW_MS}
                ops_client.ok("POST", "/tables", body)
            secret, who = (lobby, internal_player) if name == INTERNAL else (casino, player)
            _admin(admin_base, "DELETE", "/admin/faults")
            if name == DELAYED:
                rule = {"action": "delay", "call": "bet", "times": count, "delay_ms": DELAY_MS}
                _admin(admin_base, "POST", "/admin/faults", rule)
            bet = {"player_id": who, "spot": "banker", "stake_pence": 100}
            with _connected(client, port, secret) as front:
                front.ok("POST", f"/tables/{table_id}/seats", {"player_id": who, "seat": 1})
                return [
                    front.timed_ok("POST", f"/tables/{table_id}/bets", bet) for _ in range(count)
                ]

        for name in CONTENDERS:  # warm every worker's connections and caches
            place(name, 20)
        for order in rotations(repeats, list(CONTENDERS)):
            for name in order:
                took = sorted(place(name, bets))
                result.medians[name].append(statistics.median(took))
                result.p95s[name].append(took[int(0.95 * (len(took) - 1))])
        _admin(admin_base, "DELETE", "/admin/faults")
    return result
