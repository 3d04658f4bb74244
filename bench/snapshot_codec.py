"""What a snapshot's encoding and decoding cost, against the codec of an earlier revision.

A table and its players' wallets are played through the domain (bench/verify.py's Simulation,
the decisions the service makes) for a number of coups; then each state is encoded to its
snapshot document and decoded back, `--repeats` times, by today's codec and by the codec
module as it stood at `--baseline` (read from git into a module of its own, so both run in
the same process, one after the other, on the same states). orjson's own dumps and loads of
the same document are timed beside them, as the floor any codec over JSON stands on.

Both codecs must write the same document for every state; the run stops if they do not.

Run: .venv/bin/python -m bench.snapshot_codec [--coups 10 200] [--repeats 7] [--baseline REV]
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

import orjson

from bench.verify import Simulation
from domain.table import Table
from domain.wallet import Wallet
from service.application import snapshots

CODEC_PATH = "service/application/snapshots.py"


def baseline_codec(revision: str) -> ModuleType:
    """The codec module as it was at `revision`, loaded beside today's."""
    source = subprocess.run(
        ["git", "show", f"{revision}:{CODEC_PATH}"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    spec = importlib.util.spec_from_loader("bench_baseline_snapshots", loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses and typing resolve names through it
    exec(compile(source, f"{revision}:{CODEC_PATH}", "exec"), module.__dict__)
    return module


def played(coups: int, players: int = 3) -> tuple[Table, list[Wallet]]:
    """A table and its players' wallets after `coups` coups dealt through the domain."""
    simulation = Simulation("B1", players=players, seed=7)
    dealt = 0
    for append in simulation.appends(coups // 60 + 1):
        if len(append.streams) == 1 + players:
            dealt += 1
            if dealt == coups:
                break
    assert simulation.table is not None
    return simulation.table, [wallet for _, wallet in simulation.wallets.values()]


def per_call_us(action: Callable[[], object], repeats: int, number: int = 200) -> float:
    """The median over `repeats` runs of one call's wall time, in microseconds."""
    runs = []
    for _ in range(repeats):
        started = time.perf_counter()
        for _ in range(number):
            action()
        runs.append((time.perf_counter() - started) / number * 1e6)
    return statistics.median(runs)


def measure(state: Any, root: type[Any], baseline: ModuleType, repeats: int) -> dict[str, float]:
    """Encode and decode medians for today's codec, the baseline's and orjson's own."""
    document = snapshots.encode(state, root)
    if baseline.encode(state, root) != document:
        raise SystemExit(f"the codecs write different documents for a {root.__name__}")
    assert snapshots.decode(document, root) == state
    text = orjson.dumps(document)
    return {
        "encode": per_call_us(lambda: snapshots.encode(state, root), repeats),
        "encode_baseline": per_call_us(lambda: baseline.encode(state, root), repeats),
        "decode": per_call_us(lambda: snapshots.decode(document, root), repeats),
        "decode_baseline": per_call_us(lambda: baseline.decode(document, root), repeats),
        "orjson_dumps": per_call_us(lambda: orjson.dumps(document), repeats),
        "orjson_loads": per_call_us(lambda: orjson.loads(text), repeats),
        "bytes": float(len(text)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--coups", type=int, nargs="+", default=[10, 200])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--baseline", default="a7bc80e", help="git revision of the old codec")
    arguments = parser.parse_args()
    baseline = baseline_codec(arguments.baseline)
    print(
        "state coups bytes | encode us (baseline, ratio) | decode us (baseline, ratio) | "
        "orjson dumps/loads us"
    )
    for coups in arguments.coups:
        table, wallets = played(coups)
        for name, state, root in (("Table", table, Table), ("Wallet", wallets[0], Wallet)):
            m = measure(state, root, baseline, arguments.repeats)
            print(
                f"{name:6} {coups:5} {m['bytes']:6.0f} | "
                f"{m['encode']:7.1f} ({m['encode_baseline']:7.1f}, "
                f"{m['encode'] / m['encode_baseline']:.2f}) | "
                f"{m['decode']:7.1f} ({m['decode_baseline']:7.1f}, "
                f"{m['decode'] / m['decode_baseline']:.2f}) | "
                f"{m['orjson_dumps']:.1f}/{m['orjson_loads']:.1f}"
            )


if __name__ == "__main__":
    main()
