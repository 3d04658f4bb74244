"""`shoebox keys signing-key create` and `shoebox audit checkpoint` against the real database."""

import json
import stat
from pathlib import Path

import psycopg
from click.testing import CliRunner, Result
from shoebox_verify import checkpoints as independent

from service.cli import main


def run(database: str, *arguments: str, **env: str) -> Result:
    return CliRunner().invoke(main, list(arguments), env={"DATABASE_URL": database, **env})


def test_a_signing_key_is_written_for_its_owner_alone_and_never_overwritten(
    tmp_path: Path, fresh_database: str
) -> None:
    key_file = tmp_path / "signing.key"
    made = run(fresh_database, "keys", "signing-key", "create", "--out", str(key_file))
    assert made.exit_code == 0, made.output
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    public = made.stdout.split("public key:")[1].split()[0]
    assert len(public) == 64
    again = run(fresh_database, "keys", "signing-key", "create", "--out", str(key_file))
    assert again.exit_code == 2


def test_a_checkpoint_signs_the_head_and_lands_in_the_log_and_the_kept_file(
    tmp_path: Path, fresh_database: str
) -> None:
    key_file = tmp_path / "signing.key"
    run(fresh_database, "keys", "signing-key", "create", "--out", str(key_file))
    refused = run(fresh_database, "audit", "checkpoint")
    assert refused.exit_code != 0
    assert "SHOEBOX_SIGNING_KEY_FILE" in refused.output
    run(fresh_database, "keys", "create", "--role", "ops", "--name", "desk")
    kept = tmp_path / "kept.jsonl"
    signed = run(
        fresh_database,
        "audit",
        "checkpoint",
        "--out",
        str(kept),
        SHOEBOX_SIGNING_KEY_FILE=str(key_file),
    )
    assert signed.exit_code == 0, signed.output
    line = json.loads(signed.stdout)
    assert line["position"] == 1
    assert json.loads(kept.read_text()) == line
    ((_, checkpoint),) = independent.read_file(str(kept))
    independent.KeyChain().accept(checkpoint)
    verified = run(fresh_database, "audit", "verify")
    assert verified.exit_code == 0, verified.output
    assert "2 events verified" in verified.output


def test_a_log_cut_short_after_a_kept_checkpoint_fails_though_its_chain_still_verifies(
    tmp_path: Path, fresh_database: str
) -> None:
    key_file = tmp_path / "signing.key"
    run(fresh_database, "keys", "signing-key", "create", "--out", str(key_file))
    for name in ("a", "b", "c"):
        run(fresh_database, "keys", "create", "--role", "ops", "--name", name)
    kept = tmp_path / "kept.jsonl"
    signed = run(
        fresh_database,
        "audit",
        "checkpoint",
        "--out",
        str(kept),
        SHOEBOX_SIGNING_KEY_FILE=str(key_file),
    )
    assert signed.exit_code == 0, signed.output
    extends = run(fresh_database, "audit", "verify", "--checkpoint", str(kept))
    assert extends.exit_code == 0, extends.output
    assert "extends all 1 kept checkpoints" in extends.output
    # The owner (not the app) can bypass the log's guards: cut the last two key events and
    # the checkpoint's own event. The chain that remains is still perfectly linked.
    with psycopg.connect(fresh_database, autocommit=True) as conn:
        conn.execute("SET session_replication_role = replica")
        conn.execute("DELETE FROM events WHERE position >= 2")
    assert run(fresh_database, "audit", "verify").exit_code == 0
    cut = run(fresh_database, "audit", "verify", "--checkpoint", str(kept))
    assert cut.exit_code == 1
    assert "cut short" in cut.output


def test_a_damaged_kept_file_is_one_clear_line_not_a_traceback(
    tmp_path: Path, fresh_database: str
) -> None:
    kept = tmp_path / "kept.jsonl"
    kept.write_text('{"kind": "checkpoint", "position": 1}\n')
    result = run(fresh_database, "audit", "verify", "--checkpoint", str(kept))
    assert result.exit_code == 2
    assert "line 1" in result.output
    assert "Traceback" not in result.output
