"""The Merkle tree's costs as the log grows: integration per event, and a proof's time and size.

    python bench/merkle.py [--sizes 1000,100000,1000000] [--proofs 300]

A throwaway database. For each size in turn the tree is grown to it (leaves of 300 bytes,
about an event's canonical document, written through merkle_add_nodes() as the checkpoint
job writes them); then, at that size:

- integration: the time to add one more batch of 1,000 leaves (hashing, reading the old
  frontier, writing the finished nodes), per leaf;
- inclusion proof: the time to read and assemble one leaf's proof from the stored nodes
  through PostgresTree (what GET /v1/log/proof/inclusion does besides HTTP), p50 and p99
  over random leaves, and its size in bytes;
- consistency proof from a random older size, p50.

Every figure at the largest size beside the smallest, as a ratio: flat means the cost does
not grow with the log. The leaves are synthetic: the tree's costs do not depend on what its
leaves hold, and writing a million real events would measure the event store instead.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(_ROOT))

from bench.common import server_url, throwaway_database, uptime  # noqa: E402
from events.merkle import (  # noqa: E402
    added_nodes,
    consistency_proof,
    inclusion_proof,
    leaf_hash,
    root,
    verify_inclusion,
)
from events.merkle_store import PostgresTree  # noqa: E402
from events.migrations import apply_migrations  # noqa: E402
from events.postgres import app_conninfo, open_pool  # noqa: E402

GROW_BATCH = 50_000
MEASURED_BATCH = 1_000


def _leaves(start: int, count: int) -> list[bytes]:
    return [leaf_hash(b"%d" % i + b"." * 290) for i in range(start, start + count)]


def _grow(tree: PostgresTree, to: int) -> None:
    size = tree.size()
    while size < to:
        count = min(GROW_BATCH, to - size)
        leaves = _leaves(size, count)
        tree.add(size, count, added_nodes(size, leaves, tree))
        size += count


def _percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def measure(tree: PostgresTree, proofs: int) -> dict[str, float]:
    """The figures at the tree's current size (it grows by MEASURED_BATCH leaves)."""
    size = tree.size()
    leaves = _leaves(size, MEASURED_BATCH)
    started = time.perf_counter()
    tree.add(size, MEASURED_BATCH, added_nodes(size, leaves, tree))
    per_leaf_ms = (time.perf_counter() - started) * 1000 / MEASURED_BATCH
    size += MEASURED_BATCH
    tree_root = root(size, tree)
    rng = random.Random(size)
    for _ in range(20):  # warm the pool's connections and the index pages
        inclusion_proof(rng.randrange(size), size, tree)
    inclusion: list[float] = []
    lengths: list[int] = []
    for _ in range(proofs):
        index = rng.randrange(size)
        started = time.perf_counter()
        proof = inclusion_proof(index, size, tree)
        inclusion.append((time.perf_counter() - started) * 1000)
        lengths.append(sum(len(h) for h in proof))
        if index >= size - MEASURED_BATCH:
            verify_inclusion(index, size, leaves[index - (size - MEASURED_BATCH)], proof, tree_root)
    consistency: list[float] = []
    for _ in range(proofs // 3):
        old = rng.randrange(1, size)
        started = time.perf_counter()
        consistency_proof(old, size, tree)
        consistency.append((time.perf_counter() - started) * 1000)
    return {
        "size": size,
        "integrate_ms_per_leaf": per_leaf_ms,
        "inclusion_p50_ms": statistics.median(inclusion),
        "inclusion_p99_ms": _percentile(inclusion, 0.99),
        "inclusion_bytes_max": max(lengths),
        "consistency_p50_ms": statistics.median(consistency),
    }


def main(argv: Sequence[str] | None = None) -> None:
    """Grow a tree through the sizes and print each size's figures and the ratios."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1000,100000,1000000")
    parser.add_argument("--proofs", type=int, default=300)
    arguments = parser.parse_args(argv)
    sizes = [int(s) for s in arguments.sizes.split(",")]
    print(f"# bench/merkle.py, {uptime()}")
    results = []
    with throwaway_database(server_url(), "bench_merkle") as admin:
        apply_migrations(admin)
        with open_pool(app_conninfo(admin, environ={}), max_size=2) as pool:
            tree = PostgresTree(pool)
            for target in sizes:
                grown = time.perf_counter()
                _grow(tree, target)
                print(
                    f"grew to {target:,} leaves in {time.perf_counter() - grown:.1f} s", flush=True
                )
                results.append(measure(tree, arguments.proofs))
    columns = list(results[0])
    print("| " + " | ".join(columns) + " |")
    print("|" + "--:|" * len(columns))
    for row in results:
        print(
            "| "
            + " | ".join(
                f"{row[c]:,.3f}" if isinstance(row[c], float) else f"{row[c]:,}" for c in columns
            )
            + " |"
        )
    first, last = results[0], results[-1]
    for column in columns[1:]:
        if first[column]:
            ratio = last[column] / first[column]
            print(f"{column}: x{ratio:.2f} from {first['size']:,} to {last['size']:,}")


if __name__ == "__main__":
    main()
