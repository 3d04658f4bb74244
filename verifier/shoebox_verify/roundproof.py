"""`shoebox-verify proof FILE --key VKEY`: one round, proved and replayed, with no database.

A round's proof (GET /v1/rounds/{id}/proof?size=N) is a JSON document holding the signed tree
checkpoint of size N and, for each event of the round, the event's canonical bytes and a
c2sp.org/tlog-proof of its inclusion. This module checks, step by step:

1. the checkpoint is signed by a trusted log key (and, if asked, cosigned by k of n witnesses);
2. every entry's tlog-proof names the same checkpoint, holds the entry's bytes as its extra,
   sits at index position - 1, and its inclusion proof leads to the checkpoint's root;
3. the events are one round's (their round id), and, once the shoe's seed is revealed, its
   commitment matches, every card drawn is the shuffled shoe's card at its position, the
   tableau is the one the rules deal, and every settlement is what the rules pay.

It trusts nothing the server computed: not the hash chain's fields, not the positions beyond
what the proofs bind, and not the outcome or payouts the events claim.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from shoebox_verify import rules
from shoebox_verify.merkle import MerkleProofError, check_inclusion, hash_leaf
from shoebox_verify.note import (
    NoteError,
    TreeCheckpoint,
    VerifierKey,
    open_checkpoint,
    witnessed_by,
)
from shoebox_verify.shoe import SeedError, commitment, shuffle
from shoebox_verify.strictjson import BadJsonError, loads_line

FORMAT = "shoebox-round-proof/1"
TLOG_HEADER = "c2sp.org/tlog-proof@v1"


class RoundProofError(ValueError):
    """A round proof that is malformed or does not prove what it claims."""


@dataclass
class RoundReport:
    """What the proof showed: the round, its coup and its settlements, and any note."""

    round_id: str
    size: int
    events: list[dict[str, Any]]
    lines: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _tlog_proof(text: str) -> tuple[bytes, int, list[bytes], str]:
    head, separator, note = text.partition("\n\n")
    if not separator:
        raise RoundProofError("a tlog-proof is its lines, a blank line, then the checkpoint")
    lines = head.split("\n")
    if lines[0] != TLOG_HEADER:
        raise RoundProofError(f"a tlog-proof starts with {TLOG_HEADER}")
    if len(lines) < 3 or not lines[1].startswith("extra ") or not lines[2].startswith("index "):
        raise RoundProofError("a round's tlog-proof carries its entry as extra, then its index")
    try:
        extra = base64.b64decode(lines[1][6:], validate=True)
        index_text = lines[2][6:]
        index = int(index_text)
        if str(index) != index_text or index < 0:
            raise ValueError(index_text)
        hashes = [base64.b64decode(line, validate=True) for line in lines[3:]]
    except (ValueError, binascii.Error) as error:
        raise RoundProofError(f"a tlog-proof line is malformed: {error}") from None
    return extra, index, hashes, note


def check_round_proof(
    document: str,
    log_keys: Sequence[VerifierKey],
    witness_keys: Sequence[VerifierKey] = (),
    quorum: int = 0,
) -> RoundReport:
    """Check a round's proof; RoundProofError says the first thing that is wrong."""
    try:
        bundle = json.loads(document)
    except ValueError as error:
        raise RoundProofError(f"not JSON: {error}") from None
    if not isinstance(bundle, dict) or bundle.get("format") != FORMAT:
        raise RoundProofError(f"not a {FORMAT} document")
    try:
        note, checkpoint = open_checkpoint(str(bundle["checkpoint"]), log_keys)
        if quorum:
            witnessed_by(note, witness_keys, quorum)
    except (NoteError, KeyError) as error:
        raise RoundProofError(f"the checkpoint: {error}") from None
    if checkpoint.size != bundle.get("size"):
        raise RoundProofError("the document's size is not its checkpoint's")
    entries = bundle.get("entries")
    if not isinstance(entries, list) or not entries:
        raise RoundProofError("the proof holds no events")
    events = [
        _entry(number, entry, checkpoint, bundle["checkpoint"])
        for number, entry in enumerate(entries)
    ]
    round_id = bundle.get("round_id")
    report = RoundReport(str(round_id), checkpoint.size, events)
    _replay(report)
    return report


