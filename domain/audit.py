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
