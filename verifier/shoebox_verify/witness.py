"""A witness (c2sp.org/tlog-witness): cosign a log's checkpoint only if it extends the last one.

`shoebox-verify witness --key FILE --state DIR --log-key VKEY` serves
`POST /add-checkpoint`. For each log origin it keeps the last checkpoint it cosigned, in a
file of its own under DIR, and it cosigns a new one only if

- a trusted key of that origin signed it (else 403; an unknown origin is 404),
- the request's old size is the size it last cosigned (else 409 with that size,
  `text/x.tlog.size`), and
- the consistency proof from that size verifies (else 422), or, at the same size, the roots
  are equal (else 422).

The check and the update are one step under a lock, and the new state is on disk (written to
a temporary file, flushed, renamed) before the cosignature is answered, so two racing
requests can never roll the witness back. A checkpoint that fails a check is kept in the
state directory as evidence of the log's misbehaviour.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from shoebox_verify.merkle import MerkleProofError, check_consistency
from shoebox_verify.note import (
    COSIGNATURE_V1,
    ED25519,
    Note,
    NoteError,
    Signature,
    TreeCheckpoint,
    VerifierKey,
    cosigned_message,
    key_id,
)

MAX_BODY = 64 * 1024
MAX_PROOF_LINES = 63


class WitnessKeyError(ValueError):
    """A witness key file that cannot be read."""


@dataclass(frozen=True, slots=True)
class WitnessKey:
    """The witness's own Ed25519 key and name."""

    name: str
    seed: bytes

    @classmethod
    def read(cls, path: Path) -> WitnessKey:
        """Read `PRIVATE+KEY+<name>+<hex id>+<base64(0x04 || 32-byte seed)>`."""
        text = path.read_text().strip()
        parts = text.split("+", 4)
        if len(parts) != 5 or parts[:2] != ["PRIVATE", "KEY"]:
            raise WitnessKeyError("a witness key is PRIVATE+KEY+<name>+<hex id>+<base64 key>")
        try:
            material = base64.b64decode(parts[4], validate=True)
        except (binascii.Error, ValueError) as error:
            raise WitnessKeyError("the witness key is not base64") from error
        if len(material) != 33 or material[0] != COSIGNATURE_V1:
            raise WitnessKeyError("the witness key must be a 0x04 (cosignature/v1) Ed25519 key")
        key = cls(parts[2], material[1:])
        if key.verifier_key().id.hex() != parts[3]:
            raise WitnessKeyError("the witness key's id does not match its name and key")
        return key

    @classmethod
    def generate(cls, name: str) -> WitnessKey:
        """A new random key."""
        return cls(name, os.urandom(32))

    def encode(self) -> str:
        """The private key file's text."""
        material = base64.b64encode(bytes([COSIGNATURE_V1]) + self.seed).decode()
        return f"PRIVATE+KEY+{self.name}+{self.verifier_key().id.hex()}+{material}\n"

    def verifier_key(self) -> VerifierKey:
        """The vkey that verifiers configure to trust this witness."""
        public = (
            Ed25519PrivateKey.from_private_bytes(self.seed)
            .public_key()
            .public_bytes(Encoding.Raw, PublicFormat.Raw)
        )
        return VerifierKey(
            self.name, key_id(self.name, COSIGNATURE_V1, public), COSIGNATURE_V1, public
        )

    def cosign(self, text: str, timestamp: int) -> Signature:
        """A cosignature/v1 line over a checkpoint's text at `timestamp` (POSIX seconds)."""
        signature = Ed25519PrivateKey.from_private_bytes(self.seed).sign(
            cosigned_message(text, timestamp)
        )
        return Signature(
            self.name, self.verifier_key().id, timestamp.to_bytes(8, "big") + signature
        )


@dataclass(frozen=True, slots=True)
class Answer:
    """An HTTP answer: status, content type, body."""

    status: int
    content_type: str
    body: bytes


def _plain(status: int, message: str) -> Answer:
    return Answer(status, "text/plain; charset=utf-8", (message + "\n").encode())


