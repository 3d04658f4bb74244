"""Signed checkpoints: the log's head, signed with a key the database never holds.

A hash chain shows an edit, but not a log rewritten (and rehashed) from the edit onwards, nor
a tail cut off. A checkpoint is `(position, head hash, time)` signed with Ed25519; once a
regulator keeps one, a log or export that does not reproduce it fails verification, however
well its chain was recomputed. The format and its test vectors are in docs/verification.md;
this module is the service's own implementation of it, shared with no verifier.

Rotation: the first checkpoint under a new key also carries the previous key's signature of
the same message, so a verifier that trusts the old key learns the new one.

With a tree and an origin, the same job also signs the root of the log's Merkle tree at the
same size as a C2SP note (service/application/tree_notes.py), shows it to the configured
witnesses for their cosignatures, and appends both checkpoints in one append: the chain's
head hash rides in the note, so the chain and the tree can never be shown apart.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, fields
from datetime import datetime
from typing import Final, Protocol

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from domain.audit import CheckpointSigned, TreeCheckpointSigned
from domain.payloads import from_payload, to_payload
from events.canonical import canonical_json, format_timestamp
from events.merkle import consistency_proof, root
from events.merkle_store import TreeStore, integrate
from events.store import EventStore, NewEvent, RecordedEvent, StreamAppend, to_utc
from service.application.actor import Actor
from service.application.tree_notes import (
    checkpoint_text,
    note_key_id,
    signature_line,
    signed_note,
)

FORMAT: Final = "shoebox-checkpoint/1"
STREAM: Final = "audit:checkpoints"
TREE_STREAM: Final = "audit:tree-checkpoints"
CHECKPOINT_TYPES: Final = frozenset({CheckpointSigned.type, TreeCheckpointSigned.type})
SEED_BYTES: Final = 32


class CheckpointError(Exception):
    """A checkpoint that cannot be made or does not verify."""


@dataclass(frozen=True, slots=True)
class SigningKey:
    """An Ed25519 key, loaded from a 32-byte seed that lives in a file or the environment."""

    private: Ed25519PrivateKey

    @classmethod
    def from_seed(cls, seed: bytes) -> SigningKey:
        """The key whose RFC 8032 private seed is `seed`."""
        if len(seed) != SEED_BYTES:
            raise CheckpointError(f"a signing key is {SEED_BYTES} bytes, not {len(seed)}")
        return cls(Ed25519PrivateKey.from_private_bytes(seed))

    @classmethod
    def from_hex(cls, text: str) -> SigningKey:
        """The key written as 64 hex characters, as `shoebox keys signing-key create` writes."""
        try:
            seed = bytes.fromhex(text.strip())
        except ValueError as error:
            raise CheckpointError("a signing key file holds 64 hexadecimal characters") from error
        return cls.from_seed(seed)

    @classmethod
    def generate(cls) -> SigningKey:
        """A fresh key from the operating system's CSPRNG."""
        return cls(Ed25519PrivateKey.generate())

    def seed_hex(self) -> str:
        """The private seed as hex: what a key file holds."""
        from cryptography.hazmat.primitives.serialization import NoEncryption, PrivateFormat

        raw = self.private.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
        return raw.hex()

    @property
    def public_key(self) -> str:
        """The raw 32-byte public key as hex."""
        return public_key_hex(self.private.public_key())

    @property
    def key_id(self) -> str:
        """SHA-256 of the raw public key, as hex."""
        return key_id(self.public_key)

    def sign(self, message: bytes) -> str:
        """The signature of `message`, as hex."""
        return self.private.sign(message).hex()


def public_key_hex(key: Ed25519PublicKey) -> str:
    """A public key's raw bytes as hex."""
    return key.public_bytes(Encoding.Raw, PublicFormat.Raw).hex()


def key_id(public_key: str) -> str:
    """The id of a public key given as hex: the SHA-256 of its raw bytes."""
    return hashlib.sha256(bytes.fromhex(public_key)).hexdigest()


def message(position: int, head_hash: str, signer_id: str, recorded_at: str) -> bytes:
    """The bytes a checkpoint's signatures sign (docs/verification.md)."""
    return canonical_json(
        {
            "format": FORMAT,
            "head_hash": head_hash,
            "key_id": signer_id,
            "position": position,
            "recorded_at": recorded_at,
        }
    )


