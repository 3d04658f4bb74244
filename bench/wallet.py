"""A call to a seamless wallet: Shoebox's client and the reference wallet, beside a bare POST.

    python bench/wallet.py [--calls 300] [--repeats 7]

The reference wallet runs as its own process (`python -m operator_wallet serve`) on a
throwaway database, so this process's CPU time is the client's alone. Each repeat makes
`--calls` sequential calls of each contender, in rotating order:

- `bare POST` (the baseline): an unsigned POST to a path the wallet does not have, answered
  404 before any signature or database work: one connection, one request, one answer;
- `balance`: a signed balance check (one SELECT under the player's row lock);
- `bet`: a signed debit (a transaction: row lock, advisory lock, look-up, update, insert);
- `win of 0`: a signed credit settling one bet.

Prints each contender's median wall-clock and client CPU per call, with ratios to the baseline.
The bet path does not call the wallet yet; this is the cost a bet will add, on loopback.
"""

from __future__ import annotations

import argparse
import http.client
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
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
from service.application.seamless import (  # noqa: E402
    Outcome,
    SeamlessWalletConfig,
    Secret,
    balance_call,
    bet_call,
    win_call,
)
from service.runtime.seamless_wallet import SeamlessWalletClient  # noqa: E402

SECRET = "bench-secret-" + "0" * 24
ADMIN = "bench-admin"


def _admin(port: int, path: str, body: str) -> str:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    connection.request(
        "POST", path, body, {"Authorization": f"Bearer {ADMIN}", "Content-Type": "application/json"}
    )
    answer = connection.getresponse().read().decode()
    connection.close()
    return answer


def main() -> None:
    """Run the benchmark and print its table."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=7)
    arguments = parser.parse_args()
    print(f"# bench/wallet.py --calls {arguments.calls} --repeats {arguments.repeats}")
    print(f"# {uptime()}")
    with (
        throwaway_database(server_url(), "bench_wallet") as database,
        reference_wallet(database, SECRET, ADMIN) as url,
    ):
        _run(url, arguments.calls, arguments.repeats)


def _run(url: str, calls: int, repeats: int) -> None:
    port = int(url.split(":")[2].split("/")[0])
    config = SeamlessWalletConfig("bench", url, "k1", Secret(SECRET), "GBP", 1.0, 5.0)
    client = SeamlessWalletClient(config, lambda: datetime.now(UTC))
    _admin(port, "/admin/players", '{"player_id":"p1","currency":"GBP","deposit":1000000000}')
    token = _admin(port, "/admin/sessions", '{"player_id":"p1","ttl_seconds":86400}')
    token = token.split('"session_token":"')[1].split('"')[0]
    stream = f"bench-{uuid.uuid4()}"
    version = [0]
    placed: list[str] = []

    def bare() -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        connection.request("POST", "/nothing", b"{}", {"Content-Type": "application/json"})
        connection.getresponse().read()
        connection.close()

    def balance() -> None:
        call = balance_call(config, "p1", token, str(uuid.uuid4()))
        assert client.send(call).outcome is Outcome.OK

    def bet() -> None:
        version[0] += 1
        call = bet_call(config, stream, version[0], "p1", token, "t1", "r1", 100)
        assert client.send(call).outcome is Outcome.OK
        placed.append(str(call.transaction_uuid))

    def win() -> None:
        version[0] += 1
        call = win_call(config, stream, version[0], "p1", token, "t1", "r1", 0, [placed.pop()])
        assert client.send(call).outcome is Outcome.OK

    contenders: dict[str, Callable[[], None]] = {
        "bare POST": bare,
        "balance": balance,
        "bet": bet,
        "win of 0": win,
    }
    wall: dict[str, list[float]] = {name: [] for name in contenders}
    cpu: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(calls // 10):  # warm up connections, caches and the pool
        for run in contenders.values():
            if not placed:
                bet()
            run()
    for order in rotations(repeats, list(contenders)):
        for name in order:
            run = contenders[name]
            while name == "win of 0" and len(placed) < calls:
                bet()  # the bets the wins settle, placed before the clock starts
            started, started_cpu = time.perf_counter(), time.process_time()
            for _ in range(calls):
                run()
            wall[name].append((time.perf_counter() - started) / calls)
            cpu[name].append((time.process_time() - started_cpu) / calls)
    base_wall = statistics.median(wall["bare POST"])
    base_cpu = statistics.median(cpu["bare POST"])
    print(f"{'call':<10} {'wall ms':>8} {'x bare':>7} {'client CPU ms':>14} {'x bare':>7}")
    for name in contenders:
        median_wall, median_cpu = statistics.median(wall[name]), statistics.median(cpu[name])
        print(
            f"{name:<10} {median_wall * 1000:>8.3f} {median_wall / base_wall:>7.2f}"
            f" {median_cpu * 1000:>14.3f} {median_cpu / base_cpu:>7.2f}"
        )


if __name__ == "__main__":
    main()
