"""The witness cosigns only checkpoints that extend the last one it cosigned."""

from __future__ import annotations

import base64
import hashlib
import http.client
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from shoebox_verify.note import (
    ED25519,
    Note,
    Signature,
    TreeCheckpoint,
    VerifierKey,
    key_id,
    witnessed_by,
)
from shoebox_verify.witness import Witness, WitnessKey, WitnessKeyError, serve

from events.merkle import MemoryNodes, consistency_proof, root

ORIGIN = "casino.example/shoebox"


class Log:
    """A log of numbered entries that signs checkpoints, as the server would."""

    def __init__(self, name: str = ORIGIN) -> None:
        self.private = Ed25519PrivateKey.from_private_bytes(hashlib.sha256(name.encode()).digest())
        public = self.private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        self.key = VerifierKey(name, key_id(name, ED25519, public), ED25519, public)
        self.nodes = MemoryNodes()

    def grow(self, count: int) -> None:
        self.nodes.append(b"entry %d" % (self.nodes.size + i) for i in range(count))

    def note(self, size: int, root_hash: bytes | None = None) -> str:
        text = TreeCheckpoint(ORIGIN, size, root_hash or root(size, self.nodes), ()).text()
        return Note(
            text, (Signature(ORIGIN, self.key.id, self.private.sign(text.encode())),)
        ).encode()

    def request(self, old: int, size: int, proof: list[bytes] | None = None) -> str:
        if proof is None:
            proof = consistency_proof(old, size, self.nodes) if old else []
        lines = [f"old {old}", *(base64.b64encode(h).decode() for h in proof)]
        return "\n".join(lines) + "\n\n" + self.note(size)


@pytest.fixture
def log() -> Log:
    built = Log()
    built.grow(100)
    return built


@pytest.fixture
def witness(tmp_path: Path, log: Log) -> Witness:
    return Witness(
        WitnessKey.generate("witness.example/w1"),
        tmp_path / "state",
        [log.key],
        clock=lambda: 1_700_000_000.0,
    )


def _cosigned(witness: Witness, log: Log, request: str) -> int:
    answer = witness.add_checkpoint(request)
    if answer.status == 200:
        note = Note.parse(request.partition("\n\n")[2] + answer.body.decode())
        witness_key = witness.verifier_key
        assert witnessed_by(note, [witness_key], quorum=1) == [witness_key]
    return answer.status


def test_the_first_checkpoint_and_each_extension_are_cosigned(witness: Witness, log: Log) -> None:
    assert _cosigned(witness, log, log.request(0, 10)) == 200
    assert _cosigned(witness, log, log.request(10, 57)) == 200
    assert _cosigned(witness, log, log.request(57, 57)) == 200
    assert _cosigned(witness, log, log.request(57, 100)) == 200
    assert witness.latest(ORIGIN) == (100, root(100, log.nodes))


def test_a_stale_old_size_is_answered_409_with_the_size_cosigned(
    witness: Witness, log: Log
) -> None:
    assert _cosigned(witness, log, log.request(0, 20)) == 200
    answer = witness.add_checkpoint(log.request(10, 30))
    assert (answer.status, answer.content_type, answer.body) == (409, "text/x.tlog.size", b"20\n")


def test_a_fork_is_refused_422_and_kept_as_evidence(
    witness: Witness, log: Log, tmp_path: Path
) -> None:
    assert _cosigned(witness, log, log.request(0, 20)) == 200
    forked = Log()
    forked.grow(19)
    forked.nodes.append([b"rewritten"])
    forked.grow(10)
    assert witness.add_checkpoint(forked.request(20, 30)).status == 422
    same_size_other_root = forked.request(20, 20)
    assert witness.add_checkpoint(same_size_other_root).status == 422
    assert len(list((tmp_path / "state").glob("evidence-*.json"))) == 2
    assert witness.latest(ORIGIN) == (20, root(20, log.nodes))


def test_a_bad_proof_is_422_a_bad_signature_403_an_unknown_log_404(
    witness: Witness, log: Log
) -> None:
    assert _cosigned(witness, log, log.request(0, 20)) == 200
    proof = consistency_proof(20, 40, log.nodes)
    proof[0] = bytes(32)
    assert witness.add_checkpoint(log.request(20, 40, proof)).status == 422
    tampered = log.request(20, 40).replace("\n40\n", "\n41\n")
    assert witness.add_checkpoint(tampered).status == 403
    assert (
        witness.add_checkpoint(log.request(20, 40).replace(ORIGIN, "other.example/log")).status
        == 404
    )
    assert witness.add_checkpoint(log.request(0, 40, [bytes(32)])).status == 409
    assert witness.latest(ORIGIN) == (20, root(20, log.nodes))


def test_racing_submissions_never_roll_the_witness_back(witness: Witness, log: Log) -> None:
    assert _cosigned(witness, log, log.request(0, 10)) == 200
    statuses: list[int] = []
    requests = [log.request(10, size) for size in range(11, 41)]

    def submit(request: str) -> None:
        statuses.append(witness.add_checkpoint(request).status)

    threads = [threading.Thread(target=submit, args=(r,)) for r in requests]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert statuses.count(200) == 1
    assert statuses.count(409) == len(requests) - 1
    size, _ = witness.latest(ORIGIN) or (0, b"")
    assert size > 10


def test_the_key_file_round_trips_and_a_wrong_id_is_refused(tmp_path: Path) -> None:
    key = WitnessKey.generate("witness.example/w2")
    path = tmp_path / "witness.key"
    path.write_text(key.encode())
    assert WitnessKey.read(path) == key
    path.write_text(key.encode().replace(key.verifier_key().id.hex(), "00000000"))
    with pytest.raises(WitnessKeyError):
        WitnessKey.read(path)


@pytest.fixture
def served(witness: Witness) -> Iterator[int]:
    server = serve(witness, "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def test_add_checkpoint_over_http(served: int, log: Log) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", served, timeout=5)
    connection.request("POST", "/add-checkpoint", body=log.request(0, 5).encode())
    response = connection.getresponse()
    assert response.status == 200
    assert response.read().decode().startswith("\u2014 witness.example/w1 ")
    connection.request("POST", "/add-checkpoint", body=log.request(0, 6).encode())
    response = connection.getresponse()
    assert (response.status, response.read()) == (409, b"5\n")
