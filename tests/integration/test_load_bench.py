"""bench/load.py's quick mode runs end to end against a real `shoebox run`: the load test of
issue 14 stays runnable, and its figures come from where they say they do."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_load_benchmark_runs_in_quick_mode(postgres_server_url: str, tmp_path: Path) -> None:
    figures = tmp_path / "load.json"
    environment = {**os.environ, "DATABASE_URL": postgres_server_url, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "bench/load.py", "--quick", "--json", str(figures)],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )

    assert result.returncode == 0, result.stderr[-3000:]
    levels = json.loads(figures.read_text())
    # Both levels ran (the quick mode never stops early), in order, with traffic and rounds.
    assert [level["tables"] for level in levels] == [1, 2]
    for level in levels:
        assert level["bets"] > 0
        assert level["rounds"] > 0
        assert level["appends_per_second"] > 0
        # The yardsticks are measured in the same run, just before each level.
        assert level["ping_per_second"] > 0
        assert level["commits_per_second"] > 0
        assert level["bet_p50_ms"] <= level["bet_p99_ms"] <= level["bet_max_ms"]
        # Windows ran to their deadlines, their closing was found in the log, and the
        # worker's timer closed them (a bet slowed past a deadline may close one itself).
        assert level["windows"] > 0
        assert level["closed_by"]["worker timer"] > 0
        assert level["late_p50_ms"] >= 0  # never before the deadline
        # The windows after each table's first of the level are measured apart: a quick
        # level plays a second round at each table.
        assert 0 < level["later_windows"] < level["windows"]
        assert 0 <= level["late_p99_later_ms"] <= level["late_max_ms"]
        assert level["lag_events"] >= 0
        # Every 409 is classified by the rule it names or its problem type, and none is a
        # bet refused only for losing races to the log (issue 21).
        assert sum(level["refusals"].values()) == sum(
            n for error, n in level["errors"].items() if error.startswith("409")
        )
        assert level["concurrency_refusals"] == 0, level["refusals"]
    assert "| tables | ping/s | locked commits/s | rounds/s | bets/s |" in result.stdout
    assert "1 tables: " in result.stdout
    assert "409s by rule or type: " in result.stdout
    assert "concurrency refusals (concurrent-update): 0" in result.stdout
