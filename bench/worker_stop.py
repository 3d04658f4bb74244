"""How long `shoebox worker` takes to leave after SIGTERM, while every core is kept busy.

    python bench/worker_stop.py [--rounds 10] [--after 10]

A throwaway database and a throwaway Redis (the system's redis-server if installed, else the
wheel's). Each round starts a worker, waits `--after` seconds (plus 0.7 s times the round's
place in a cycle of five, so that the signal meets the worker at different moments), sends
SIGTERM and times the exit; a worker still there after 30 s is counted as hung, its threads'
tracebacks printed (faulthandler, on SIGABRT) and killed. A process spins on each core the
whole time: the race that held the worker is lost on a busy machine. Prints each round and
the count of hung ones; an exit status of -15 means the signal came before the worker had
installed its handlers (still importing), which is an immediate, harmless exit.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(_ROOT))

from bench.common import server_url, throwaway_database, uptime  # noqa: E402
from events.migrations import apply_migrations  # noqa: E402
from service.embedded import EmbeddedRedis  # noqa: E402

SHOEBOX = Path(sys.executable).with_name("shoebox")
HUNG_SECONDS = 30.0


def _spin(stop: Any) -> None:
    while not stop.is_set():
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--after", type=float, default=10.0)
    arguments = parser.parse_args()
    print(uptime())
    context = multiprocessing.get_context("spawn")
    stop = context.Event()
    spinners = [context.Process(target=_spin, args=(stop,)) for _ in range(os.cpu_count() or 1)]
    for spinner in spinners:
        spinner.start()
    hung = 0
    try:
        with (
            throwaway_database(server_url(), "bench_worker_stop") as url,
            tempfile.TemporaryDirectory(prefix="bench-worker-stop-") as scratch,
            EmbeddedRedis(Path(scratch) / "redis") as redis,
        ):
            apply_migrations(url)
            environment = {**os.environ, "DATABASE_URL": url, "REDIS_URL": redis.url}
            environment["PYTHONFAULTHANDLER"] = "1"
            environment.pop("SHOEBOX_APP_DATABASE_URL", None)
            for n in range(arguments.rounds):
                log = Path(scratch) / f"worker-{n}.log"
                with log.open("wb") as sink:
                    child = subprocess.Popen(
                        [str(SHOEBOX), "worker"], env=environment, stdout=sink, stderr=sink
                    )
                time.sleep(arguments.after + (n % 5) * 0.7)
                sent = time.monotonic()
                child.send_signal(signal.SIGTERM)
                try:
                    child.wait(timeout=HUNG_SECONDS)
                    took = time.monotonic() - sent
                    logged = re.search(r"stopped \(SIGTERM\), ([0-9.]+) s", log.read_text())
                    said = f" (logged stopped at {logged.group(1)} s)" if logged else ""
                    print(f"round {n}: exit {child.returncode}, {took:.2f} s after SIGTERM{said}")
                except subprocess.TimeoutExpired:
                    hung += 1
                    child.send_signal(signal.SIGABRT)
                    child.wait()
                    print(f"round {n}: HUNG over {HUNG_SECONDS:g} s; its threads:")
                    print(log.read_text()[-4000:])
    finally:
        stop.set()
        for spinner in spinners:
            spinner.join()
    print(f"hung: {hung} of {arguments.rounds}")


if __name__ == "__main__":
    main()
