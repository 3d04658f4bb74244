"""End to end: the server's `shoebox export` from a real PostgreSQL log, and `shoebox-verify`."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest
from click.testing import CliRunner
from shoebox_verify.cli import main as shoebox_verify

from events.postgres import Pool, PostgresEventStore
from events.store import StreamAppend
from tests.verifier.exportgen import METADATA, START, Simulation


def _play(pool: Pool) -> None:
    clock = [START]
    store = PostgresEventStore(pool, lambda: clock[0])

    def append(streams: list[StreamAppend], recorded_at: datetime) -> None:
        clock[0] = recorded_at
        store.append(streams, METADATA)

    Simulation("T1", players=2, on_append=append).play(shoes=1, void_at=30)


def _export(database: str, path: Path, start: str, end: str) -> None:
    from service.cli import main

    arguments = ["export", "--table", "T1", "--from", start, "--to", end, "-o", str(path)]
    result = CliRunner().invoke(main, arguments, env={"DATABASE_URL": database})
    assert result.exit_code == 0, result.output


@pytest.mark.slow
def test_real_exports_verify(
    app_pool: Pool, fresh_database: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _play(app_pool)
    for start, end in (
        ("2026-11-30", "2026-12-01"),
        ("2026-11-30T12:00:10", "2026-11-30T12:00:40"),
    ):
        path = tmp_path / "T1.jsonl"
        _export(fresh_database, path, start, end)
        code = shoebox_verify([str(path), "--no-progress"])
        out = capsys.readouterr().out
        assert code == 0, out
        assert out.splitlines()[-1].startswith("OK: ")
