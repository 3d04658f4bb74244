"""bench/dashboard.py's quick mode runs end to end: issue 21's benchmark stays runnable."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_dashboard_benchmark_runs_in_quick_mode(postgres_server_url: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "bench.dashboard", "--quick"],
        cwd=ROOT,
        env={**os.environ, "DATABASE_URL": postgres_server_url, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )

    assert result.returncode == 0, result.stderr[-3000:]
    for operation in (
        "before: listing + 4 calls a table (the old backend)",
        "after: GET /v1/ops/tables",
        "after: GET /dashboard/api/overview (whole refresh)",
        "GET /v1/ping (noise)",
    ):
        assert f"| {operation} |" in result.stdout
