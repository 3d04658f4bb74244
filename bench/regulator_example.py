"""Write the regulator's worked example of the README: an export, kept checkpoints, the key.

A table plays one shoe through the domain into an in-memory log, a checkpoint is signed part of
the way through with a fixed key, and the export of a period in the middle of the shoe is
written with the server's own exporter. Everything is deterministic, so the files under
verifier/example/ are reproducible byte for byte, and tests/verifier/test_example.py holds them
to this script.

Run: .venv/bin/python -m bench.regulator_example [OUT_DIR]
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from unittest.mock import patch

import orjson

from bench.verify import START, Simulation
from domain.shoe import ServerSeed
from events.memory import InMemoryEventStore
from events.store import EventMetadata
from service.application.actor import Actor
from service.application.checkpoints import CheckpointService, SigningKey, document
from service.regulator.export import build_export

EXAMPLE = Path(__file__).resolve().parents[1] / "verifier" / "example"
KEY = SigningKey.from_seed(hashlib.sha256(b"shoebox worked example: not a real key").digest())
DEALER = EventMetadata(actor="dealer", role="system")
SIGN_AFTER_APPEND = 40
# Coups 20 to 50 or so of the shoe, which retires (and reveals its seed) at the end.
PERIOD = (START + timedelta(seconds=24), START + timedelta(seconds=55))


def _seeds() -> Iterator[ServerSeed]:
    number = 0
    while True:
        number += 1
        yield ServerSeed(hashlib.sha256(f"worked example shoe {number}".encode()).hexdigest())


def write(directory: Path) -> None:
    """Play, sign, export; write export.jsonl, kept.jsonl and public-key.txt to `directory`."""
    clock = [START]
    store = InMemoryEventStore(clock=lambda: clock[0])
    signer = CheckpointService(store, lambda: clock[0], KEY)
    kept: list[bytes] = []
    seeds = _seeds()
    # The simulation draws its seeds from the CSPRNG; the example must be reproducible.
    with patch.object(ServerSeed, "generate", staticmethod(lambda: next(seeds))):
        appends = list(Simulation("T1", players=2).appends(1))
    for number, append in enumerate(appends):
        clock[0] = append.recorded_at
        store.append(append.streams, DEALER)
        if number == SIGN_AFTER_APPEND:
            signed = signer.sign_head(Actor("checkpointer", "system"))
            assert signed is not None
            kept.append(orjson.dumps(document(signed), option=orjson.OPT_SORT_KEYS))
    directory.mkdir(parents=True, exist_ok=True)
    lines = build_export(store, "T1", *PERIOD)
    (directory / "export.jsonl").write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in lines))
    (directory / "kept.jsonl").write_bytes(b"".join(line + b"\n" for line in kept))
    (directory / "public-key.txt").write_text(KEY.public_key + "\n")


if __name__ == "__main__":
    write(Path(sys.argv[1]) if len(sys.argv) > 1 else EXAMPLE)
