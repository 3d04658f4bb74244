"""Helpers shared by the benchmarks: timing, interleaved repeats, throwaway databases, tables."""

from __future__ import annotations

import os
import secrets
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

DEFAULT_SERVER_URL = "postgresql://postgres@127.0.0.1:5432/postgres"

CONCURRENCY_REFUSAL = "concurrent-update"
"""The problem type of a 409 that names no rule: others kept changing what the request wrote
(service/web/problems.py). A game rule's 409 names its rule instead."""


def problem_kind(answer: object) -> str:
    """What an error answer refused on: the game rule it names, else its problem type's slug."""
    if isinstance(answer, dict):
        rule = answer.get("rule")
        if isinstance(rule, str) and rule:
            return rule
        kind = answer.get("type")
        if isinstance(kind, str) and kind:
            return kind.rstrip("/").rsplit("/", 1)[-1]
    return "no problem document"


def machine_ticks() -> tuple[int, int]:
    """The machine's (busy, total) CPU ticks so far, from /proc/stat (busy: not idle, not
    waiting on I/O)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, sum(fields)


def uptime() -> str:
    """The machine's load, as `uptime` reports it."""
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "uptime unavailable"


def server_url() -> str:
    """The server to benchmark on: DATABASE_URL, else the local default."""
    return os.environ.get("DATABASE_URL") or DEFAULT_SERVER_URL


def with_dbname(conninfo: str, dbname: str) -> str:
    """The same connection string pointed at another database."""
    params = conninfo_to_dict(conninfo)
    params["dbname"] = dbname
    return make_conninfo(**params)  # type: ignore[arg-type]


@contextmanager
def throwaway_database(admin_url: str, prefix: str = "bench") -> Iterator[str]:
    """A freshly created database's URL, dropped (connections and all) on the way out."""
    name = f"{prefix}_{os.getpid()}_{secrets.token_hex(4)}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield with_dbname(admin_url, name)
    finally:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


def timed(run: Callable[[], object]) -> float:
    """Wall-clock seconds that one call of `run` takes."""
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def timed_clients(clients: int, work: Callable[[int], object]) -> float:
    """Wall-clock seconds for `clients` threads, released together, to each run `work(client)`.

    Threads rather than processes: the clients of one service process share its GIL and pool,
    and that is the contention worth measuring.
    """
    if clients == 1:
        return timed(lambda: work(0))
    start_line = threading.Barrier(clients + 1)
    errors: list[BaseException] = []

    def client(number: int) -> None:
        start_line.wait()
        try:
            work(number)
        except BaseException as error:  # re-raised in the caller's thread below
            errors.append(error)

    threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    for thread in threads:
        thread.start()
    start_line.wait()
    start = time.perf_counter()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - start
    if errors:
        raise errors[0]
    return elapsed


def rotations(repeats: int, contenders: Sequence[str]) -> Iterator[list[str]]:
    """The contenders' running order for each repeat, rotated so that none always goes first.

    Interleaving spreads slow drift (autovacuum, checkpoints, neighbours on the machine) over
    every contender instead of pinning it on whichever ran during it.
    """
    for repeat in range(repeats):
        shift = repeat % len(contenders)
        yield [*contenders[shift:], *contenders[:shift]]


@dataclass(slots=True)
class Figure:
    """One scenario's samples, in units a second, for each contender that ran it."""

    scenario: str
    samples: dict[str, list[float]] = field(default_factory=dict)

    def add(self, contender: str, count: int, seconds: float) -> None:
        """Record that `contender` got through `count` units in `seconds`."""
        self.samples.setdefault(contender, []).append(count / seconds)

    def median(self, contender: str) -> float | None:
        """The contender's median rate, or None if it did not run this scenario."""
        rates = self.samples.get(contender)
        return statistics.median(rates) if rates else None

    def spread(self, contender: str) -> float | None:
        """(max - min) / median of the contender's rates: how far to trust the median."""
        rates = self.samples.get(contender)
        if not rates:
            return None
        return (max(rates) - min(rates)) / statistics.median(rates)


def _rate(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.0f}"


def _ratio(numerator: float | None, denominator: float | None) -> str:
    if numerator is None or denominator is None or denominator == 0:
        return "n/a"
    return f"{numerator / denominator:.2f}"


def render_table(
    figures: Sequence[Figure],
    subject: str,
    baselines: Sequence[str],
    short_names: Mapping[str, str] | None = None,
) -> str:
    """A Markdown table of median rates, the subject's spread, and its ratio to each baseline."""
    short = dict(short_names or {})
    headers = [
        "scenario",
        subject,
        "spread",
        *baselines,
        *(f"{subject} / {short.get(name, name)}" for name in baselines),
    ]
    rows = []
    for figure in figures:
        ours = figure.median(subject)
        spread = figure.spread(subject)
        rows.append(
            [
                figure.scenario,
                _rate(ours),
                "n/a" if spread is None else f"{spread:.0%}",
                *(_rate(figure.median(name)) for name in baselines),
                *(_ratio(ours, figure.median(name)) for name in baselines),
            ]
        )
    widths = [max(len(line[i]) for line in [headers, *rows]) for i in range(len(headers))]

    def line(cells: Sequence[str]) -> str:
        # The scenario is text and reads left-aligned; the figures line up on their right.
        padded = [
            cell.ljust(width) if i == 0 else cell.rjust(width)
            for i, (cell, width) in enumerate(zip(cells, widths, strict=True))
        ]
        return "| " + " | ".join(padded) + " |"

    rule = "|" + "|".join(
        "-" * (w + 1) + ":" if i else ":" + "-" * (w + 1) for i, w in enumerate(widths)
    )
    return "\n".join([line(headers), rule + "|", *(line(row) for row in rows)])


@contextmanager
def reference_wallet(database_url: str, secret: str, admin_token: str) -> Iterator[str]:
    """The reference operator wallet serving on a free port over `database_url`: its URL."""
    environment = {
        **os.environ,
        "OPERATOR_WALLET_KEYS": f"k1:{secret}",
        "OPERATOR_WALLET_ADMIN_TOKEN": admin_token,
    }
    command = [sys.executable, "-m", "operator_wallet", "serve"]
    command += ["--database-url", database_url, "--port", "0"]
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=environment
    ) as wallet:
        try:
            assert wallet.stdout is not None
            yield wallet.stdout.readline().rsplit(" ", 1)[1].strip()
        finally:
            wallet.terminate()
            wallet.communicate(timeout=10)
