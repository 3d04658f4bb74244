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


@dataclass(frozen=True, slots=True)
class LogRestored:
    """The database was restored to an earlier point: the log resumes after `last_position_kept`.

    Appended by `shoebox restore` before play resumes. Whatever the log held after
    `last_position_kept` is gone, and checkpoints signed over it (`recorded_at` before this
    event's `restored_at`) are reported by `shoebox audit verify` as lost by this restore,
    not as a cut log. `last_checkpoint_position` and `last_checkpoint_hash` name the last
    checkpoint the restored log extends (None before the first). Every table whose shoe was
    open is then retired, its seed revealed and its open round voided (a MalfunctionDeclared
    naming this restore), since cards dealt after the restore point may have been seen.

    `recovered_head` is where recovery itself ended. Appends committed before the recovery
    target that the lost timeline had not sequenced yet are kept by the recovery, and placed
    after it before this event: positions `recovered_head + 1` to `last_position_kept`. Their
    positions and hashes are new, so a checkpoint the lost timeline signed past
    `recovered_head` is lost by this restore too. None (as in restores recorded before the
    field existed) means no append was placed: it equals `last_position_kept`.
    """

    type: ClassVar[str] = "LogRestored"
    restore_id: str
    last_position_kept: int
    last_checkpoint_position: int | None
    last_checkpoint_hash: str | None
    recovery_target: str
    reason: str
    restored_at: str
    recovered_head: int | None = None

    @property
    def lost_after(self) -> int:
        """The last position the lost timeline and the restored log hold alike."""
        return self.last_position_kept if self.recovered_head is None else self.recovered_head
