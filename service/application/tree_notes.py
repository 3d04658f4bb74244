"""The log's Merkle tree checkpoints as C2SP signed notes (the service's side; it only signs).

A tree checkpoint (c2sp.org/tlog-checkpoint) is the note text

    <origin>
    <tree size>
    <base64 root>
    shoebox-chain-head <hex hash of the event at position = tree size>

signed per c2sp.org/signed-note with Ed25519: each signature line is
"— <origin> base64(key id || signature)", the key id being the first four bytes of
SHA-256(origin || "\\n" || 0x01 || public key). The extension line binds the tree to the hash
chain at the same size, so the two can never tell two histories; C2SP tools ignore it. The
verifier (shoebox_verify.note) checks all of this with code of its own.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Sequence
from typing import Final

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

EXAMPLE_ORIGIN: Final = "shoebox.example/log"
"""The origin the demo signs with; the service refuses it outside demo mode."""

CHAIN_HEAD_PREFIX: Final = "shoebox-chain-head "
ED25519_TYPE: Final = 0x01
EM_DASH: Final = "\u2014"


def note_key_id(origin: str, private: Ed25519PrivateKey) -> bytes:
    """The signed-note key id of a key used under `origin`."""
    public = private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    return hashlib.sha256(origin.encode() + b"\n" + bytes([ED25519_TYPE]) + public).digest()[:4]


def verifier_key(origin: str, private: Ed25519PrivateKey) -> str:
    """The vkey a verifier configures to trust notes signed by this key (`<name>+<id>+<key>`)."""
    public = private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    material = base64.b64encode(bytes([ED25519_TYPE]) + public).decode()
    return f"{origin}+{note_key_id(origin, private).hex()}+{material}"


def checkpoint_text(origin: str, size: int, root: bytes, chain_head_hash: str) -> str:
    """The note text of a tree checkpoint."""
    if not origin or any(ch.isspace() or ch == "+" for ch in origin):
        raise ValueError("an origin is non-empty, with no spaces or '+'")
    encoded = base64.b64encode(root).decode()
    return f"{origin}\n{size}\n{encoded}\n{CHAIN_HEAD_PREFIX}{chain_head_hash}\n"


def signature_line(origin: str, private: Ed25519PrivateKey, text: str) -> str:
    """One signature line over the note text, newline included."""
    signed = note_key_id(origin, private) + private.sign(text.encode())
    return f"{EM_DASH} {origin} {base64.b64encode(signed).decode()}\n"


def signed_note(text: str, signature_lines: Sequence[str]) -> str:
    """The note: text, a blank line, then the signature lines."""
    return text + "\n" + "".join(signature_lines)


def note_text(note: str) -> str:
    """The text of a note this service wrote (everything before its last blank line)."""
    return note[: note.rindex("\n\n") + 1]
