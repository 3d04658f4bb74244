"""`shoebox export` from a real PostgreSQL log, and `shoebox verify` of what it wrote."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import orjson
from click.testing import CliRunner

from bench.verify import START, Simulation
from events.postgres import Pool, PostgresEventStore
from events.store import EventMetadata
from service.cli import main

DEALER = EventMetadata(actor="dealer", role="system")


def _play(pool: Pool, shoes: int = 1) -> None:
    clock = [START]
    store = PostgresEventStore(pool, lambda: clock[0])
    for append in Simulation("T1", players=2).appends(shoes):
        clock[0] = append.recorded_at
        store.append(append.streams, DEALER)


def _export(database: str, path: Path, start: str, end: str) -> list[dict[str, object]]:
    arguments = ["export", "--table", "T1", "--from", start, "--to", end, "-o", str(path)]
    result = CliRunner().invoke(main, arguments, env={"DATABASE_URL": database})
    assert result.exit_code == 0, result.output
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


def test_an_export_of_a_whole_shoe_verifies_offline(
    app_pool: Pool, fresh_database: str, tmp_path: Path
) -> None:
    _play(app_pool)
    path = tmp_path / "T1.jsonl"

    lines = _export(fresh_database, path, "2026-11-30", "2026-12-01")
    result = CliRunner().invoke(main, ["verify", str(path)], env={"DATABASE_URL": ""})

    assert result.exit_code == 0, result.output
    assert result.output.startswith("OK")
    assert lines[0]["first_position"] == 1
    shoes = [line for line in lines if line["kind"] == "shoe"]
    assert len(shoes) == 1
    assert shoes[0]["server_seed"] is not None


def test_a_slice_of_the_day_verifies_from_its_first_prev_hash(
    app_pool: Pool, fresh_database: str, tmp_path: Path
) -> None:
    _play(app_pool)
    path = tmp_path / "T1.jsonl"
    middle = (START + timedelta(seconds=30)).strftime("%Y-%m-%dT%H:%M:%S")

    lines = _export(fresh_database, path, middle, "2026-12-01")
    result = CliRunner().invoke(main, ["verify", str(path)])

    assert result.exit_code == 0, result.output
    first = lines[0]["first_position"]
    assert isinstance(first, int)
    assert first > 1


def test_a_corrupted_export_fails_naming_the_card(
    app_pool: Pool, fresh_database: str, tmp_path: Path
) -> None:
    _play(app_pool)
    path = tmp_path / "T1.jsonl"
    lines = _export(fresh_database, path, "2026-11-30", "2026-12-01")
    card = next(line for line in lines if line.get("type") == "CardDrawn")
    payload = card["payload"]
    assert isinstance(payload, dict)
    payload["card"] = "KS" if payload["card"] != "KS" else "QS"
    path.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))

    result = CliRunner().invoke(main, ["verify", str(path)])

    assert result.exit_code == 1
    assert "chain:" in result.output
    assert "card:" in result.output


def test_an_export_carries_its_periods_checkpoints_and_extends_a_kept_one(
    app_pool: Pool, fresh_database: str, tmp_path: Path
) -> None:
    from service.application.actor import Actor
    from service.application.checkpoints import CheckpointService, SigningKey, document

    key = SigningKey.generate()
    clock = [START]
    store = PostgresEventStore(app_pool, lambda: clock[0])
    signer = CheckpointService(store, lambda: clock[0], key)
    kept = tmp_path / "kept.jsonl"
    signatures: list[str] = []
    for number, append in enumerate(Simulation("T1", players=2).appends(1)):
        clock[0] = append.recorded_at
        store.append(append.streams, DEALER)
        if number == 40:
            signed = signer.sign_head(Actor("checkpointer", "system"))
            assert signed is not None
            signatures.append(signed.signature)
            kept.write_bytes(orjson.dumps(document(signed)) + b"\n")
    path = tmp_path / "T1.jsonl"

    lines = _export(fresh_database, path, "2026-11-30", "2026-12-01")
    carried = [line for line in lines if line["kind"] == "checkpoint"]
    arguments = ["verify", str(path), "--checkpoint", str(kept), "--trusted-key", key.public_key]
    result = CliRunner().invoke(main, arguments)

    assert [line["signature"] for line in carried] == signatures
    assert result.exit_code == 0, result.output
