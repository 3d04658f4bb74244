"""Signed checkpoints: (position, head hash, time) signed with Ed25519, and key rotation.

The format is docs/verification.md, "Signed checkpoints". In short:

- key id: lowercase hex SHA-256 of the raw 32-byte Ed25519 public key;
- signed message: the canonical JSON (docs/audit-log.md, keys sorted, no spaces) of
  {"format": "shoebox-checkpoint/1", "head_hash": h, "key_id": k, "position": p,
  "recorded_at": t}, t being YYYY-MM-DDTHH:MM:SS.ffffffZ;
- a checkpoint line: that object plus "kind": "checkpoint", "public_key" (64 hex), "signature"
  (128 hex, the key's signature of the message) and "previous_key_signature" (null, or 128 hex:
  the signature of the same message by the key in use before, on the first checkpoint signed
  under a new key; since the message names the new key id, the old key endorses the new one).

The server signs on its own side with its own code; this module is what a verifier (or a test)
needs: build the message, sign with a 32-byte private key seed, check a line, follow keys.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from shoebox_verify.strictjson import BadJsonError, canonical_json, loads_line

FORMAT = "shoebox-checkpoint/1"
_HEX64 = re.compile(r"[0-9a-f]{64}")
_HEX128 = re.compile(r"[0-9a-f]{128}")
_TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z")
_KEYS = {
    "kind",
    "format",
    "position",
    "head_hash",
    "recorded_at",
    "key_id",
    "public_key",
    "signature",
    "previous_key_signature",
}


class CheckpointError(ValueError):
    """A checkpoint that is malformed, badly signed, or signed by a key not trusted."""


def key_id(public_key: bytes) -> str:
    """The id of an Ed25519 public key: lowercase hex SHA-256 of its 32 raw bytes."""
    return hashlib.sha256(public_key).hexdigest()


def public_key_of(private_key_seed: bytes) -> bytes:
    """The raw 32-byte public key of a 32-byte Ed25519 private key seed."""
    private = Ed25519PrivateKey.from_private_bytes(private_key_seed)
    return private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


def is_timestamp(text: object) -> bool:
    """Whether `text` is the log's fixed-width UTC timestamp, which sorts as it reads."""
    return isinstance(text, str) and _TIMESTAMP.fullmatch(text) is not None


def signed_message(position: int, head_hash: str, recorded_at: str, signer_key_id: str) -> bytes:
    """The exact bytes a checkpoint's signatures cover."""
    return canonical_json(
        {
            "format": FORMAT,
            "position": position,
            "head_hash": head_hash,
            "recorded_at": recorded_at,
            "key_id": signer_key_id,
        }
    )


def sign(
    private_key_seed: bytes,
    position: int,
    head_hash: str,
    recorded_at: str,
    previous_private_key_seed: bytes | None = None,
) -> dict[str, Any]:
    """A checkpoint line signed by the key of `private_key_seed`.

    Pass `previous_private_key_seed` on the first checkpoint under a new key: the old key then
    signs the same message, which names the new key, as `previous_key_signature`.
    """
    public_key = public_key_of(private_key_seed)
    kid = key_id(public_key)
    message = signed_message(position, head_hash, recorded_at, kid)
    previous = None
    if previous_private_key_seed is not None:
        old = Ed25519PrivateKey.from_private_bytes(previous_private_key_seed)
        previous = old.sign(message).hex()
    return {
        "kind": "checkpoint",
        "format": FORMAT,
        "position": position,
        "head_hash": head_hash,
        "recorded_at": recorded_at,
        "key_id": kid,
        "public_key": public_key.hex(),
        "signature": Ed25519PrivateKey.from_private_bytes(private_key_seed).sign(message).hex(),
        "previous_key_signature": previous,
    }