class Witness:
    """The witness's state and its one operation, add-checkpoint."""

    def __init__(
        self,
        key: WitnessKey,
        state: Path,
        log_keys: Sequence[VerifierKey],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._key = key
        self._state = state
        self._clock = clock
        self._logs: dict[str, list[VerifierKey]] = {}
        for log_key in log_keys:
            if log_key.signature_type != ED25519:
                raise ValueError(f"{log_key.name}: a log key is an Ed25519 (0x01) key")
            self._logs.setdefault(log_key.name, []).append(log_key)
        self._lock = threading.Lock()
        state.mkdir(parents=True, exist_ok=True)

    @property
    def verifier_key(self) -> VerifierKey:
        """The vkey verifiers configure to trust this witness's cosignatures."""
        return self._key.verifier_key()

    def _file(self, origin: str) -> Path:
        return self._state / (hashlib.sha256(origin.encode()).hexdigest()[:32] + ".json")

    def latest(self, origin: str) -> tuple[int, bytes] | None:
        """The size and root this witness last cosigned for the origin, if any."""
        path = self._file(origin)
        if not path.exists():
            return None
        saved = json.loads(path.read_text())
        return int(saved["size"]), base64.b64decode(saved["root"])

    def _save(self, origin: str, checkpoint: TreeCheckpoint, note: str) -> None:
        path = self._file(origin)
        temporary = path.with_suffix(".tmp")
        record = {
            "origin": origin,
            "size": checkpoint.size,
            "root": base64.b64encode(checkpoint.root).decode(),
            "note": note,
        }
        with temporary.open("w") as handle:
            json.dump(record, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
        directory = os.open(self._state, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)

    def _keep_evidence(self, origin: str, body: str, reason: str) -> None:
        stamp = f"{self._clock():.6f}"
        name = f"evidence-{hashlib.sha256(body.encode()).hexdigest()[:16]}-{stamp}.json"
        (self._state / name).write_text(
            json.dumps({"origin": origin, "reason": reason, "request": body})
        )

    def add_checkpoint(self, body: str) -> Answer:
        """Handle one add-checkpoint request body."""
        head, separator, raw_note = body.partition("\n\n")
        if not separator:
            return _plain(
                400, "the body is an old size line, proof lines, a blank line, a checkpoint"
            )
        lines = head.split("\n")
        if not lines[0].startswith("old ") or len(lines) - 1 > MAX_PROOF_LINES:
            return _plain(400, "the first line is `old <size>`, then at most 63 proof lines")
        try:
            old_size = int(lines[0][4:])
            if str(old_size) != lines[0][4:] or old_size < 0:
                raise ValueError(lines[0])
            proof = [base64.b64decode(line, validate=True) for line in lines[1:]]
            note = Note.parse(raw_note)
            checkpoint = TreeCheckpoint.parse(note.text)
        except (ValueError, binascii.Error, NoteError) as error:
            return _plain(400, f"malformed request: {error}")
        keys = self._logs.get(checkpoint.origin)
        if keys is None:
            return _plain(404, f"unknown log origin {checkpoint.origin!r}")
        try:
            if not note.verified_by(keys):
                return _plain(403, "no signature of a trusted key of this log")
        except NoteError as error:
            return _plain(403, str(error))
        if old_size > checkpoint.size:
            return _plain(400, "the old size is larger than the checkpoint's")
        with self._lock:
            latest = self.latest(checkpoint.origin)
            cosigned_size = 0 if latest is None else latest[0]
            if old_size != cosigned_size:
                return Answer(409, "text/x.tlog.size", f"{cosigned_size}\n".encode())
            problem = self._inconsistency(latest, old_size, checkpoint, proof)
            if problem is not None:
                self._keep_evidence(checkpoint.origin, body, problem)
                return _plain(422, problem)
            self._save(checkpoint.origin, checkpoint, raw_note)
            line = self._key.cosign(note.text, int(self._clock()))
        return Answer(200, "text/plain; charset=utf-8", line.line().encode())

    @staticmethod
    def _inconsistency(
        latest: tuple[int, bytes] | None,
        old_size: int,
        checkpoint: TreeCheckpoint,
        proof: list[bytes],
    ) -> str | None:
        if checkpoint.size == 0 and checkpoint.root != hashlib.sha256(b"").digest():
            return "a checkpoint of size 0 must carry the empty tree's root"
        if latest is None or old_size == 0:
            return "the old size is 0, so the proof must be empty" if proof else None
        old_root = latest[1]
        if old_size == checkpoint.size:
            return None if old_root == checkpoint.root else "same size, another root: a fork"
        try:
            check_consistency(old_size, checkpoint.size, old_root, checkpoint.root, proof)
        except MerkleProofError as error:
            return f"the consistency proof fails: {error}"
        return None


def serve(witness: Witness, host: str, port: int) -> ThreadingHTTPServer:
    """An HTTP server answering POST /add-checkpoint (call serve_forever on it)."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            if self.path.rstrip("/").rsplit("/", 1)[-1] != "add-checkpoint":
                self._answer(_plain(404, "only POST add-checkpoint is served"))
                return
            length = int(self.headers.get("Content-Length") or 0)
            if not 0 < length <= MAX_BODY:
                self._answer(_plain(400, "a body of 1 to 65536 bytes is expected"))
                return
            try:
                body = self.rfile.read(length).decode()
            except UnicodeDecodeError:
                self._answer(_plain(400, "the body is not UTF-8"))
                return
            self._answer(witness.add_checkpoint(body))

        def _answer(self, answer: Answer) -> None:
            self.send_response(answer.status)
            self.send_header("Content-Type", answer.content_type)
            self.send_header("Content-Length", str(len(answer.body)))
            self.end_headers()
            self.wfile.write(answer.body)

    return ThreadingHTTPServer((host, port), Handler)
