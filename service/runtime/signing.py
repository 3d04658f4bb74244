"""The checkpoint signing keys, loaded from a file or the environment, never the database."""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from domain.audit import CheckpointSigned
from events.store import EventStore
from service.application.checkpoints import (
    CheckpointError,
    CheckpointService,
    SigningKey,
    kept_line,
)
from service.runtime.settings import Settings, SettingsError


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


def checkpoint_service(
    settings: Settings, store: EventStore, clock: Callable[[], datetime]
) -> CheckpointService | None:
    """The checkpoint service over `store`, or None when no signing key is configured."""
    keys = signing_keys(settings)
    if keys is None:
        return None
    return CheckpointService(store, clock, keys[0], keys[1])


def write_key_file(path: Path, key: SigningKey) -> None:
    """Write a new key file readable by its owner alone; never overwrite one."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
    descriptor = os.open(path, flags, 0o600)
    with os.fdopen(descriptor, "w") as file:
        file.write(key.seed_hex() + "\n")


def publish(settings: Settings, checkpoint: CheckpointSigned) -> None:
    """Append the checkpoint to the settings' checkpoint file, if one is named."""
    if settings.checkpoint_file is None:
        return
    with settings.checkpoint_file.open("a") as file:
        file.write(kept_line(checkpoint) + "\n")