def signature_valid(public_key: bytes, message: bytes, signature: bytes) -> bool:
    """Whether `signature` is the Ed25519 signature of `message` by `public_key`."""
    try:
        Ed25519PublicKey.from_public_bytes(public_key).verify(signature, message)
    except (InvalidSignature, ValueError):
        return False
    return True


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A checkpoint line, its fields checked for shape (not yet for trust)."""

    position: int
    head_hash: str
    recorded_at: str
    key_id: str
    public_key: bytes
    signature: bytes
    previous_key_signature: bytes | None

    @property
    def message(self) -> bytes:
        """The bytes its signatures cover."""
        return signed_message(self.position, self.head_hash, self.recorded_at, self.key_id)


def parse(line: Mapping[str, Any]) -> Checkpoint:
    """A checkpoint from its JSON object; CheckpointError names what is malformed."""
    missing = sorted(_KEYS - set(line))
    if missing:
        raise CheckpointError(f"a checkpoint needs {', '.join(missing)}")
    extra = sorted(set(line) - _KEYS)
    if extra:
        raise CheckpointError(f"a checkpoint has no key {', '.join(extra)}")
    if line["kind"] != "checkpoint" or line["format"] != FORMAT:
        raise CheckpointError(f'a checkpoint has kind "checkpoint" and format "{FORMAT}"')
    position = line["position"]
    if isinstance(position, bool) or not isinstance(position, int) or position < 1:
        raise CheckpointError(f"position {position!r} is not a positive integer")
    for name, pattern in (("head_hash", _HEX64), ("key_id", _HEX64), ("public_key", _HEX64)):
        if not isinstance(line[name], str) or not pattern.fullmatch(line[name]):
            raise CheckpointError(f"{name} is not 64 lowercase hex characters")
    if not isinstance(line["recorded_at"], str) or not _TIMESTAMP.fullmatch(line["recorded_at"]):
        raise CheckpointError("recorded_at is not of the form YYYY-MM-DDTHH:MM:SS.ffffffZ")
    for name in ("signature", "previous_key_signature"):
        value = line[name]
        if value is None and name == "previous_key_signature":
            continue
        if not isinstance(value, str) or not _HEX128.fullmatch(value):
            raise CheckpointError(f"{name} is not 128 lowercase hex characters")
    public_key = bytes.fromhex(line["public_key"])
    if key_id(public_key) != line["key_id"]:
        raise CheckpointError("key_id is not the SHA-256 of public_key")
    previous = line["previous_key_signature"]
    return Checkpoint(
        position,
        line["head_hash"],
        line["recorded_at"],
        line["key_id"],
        public_key,
        bytes.fromhex(line["signature"]),
        bytes.fromhex(previous) if previous is not None else None,
    )


class KeyChain:
    """The keys trusted so far, followed through rotations in signing order.

    It starts from trusted public keys, or, with none, trusts the first checkpoint's key (and
    says so: `anchored` stays False). A checkpoint is accepted when its own signature is valid
    and its key is the current key, or when its key is new and `previous_key_signature` is a
    valid signature by the current key; the new key then becomes current and the old one is
    retired: a later checkpoint signed by a retired key is refused.
    """

    def __init__(self, trusted: Iterable[bytes] = ()) -> None:
        self._trusted = list(trusted)
        self.anchored = bool(self._trusted)
        self._current: bytes | None = None
        self._retired: set[str] = set()

    @property
    def current(self) -> bytes | None:
        """The key in use at the last accepted checkpoint."""
        return self._current

    def accept(self, checkpoint: Checkpoint) -> None:
        """Check a checkpoint's signatures against the chain of keys; CheckpointError if bad."""
        message = checkpoint.message
        if not signature_valid(checkpoint.public_key, message, checkpoint.signature):
            raise CheckpointError(f"the signature of key {checkpoint.key_id[:16]} is not valid")
        if checkpoint.key_id in self._retired:
            raise CheckpointError(f"key {checkpoint.key_id[:16]} was rotated out before this")
        current = self._current
        if current is not None and checkpoint.public_key == current:
            return
        if current is None and (not self._trusted or checkpoint.public_key in self._trusted):
            self._current = checkpoint.public_key
            return
        # A new key: the key in use before (or, at the start, a trusted key) must endorse it.
        endorsers = [current] if current is not None else self._trusted
        endorsement = checkpoint.previous_key_signature
        endorser = next(
            (
                key
                for key in endorsers
                if endorsement is not None and signature_valid(key, message, endorsement)
            ),
            None,
        )
        if endorser is None:
            raise CheckpointError(
                f"key {checkpoint.key_id[:16]} is not trusted: no valid previous_key_signature "
                "by the key in use before introduces it"
            )
        self._retired.add(key_id(endorser))
        self._current = checkpoint.public_key


def read_file(path: str) -> list[tuple[int, Checkpoint]]:
    """The checkpoints of a JSON Lines checkpoint file, with their line numbers."""
    found: list[tuple[int, Checkpoint]] = []
    with open(path, "rb") as file:
        for number, raw in enumerate(file, start=1):
            if not raw.strip():
                continue
            try:
                document = loads_line(raw)
            except BadJsonError as error:
                raise CheckpointError(f"{path} line {number}: {error}") from None
            if not isinstance(document, dict):
                raise CheckpointError(f"{path} line {number}: a checkpoint is a JSON object")
            try:
                found.append((number, parse(document)))
            except CheckpointError as error:
                raise CheckpointError(f"{path} line {number}: {error}") from None
    return found


def verify_chain_of_keys(
    checkpoints: Iterable[tuple[int, Checkpoint]], chain: KeyChain, source: str
) -> None:
    """Accept each checkpoint in order; CheckpointError names the first that fails.

    Positions and times never go backwards, and one position has one head hash.
    """
    last: Checkpoint | None = None
    for number, checkpoint in checkpoints:
        try:
            chain.accept(checkpoint)
        except CheckpointError as error:
            raise CheckpointError(f"{source} line {number}: {error}") from None
        if last is not None:
            if checkpoint.position < last.position or checkpoint.recorded_at < last.recorded_at:
                raise CheckpointError(f"{source} line {number}: goes back in position or time")
            if checkpoint.position == last.position and checkpoint.head_hash != last.head_hash:
                raise CheckpointError(
                    f"{source} line {number}: position {checkpoint.position} has two head hashes"
                )
        last = checkpoint
