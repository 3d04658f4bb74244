"""The checkpoint signing keys, loaded from a file or the environment, never the database."""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from domain.audit import CheckpointSigned, TreeCheckpointSigned
from events.merkle_store import TreeStore
from events.store import EventStore
from service.application.checkpoints import (
    CheckpointError,
    CheckpointService,
    SigningKey,
    TreeSigning,
    kept_line,
)
from service.application.tree_notes import EXAMPLE_ORIGIN
from service.runtime.settings import Settings, SettingsError
from service.runtime.witnesses import HttpWitnesses, Witness


def _load(file: Path | None, text: str | None, what: str) -> SigningKey | None:
    if file is not None:
        try:
            text = file.read_text()
        except OSError as error:
            raise SettingsError(f"cannot read the {what} file {file}: {error}") from error
    if text is None:
        return None
    try:
        return SigningKey.from_hex(text)
    except CheckpointError as error:
        raise SettingsError(f"the {what}: {error}") from error


def signing_keys(settings: Settings) -> tuple[SigningKey, SigningKey | None] | None:
    """The current and previous signing keys the settings name, or None if none is set."""
    key = _load(settings.signing_key_file, settings.signing_key, "signing key")
    previous = _load(
        settings.previous_signing_key_file, settings.previous_signing_key, "previous signing key"
    )
    if key is None:
        if previous is not None:
            raise SettingsError("a previous signing key is set, but no signing key")
        return None
    return key, previous


def log_origin(settings: Settings) -> str | None:
    """The origin the tree's notes are signed as; None when none is configured.

    The example origin names no real log, so two casinos using it could not be told apart by
    a witness or a verifier: it is refused outside demo mode, where it is the default.
    """
    origin = settings.log_origin
    if origin is None:
        return EXAMPLE_ORIGIN if settings.demo else None
    if origin == EXAMPLE_ORIGIN and not settings.demo:
        raise SettingsError(
            f"SHOEBOX_LOG_ORIGIN is the example origin {EXAMPLE_ORIGIN!r}; name this log"
            " (e.g. casino.example/shoebox) to sign tree checkpoints outside demo mode"
        )
    return origin


def checkpoint_service(
    settings: Settings,
    store: EventStore,
    clock: Callable[[], datetime],
    tree: TreeStore | None = None,
) -> CheckpointService | None:
    """The checkpoint service over `store`, or None when no signing key is configured.

    With a tree and an origin it signs the tree's notes too, showing them to the witnesses.
    """
    keys = signing_keys(settings)
    if keys is None:
        return None
    origin = log_origin(settings)
    signing = None
    if tree is not None and origin is not None:
        try:
            witnesses = [Witness.parse(url, vkey) for url, vkey in settings.witnesses]
        except ValueError as error:
            raise SettingsError(f"SHOEBOX_WITNESSES: {error}") from error
        signing = TreeSigning(tree, origin, HttpWitnesses(witnesses) if witnesses else None)
    return CheckpointService(store, clock, keys[0], keys[1], signing)


def write_key_file(path: Path, key: SigningKey) -> None:
    """Write a new key file readable by its owner alone; never overwrite one."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
    descriptor = os.open(path, flags, 0o600)
    with os.fdopen(descriptor, "w") as file:
        file.write(key.seed_hex() + "\n")


def publish_note(settings: Settings, tree_checkpoint: TreeCheckpointSigned | None) -> None:
    """Replace the note file, if one is named, with the latest tree checkpoint's note.

    Written to a temporary file and renamed, so a reader never sees half a note.
    """
    if settings.note_file is None or tree_checkpoint is None:
        return
    temporary = settings.note_file.with_name(settings.note_file.name + ".tmp")
    temporary.write_text(tree_checkpoint.note)
    os.replace(temporary, settings.note_file)


def publish(settings: Settings, checkpoint: CheckpointSigned) -> None:
    """Append the checkpoint to the settings' checkpoint file, if one is named."""
    if settings.checkpoint_file is None:
        return
    with settings.checkpoint_file.open("a") as file:
        file.write(kept_line(checkpoint) + "\n")
