"""bench/wallet.py runs end to end with a few calls: the benchmark of issue 24 stays runnable."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_the_wallet_benchmark_runs_with_a_few_calls(postgres_server_url: str) -> None:
    result = subprocess.run(
        [sys.executable, "bench/wallet.py", "--calls", "10", "--repeats", "1"],
        cwd=ROOT,
        env={**os.environ, "DATABASE_URL": postgres_server_url},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    rows = {line.split("  ")[0].strip() for line in result.stdout.splitlines()}
    assert {"bare POST", "balance", "bet", "win of 0"} <= rows
