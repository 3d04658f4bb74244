"""The demo API keys: one a role, kept in the data dir so that a restart reuses them.

`shoebox run` prints them; in demo mode `shoebox serve` makes sure they exist before its
workers start, and the /play page's backend (service/web/pages) acts with the frontend and
ops keys on the browser's behalf, so the browser never holds one.
"""

from __future__ import annotations

import getpass
import json
import logging
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

DEMO_KEYS_FILE: Final = "demo-keys.json"
DEMO_KEY_PREFIX: Final = "demo-"

log = logging.getLogger("shoebox.demo")


@dataclass(frozen=True, slots=True)
class DemoKey:
    """A demo API key: its id, role and secret."""

    key_id: str
    role: str
    secret: str


def demo_keys_path(data_dir: Path) -> Path:
    """Where the demo keys of a data dir are kept (mode 0600)."""
    return data_dir / DEMO_KEYS_FILE


def ensure_demo_keys(db_url: str, data_dir: Path) -> list[DemoKey]:
    """A live demo key for each role: reused from the data dir's key file, or created anew.

    Reusing keeps the log from growing three more live keys at every start, and keeps commands
    copied from an earlier run working; the file is readable by its owner alone, as the data
    dir's database already is. A key that this database does not know, or has revoked, is
    replaced.
    """
    # Imported here: only demo mode needs the store and the key ring this early.
    from events.postgres import PostgresEventStore, open_pool
    from events.store import EventMetadata
    from service.application.keys import Role, create_key, hash_key, list_keys
    from service.application.upcasters import upcasters

    path = demo_keys_path(data_dir)
    stored = {key.role: key for key in read_demo_keys(path)}
    metadata = EventMetadata(actor=f"cli:{getpass.getuser()}", role="cli")
    keys: list[DemoKey] = []
    with open_pool(db_url, max_size=1) as pool:
        store = PostgresEventStore(pool, upcasters=upcasters())
        live = {key.key_id: key for key in list_keys(store) if not key.revoked}
        for role in Role:
            candidate = stored.get(role.value)
            known = live.get(candidate.key_id) if candidate is not None else None
            if (
                candidate is not None
                and known is not None
                and known.role is role
                and known.key_sha256 == hash_key(candidate.secret)
            ):
                keys.append(candidate)
                continue
            issued = create_key(store, f"{DEMO_KEY_PREFIX}{role.value}", role, metadata)
            keys.append(DemoKey(issued.key.key_id, role.value, issued.secret))
    _write_keys(path, keys)
    return keys


def demo_keys_by_role(data_dir: Path) -> Mapping[str, DemoKey]:
    """The data dir's demo keys by role name; empty when there are none."""
    return {key.role: key for key in read_demo_keys(demo_keys_path(data_dir))}


def read_demo_keys(path: Path) -> Iterator[DemoKey]:
    """The keys a demo key file holds; nothing if it is missing or unreadable."""
    try:
        entries = json.loads(path.read_text())
    except FileNotFoundError:
        return
    except (OSError, ValueError) as error:
        log.warning("ignoring %s: %s", path, error)
        return
    if not isinstance(entries, list):
        return
    for entry in entries:
        if isinstance(entry, dict) and all(
            isinstance(entry.get(field), str) for field in ("key_id", "role", "secret")
        ):
            yield DemoKey(entry["key_id"], entry["role"], entry["secret"])


def _write_keys(path: Path, keys: list[DemoKey]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(
        [{"key_id": k.key_id, "role": k.role, "secret": k.secret} for k in keys], indent=2
    )
    # Created 0600 before any secret is written, then moved into place in one step.
    scratch = path.with_name(path.name + ".new")
    scratch.unlink(missing_ok=True)
    descriptor = os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as file:
        file.write(text + "\n")
    os.replace(scratch, path)
