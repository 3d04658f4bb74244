"""A bet's latency through a seamless wallet, beside the same bet through the internal wallet.

    python bench/seamless_bets.py [--bets 100] [--repeats 7]

Shoebox's bet path runs in this process on a throwaway migrated database (PostgreSQL from
DATABASE_URL); the reference wallet runs as its own process on another throwaway database.
Each repeat places `--bets` sequential bets of each contender, in rotating order, each
contender at a table of its own (a fresh one each repeat, so its stakes stay under the table's
maximum):

- `internal` (the baseline): `GameService.place_bet`, the stake reserved from Shoebox's wallet
  in the bet's own append;
- `seamless`: `SeamlessService.place_bet`, the stake debited by the reference wallet first
  (the player's money lock, the in-flight row, the signed call, then the append);
- `seamless +5 ms`: the same, the wallet answering each bet 5 ms late (its `delay` fault);
- `seamless, no outbox`: `seamless` as it was before the calls a bet's append owes were
  written in its own transaction (service/application/seamless_owed.py): the append in the
  group-commit path, its debit's row left to the projection.

Prints each contender's median milliseconds a bet, with ratios to the baseline.
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(_ROOT))

from bench.common import (  # noqa: E402
    reference_wallet,
    rotations,
    server_url,
    throwaway_database,
    uptime,
)
from domain.outcome import Spot  # noqa: E402
from domain.table import TableSettings  # noqa: E402
from events.migrations import apply_migrations  # noqa: E402
from events.postgres import PostgresEventStore, app_conninfo, open_pool  # noqa: E402
from events.store import utc_now  # noqa: E402
from service.application.actor import Actor  # noqa: E402
from service.application.game.tables import GameService  # noqa: E402
from service.application.operators import operator_of  # noqa: E402
from service.application.seamless import SeamlessWalletConfig, Secret  # noqa: E402
from service.application.seamless_bets import SeamlessService  # noqa: E402
from service.application.seamless_owed import OwedCalls  # noqa: E402
from service.application.upcasters import upcasters  # noqa: E402
from service.application.wallets import WalletService  # noqa: E402
from service.runtime.seamless_wallet import SeamlessWalletClient  # noqa: E402

SECRET = "bench-secret-" + "0" * 24
ADMIN = "bench-admin"
OPS = Actor("bench-ops", "ops")
PLAYER = Actor("bench-frontend", "frontend")


def _admin(port: int, method: str, path: str, document: object = None) -> dict[str, object]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    body = None if document is None else json.dumps(document)
    headers = {"Authorization": f"Bearer {ADMIN}", "Content-Type": "application/json"}
    connection.request(method, path, body, headers)
    answer: dict[str, object] = json.loads(connection.getresponse().read() or b"{}")
    connection.close()
    return answer


def main() -> None:
    """Run the benchmark and print its table."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--bets", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=7)
    arguments = parser.parse_args()
    print(f"# bench/seamless_bets.py --bets {arguments.bets} --repeats {arguments.repeats}")
    print(f"# {uptime()}")
    with (
        throwaway_database(server_url(), "bench_seamless") as shoebox_url,
        throwaway_database(server_url(), "bench_wallet") as wallet_url,
    ):
        apply_migrations(shoebox_url)
        with reference_wallet(wallet_url, SECRET, ADMIN) as url:
            _run(app_conninfo(shoebox_url, environ={}), url, arguments.bets, arguments.repeats)


def _run(database: str, url: str, bets: int, repeats: int) -> None:
    port = int(url.split(":")[2].split("/")[0])
    config = SeamlessWalletConfig("acme", url, "k1", Secret(SECRET), "GBP", 1.0, 5.0)
    with open_pool(database, max_size=8) as pool:
        store = PostgresEventStore(pool, utc_now, upcasters())

        def acme(player: str) -> bool:
            return operator_of(player) == "acme"

        # As production wires them (service/runtime/seamless_wiring.py).
        owed = OwedCalls(pool, utc_now, acme)
        games = GameService(store, utc_now, seamless=acme, owed=owed)
        client = SeamlessWalletClient(config, utc_now)
        wallets = {"acme": (config, client)}
        seamless = SeamlessService(store, utc_now, pool, games, wallets, owed=owed)
        plain = SeamlessService(
            store, utc_now, pool, GameService(store, utc_now, seamless=acme), wallets
        )
        _admin(
            port,
            "POST",
            "/admin/players",
            {"player_id": "p1", "currency": "GBP", "deposit": 10**12},
        )
        token = _admin(port, "POST", "/admin/sessions", {"player_id": "p1", "ttl_seconds": 86400})
        seamless.open_session("acme/p1", str(token["session_token"]), PLAYER)
        WalletService(store, utc_now).deposit("bob", 10**10, "bench float", OPS)
        tables = [0]
        settings = TableSettings(betting_window=TableSettings().betting_window * 20)

        def table_for(player: str) -> str:
            tables[0] += 1
            table_id = f"B{tables[0]}"
            games.create_table(table_id, settings, OPS)
            games.sit(table_id, player, 1, PLAYER)
            return table_id

        def internal(table_id: str) -> None:
            games.place_bet(table_id, "bob", Spot.BANKER, 100, PLAYER)

        def direct(table_id: str) -> None:
            seamless.place_bet(table_id, "acme/p1", Spot.BANKER, 100, PLAYER)

        def no_outbox(table_id: str) -> None:
            plain.place_bet(table_id, "acme/p1", Spot.BANKER, 100, PLAYER)

        contenders: dict[str, tuple[str, Callable[[str], None], int]] = {
            "internal": ("bob", internal, 0),
            "seamless": ("acme/p1", direct, 0),
            "seamless +5 ms": ("acme/p1", direct, 5),
            "seamless, no outbox": ("acme/p1", no_outbox, 0),
        }
        timings: dict[str, list[float]] = {name: [] for name in contenders}
        for player, run, _ in contenders.values():  # warm up caches and connections
            warm = table_for(player)
            for _ in range(10):
                run(warm)
        for order in rotations(repeats, list(contenders)):
            for name in order:
                player, run, delay = contenders[name]
                table_id = table_for(player)
                _admin(port, "DELETE", "/admin/faults")
                if delay:
                    rule = {"action": "delay", "call": "bet", "times": bets, "delay_ms": delay}
                    _admin(port, "POST", "/admin/faults", rule)
                started = time.perf_counter()
                for _ in range(bets):
                    run(table_id)
                timings[name].append((time.perf_counter() - started) / bets)
        _admin(port, "DELETE", "/admin/faults")
    base = statistics.median(timings["internal"])
    print(f"{'bet':<20} {'median ms':>10} {'x internal':>11}")
    for name in contenders:
        median = statistics.median(timings[name])
        print(f"{name:<20} {median * 1000:>10.2f} {median / base:>11.2f}")


if __name__ == "__main__":
    main()
