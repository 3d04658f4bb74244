"""bench/growth.py's quick mode runs end to end: the benchmark of issues 12 and 21 runs."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_growth_benchmark_runs_in_quick_mode(postgres_server_url: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "bench.growth", "--quick"],
        cwd=ROOT,
        env={**os.environ, "DATABASE_URL": postgres_server_url, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )

    assert result.returncode == 0, result.stderr[-3000:]
    # Every operation of the issue has its row, and the table names the one that grows most.
    for operation in (
        "warm bet",
        "cold first bet",
        "cold GET /state",
        "cold GET /wallets/{player}",
        "recovery sweep",
        "significant events, first page",
        "shoe lookup",
        "open shoe lookup",
        "wallet movements, a page",
        "chat, a page",
        "a player's rounds, a page",
        "export of one shoe",
        "invariants check",
        "projector: catch up one coup",
    ):
        assert f"| {operation} |" in result.stdout
    assert "grows most:" in result.stdout
    assert "whole-history export" in result.stdout
