"""C2SP signed notes, tree checkpoints and cosignatures, checked against keys a verifier trusts.

The formats are c2sp.org/signed-note, c2sp.org/tlog-checkpoint and c2sp.org/tlog-cosignature:

- a note is text ending in a newline, a blank line, then signature lines
  "— <key name> base64(4-byte key id || signature)";
- a verifier key ("vkey") is "<name>+<hex key id>+base64(type byte || public key)", where the
  key id is SHA-256(name || "\\n" || type byte || public key)[:4];
- type 0x01 is Ed25519 over the note text; type 0x04 is a witness's timestamped Ed25519
  cosignature over "cosignature/v1\\ntime <t>\\n" followed by the note text;
- a checkpoint's text is its origin, its tree size, its base64 root, and extension lines.

Signatures from keys the verifier does not know are ignored, as the specification says, so a
second signature line of a newer algorithm (ML-DSA) passes through verifiers that know only
Ed25519. A known key whose signature fails rejects the whole note.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

ED25519 = 0x01
COSIGNATURE_V1 = 0x04
EM_DASH = "\u2014"
MAX_SIGNATURES = 100
_DECIMAL = re.compile(r"0|[1-9][0-9]*")


class NoteError(ValueError):
    """A note, checkpoint or key that is malformed or not signed by a trusted key."""


def _b64(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as error:
        raise NoteError(f"{what} is not base64") from error


def key_id(name: str, signature_type: int, public_key: bytes) -> bytes:
    """The 4-byte key id of c2sp.org/signed-note."""
    return hashlib.sha256(name.encode() + b"\n" + bytes([signature_type]) + public_key).digest()[:4]


@dataclass(frozen=True, slots=True)
class VerifierKey:
    """A trusted key: its name, id, signature type and Ed25519 public key."""

    name: str
    id: bytes
    signature_type: int
    public_key: bytes

    @classmethod
    def parse(cls, vkey: str) -> VerifierKey:
        """Read a vkey string; its id must be the one its name and key imply."""
        # The name holds no "+", but base64 may: split at the first two only.
        parts = vkey.strip().split("+", 2)
        if len(parts) != 3 or not parts[0]:
            raise NoteError("a verifier key is <name>+<hex id>+<base64 key>")
        name, hex_id, encoded = parts
        try:
            claimed = bytes.fromhex(hex_id)
        except ValueError as error:
            raise NoteError("the verifier key's id is not hex") from error
        material = _b64(encoded, "the verifier key")
        if len(claimed) != 4 or len(material) != 33:
            raise NoteError("only Ed25519 verifier keys (33 bytes with the type) are known here")
        signature_type, public_key = material[0], material[1:]
        if signature_type not in (ED25519, COSIGNATURE_V1):
            raise NoteError(f"signature type {signature_type:#04x} is not known here")
        if key_id(name, signature_type, public_key) != claimed:
            raise NoteError("the verifier key's id does not match its name and key")
        return cls(name, claimed, signature_type, public_key)

    def encode(self) -> str:
        """The vkey string of this key."""
        material = base64.b64encode(bytes([self.signature_type]) + self.public_key).decode()
        return f"{self.name}+{self.id.hex()}+{material}"


@dataclass(frozen=True, slots=True)
class Signature:
    """One signature line: who signed (name and key id) and the signature bytes."""

    name: str
    id: bytes
    signature: bytes

    def line(self) -> str:
        """The signature line, newline included."""
        return f"{EM_DASH} {self.name} {base64.b64encode(self.id + self.signature).decode()}\n"


@dataclass(frozen=True, slots=True)
class Note:
    """A signed note: its text (final newline included) and its signature lines."""

    text: str
    signatures: tuple[Signature, ...]

    @classmethod
    def parse(cls, raw: str) -> Note:
        """Split a note into text and signatures, enforcing the format strictly."""
        if any(ord(ch) < 0x20 and ch != "\n" for ch in raw):
            raise NoteError("a note may hold no control character but newline")
        cut = raw.rfind("\n\n")
        if cut < 0 or not raw.endswith("\n"):
            raise NoteError("a note is text, a blank line, and signature lines, each ending a line")
        text, block = raw[: cut + 1], raw[cut + 2 :]
        lines = block[:-1].split("\n")
        if len(lines) > MAX_SIGNATURES:
            raise NoteError("too many signature lines")
        signatures = []
        for line in lines:
            fields = line.split(" ")
            if len(fields) != 3 or fields[0] != EM_DASH or not fields[1]:
                raise NoteError(f"not a signature line: {line!r}")
            blob = _b64(fields[2], "a signature")
            if len(blob) < 5:
                raise NoteError("a signature is too short to hold its key id")
            signatures.append(Signature(fields[1], blob[:4], blob[4:]))
        return cls(text, tuple(signatures))

    def encode(self) -> str:
        """The note as text, its signature lines after a blank line."""
        return self.text + "\n" + "".join(signature.line() for signature in self.signatures)

    def verified_by(self, keys: Iterable[VerifierKey]) -> list[VerifierKey]:
        """The trusted keys that signed this note; NoteError if a known key's signature fails.

        A cosignature (type 0x04) is checked over its own message; its timestamp is not
        judged here (a witness policy may).
        """
        known = {(key.name, key.id): key for key in keys}
        verified: list[VerifierKey] = []
        for signature in self.signatures:
            key = known.get((signature.name, signature.id))
            if key is None:
                continue
            if key.signature_type == COSIGNATURE_V1:
                if len(signature.signature) != 72:
                    raise NoteError(f"the cosignature of {key.name} is not 72 bytes")
                timestamp = int.from_bytes(signature.signature[:8], "big")
                message = cosigned_message(self.text, timestamp)
                raw = signature.signature[8:]
            else:
                message, raw = self.text.encode(), signature.signature
            try:
                Ed25519PublicKey.from_public_bytes(key.public_key).verify(raw, message)
            except InvalidSignature as error:
                raise NoteError(f"the signature of {key.name} does not verify") from error
            if key not in verified:
                verified.append(key)
        return verified


def cosigned_message(text: str, timestamp: int) -> bytes:
    """The message a cosignature/v1 signs: the header, the time, and the checkpoint's text."""
    if not 0 <= timestamp < 1 << 63:
        raise NoteError("a cosignature's timestamp is out of range")
    return f"cosignature/v1\ntime {timestamp}\n".encode() + text.encode()


