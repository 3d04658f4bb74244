"""`shoebox keys signing-key create` and `shoebox audit checkpoint` against the real database."""

import json
import stat
from pathlib import Path

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
