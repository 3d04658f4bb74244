"""A checkpoint file made from `GET /v1/audit/checkpoints` is what the verifiers take.

A regulator pages through the API, appends each checkpoint's `line` to the file it keeps, and
later checks an export with the real `shoebox-verify --checkpoint` and the live log with
`shoebox audit verify --checkpoint`, anchored on the public key it was given.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime
from pathlib import Path

from click.testing import CliRunner

from events.postgres import Pool, PostgresEventStore
from events.store import StreamAppend
from service.application.actor import Actor
from service.application.checkpoints import CheckpointService, SigningKey
from service.application.keys import Role
from service.cli import main
from tests.api_harness import Api
from tests.verifier.exportgen import METADATA, START, Simulation

SHOEBOX_VERIFY = Path(sys.executable).with_name("shoebox-verify")
KEY = SigningKey.from_seed(bytes(range(32)))
OTHER_KEY = SigningKey.from_seed(bytes(range(32, 64)))
SIGNER = Actor("checkpointer", "system")


def _play_and_sign(pool: Pool) -> None:
    """A table's shoe, voided after three coups so that its seed is revealed; then a checkpoint."""
    clock = [START]
    store = PostgresEventStore(pool, lambda: clock[0])

    def append(streams: list[StreamAppend], recorded_at: datetime) -> None:
        clock[0] = recorded_at
        store.append(streams, METADATA)

    Simulation("T1", players=2, on_append=append).play(shoes=1, void_at=3)
    assert CheckpointService(store, lambda: clock[0], KEY).sign_head(SIGNER) is not None


def _kept_file_from_the_api(pool: Pool, path: Path) -> list[str]:
    api = Api(store=PostgresEventStore(pool))
    lines: list[str] = []
    after = 0
    while True:
        page = api.ok("GET", f"/v1/audit/checkpoints?after={after}", role=Role.REGULATOR)
        lines += [item["line"] for item in page["checkpoints"]]
        if page["next_after"] is None:
            break
        after = page["next_after"]
    path.write_text("".join(line + "\n" for line in lines))
    return lines


def _verify(*arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SHOEBOX_VERIFY), *arguments, "--no-progress"],
        capture_output=True,
        text=True,
        check=False,
    )


def test_a_file_of_the_apis_checkpoint_lines_verifies_an_export_and_a_tampered_one_fails(
    app_pool: Pool, fresh_database: str, tmp_path: Path
) -> None:
    _play_and_sign(app_pool)
    kept = tmp_path / "kept.jsonl"
    (line,) = _kept_file_from_the_api(app_pool, kept)
    export = tmp_path / "T1.jsonl"
    exported = CliRunner().invoke(
        main,
        [
            "export",
            "--table",
            "T1",
            "--from",
            "2026-11-30",
            "--to",
            "2026-12-01",
            "-o",
            str(export),
        ],
        env={"DATABASE_URL": fresh_database},
    )
    assert exported.exit_code == 0, exported.output

    anchored = ("--checkpoint", str(kept), "--trusted-key", KEY.public_key)
    passed = _verify(str(export), *anchored)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert passed.stdout.splitlines()[-1].startswith("OK: ")

    # The signed head moved one position on: the signature no longer holds.
    document = json.loads(line)
    tampered = tmp_path / "tampered.jsonl"
    tampered.write_text(json.dumps({**document, "position": document["position"] - 1}) + "\n")
    failed = _verify(str(export), "--checkpoint", str(tampered))
    assert failed.returncode != 0, failed.stdout
    # A well-signed file, but by a key the regulator never trusted.
    untrusted = _verify(
        str(export), "--checkpoint", str(kept), "--trusted-key", OTHER_KEY.public_key
    )
    assert untrusted.returncode != 0, untrusted.stdout


def test_audit_verify_anchors_the_kept_file_on_a_trusted_key_or_says_it_trusts_on_first_use(
    app_pool: Pool, fresh_database: str, tmp_path: Path
) -> None:
    _play_and_sign(app_pool)
    kept = tmp_path / "kept.jsonl"
    _kept_file_from_the_api(app_pool, kept)

    def audit_verify(*arguments: str) -> tuple[int, str]:
        result = CliRunner().invoke(
            main,
            ["audit", "verify", "--checkpoint", str(kept), *arguments],
            env={"DATABASE_URL": fresh_database},
        )
        return result.exit_code, result.output

    code, output = audit_verify("--trusted-key", KEY.public_key)
    assert code == 0, output
    assert "extends all 1 kept checkpoints" in output
    assert "trust on first use" not in output

    code, output = audit_verify("--trusted-key", OTHER_KEY.public_key)
    assert code == 1, output
    assert "is not trusted" in output

    code, output = audit_verify()
    assert code == 0, output
    assert f"key {KEY.key_id[:16]}, trust on first use" in output
    assert "--trusted-key" in output
