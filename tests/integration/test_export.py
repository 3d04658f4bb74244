"""`shoebox export` from a real PostgreSQL log, and `shoebox verify` of what it wrote."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
from click.testing import CliRunner

from bench.verify import START, Simulation
from events.postgres import Pool, PostgresEventStore
from events.snapshots import PostgresSnapshotStore, Snapshot
from events.store import EventMetadata
from service.application.streams import id_of, table_stream, wallet_stream
from service.application.wallets import WalletCache, wallet_codec
from service.cli import main
from service.regulator.export import build_export
from service.regulator.log_index import PostgresLogIndex

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


def _play_with_wallet_snapshots(pool: Pool, shoes: int) -> PostgresEventStore:
    """The simulation's appends, each wallet's state put into a snapshotting cache after its
    append as the service's caches are; small blocks, so a short history keeps several."""
    clock = [START]
    store = PostgresEventStore(pool, lambda: clock[0])
    wallets = WalletCache(snapshots=PostgresSnapshotStore(pool), snapshot_every=7, keep_every=20)
    simulation = Simulation("T1", players=2)
    for append in simulation.appends(shoes):
        clock[0] = append.recorded_at
        store.append(append.streams, DEALER)
        for stream in append.streams:
            if stream.stream_id.startswith("wallet:"):
                wallets.put(stream.stream_id, *simulation.wallets[id_of(stream.stream_id)])
    return store


def _wallet_lines(lines: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    return [line for line in lines if line["kind"] == "wallet"]


def test_a_slices_wallets_from_kept_snapshots_equal_a_replay_from_the_first_event(
    app_pool: Pool,
) -> None:
    store = _play_with_wallet_snapshots(app_pool, shoes=2)
    table = store.read_stream(table_stream("T1"), upcast=False)
    start, end = table[len(table) * 2 // 3].recorded_at, table[-1].recorded_at
    index = PostgresLogIndex(app_pool)

    from_snapshots = _wallet_lines(build_export(store, "T1", start, end, index))
    # Without an index, each wallet is replayed from its first event.
    replayed = _wallet_lines(build_export(store, "T1", start, end))

    assert from_snapshots == replayed
    assert len(replayed) == 2
    assert all(line["opening"]["available"] for line in replayed)
    # The export started each wallet from a kept snapshot, not from its first event.
    for line in replayed:
        stream = wallet_stream(str(line["player_id"]))
        first_in_slice = min(
            e.version
            for e in store.read_stream(stream, upcast=False)
            if start <= e.recorded_at <= end
        )
        found = index.wallet_before(stream, first_in_slice - 1)
        assert found is not None
        assert 1 < found[0] <= first_in_slice - 1


def test_a_wallet_snapshot_of_another_schema_or_unreadable_is_not_trusted(
    app_pool: Pool,
) -> None:
    _play(app_pool)
    store = PostgresEventStore(app_pool)
    table = store.read_stream(table_stream("T1"), upcast=False)
    start, end = table[len(table) // 2].recorded_at, table[-1].recorded_at
    replayed = _wallet_lines(build_export(store, "T1", start, end))
    snapshots = PostgresSnapshotStore(app_pool)
    schema = wallet_codec().schema
    for line in replayed:
        stream = wallet_stream(str(line["player_id"]))
        # Just before the slice: a lie under the reader's schema that does not decode, and a
        # rich wallet under another schema.
        before = _first_version_in(store, stream, start) - 1
        snapshots.save(Snapshot(stream, before, schema, {"state": {"available": "lots"}}))
        snapshots.save(
            Snapshot(stream, before - 1, "an-older-domain", {"state": {"available": 10**9}})
        )
        assert snapshots.at_or_before(stream, schema, before) is not None

    from_index = build_export(store, "T1", start, end, PostgresLogIndex(app_pool))

    assert _wallet_lines(from_index) == replayed


def _first_version_in(store: PostgresEventStore, stream: str, start: datetime) -> int:
    return min(e.version for e in store.read_stream(stream) if e.recorded_at >= start)
