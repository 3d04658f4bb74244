"""The figures every fault test records: sent, acknowledged, found in the log, lost."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from events.store import EventStore

# Set to a file to collect every fault test's figures as JSON lines (docs/reliability.md).
FIGURES_FILE = "SHOEBOX_FAULT_FIGURES"


@dataclass(frozen=True, slots=True)
class Figures:
    """One fault run: requests sent, 2xx answers, those found in the log, and the lost ones."""

    fault: str
    sent: int
    acknowledged: int
    found_in_log: int

    @property
    def lost(self) -> int:
        return self.acknowledged - self.found_in_log

    def record(self) -> None:
        """Append these figures to SHOEBOX_FAULT_FIGURES, if set; and require that none is lost."""
        target = os.environ.get(FIGURES_FILE)
        if target:
            with Path(target).open("a") as out:
                out.write(json.dumps({**asdict(self), "lost": self.lost}) + "\n")
        assert self.lost == 0, f"{self.fault}: {self.lost} acknowledged requests are not in the log"


def request_ids_in_log(store: EventStore) -> set[str]:
    """Every request id that appended something."""
    found: set[str] = set()
    position = 0
    while batch := store.read_all(position, 2_000, upcast=False):
        found.update(e.metadata.request_id for e in batch if e.metadata.request_id)
        position = batch[-1].position
    return found


def count_found(acknowledged: Iterable[str], store: EventStore) -> int:
    """How many of these request ids appended to the log."""
    in_log = request_ids_in_log(store)
    return sum(1 for request_id in acknowledged if request_id in in_log)
