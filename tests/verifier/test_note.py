"""The verifier's signed notes: the C2SP example, checkpoints, cosignatures, refusals."""

from __future__ import annotations

import base64
import hashlib

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
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
    open_checkpoint,
    witnessed_by,
)

# c2sp.org/signed-note, "Verifier keys", "Example".
EXAMPLE_VKEY = "example.com/foo+530d903a+AekyeRrm56hApGFkyQR4ZCbV54Id2LKaANYcrnKv3U2k"
EXAMPLE_NOTE = (
    "This is an example message.\n\n"
    "\u2014 example.com/foo Uw2QOkn8srV1yJGh2VYRlL1Tnagv1YEq6TfXppzi2ONncAlTgK7Ztg1ERYNZXsYjOBH3"
    "mFXmRKuwHjG1Yu72IneyaQM=\n"
)


def _key(name: str, kind: int = ED25519) -> tuple[Ed25519PrivateKey, VerifierKey]:
    private = Ed25519PrivateKey.from_private_bytes(hashlib.sha256(name.encode()).digest())
    public = private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    return private, VerifierKey(name, key_id(name, kind, public), kind, public)


def _sign(text: str, name: str) -> Signature:
    private, key = _key(name)
    return Signature(name, key.id, private.sign(text.encode()))


def _cosign(text: str, name: str, timestamp: int) -> Signature:
    private, key = _key(name, COSIGNATURE_V1)
    raw = timestamp.to_bytes(8, "big") + private.sign(cosigned_message(text, timestamp))
    return Signature(name, key.id, raw)


def test_the_specifications_example_note_verifies_with_its_example_key() -> None:
    key = VerifierKey.parse(EXAMPLE_VKEY)
    assert key.encode() == EXAMPLE_VKEY
    note = Note.parse(EXAMPLE_NOTE)
    assert note.text == "This is an example message.\n"
    assert note.verified_by([key]) == [key]
    assert note.encode() == EXAMPLE_NOTE


def test_a_changed_text_fails_and_an_unknown_key_is_ignored() -> None:
    key = VerifierKey.parse(EXAMPLE_VKEY)
    with pytest.raises(NoteError, match="does not verify"):
        Note.parse(EXAMPLE_NOTE.replace("example", "exemplary", 1)).verified_by([key])
    _, stranger = _key("example.com/bar")
    assert Note.parse(EXAMPLE_NOTE).verified_by([stranger]) == []


def test_a_vkey_whose_id_does_not_match_its_key_is_refused() -> None:
    with pytest.raises(NoteError, match="id does not match"):
        VerifierKey.parse(EXAMPLE_VKEY.replace("530d903a", "530d903b"))


def test_a_checkpoint_signed_by_the_log_opens_and_a_flipped_size_does_not() -> None:
    root = hashlib.sha256(b"root").digest()
    text = TreeCheckpoint("casino.example/shoebox", 42, root, ("chain-head abc",)).text()
    note = Note(text, (_sign(text, "casino.example/shoebox"),)).encode()
    _, log_key = _key("casino.example/shoebox")
    _, checkpoint = open_checkpoint(note, [log_key], origin="casino.example/shoebox")
    assert (checkpoint.size, checkpoint.root) == (42, root)
    assert checkpoint.extension("chain-head ") == "abc"
    with pytest.raises(NoteError):
        open_checkpoint(note.replace("\n42\n", "\n43\n"), [log_key])
    with pytest.raises(NoteError, match="origin"):
        open_checkpoint(note, [log_key], origin="other.example/log")


def test_an_unknown_second_signature_line_is_passed_over() -> None:
    # Room for a second algorithm: a line from a key the verifier does not know (here an
    # ML-DSA-sized blob) changes nothing for a verifier that knows only Ed25519.
    root = hashlib.sha256(b"root").digest()
    text = TreeCheckpoint("casino.example/shoebox", 7, root, ()).text()
    future = Signature("casino.example/shoebox", b"\x00\x01\x02\x03", b"\x07" * 2420)
    note = Note(text, (_sign(text, "casino.example/shoebox"), future)).encode()
    _, log_key = _key("casino.example/shoebox")
    open_checkpoint(note, [log_key])


def test_witness_cosignatures_count_toward_a_quorum() -> None:
    root = hashlib.sha256(b"root").digest()
    text = TreeCheckpoint("casino.example/shoebox", 9, root, ()).text()
    lines = (
        _sign(text, "casino.example/shoebox"),
        _cosign(text, "witness.example/a", 1_700_000_000),
        _cosign(text, "witness.example/b", 1_700_000_001),
    )
    note = Note.parse(Note(text, lines).encode())
    witnesses = [_key(n, COSIGNATURE_V1)[1] for n in ("witness.example/a", "witness.example/b")]
    assert len(witnessed_by(note, witnesses, quorum=2)) == 2
    third = _key("witness.example/c", COSIGNATURE_V1)[1]
    with pytest.raises(NoteError, match="2 of the trusted witnesses"):
        witnessed_by(note, [*witnesses, third], quorum=3)
    forged = Signature(lines[1].name, lines[1].id, (1).to_bytes(8, "big") + lines[1].signature[8:])
    with pytest.raises(NoteError, match="does not verify"):
        witnessed_by(Note(text, (lines[0], forged)), witnesses, quorum=1)


@pytest.mark.parametrize(
    "raw",
    [
        "no blank line\n\u2014 a " + base64.b64encode(b"12345").decode() + "\n",
        "text\n\n\u2014 a not-base64!\n",
        "text\n\n- a " + base64.b64encode(b"12345").decode() + "\n",
        "text\n\n\u2014 a " + base64.b64encode(b"123").decode() + "\n",
        "text\x07\n\n\u2014 a " + base64.b64encode(b"12345").decode() + "\n",
        "text\n\n",
    ],
)
def test_malformed_notes_are_refused(raw: str) -> None:
    with pytest.raises(NoteError):
        Note.parse(raw)


@pytest.mark.parametrize(
    "text",
    ["origin\n042\n" + base64.b64encode(b"r" * 32).decode() + "\n", "origin\n1\nAAAA\n", "o\n1\n"],
)
def test_malformed_checkpoint_texts_are_refused(text: str) -> None:
    with pytest.raises(NoteError):
        TreeCheckpoint.parse(text)
