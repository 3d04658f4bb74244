"""py-spy of saturated web workers during a phase of bench/saturate.py (bets), by stage.

    python bench/spy_bet.py [--seconds 12] [--spied 2] [--code DIR] [--raw-dir DIR]

Starts `shoebox serve` (default workers) as bench/saturate.py does, sets up its 16 tables,
warms up, then runs the bet phase (32 clients) for `--seconds` while
`py-spy record --gil -r 200 -f raw` samples `--spied` of the workers. Prints each stage's
share of the samples holding the GIL (STAGES below: each sample counted once, in the first
stage its stack matches). With `--code`, the server
runs that directory's code (an export of another commit), to profile old and new alike.
py-spy is not a project dependency: install it into the venv to use this.
"""

from __future__ import annotations

import argparse
import secrets
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Final

_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(_ROOT))

from bench.api import await_workers, issue_keys, served  # noqa: E402
from bench.common import server_url, throwaway_database, uptime  # noqa: E402
from bench.saturate import BET, PHASES, close_rounds, run_phase, set_up, web_workers  # noqa: E402
from events.migrations import apply_migrations  # noqa: E402
from service.cli.serve import DEFAULT_WORKERS  # noqa: E402

# (stage, patterns): a sample is counted in the first stage one of whose patterns is a
# substring of some frame of its stack (a pattern may be several substrings, joined by "&",
# every one of which must appear in the stack). Order matters: metrics inside the log hook
# are metrics, PostgreSQL calls inside the bet are the store's, and so on.
STAGES: Final = (
    (
        "metrics (prometheus counters)",
        ("prometheus_client", "request_duration (", "record_appended"),
    ),
    ("the log line", ("_log_request",)),
    ("consistency token (WAL position query)", ("_answer_token",)),
    ("idempotency before the view (body, fingerprint)", ("begin_request (service/web/idem",)),
    ("authenticate (key, roles)", ("authenticate_request",)),
    ("other before-request hooks", ("Flask.preprocess_request",)),
    ("other after-request hooks", ("Flask.process_response",)),
    ("parse and validate (webargs, Schema.load)", ("Parser.parse (webargs",)),
    ("the answer (build, name players, stored form)", ("answer_command.<locals>.respond",)),
    ("the store: PostgreSQL calls of the bet (psycopg)", ("place_bet&psycopg",)),
    ("decide (read the table, the rules, the plan)", (".prepare (service/",)),
    ("rest of the bet (turns, encode, append bookkeeping)", ("GameService.place_bet",)),
    ("the view outside the bet (flask-smorest, answer_command)", ("MethodView.dispatch_request",)),
    ("Flask + Werkzeug (contexts, routing, the response)", ("Flask.wsgi_app",)),
    ("gunicorn + gevent (accept, parse, write), the sequencer", ("",)),
)


def stage_of(stack: str) -> str:
    for stage, patterns in STAGES:
        for pattern in patterns:
            if all(part in stack for part in pattern.split("&")):
                return stage
    return "other"


def shares(raw_files: Sequence[Path]) -> tuple[Counter[str], int]:
    counts: Counter[str] = Counter()
    total = 0
    for path in raw_files:
        for line in path.read_text().splitlines():
            stack, _, count = line.rpartition(" ")
            if not stack or not count.isdigit():
                continue
            counts[stage_of(stack)] += int(count)
            total += int(count)
    return counts, total


def compare(before: Sequence[Path], after: Sequence[Path], cpu_ms: Sequence[float]) -> str:
    """Two profiles' stages side by side; with the web workers' CPU a bet of each run, each
    stage's share of it in ms (a share of samples times the run's CPU a bet)."""
    (old, old_total), (new, new_total) = shares(before), shares(after)
    lines = [
        "| stage | before: share | after: share | before: ms a bet | after: ms a bet |",
        "|:--|--:|--:|--:|--:|",
    ]
    for stage, _ in STAGES:
        a, b = old[stage] / max(old_total, 1), new[stage] / max(new_total, 1)
        lines.append(f"| {stage} | {a:.1%} | {b:.1%} | {a * cpu_ms[0]:.3f} | {b * cpu_ms[1]:.3f} |")
    lines.append(
        f"| all (samples holding the GIL: {old_total}, {new_total}) | 100% | 100%"
        f" | {cpu_ms[0]:.3f} | {cpu_ms[1]:.3f} |"
    )
    return "\n".join(lines)


def render(counts: Counter[str], total: int) -> str:
    lines = ["| stage | samples | share |", "|:--|--:|--:|"]
    for stage, _ in STAGES:
        lines.append(f"| {stage} | {counts[stage]} | {counts[stage] / max(total, 1):.1%} |")
    lines.append(f"| all (holding the GIL) | {total} | 100% |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seconds", type=float, default=12.0)
    parser.add_argument("--spied", type=int, default=2, help="workers sampled")
    parser.add_argument("--workers", type=int, default=DEFAULT_WORKERS)
    parser.add_argument("--code", type=Path, help="serve this directory's code")
    parser.add_argument("--phase", choices=PHASES, default=BET)
    parser.add_argument(
        "--compare",
        nargs=2,
        type=Path,
        metavar=("BEFORE", "AFTER"),
        help="print two earlier runs' raw dirs side by side, and measure nothing",
    )
    parser.add_argument(
        "--cpu-ms", nargs=2, type=float, default=(1.0, 1.0), help="with --compare: ms a bet"
    )
    parser.add_argument("--raw-dir", type=Path, help="keep py-spy's raw files here")
    args = parser.parse_args(argv)
    if args.compare:
        before, after = (sorted(d.glob("*.txt")) for d in args.compare)
        print(compare(before, after, args.cpu_ms))
        return
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    raw_dir = args.raw_dir or Path(tempfile.mkdtemp(prefix="spy_bet"))
    raw_dir.mkdir(parents=True, exist_ok=True)
    load_before = uptime()
    with throwaway_database(server_url(), prefix="bench_spy") as database_url:
        apply_migrations(database_url)
        keys = issue_keys(database_url)
        with served(database_url, args.workers, 1, code=args.code) as (port, master):
            await_workers(port, keys, args.workers)
            pids = web_workers(master)
            tables = set_up(port, keys, secrets.token_hex(3))
            run_phase(args.phase, port, keys, tables, 2.0, pids)
            close_rounds(port, keys, tables)
            spies = [
                subprocess.Popen(
                    [
                        spy,
                        "record",
                        "--gil",
                        "-r",
                        "200",
                        "-d",
                        str(int(args.seconds)),
                        "-f",
                        "raw",
                        "-o",
                        str(raw_dir / f"{pid}.txt"),
                        "--pid",
                        str(pid),
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
                for pid in pids[: args.spied]
            ]
            tallies, elapsed, cpu = run_phase(
                args.phase, port, keys, tables, args.seconds + 1, pids
            )
            for process in spies:
                process.wait()
            bets = sum(len(t.latencies) for t in tallies)
    counts, total = shares(sorted(raw_dir.glob("*.txt")))
    print(f"load before {load_before}, after {uptime()}; raw files in {raw_dir}")
    print(
        f"{args.phase}: {bets / elapsed:.0f}/s, web workers' CPU {cpu / bets * 1000:.3f} ms each\n"
    )
    print(render(counts, total))


if __name__ == "__main__":
    main()