def document(checkpoint: CheckpointSigned) -> dict[str, object]:
    """A checkpoint as a line of a checkpoint file or an export."""
    return {"kind": "checkpoint", **asdict(checkpoint)}


def kept_line(checkpoint: CheckpointSigned) -> str:
    """A checkpoint as exactly one line of a checkpoint file, without its newline."""
    return json.dumps(document(checkpoint), sort_keys=True, separators=(",", ":"))


def verify_signatures(checkpoint: CheckpointSigned, previous: str | None = None) -> None:
    """Raise CheckpointError unless the checkpoint is signed by its key (and `previous`).

    `previous`, a public key as hex, is the key the log used before: its endorsement of a
    new key is checked when the checkpoint carries one.
    """
    if checkpoint.format != FORMAT:
        raise CheckpointError(f"unknown checkpoint format {checkpoint.format!r}")
    if key_id(checkpoint.public_key) != checkpoint.key_id:
        raise CheckpointError(f"key id {checkpoint.key_id} is not the public key's")
    signed = message(
        checkpoint.position, checkpoint.head_hash, checkpoint.key_id, checkpoint.recorded_at
    )
    _check(checkpoint.public_key, checkpoint.signature, signed, "signature")
    if previous is not None and checkpoint.key_id != key_id(previous):
        if checkpoint.previous_key_signature is None:
            raise CheckpointError(
                f"checkpoint at {checkpoint.position} changes key without the old key's signature"
            )
        _check(previous, checkpoint.previous_key_signature, signed, "previous key's signature")


def _check(public_key: str, signature: str, signed: bytes, what: str) -> None:
    try:
        Ed25519PublicKey.from_public_bytes(bytes.fromhex(public_key)).verify(
            bytes.fromhex(signature), signed
        )
    except (InvalidSignature, ValueError) as error:
        raise CheckpointError(f"the {what} does not verify") from error


def from_recorded(event: RecordedEvent) -> CheckpointSigned:
    """The checkpoint a CheckpointSigned event of the log records."""
    return from_payload(CheckpointSigned, event.payload)


@dataclass(frozen=True, slots=True)
class Cosignatures:
    """What the witnesses said of one note: their signature lines, and who they are."""

    lines: tuple[str, ...] = ()
    cosigners: tuple[str, ...] = ()


class Witnesses(Protocol):
    """The witnesses a tree checkpoint is shown to before it is published."""

    def cosign(
        self,
        note: str,
        size: int,
        last_sizes: dict[str, int],
        proof: Callable[[int], list[bytes]],
    ) -> Cosignatures:
        """Each reachable witness's cosignature; an unreachable one is left out, never waited on.

        `last_sizes` is the size each witness cosigned last as far as the log knows (a hint:
        a witness that knows better answers 409 with its size), and `proof(old)` the
        consistency proof from that size to `size`.
        """
        ...


@dataclass(frozen=True, slots=True)
class TreeSigning:
    """What the service needs to sign tree checkpoints: the tree, the log's origin, witnesses."""

    tree: TreeStore
    origin: str
    witnesses: Witnesses | None = None


