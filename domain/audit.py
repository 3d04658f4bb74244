"""Events of the audit log itself, as opposed to the game: signed checkpoints of its head."""

from dataclasses import dataclass
from typing import ClassVar


@dataclass(frozen=True, slots=True)
class CheckpointSigned:
    """The service signed the log's head, so that anyone who keeps this can detect a rewrite.

    `position` and `head_hash` name the event that was the head when it was signed (this
    event comes after it); docs/verification.md gives the signed bytes.
    """

    type: ClassVar[str] = "CheckpointSigned"
    format: str
    position: int
    head_hash: str
    recorded_at: str
    key_id: str
    public_key: str
    signature: str
    previous_key_signature: str | None


@dataclass(frozen=True, slots=True)
class TreeCheckpointSigned:
    """The service signed the root of the log's Merkle tree at `size`, as a C2SP note.

    `note` is the whole signed note: origin, size, base64 root, the extension line binding
    the chain's head hash at that size, then the log's signature lines and any witnesses'
    cosignatures. It is signed in the same job as the CheckpointSigned of the same size.
    `root_hash` is base64, as in the note; `key_id` is the signed-note key id (8 hex);
    `cosigners` names the witnesses whose cosignatures the note carries.
    """

    type: ClassVar[str] = "TreeCheckpointSigned"
    origin: str
    size: int
    root_hash: str
    chain_head_hash: str
    key_id: str
    note: str
    cosigners: tuple[str, ...]