def _entry(number: int, entry: Any, checkpoint: TreeCheckpoint, note: str) -> dict[str, Any]:
    where = f"entry {number}"
    if not isinstance(entry, dict):
        raise RoundProofError(f"{where}: not an object")
    raw = entry.get("event")
    if not isinstance(raw, str):
        raise RoundProofError(f"{where}: no event")
    entry_bytes = raw.encode()
    extra, index, hashes, proof_note = _tlog_proof(str(entry.get("tlog_proof")))
    if extra != entry_bytes:
        raise RoundProofError(f"{where}: the tlog-proof's extra is not the event")
    if proof_note != note:
        raise RoundProofError(f"{where}: the tlog-proof names another checkpoint")
    try:
        check_inclusion(index, checkpoint.size, hash_leaf(entry_bytes), hashes, checkpoint.root)
    except MerkleProofError as error:
        raise RoundProofError(f"{where}: {error}") from None
    try:
        event = loads_line(entry_bytes)
    except BadJsonError as error:
        raise RoundProofError(f"{where}: the event is not canonical JSON: {error}") from None
    if not isinstance(event, dict) or event.get("position") != index + 1:
        raise RoundProofError(f"{where}: the event's position is not its leaf's index + 1")
    if entry.get("position") != index + 1:
        raise RoundProofError(f"{where}: the entry's position is not its leaf's")
    return event


def _replay(report: RoundReport) -> None:
    # The round's own events name the round; the shoe's name only the shoe.
    round_events = [e for e in report.events if e["payload"].get("round_id") is not None]
    if any(e["payload"]["round_id"] != report.round_id for e in round_events):
        raise RoundProofError("an event of another round is in the proof")
    by_type: dict[str, list[dict[str, Any]]] = {}
    for event in report.events:
        by_type.setdefault(str(event["type"]), []).append(event)
    opened = by_type.get("ShoeOpened", [])
    revealed = by_type.get("ShoeRevealed", [])
    drawn = by_type.get("CardDrawn", [])
    report.lines.append(
        f"round {report.round_id}: {len(report.events)} events proved in tree size {report.size}"
    )
    if not drawn:
        report.notes.append("no card was drawn in this round")
        return
    if not opened:
        raise RoundProofError("the round's shoe's ShoeOpened is not in the proof")
    shoe = opened[0]["payload"]
    if not revealed:
        report.notes.append(
            "the shoe is not revealed yet: the cards cannot be checked from its seed"
        )
        return
    seed = str(revealed[0]["payload"]["server_seed"])
    if commitment(seed) != shoe["server_seed_hash"]:
        raise RoundProofError("the revealed seed does not match the shoe's commitment")
    try:
        cards = shuffle(
            seed, str(shoe["client_seed"]), int(shoe["nonce"]), int(shoe["decks"])
        ).cards
    except SeedError as error:
        raise RoundProofError(f"the shoe cannot be shuffled: {error}") from None
    first = min(int(e["payload"]["position"]) for e in drawn)
    coup = rules.deal(lambda p: cards[p] if 0 <= p < len(cards) else None, first)
    dealt = [
        (str(e["payload"]["hand"]), int(e["payload"]["position"]), str(e["payload"]["card"]))
        for e in drawn
    ]
    expected = [(str(s[1]), int(str(s[2])), str(s[3])) for s in coup.steps if s[0] == "card"]
    if dealt != expected:
        raise RoundProofError(f"the cards drawn {dealt} are not the shoe's {expected}")
    report.lines.append(
        "cards: " + " ".join(f"{hand}:{card}@{position}" for hand, position, card in dealt)
    )
    completed = by_type.get("CoupCompleted", [])
    if completed:
        outcome = completed[0]["payload"]["outcome"]
        if outcome != coup.outcome:
            raise RoundProofError(f"the coup claims {outcome}, the rules deal {coup.outcome}")
        report.lines.append(f"outcome: {outcome} ({coup.player_total} to {coup.banker_total})")
    for settled in by_type.get("BetSettled", []):
        payload = settled["payload"]
        payout, commission = rules.settle(str(payload["spot"]), int(payload["stake"]), coup.outcome)
        if (payout, commission) != (payload["payout"], payload["commission"]):
            raise RoundProofError(
                f"{payload['player_id']}'s {payload['spot']} bet of {payload['stake']} pays"
                f" {payout} (commission {commission}), not {payload['payout']}"
            )
        report.lines.append(
            f"seat {payload['seat']} {payload['player_id']}: {payload['spot']} {payload['stake']}"
            f" -> {payout} (commission {commission})"
        )