class CheckpointService:
    """Signs the log's head and records the checkpoint in the log itself."""

    def __init__(
        self,
        store: EventStore,
        clock: Callable[[], datetime],
        key: SigningKey,
        previous: SigningKey | None = None,
        tree: TreeSigning | None = None,
    ) -> None:
        self._store = store
        self._clock = clock
        self._key = key
        self._previous = previous
        self._tree = tree

    def sign_head(self, actor: Actor) -> CheckpointSigned | None:
        """Sign the head now and append the checkpoint; None while the log is empty."""
        head = self._head()
        if head is None:
            return None
        return self._sign(head, actor)

    def sign_if_due(self, actor: Actor) -> CheckpointSigned | None:
        """Sign the head unless nothing but a checkpoint was appended since the last one."""
        head = self._head()
        if head is None or head.type in CHECKPOINT_TYPES:
            return None
        last = self.latest()
        if last is not None and last.position >= head.position:
            # The last checkpoint signed this very head, and its own events are durable but
            # not yet placed by the sequencer (docs/scaling.md): signing again would record a
            # second checkpoint of the same head.
            return None
        return self._sign(head, actor)

    def latest(self) -> CheckpointSigned | None:
        """The log's last checkpoint, if any."""
        last = self._store.last_of_stream(STREAM)
        return None if last is None else from_recorded(last)

    def latest_tree(self) -> TreeCheckpointSigned | None:
        """The log's last tree checkpoint, if any."""
        last = self._store.last_of_stream(TREE_STREAM)
        return None if last is None else from_payload(TreeCheckpointSigned, last.payload)

    def _head(self) -> RecordedEvent | None:
        head = self._store.head()
        if head == 0:
            return None
        (event,) = self._store.read_all(head - 1, 1, upcast=False)
        return event

    def _sign(self, head: RecordedEvent, actor: Actor) -> CheckpointSigned:
        last = self._store.last_of_stream(STREAM)
        recorded_at = format_timestamp(to_utc(self._clock()))
        signed = message(head.position, head.hash, self._key.key_id, recorded_at)
        endorsement: str | None = None
        if last is not None:
            earlier = from_recorded(last)
            if earlier.key_id != self._key.key_id:
                if self._previous is None or self._previous.key_id != earlier.key_id:
                    raise CheckpointError(
                        f"the last checkpoint was signed by key {earlier.key_id}; give that key"
                        " as the previous signing key so that it endorses the new one"
                    )
                endorsement = self._previous.sign(signed)
        checkpoint = CheckpointSigned(
            format=FORMAT,
            position=head.position,
            head_hash=head.hash,
            recorded_at=recorded_at,
            key_id=self._key.key_id,
            public_key=self._key.public_key,
            signature=self._key.sign(signed),
            previous_key_signature=endorsement,
        )
        version = 0 if last is None else last.version
        event = NewEvent(CheckpointSigned.type, to_payload(checkpoint))  # type: ignore[arg-type]
        appends = [StreamAppend(STREAM, version, [event])]
        if self._tree is not None:
            appends.append(self._tree_append(self._tree, head))
        self._store.append(appends, actor.metadata())
        return checkpoint

    def _tree_append(self, signing: TreeSigning, head: RecordedEvent) -> StreamAppend:
        # The tree at exactly the head's size: integrate() may go past it if another
        # integrator ran meanwhile, which leaves the root at this size what it was.
        size = head.position
        integrate(self._store, signing.tree, up_to=size)
        tree_root = root(size, signing.tree)
        text = checkpoint_text(signing.origin, size, tree_root, head.hash)
        lines = [signature_line(signing.origin, self._key.private, text)]
        last = self._store.last_of_stream(TREE_STREAM)
        earlier = None if last is None else from_payload(TreeCheckpointSigned, last.payload)
        key_id = note_key_id(signing.origin, self._key.private).hex()
        if earlier is not None and earlier.key_id != key_id:
            previous = self._previous
            if previous is None or note_key_id(signing.origin, previous.private).hex() != (
                earlier.key_id
            ):
                raise CheckpointError(
                    f"the last tree checkpoint was signed by key {earlier.key_id}; give that key"
                    " as the previous signing key so that it signs the first note of the new one"
                )
            lines.append(signature_line(signing.origin, previous.private, text))
        cosignatures = Cosignatures()
        if signing.witnesses is not None:
            last_sizes = {} if earlier is None else dict.fromkeys(earlier.cosigners, earlier.size)
            cosignatures = signing.witnesses.cosign(
                signed_note(text, lines),
                size,
                last_sizes,
                lambda old: consistency_proof(old, size, signing.tree),
            )
        tree_checkpoint = TreeCheckpointSigned(
            origin=signing.origin,
            size=size,
            root_hash=base64.b64encode(tree_root).decode(),
            chain_head_hash=head.hash,
            key_id=key_id,
            note=signed_note(text, [*lines, *cosignatures.lines]),
            cosigners=cosignatures.cosigners,
        )
        event = NewEvent(TreeCheckpointSigned.type, to_payload(tree_checkpoint))  # type: ignore[arg-type]
        return StreamAppend(TREE_STREAM, 0 if last is None else last.version, [event])