@dataclass(frozen=True, slots=True)
class TreeCheckpoint:
    """A checkpoint's text: origin, tree size, root hash and extension lines."""

    origin: str
    size: int
    root: bytes
    extensions: tuple[str, ...]

    @classmethod
    def parse(cls, text: str) -> TreeCheckpoint:
        """Read a checkpoint's note text (not its signatures)."""
        lines = text[:-1].split("\n") if text.endswith("\n") else []
        if len(lines) < 3 or any(not line for line in lines):
            raise NoteError("a checkpoint is at least three non-empty lines")
        origin, size, root = lines[:3]
        if not _DECIMAL.fullmatch(size):
            raise NoteError("the tree size is not a decimal without leading zeroes")
        decoded = _b64(root, "the root hash")
        if len(decoded) != 32:
            raise NoteError("the root hash is not 32 bytes")
        return cls(origin, int(size), decoded, tuple(lines[3:]))

    def text(self) -> str:
        """The checkpoint's note text."""
        body = [self.origin, str(self.size), base64.b64encode(self.root).decode()]
        return "\n".join([*body, *self.extensions]) + "\n"

    def extension(self, prefix: str) -> str | None:
        """The value of the first extension line that starts with `prefix`, if any."""
        for line in self.extensions:
            if line.startswith(prefix):
                return line[len(prefix) :]
        return None


def open_checkpoint(
    raw: str, log_keys: Sequence[VerifierKey], origin: str | None = None
) -> tuple[Note, TreeCheckpoint]:
    """A checkpoint note verified by at least one of the log's keys (and of the origin given)."""
    note = Note.parse(raw)
    if not note.verified_by([key for key in log_keys if key.signature_type == ED25519]):
        raise NoteError("no signature of a trusted log key")
    checkpoint = TreeCheckpoint.parse(note.text)
    if origin is not None and checkpoint.origin != origin:
        raise NoteError(f"the checkpoint's origin is {checkpoint.origin!r}, not {origin!r}")
    return note, checkpoint


def witnessed_by(note: Note, witness_keys: Sequence[VerifierKey], quorum: int) -> list[VerifierKey]:
    """The witnesses that cosigned; NoteError unless at least `quorum` of them did."""
    cosigners = note.verified_by([k for k in witness_keys if k.signature_type == COSIGNATURE_V1])
    if len(cosigners) < quorum:
        raise NoteError(f"{len(cosigners)} of the trusted witnesses cosigned; {quorum} wanted")
    return cosigners
