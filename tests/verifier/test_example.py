"""The README's worked example for regulators: its files are what bench/regulator_example.py
writes, and they verify; one changed payout makes them fail."""

from pathlib import Path

import pytest
from shoebox_verify.cli import main as shoebox_verify

from bench.regulator_example import EXAMPLE, write


def test_the_example_files_are_exactly_what_the_script_writes(tmp_path: Path) -> None:
    write(tmp_path)
    for name in ("export.jsonl", "kept.jsonl", "public-key.txt"):
        assert (tmp_path / name).read_bytes() == (EXAMPLE / name).read_bytes(), (
            f"verifier/example/{name} is stale: run .venv/bin/python -m bench.regulator_example"
        )


def _arguments(export: Path) -> list[str]:
    key = (EXAMPLE / "public-key.txt").read_text().strip()
    return [str(export), "--checkpoint", str(EXAMPLE / "kept.jsonl"), "--trusted-key", key]


def test_the_example_verifies_with_its_kept_checkpoint_and_key(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert shoebox_verify(_arguments(EXAMPLE / "export.jsonl")) == 0
    assert capsys.readouterr().out.startswith("OK:")


def test_one_payout_changed_in_the_example_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = (EXAMPLE / "export.jsonl").read_text()
    marker = '"type":"PayoutCredited"'
    start = text.index(marker)
    line_end = text.index("\n", start)
    line = text[text.rindex("\n", 0, start) + 1 : line_end]
    tampered = line.replace('"payout":', '"payout":1', 1)
    assert tampered != line
    (tmp_path / "export.jsonl").write_text(text.replace(line, tampered, 1))
    assert shoebox_verify(_arguments(tmp_path / "export.jsonl")) == 1
    assert "FAILED" in capsys.readouterr().out


@pytest.mark.slow
def test_a_regulator_installs_the_verifier_alone_and_runs_the_example(tmp_path: Path) -> None:
    """The README's steps, in a fresh virtual environment: nothing of the server comes along."""
    import subprocess
    import sys

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "install", str(EXAMPLE.parent)], check=True)
    listed = subprocess.run([*pip, "list"], capture_output=True, text=True, check=True).stdout
    installed = {line.split()[0].lower() for line in listed.splitlines()[2:] if line.strip()}
    assert not installed & {"flask", "psycopg", "psycopg-binary", "redis", "rq", "shoebox"}
    ran = subprocess.run(
        [str(venv / "bin" / "shoebox-verify"), *_arguments(EXAMPLE / "export.jsonl")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
