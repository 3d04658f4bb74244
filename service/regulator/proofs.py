"""Proofs of the log's Merkle tree: one event's inclusion, two sizes' consistency, one round.

A round's events are (docs/verification.md, "Proving one round"): the round's table events,
its players' wallet events for the round, and its shoe's ShoeOpened and, once the shoe has
retired, ShoeRevealed. A round's proof holds each of them as the leaf's own bytes with a
c2sp.org/tlog-proof against the tree checkpoint of the size asked for, so it is one
self-contained document that never changes once made: a player's advocate verifies it
offline with `shoebox-verify proof`, and replays the round's cards from what it holds.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from psycopg import sql

from domain.audit import TreeCheckpointSigned
from domain.payloads import from_payload
from domain.round import CardDrawn, RoundOpened
from domain.table import ShoeOpened, ShoeRevealed
from events.merkle import inclusion_proof
from events.merkle_store import TreeStore, leaf_entry
from events.postgres import EVENT_COLUMNS, Pool, event_rows
from events.store import EventStore, RecordedEvent
from service.application.read_models.queries import ProjectionService
from service.application.streams import table_stream, wallet_stream
from service.regulator.replay import NotInLogError, find_shoe

ROUND_PROOF_FORMAT: Final = "shoebox-round-proof/1"
TLOG_PROOF_HEADER: Final = "c2sp.org/tlog-proof@v1"


class ProofUnavailableError(LookupError):
    """The tree or a checkpoint cannot prove this yet (a size not integrated or not signed)."""


@dataclass(frozen=True, slots=True)
class RoundEvidence:
    """A round's events, who played in it, and whether its shoe's seed is public yet."""

    round_id: str
    events: list[RecordedEvent]
    players: list[str]
    shoe_revealed: bool


def _round_table(round_id: str) -> str:
    table_id, _, number = round_id.rpartition("-")
    if not table_id or not number.isdigit():
        raise NotInLogError(f"{round_id!r} is not a round id")
    return table_id


def round_evidence(
    store: EventStore, round_id: str, read_models: ProjectionService | None = None
) -> RoundEvidence:
    """The events that make up a round, as recorded, in log order."""
    table_events = [
        e
        for e in store.read_stream(table_stream(_round_table(round_id)), upcast=False)
        if e.payload.get("round_id") == round_id
    ]
    if not table_events:
        raise NotInLogError(f"no round {round_id} in the log")
    players: set[str] = set()
    for event in table_events:
        if event.type == RoundOpened.type:
            participants = event.payload["participants"]
            assert isinstance(participants, list)
            players.update(str(pair[1]) for pair in participants if isinstance(pair, list))
        elif "player_id" in event.payload:
            players.add(str(event.payload["player_id"]))
    wallet_events = [
        e
        for player in sorted(players)
        for e in store.read_stream(wallet_stream(player), upcast=False)
        if e.payload.get("round_id") == round_id
    ]
    shoe_ids = {
        str(e.payload["shoe_id"])
        for e in table_events
        if e.type in (RoundOpened.type, CardDrawn.type) and "shoe_id" in e.payload
    }
    shoe_events: list[RecordedEvent] = []
    revealed = bool(shoe_ids)
    for shoe_id in sorted(shoe_ids):
        record = find_shoe(store, shoe_id, read_models)
        mine = [e for e in record.events if e.type in (ShoeOpened.type, ShoeRevealed.type)]
        shoe_events.extend(mine)
        revealed = revealed and any(e.type == ShoeRevealed.type for e in mine)
    by_position = {e.position: e for e in [*table_events, *wallet_events, *shoe_events]}
    return RoundEvidence(
        round_id, [by_position[p] for p in sorted(by_position)], sorted(players), revealed
    )


# Through events_tree_checkpoint_size (migration 0040): one index probe, however many
# checkpoints the log holds.
_TREE_CHECKPOINT_AT: Final = sql.SQL(
    "SELECT {columns} FROM events WHERE type = {type}"
    " AND (payload ->> 'size')::bigint = %s ORDER BY position LIMIT 1"
).format(columns=sql.SQL(EVENT_COLUMNS), type=sql.Literal(TreeCheckpointSigned.type))


def tree_checkpoint_at(store: EventStore, pool: Pool | None, size: int) -> TreeCheckpointSigned:
    """The tree checkpoint signed at exactly `size`.

    Without a pool (the in-memory wiring of the unit tests) the log's tree checkpoints are
    scanned, which is fine for a log that small.
    """
    found: RecordedEvent | None = None
    if pool is not None:
        with pool.connection() as conn:
            cursor = conn.cursor(row_factory=event_rows)
            found = cursor.execute(_TREE_CHECKPOINT_AT, (size,)).fetchone()
    else:
        after = 0
        while found is None:
            batch = store.read_all(after, 1000, types=[TreeCheckpointSigned.type], upcast=False)
            if not batch:
                break
            found = next((e for e in batch if e.payload.get("size") == size), None)
            after = batch[-1].position
    if found is None:
        raise ProofUnavailableError(f"no tree checkpoint was signed at size {size}")
    return from_payload(TreeCheckpointSigned, found.payload)


def tlog_proof(index: int, entry: bytes, proof: Sequence[bytes], note: str) -> str:
    """One entry's proof in the c2sp.org/tlog-proof format, the entry itself as its extra."""
    lines = [
        TLOG_PROOF_HEADER,
        "extra " + base64.b64encode(entry).decode(),
        f"index {index}",
        *(base64.b64encode(element).decode() for element in proof),
    ]
    return "\n".join(lines) + "\n\n" + note


def round_proof(
    store: EventStore,
    tree: TreeStore,
    evidence: RoundEvidence,
    checkpoint: TreeCheckpointSigned,
) -> dict[str, Any]:
    """The round's events, each with its inclusion proof against this tree checkpoint."""
    size = checkpoint.size
    round_id = evidence.round_id
    late = [e.position for e in evidence.events if e.position > size]
    if late:
        raise ProofUnavailableError(
            f"the checkpoint of size {size} precedes the round's event at position {late[0]};"
            " ask with the size of a later checkpoint"
        )
    if tree.size() < size:
        raise ProofUnavailableError(f"the tree holds {tree.size()} leaves, fewer than {size}")
    entries = []
    for event in evidence.events:
        entry = leaf_entry(event)
        proof = inclusion_proof(event.position - 1, size, tree)
        entries.append(
            {
                "position": event.position,
                "event": entry.decode(),
                "tlog_proof": tlog_proof(event.position - 1, entry, proof, checkpoint.note),
            }
        )
    return {
        "format": ROUND_PROOF_FORMAT,
        "round_id": round_id,
        "size": size,
        "checkpoint": checkpoint.note,
        "entries": entries,
    }