def read_kept(lines: Iterable[str], source: str) -> list[CheckpointSigned]:
    """The checkpoints of a kept file's JSON lines; CheckpointError names a bad line."""
    found: list[CheckpointSigned] = []
    names = {field.name for field in fields(CheckpointSigned)}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            parsed = json.loads(line)
        except ValueError as error:
            raise CheckpointError(f"{source} line {number}: not JSON ({error})") from None
        if not isinstance(parsed, dict) or parsed.get("kind") != "checkpoint":
            raise CheckpointError(f"{source} line {number}: not a checkpoint")
        given = {k: v for k, v in parsed.items() if k != "kind"}
        if set(given) != names:
            raise CheckpointError(f"{source} line {number}: needs exactly {sorted(names)}")
        try:
            checkpoint = CheckpointSigned(**given)
            verify_signatures(checkpoint)
        except (TypeError, ValueError, CheckpointError) as error:
            raise CheckpointError(f"{source} line {number}: {error}") from None
        found.append(checkpoint)
    return found


def check_kept(
    kept: Sequence[CheckpointSigned],
    hash_at: Callable[[int], str | None],
    trusted: Sequence[str] = (),
    *,
    explained: Callable[[CheckpointSigned], str | None] | None = None,
    lost: list[str] | None = None,
) -> list[str]:
    """What is wrong between kept checkpoints and a log, one line each; empty if it extends them.

    The keys are followed in file order, as docs/verification.md says: the first key must be
    one of `trusted` (public keys as hex) or be endorsed by one, or, with none given, is
    trusted on first use; each later key must be endorsed by the key in use before it, which
    is then retired. `hash_at` is the log's hash at a position, or None where the log has no
    such event (a log cut short). A checkpoint the log no longer extends that `explained`
    accounts for (a recorded restore lost it) is reported in `lost` instead, in its words.
    """
    problems: list[str] = []
    chain = _KeyChain(tuple(trusted))
    for checkpoint in kept:
        try:
            chain.accept(checkpoint)
        except CheckpointError as error:
            problems.append(f"checkpoint at position {checkpoint.position}: {error}")
            continue
        found = hash_at(checkpoint.position)
        if found != checkpoint.head_hash and explained is not None and lost is not None:
            why = explained(checkpoint)
            if why is not None:
                lost.append(why)
                continue
        if found is None:
            problems.append(
                f"checkpoint at position {checkpoint.position}: the log has no such event;"
                " it was cut short after the checkpoint was signed"
            )
        elif found != checkpoint.head_hash:
            problems.append(
                f"checkpoint at position {checkpoint.position}: the log's hash there is"
                f" {found}, the signed head was {checkpoint.head_hash}; the log was rewritten"
            )
    return problems


class _KeyChain:
    """The signing keys trusted so far, followed through their rotations in file order."""

    def __init__(self, trusted: tuple[str, ...]) -> None:
        self._trusted = trusted
        self._current: str | None = None
        self._retired: set[str] = set()

    def accept(self, checkpoint: CheckpointSigned) -> None:
        """Take the checkpoint's key as current, or raise CheckpointError if it is not trusted."""
        verify_signatures(checkpoint)
        if checkpoint.key_id in self._retired:
            raise CheckpointError(f"key {checkpoint.key_id[:16]} was rotated out before this")
        if checkpoint.public_key == self._current:
            return
        if self._current is None and (not self._trusted or checkpoint.public_key in self._trusted):
            self._current = checkpoint.public_key
            return
        # A new key: the key in use before (or, at the start, a trusted key) must endorse it.
        endorsers = (self._current,) if self._current is not None else self._trusted
        for endorser in endorsers:
            try:
                verify_signatures(checkpoint, previous=endorser)
            except CheckpointError:
                continue
            self._retired.add(key_id(endorser))
            self._current = checkpoint.public_key
            return
        raise CheckpointError(
            f"key {checkpoint.key_id[:16]} is not trusted: neither "
            + ("a trusted key" if self._current is None else "the key in use before")
            + " endorses it with a valid previous_key_signature"
        )
