"""Verifying an export in two streaming passes, with memory bounded by what is open.

Pass 1 reads the header, the shoe, wallet and checkpoint lines (few and small) and the ids of
voided rounds; it does not decode event lines that start `{"kind":"event"`. Pass 2 walks the
events in order: the hash chain and the header's promises, every card against its re-derived
shoe, every coup against the tableau, every settlement against the payout rules, and the money
between tables and wallets. It keeps only open rounds (dropped once finished and balanced),
the shoes' dealing state, a few derived shoes, and one state per wallet and stream.
"""

from __future__ import annotations

import hashlib
import os
import sys
import time
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any, Final

from shoebox_verify import checkpoints as cp
from shoebox_verify import rules
from shoebox_verify.events import EVENT_TYPES
from shoebox_verify.export import (
    DOCUMENT_KEYS,
    EVENT_KEYS,
    EXPORT_FORMAT,
    METADATA_KEYS,
    DamagedError,
    Fields,
    Header,
    ShoeLine,
    WalletLine,
    WalletState,
    read_header,
    read_object,
    read_shoe,
    read_wallet,
)
from shoebox_verify.seamless import SeamlessMoney
from shoebox_verify.shoe import POINTS, SeedError, Shoe, check_parameters, commitment, shuffle
from shoebox_verify.strictjson import BadJsonError, canonical_json
from shoebox_verify.upcasting import UnknownSchemaError, upcast

_EVENT_PREFIX = b'{"kind":"event"'
_HANDS = (rules.PLAYER, rules.BANKER)
_MIN_CARDS_TO_START = 6
_DERIVED_SHOES_KEPT = 16
_PROGRESS_EVERY = 8192  # lines between looks at the clock


@dataclass(frozen=True, slots=True)
class Finding:
    """One thing in the export that does not follow from the rest and the rules."""

    check: str
    where: str
    detail: str

    def __str__(self) -> str:
        return f"{self.check}: {self.where}: {self.detail}"


@dataclass(slots=True)
class Report:
    """What was checked, what was wrong, and what could not be proved either way."""

    events: int = 0
    shoes: int = 0
    shoes_unrevealed: int = 0
    coups: int = 0
    cards: int = 0
    cards_unrevealed: int = 0
    settlements: int = 0
    credits: int = 0
    wallets: int = 0
    checkpoints: int = 0
    findings: list[Finding] = field(default_factory=list)
    finding_count: int = 0
    notes: list[str] = field(default_factory=list)
    max_findings: int = 1000

    @property
    def ok(self) -> bool:
        """Whether nothing was found wrong."""
        return self.finding_count == 0

    def add(self, check: str, where: str, detail: str) -> None:
        """Record a finding (the first `max_findings` are kept, all are counted)."""
        self.finding_count += 1
        if len(self.findings) < self.max_findings:
            self.findings.append(Finding(check, where, detail))

    def summary(self) -> str:
        """One line of counts."""
        return (
            f"{self.events} events, {self.shoes} shoes ({self.shoes_unrevealed} not yet "
            f"revealed), {self.coups} coups, {self.cards} cards ({self.cards_unrevealed} from "
            f"unrevealed shoes), {self.settlements} settlements, {self.credits} credits, "
            f"{self.wallets} wallets, {self.checkpoints} checkpoints"
        )


_OWED_TO_SEAMLESS: Final = ("return", "credit", "reverse")
"""Obligations that for a seamless player are calls to their operator's wallet."""


@dataclass(slots=True)
class _Round:
    """What the slice has shown of one round so far."""

    table_id: str
    round_id: str
    opened: bool = False  # RoundOpened is in the slice: every bet of it is too
    table_seen: bool = False
    live: dict[tuple[str, str], int] = field(default_factory=dict)
    settled: dict[tuple[str, str], tuple[int, int, int]] = field(default_factory=dict)
    reversed: set[tuple[str, str]] = field(default_factory=set)
    # What the table recorded (+) and the wallets recorded (-): zero when they agree.
    owed: dict[tuple[Any, ...], int] = field(default_factory=dict)
    wallet_open: int = 0
    shoe_id: str | None = None
    first_position: int | None = None
    steps: list[tuple[Any, ...]] = field(default_factory=list)
    outcome: str | None = None
    finished: str | None = None
    last_position: int = 0

    @property
    def where(self) -> str:
        return f"round {self.round_id} (table {self.table_id})"

    def owe(self, key: tuple[Any, ...], amount: int) -> None:
        left = self.owed.get(key, 0) + amount
        if left:
            self.owed[key] = left
        else:
            self.owed.pop(key, None)


@dataclass(slots=True)
class _ShoeState:
    line: ShoeLine | None
    valid: bool = False  # revealed and its seed checks out: cards can be compared
    next_position: int | None = None
    coups: int | None = None


@dataclass(slots=True)
class _Wallet:
    line: WalletLine | None
    available: int
    reserved: int
    open_stakes: dict[tuple[str, str, str], int]
    seen: bool = False


class _Progress:
    """Progress on stderr every second or so, when asked or when stderr is a terminal."""

    def __init__(self, path: str, enabled: bool | None, stream: IO[str]) -> None:
        self._size = max(os.path.getsize(path), 1)
        self._stream = stream
        self._tty = stream.isatty()
        self.enabled = self._tty if enabled is None else enabled
        self._next = time.monotonic() + 1.0
        self._shown = False

    def tick(self, phase: str, offset: int, line: int) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if now < self._next:
            return
        self._next = now + 1.0
        message = f"shoebox-verify: {phase}: {100 * offset // self._size}% (line {line:,})"
        if self._tty:
            self._stream.write("\r" + message)
        else:
            self._stream.write(message + "\n")
        self._stream.flush()
        self._shown = True

    def done(self) -> None:
        if self._shown and self._tty:
            self._stream.write("\n")
            self._stream.flush()


def _lines(file: IO[bytes]) -> Iterator[tuple[int, bytes]]:
    yield from enumerate(file, start=1)


@dataclass(frozen=True, slots=True)
class _Restore:
    """A `LogRestored` in the slice: the log was restored to an earlier point, then resumed."""

    position: int  # of the LogRestored event itself
    last_position_kept: int
    last_checkpoint_position: int | None
    last_checkpoint_hash: str | None
    restored_at: str
    reason: str
    # Where recovery itself ended: the events after it, to last_position_kept, were placed
    # afresh from appends the recovery kept unsequenced (absent in older records: no such).
    recovered_head: int

    def lost(self, position: int, recorded_at: str | None) -> str | None:
        """Why a kept checkpoint the log no longer extends was lost by this restore, if it was.

        Only a checkpoint past the last position kept, and signed before the restore: one
        signed since was signed over the restored log, which must extend it.
        """
        if recorded_at is None or position <= self.recovered_head:
            return None
        if not recorded_at < self.restored_at:  # fixed-width UTC: text order is time order
            return None
        extends = (
            "no checkpoint"
            if self.last_checkpoint_position is None
            else f"the checkpoint at {self.last_checkpoint_position}"
        )
        return (
            f"checkpoint at position {position}: LOST by the restore recorded at position"
            f" {self.position} ({self.restored_at}: the log was restored to position"
            f" {self.recovered_head}, extending {extends}; reason: {self.reason})"
        )


class Verifier:
    """One verification of one export file."""

    def __init__(
        self,
        path: str,
        *,
        checkpoint_file: str | None = None,
        trusted_keys: tuple[bytes, ...] = (),
        progress: bool | None = None,
        progress_stream: IO[str] | None = None,
        max_findings: int = 1000,
    ) -> None:
        self.path = path
        self.report = Report(max_findings=max_findings)
        self._checkpoint_file = checkpoint_file
        self._trusted_keys = trusted_keys
        self._progress = _Progress(path, progress, progress_stream or sys.stderr)
        self._header: Header | None = None
        self._shoe_lines: dict[str, ShoeLine] = {}
        self._wallet_lines: dict[str, WalletLine] = {}
        self._export_checkpoints: list[tuple[int, cp.Checkpoint]] = []
        self._voided: set[tuple[str, str]] = set()
        self._event_lines = 0
        # Pass 2 state.
        self._expected_position: int | None = None
        self._prev_hash: str | None = None
        self._last_position: int | None = None
        self._versions: dict[str, int] = {}
        self._last_metadata: dict[str, Any] | None = None
        self._last_recorded_at: str | None = None
        self._run_start = 0  # the position where the last append (as far as can be told) began
        self._rounds: dict[tuple[str, str], _Round] = {}
        self._shoes: dict[str, _ShoeState] = {}
        # Each published commitment and the shoe that published it: a seed deals one shoe.
        self._commitments: dict[str, str] = {}
        self._derived: OrderedDict[str, Shoe] = OrderedDict()
        self._named_shoes: set[str] = set()
        self._wallets: dict[str, _Wallet] = {}
        # Players of seamless operators seen in the slice: their stakes are checked against
        # their debits; their wins and rollbacks are calls to the operator's wallet, which
        # reconciliation checks (docs/wallets.md), not this file.
        self._seamless: set[str] = set()
        # Their wins and rollbacks, derived from the table's events and held to their
        # confirmations (shoebox_verify/seamless.py).
        self._money = SeamlessMoney(self.report.add)
        # Position -> (who signed it, the head signed, and when for a kept checkpoint, which a
        # recorded restore may have lost; None for one no restore can excuse).
        self._expected_hashes: dict[int, list[tuple[str, str, str | None]]] = {}
        self._restores: list[_Restore] = []
        self._table_stream = ""
        self._first_is_table = False
        self._last_is_table = False

    # The two passes.

    def run(self) -> Report:
        """Verify the export; DamagedError if it cannot be read."""
        try:
            self._index()
            self._prepare()
            self._walk()
            self._finish()
        finally:
            self._progress.done()
        return self.report

    def _index(self) -> None:
        # Events are contiguous: shoe and wallet lines go after them (or, a proposed order,
        # before them), never in between.
        events_seen = trailer = False
        with open(self.path, "rb") as file:
            for number, raw in _lines(file):
                if number % _PROGRESS_EVERY == 0:
                    self._progress.tick("pass 1 of 2", file.tell(), number)
                if number == 1:
                    self._header = read_header(read_object(raw, 1), 1)
                    continue
                if not raw.strip():
                    continue
                if raw.startswith(_EVENT_PREFIX):
                    self._index_event(raw, number, trailer)
                    events_seen = True
                    continue
                document = read_object(raw, number)
                kind = document["kind"]
                if kind == "event":
                    self._index_event(raw, number, trailer)
                    events_seen = True
                elif kind == "shoe":
                    trailer = events_seen
                    shoe = read_shoe(document, number)
                    if shoe.shoe_id in self._shoe_lines:
                        self.report.add("format", f"line {number}", f"shoe {shoe.shoe_id} twice")
                    self._shoe_lines[shoe.shoe_id] = shoe
                elif kind == "wallet":
                    trailer = events_seen
                    wallet = read_wallet(document, number)
                    if wallet.player_id in self._wallet_lines:
                        self.report.add(
                            "format", f"line {number}", f"wallet {wallet.player_id} twice"
                        )
                    self._wallet_lines[wallet.player_id] = wallet
                elif kind == "checkpoint":
                    try:
                        self._export_checkpoints.append((number, cp.parse(document)))
                    except cp.CheckpointError as error:
                        raise DamagedError(number, f"checkpoint: {error}") from None
                elif kind == "header":
                    raise DamagedError(number, "a second header line")
                else:
                    raise DamagedError(number, f"unknown line kind {kind!r}")
        if self._header is None:
            raise DamagedError(0, "the file is empty: an export starts with a header line")

    def _index_event(self, raw: bytes, number: int, trailer: bool) -> None:
        self._event_lines += 1
        if trailer:
            self.report.add("format", f"line {number}", "an event line after shoe or wallet lines")
        if b'"LogRestored"' in raw:
            document = read_object(raw, number)
            if document.get("type") == "LogRestored":
                self._index_restore(document, number)
        if b'"RoundVoided"' in raw:
            document = read_object(raw, number)
            if document.get("type") == "RoundVoided":
                stream_id = document.get("stream_id")
                payload = document.get("payload")
                if isinstance(stream_id, str) and isinstance(payload, dict):
                    round_id = payload.get("round_id")
                    if isinstance(round_id, str):
                        self._voided.add((stream_id.partition(":")[2], round_id))

    def _index_restore(self, document: dict[str, Any], number: int) -> None:
        position = document.get("position")
        payload = document.get("payload")
        if type(position) is not int or type(payload) is not dict:
            return  # pass 2 names what is malformed
        body = Fields(payload, number, "payload.", position)
        kept = body.integer("last_position_kept", 0)
        recovered = body.integer_or_none("recovered_head") if "recovered_head" in payload else None
        restore = _Restore(
            position=position,
            last_position_kept=kept,
            recovered_head=kept if recovered is None else recovered,
            last_checkpoint_position=body.integer_or_none("last_checkpoint_position"),
            last_checkpoint_hash=body.text_or_none("last_checkpoint_hash"),
            restored_at=body.text("restored_at"),
            reason=body.text("reason"),
        )
        if not cp.is_timestamp(restore.restored_at):
            body.fail("payload.restored_at is not a timestamp YYYY-MM-DDTHH:MM:SS.ffffffZ")
        self._restores.append(restore)

    def _prepare(self) -> None:
        header = self._header
        assert header is not None
        self._table_stream = f"table:{header.table_id}"
        self._expected_position = header.first_position
        self._prev_hash = header.prev_hash
        for shoe_id, line in self._shoe_lines.items():
            self._shoes[shoe_id] = self._check_shoe_line(line)
        for player_id, wallet in self._wallet_lines.items():
            opening = wallet.opening
            self._check_wallet_state(wallet, "opening", opening)
            self._check_wallet_state(wallet, "closing", wallet.closing)
            self._wallets[player_id] = _Wallet(
                wallet, opening.available, opening.reserved, dict(opening.open_stakes)
            )
            for (table_id, round_id, _), stake in opening.open_stakes.items():
                self._round(table_id, round_id).wallet_open += stake
        self._prepare_checkpoints()
        self._prepare_restores()

    def _walk(self) -> None:
        with open(self.path, "rb") as file:
            for number, raw in _lines(file):
                if number % _PROGRESS_EVERY == 0:
                    self._progress.tick("pass 2 of 2", file.tell(), number)
                if number == 1 or not raw.strip():
                    continue
                # Shoe, wallet and checkpoint lines were read in pass 1.
                if (
                    not raw.startswith(_EVENT_PREFIX)
                    and read_object(raw, number)["kind"] != "event"
                ):
                    continue
                self._event(read_object(raw, number), number)

    # Shoes and wallets as the export states them.

    def _check_shoe_line(self, line: ShoeLine) -> _ShoeState:
        report = self.report
        report.shoes += 1
        where = f"shoe {line.shoe_id}"
        state = _ShoeState(line)
        if line.server_seed is None:
            report.shoes_unrevealed += 1
            return state
        problem = check_parameters(line.server_seed, line.client_seed, line.nonce, line.decks)
        if problem is not None:
            report.add("seed", where, f"cannot re-derive the shoe: {problem}")
            return state
        if commitment(line.server_seed) != line.server_seed_hash:
            report.add(
                "seed",
                where,
                f"the revealed server_seed does not hash to the commitment {line.server_seed_hash}",
            )
            return state
        derived = self._derive(line)
        if derived.hands != line.hands:
            report.add(
                "seed", where, f"the seed gives {derived.hands} hands, the export says {line.hands}"
            )
        state.valid = True
        return state

    def _derive(self, line: ShoeLine) -> Shoe:
        derived = self._derived.get(line.shoe_id)
        if derived is not None:
            self._derived.move_to_end(line.shoe_id)
            return derived
        assert line.server_seed is not None
        derived = shuffle(line.server_seed, line.client_seed, line.nonce, line.decks)
        self._derived[line.shoe_id] = derived
        if len(self._derived) > _DERIVED_SHOES_KEPT:
            self._derived.popitem(last=False)
        return derived

    def _check_wallet_state(self, wallet: WalletLine, which: str, state: WalletState) -> None:
        staked = sum(state.open_stakes.values())
        if staked != state.reserved:
            self.report.add(
                "wallet",
                f"wallet {wallet.player_id}",
                f"its {which} reserved {state.reserved}p is not the sum of its open stakes "
                f"{staked}p",
            )

    # Checkpoints.

    def _prepare_checkpoints(self) -> None:
        header = self._header
        assert header is not None
        trusted = list(self._trusted_keys)
        if self._checkpoint_file is not None:
            try:
                kept = cp.read_file(self._checkpoint_file)
                chain = cp.KeyChain(trusted)
                cp.verify_chain_of_keys(kept, chain, self._checkpoint_file)
            except cp.CheckpointError as error:
                self.report.add("checkpoint", self._checkpoint_file, str(error))
                kept = []
            except OSError as error:
                raise DamagedError(
                    0, f"cannot read {self._checkpoint_file}: {error.strerror}"
                ) from None
            else:
                if not chain.anchored:
                    self.report.notes.append(
                        f"the keys of {self._checkpoint_file} are trusted from its first line; "
                        "pass --trusted-key to anchor them"
                    )
                trusted.extend({c.public_key for _, c in kept} - set(trusted))
            covered = [
                c
                for _, c in kept
                if self._expect_head(c.position, c.head_hash, c.recorded_at, "the checkpoint file")
            ]
            self.report.checkpoints += len(covered)
            if kept and not covered:
                first, last = header.first_position, header.last_position
                self.report.add(
                    "checkpoint",
                    self._checkpoint_file,
                    f"cannot prove the export extends any kept checkpoint: it covers positions "
                    f"{first} to {last} (and {first} - 1 by its prev_hash), the checkpoints "
                    f"are at {', '.join(str(c.position) for _, c in kept)}",
                )
        if self._export_checkpoints:
            chain = cp.KeyChain(trusted)
            try:
                cp.verify_chain_of_keys(self._export_checkpoints, chain, "the export")
            except cp.CheckpointError as error:
                self.report.add("checkpoint", "the export", str(error))
                return
            if not chain.anchored:
                self.report.notes.append(
                    "the export's checkpoint keys are trusted from its first checkpoint; pass "
                    "--trusted-key or --checkpoint to anchor them"
                )
            for number, checkpoint in self._export_checkpoints:
                # Recorded in the slice, so over the log as it is: no restore excuses it.
                if self._expect_head(
                    checkpoint.position, checkpoint.head_hash, None, f"the export's line {number}"
                ):
                    self.report.checkpoints += 1
                else:
                    self.report.add(
                        "checkpoint",
                        f"line {number}",
                        f"the export's checkpoint at position {checkpoint.position} is outside "
                        "its slice",
                    )

    def _expect_head(
        self, position: int, head_hash: str, recorded_at: str | None, source: str
    ) -> bool:
        """Arrange for a signed head to be compared with the chain; False if out of reach."""
        header = self._header
        assert header is not None
        first, last = header.first_position, header.last_position
        if first is None or last is None:
            return False
        if position == first - 1:
            # A restore recorded in the slice kept at least first - 1 positions, so none
            # explains a mismatch here.
            if header.prev_hash != head_hash:
                self.report.add(
                    "checkpoint",
                    source,
                    f"position {position} was signed with head {head_hash}; "
                    f"the export's prev_hash is {header.prev_hash}",
                )
            return True
        if first <= position <= last:
            self._expected_hashes.setdefault(position, []).append((source, head_hash, recorded_at))
            return True
        return False

    def _prepare_restores(self) -> None:
        """Hold each recorded restore to what it claims of the log it resumed."""
        for restore in self._restores:
            where = f"the restore recorded at position {restore.position}"
            # `shoebox restore` records it as the first event after the restored head.
            if restore.last_position_kept != restore.position - 1:
                self.report.add(
                    "checkpoint",
                    where,
                    f"it says the log was restored to position {restore.last_position_kept},"
                    f" but it was recorded at {restore.position}",
                )
            if not 0 <= restore.recovered_head <= restore.last_position_kept:
                self.report.add(
                    "checkpoint",
                    where,
                    f"it says recovery ended at position {restore.recovered_head}, outside 0 to"
                    f" the last position it kept ({restore.last_position_kept})",
                )
            named, named_hash = restore.last_checkpoint_position, restore.last_checkpoint_hash
            if (named is None) != (named_hash is None):
                self.report.add(
                    "checkpoint",
                    where,
                    "last_checkpoint_position and last_checkpoint_hash must both be null or"
                    " neither",
                )
            elif named is not None and named_hash is not None:
                if named > restore.last_position_kept:
                    self.report.add(
                        "checkpoint",
                        where,
                        f"it names the checkpoint at position {named}, past the last position"
                        f" it kept ({restore.last_position_kept})",
                    )
                elif not self._expect_head(named, named_hash, None, where):
                    self.report.notes.append(
                        f"{where} names the checkpoint at position {named}, outside the slice:"
                        " its hash is not checked"
                    )

    def _lost_by_restore(self, position: int, recorded_at: str | None) -> str | None:
        for restore in self._restores:
            why = restore.lost(position, recorded_at)
            if why is not None:
                return why
        return None

    # Events.

    def _event(self, document: dict[str, Any], number: int) -> None:
        try:
            position = document["position"]
            stream_id = document["stream_id"]
            category = document["category"]
            version = document["version"]
            type_ = document["type"]
            schema_version = document["schema_version"]
            payload = document["payload"]
            metadata = document["metadata"]
            recorded_at = document["recorded_at"]
            prev_hash = document["prev_hash"]
            hash_ = document["hash"]
        except KeyError:
            _event_shape(document, number)
            raise  # pragma: no cover - _event_shape names the missing key
        # The common case in a few type tests; anything else gets the precise diagnosis.
        if not (
            type(position) is int
            and position >= 1
            and type(stream_id) is str
            and type(category) is str
            and type(version) is int
            and version >= 1
            and type(type_) is str
            and type(schema_version) is int
            and schema_version >= 1
            and type(payload) is dict
            and type(metadata) is dict
            and type(recorded_at) is str
            and type(prev_hash) is str
            and type(hash_) is str
        ):
            _event_shape(document, number)
        report = self.report
        where = _Where(position, stream_id, type_)
        # The events of one append share metadata and recorded_at: each is checked once.
        if metadata != self._last_metadata:
            _event_shape(document, number)
            if set(metadata) != METADATA_KEYS:
                report.add("format", str(where), "metadata does not have exactly the six keys")
            self._last_metadata = metadata
            self._run_start = position
        if recorded_at != self._last_recorded_at:
            _event_shape(document, number)
            self._last_recorded_at = recorded_at
            self._run_start = position
        report.events += 1
        self._chain(document, number, position, prev_hash, hash_, where)
        if category != stream_id.partition(":")[0]:
            report.add("chain", str(where), f"category {category!r} is not the stream's")
        if type_ not in EVENT_TYPES:
            report.add("format", str(where), f"unknown event type {type_!r}")
        last_version = self._versions.get(stream_id)
        if last_version is not None and version != last_version + 1:
            report.add(
                "chain", str(where), f"version {version} follows {last_version} in its stream"
            )
        self._versions[stream_id] = version
        if stream_id == self._table_stream:
            self._period(position, recorded_at, str(where))
        elif (
            category in ("wallet", "seamless")
            and self._header is not None
            and position == self._header.last_position
            and type(payload) is dict
            and payload.get("table_id") == self._header.table_id
        ):
            # The slice runs on to the last wallet event of its rounds (the append that settles
            # a coup writes the table's events before the wallets'; a void may come later).
            self._last_is_table = True
        if category == "seamless" and type(payload) is dict:
            body = Fields(payload, number, "payload.", position)
            self._seamless_event(stream_id.partition(":")[2], type_, body)
            self._money.seamless_event(stream_id, version, type_, body, str(where))
            return
        if category != "table" and category != "wallet":
            return
        try:
            lifted = upcast(category, type_, schema_version, payload)
        except UnknownSchemaError as error:
            report.add("format", str(where), str(error))
            return
        body = Fields(
            lifted if type(lifted) is dict else dict(lifted), number, "payload.", position
        )
        if category == "table":
            if type_ in ("BetSettled", "StakeReturned", "SettlementReversed"):
                self._money.table_event(stream_id, version, type_, body, str(where))
            self._table_event(stream_id.partition(":")[2], type_, body, position)
        else:
            self._wallet_event(stream_id.partition(":")[2], type_, body, position, where)

    def _chain(
        self,
        document: dict[str, Any],
        number: int,
        position: int,
        prev_hash: str,
        hash_: str,
        where: _Where,
    ) -> None:
        report = self.report
        header = self._header
        assert header is not None
        if self._last_position is None:
            if header.first_position is None:
                report.add("chain", str(where), "the header says the slice is empty")
            elif position != header.first_position or prev_hash != header.prev_hash:
                report.add(
                    "chain",
                    str(where),
                    f"the first event does not start where the header says (position "
                    f"{header.first_position}, prev_hash {header.prev_hash})",
                )
            self._expected_position = position
            self._prev_hash = prev_hash
        if position != self._expected_position:
            report.add("chain", str(where), f"expected position {self._expected_position}")
        if prev_hash != self._prev_hash:
            _event_shape(document, number)
            report.add("chain", str(where), f"prev_hash should be {self._prev_hash}")
        try:
            body = canonical_json({key: document[key] for key in DOCUMENT_KEYS})
            digest = hashlib.sha256(prev_hash.encode("ascii") + body).hexdigest()
        except (BadJsonError, UnicodeEncodeError) as error:
            raise DamagedError(number, str(error), position) from None
        if digest != hash_:
            _event_shape(document, number)  # a hash that is not even 64 hex characters
            report.add("chain", str(where), f"the event hashes to {digest}, not {hash_}")
        for source, head_hash, signed_at in self._expected_hashes.pop(position, ()):
            if head_hash != hash_:
                lost = self._lost_by_restore(position, signed_at)
                if lost is not None:
                    report.notes.append(f"{source}: {lost}")
                    continue
                report.add(
                    "checkpoint",
                    str(where),
                    f"{source} signed head {head_hash} at this position; the export has {hash_}",
                )
        # Go on from the hash the line carries, so that each edited event is named once.
        self._prev_hash = hash_
        self._expected_position = position + 1
        self._last_position = position

    def _period(self, position: int, recorded_at: str, where: str) -> None:
        header = self._header
        assert header is not None
        if position not in (header.first_position, header.last_position):
            return
        if (header.start is not None and recorded_at < header.start) or (
            header.end is not None and recorded_at > header.end
        ):
            self.report.add(
                "chain",
                where,
                f"the header's first/last event was recorded at {recorded_at}, outside the "
                f"period {header.start} to {header.end}",
            )
        if position == header.first_position:
            self._first_is_table = True
        if position == header.last_position:
            self._last_is_table = True

    # Table streams: shoes, coups, bets and settlements.

    def _round(self, table_id: str, round_id: str) -> _Round:
        key = (table_id, round_id)
        found = self._rounds.get(key)
        if found is None:
            found = self._rounds[key] = _Round(table_id, round_id)
        return found

    def _table_event(self, table_id: str, type_: str, body: Fields, position: int) -> None:
        payload = body.document
        shoe_id = payload.get("shoe_id")
        if type(shoe_id) is str:
            self._named_shoes.add(shoe_id)
        if type_ == "ShoeOpened":
            self._shoe_opened(body)
            return
        if type_ == "ShoeRevealed":
            self._shoe_revealed(body)
            return
        if "round_id" not in payload:
            return
        current = self._round(table_id, body.text("round_id"))
        current.last_position = position
        report = self.report
        if current.finished is not None and type_ not in (
            "SettlementReversed",
            "StakeReturned",
            "RoundVoided",
        ):
            report.add("format", current.where, f"{type_} after the round ended")
        if type_ == "RoundOpened":
            if current.table_seen:
                report.add("format", current.where, "opened twice")
            current.opened = True
        elif type_ == "BetPlaced":
            key = (body.text("player_id"), body.choice("spot", rules.SPOTS))
            stake = body.integer("stake")
            if stake <= 0:
                report.add("money", current.where, f"a bet of {stake}p")
            current.live[key] = current.live.get(key, 0) + stake
            if current.opened:
                current.owe(("reserve", *key), stake)
        elif type_ == "StakeReturned":
            key = (body.text("player_id"), body.choice("spot", rules.SPOTS))
            stake = body.integer("stake")
            placed = current.live.pop(key, None)
            if current.opened and placed != stake:
                report.add(
                    "money",
                    f"{current.where}, {key[0]} on {key[1]}",
                    f"returns {stake}p, the bets placed {placed}p",
                )
            current.owe(("return", *key, stake), 1)
        elif type_ in ("CardDrawn", "HandStood", "CoupCompleted"):
            self._coup_step(current, type_, body)
        elif type_ == "BetSettled":
            self._settled(current, body)
        elif type_ == "SettlementReversed":
            self._reversal(current, body)
        elif type_ in ("RoundSettled", "RoundEndedWithoutPlay", "RoundVoided"):
            self._round_ended(current, type_)
        current.table_seen = True
        self._try_close(current)

    def _shoe_opened(self, body: Fields) -> None:
        shoe_id = body.text("shoe_id")
        published = (
            body.text("server_seed_hash"),
            body.text("client_seed"),
            body.integer("nonce"),
            body.integer("decks"),
            body.integer("hands"),
        )
        first = self._commitments.setdefault(published[0], shoe_id)
        if first != shoe_id:
            # Anyone who saw the first shoe revealed would know this one's cards.
            self.report.add(
                "seed",
                f"shoe {shoe_id}",
                f"its commitment was already published for shoe {first}: a seed deals one shoe",
            )
        state = self._shoes.get(shoe_id)
        line = state.line if state is not None else None
        if line is None or published != (
            line.server_seed_hash,
            line.client_seed,
            line.nonce,
            line.decks,
            line.hands,
        ):
            self.report.add("seed", f"shoe {shoe_id}", "the shoe line differs from its ShoeOpened")
        if state is None:
            state = self._shoes[shoe_id] = _ShoeState(None)
        state.next_position, state.coups = 0, 0

    def _shoe_revealed(self, body: Fields) -> None:
        shoe_id = body.text("shoe_id")
        seed = body.text("server_seed")
        state = self._shoes.get(shoe_id)
        if state is None or state.line is None or state.line.server_seed != seed:
            self.report.add(
                "seed", f"shoe {shoe_id}", "the shoe line's server_seed differs from ShoeRevealed"
            )

    def _coup_step(self, current: _Round, type_: str, body: Fields) -> None:
        report = self.report
        if current.outcome is not None:
            report.add("tableau", current.where, f"{type_} after the coup completed")
            return
        if type_ == "CardDrawn":
            shoe_id = body.text("shoe_id")
            hand = body.choice("hand", _HANDS)
            position = body.integer("position")
            card = body.text("card")
            report.cards += 1
            if current.first_position is None:
                current.first_position, current.shoe_id = position, shoe_id
                self._coup_starts(current, shoe_id, position)
            elif shoe_id != current.shoe_id:
                report.add("card", current.where, f"a card from shoe {shoe_id} mid-coup")
            current.steps.append(("card", hand, position, card))
            self._check_card(current, shoe_id, position, card)
        elif type_ == "HandStood":
            current.steps.append(("stand", body.choice("hand", _HANDS)))
        else:
            outcome = body.choice("outcome", rules.SPOTS)
            current.steps.append(
                ("complete", body.integer("player_total"), body.integer("banker_total"), outcome)
            )
            current.outcome = outcome
            self._check_tableau(current)

    def _coup_starts(self, current: _Round, shoe_id: str, position: int) -> None:
        report = self.report
        state = self._shoes.get(shoe_id)
        if state is None:
            return  # no shoe line: reported once at the end
        if state.next_position is not None and position != state.next_position:
            report.add(
                "card",
                current.where,
                f"the coup starts at position {position} of shoe {shoe_id}; its next card is "
                f"at {state.next_position} (no card is burned or dealt twice)",
            )
        if state.line is not None:
            left = 52 * state.line.decks - position
            if left < _MIN_CARDS_TO_START:
                report.add(
                    "card", current.where, f"a coup started with {left} cards left in the shoe"
                )
            if state.coups is not None and state.coups >= state.line.hands:
                report.add(
                    "card",
                    current.where,
                    f"shoe {shoe_id} had dealt its {state.line.hands} hands already",
                )
        state.next_position = None  # known again once this coup completes

    def _check_card(self, current: _Round, shoe_id: str, position: int, card: str) -> None:
        report = self.report
        if card not in POINTS:
            report.add("card", current.where, f"{card!r} is not a card code")
            return
        state = self._shoes.get(shoe_id)
        if state is None or state.line is None:
            return
        if not state.valid:
            report.cards_unrevealed += 1
            return
        cards = self._derive(state.line).cards
        if not 0 <= position < len(cards):
            report.add("card", current.where, f"shoe {shoe_id} has no position {position}")
        elif cards[position] != card:
            report.add(
                "card",
                f"{current.where}, shoe {shoe_id} position {position}",
                f"the log says {card}, the re-derived shoe has {cards[position]}",
            )

    def _check_tableau(self, current: _Round) -> None:
        report = self.report
        report.coups += 1
        if current.first_position is None:
            report.add("tableau", current.where, "the coup completed without a card")
            return
        recorded = current.steps
        cards = {step[2]: step[3] for step in recorded if step[0] == "card" and step[3] in POINTS}
        coup = rules.deal(cards.get, current.first_position)
        expected = list(coup.steps)
        for index, (want, got) in enumerate(zip(expected, recorded, strict=False)):
            if want != got:
                report.add(
                    "tableau",
                    current.where,
                    f"step {index + 1} of the coup: the rules give {_step(want)}, the log has "
                    f"{_step(got)}",
                )
                break
        else:
            if len(expected) != len(recorded):
                report.add(
                    "tableau",
                    current.where,
                    f"the rules deal {len(expected)} steps, the log has {len(recorded)}",
                )
        state = self._shoes.get(current.shoe_id or "")
        if state is not None:
            last = max((step[2] for step in recorded if step[0] == "card"), default=0)
            state.next_position = last + 1
            if state.coups is not None:
                state.coups += 1

    def _settled(self, current: _Round, body: Fields) -> None:
        report = self.report
        report.settlements += 1
        key = (body.text("player_id"), body.choice("spot", rules.SPOTS))
        stake, payout, commission = (
            body.integer("stake"),
            body.integer("payout"),
            body.integer("commission"),
        )
        where = f"{current.where}, {key[0]} on {key[1]}"
        placed = current.live.pop(key, None)
        if current.opened and placed != stake:
            report.add("money", where, f"settles a stake of {stake}p, the bets placed {placed}p")
        if key in current.settled:
            report.add("money", where, "settled twice")
        current.settled[key] = (stake, payout, commission)
        current.owe(("credit", *key, stake, payout, commission), 1)
        if current.outcome is None:
            report.add("payout", where, "a bet settled before the coup completed")
            return
        try:
            rule = rules.settle(key[1], stake, current.outcome)
        except ValueError as error:
            report.add("payout", where, f"cannot settle: {error}")
            return
        if rule != (payout, commission):
            report.add(
                "payout",
                where,
                f"paid {payout}p with {commission}p commission on stake {stake}p and a "
                f"{current.outcome} win; the rules pay {rule[0]}p with {rule[1]}p commission",
            )

    def _reversal(self, current: _Round, body: Fields) -> None:
        key = (body.text("player_id"), body.choice("spot", rules.SPOTS))
        reversal = (body.integer("stake"), body.integer("payout"), body.integer("commission"))
        where = f"{current.where}, {key[0]} on {key[1]}"
        settled = current.settled.get(key)
        if settled is not None and settled != reversal:
            self.report.add(
                "money", where, f"the reversal {reversal} differs from the settlement {settled}"
            )
        elif settled is None and current.opened:
            self.report.add("money", where, "reverses a settlement the round never made")
        if key in current.reversed:
            self.report.add("money", where, "reversed twice")
        current.reversed.add(key)
        current.owe(("reverse", *key, *reversal), 1)

    def _round_ended(self, current: _Round, type_: str) -> None:
        report = self.report
        if type_ == "RoundSettled" and current.outcome is None:
            report.add("tableau", current.where, "settled without a completed coup")
        if type_ == "RoundEndedWithoutPlay" and current.first_position is not None:
            report.add("tableau", current.where, "ended without play after cards were dealt")
        if current.opened and current.live:
            left = ", ".join(f"{p} {s} {stake}p" for (p, s), stake in sorted(current.live.items()))
            report.add(
                "money",
                current.where,
                f"{type_} leaves stakes neither settled nor returned: {left}",
            )
        if type_ == "RoundVoided":
            unreversed = sorted(set(current.settled) - current.reversed)
            if unreversed:
                left = ", ".join(f"{p} {s}" for p, s in unreversed)
                report.add("money", current.where, f"voided without reversing {left}")
        current.finished = type_

    def _unsettled(self, current: _Round) -> dict[tuple[Any, ...], int]:
        """A round's obligations still open, less a seamless player's wins and returns."""
        return {
            key: amount
            for key, amount in current.owed.items()
            if not (key[0] in _OWED_TO_SEAMLESS and key[1] in self._seamless)
        }

    def _seamless_event(self, player_id: str, type_: str, body: Fields) -> None:
        self._seamless.add(player_id)
        if type_ != "StakeDebited":
            return
        table_id, round_id = body.text("table_id"), body.text("round_id")
        spot = body.choice("spot", rules.SPOTS)
        amount = body.integer("amount")
        current = self._round(table_id, round_id)
        if current.opened:
            current.owe(("reserve", player_id, spot), -amount)
        self._try_close(current)

    def _try_close(self, current: _Round) -> None:
        if current.finished is None or self._unsettled(current) or current.wallet_open:
            return
        key = (current.table_id, current.round_id)
        if key in self._voided and current.finished != "RoundVoided":
            return  # a later void must be checked against these settlements
        del self._rounds[key]

    # Wallet streams.

    def _wallet(self, player_id: str, where: str) -> _Wallet:
        wallet = self._wallets.get(player_id)
        if wallet is None:
            self.report.add("wallet", where, "the export has no wallet line for this wallet")
            wallet = self._wallets[player_id] = _Wallet(None, 0, 0, {})
        wallet.seen = True
        return wallet

    def _wallet_event(
        self, player_id: str, type_: str, body: Fields, position: int, where_: _Where
    ) -> None:
        report = self.report
        where = str(where_)
        wallet = self._wallet(player_id, where)
        if type_ in ("Deposited", "Corrected"):
            wallet.available += body.integer("amount")
            return
        if type_ == "Withdrawn":
            wallet.available -= body.integer("amount")
            return
        if type_ not in ("StakeReserved", "StakeReturned", "PayoutCredited", "SettlementReversed"):
            report.add("wallet", where, f"unknown wallet event {type_}")
            return
        table_id, round_id = body.text("table_id"), body.text("round_id")
        spot = body.choice("spot", rules.SPOTS)
        stake = body.integer("stake")
        bet = (table_id, round_id, spot)
        current = self._round(table_id, round_id)
        if type_ == "StakeReserved":
            wallet.open_stakes[bet] = wallet.open_stakes.get(bet, 0) + stake
            wallet.available -= stake
            wallet.reserved += stake
            current.wallet_open += stake
            if current.opened:
                current.owe(("reserve", player_id, spot), -stake)
        elif type_ == "SettlementReversed":
            payout, commission = body.integer("payout"), body.integer("commission")
            wallet.available += stake - payout
            current.owe(("reverse", player_id, spot, stake, payout, commission), -1)
        else:
            open_stake = wallet.open_stakes.pop(bet, None)
            if open_stake != stake:
                report.add(
                    "money",
                    where,
                    f"releases a {stake}p stake on round {round_id} {spot}, but "
                    f"{open_stake}p was reserved",
                )
            released = open_stake or 0
            wallet.reserved -= released
            current.wallet_open -= released
            if type_ == "StakeReturned":
                wallet.available += stake
                current.owe(("return", player_id, spot, stake), -1)
            else:
                report.credits += 1
                payout, commission = body.integer("payout"), body.integer("commission")
                wallet.available += payout
                current.owe(("credit", player_id, spot, stake, payout, commission), -1)
        self._try_close(current)

    # The end of the file.

    def _finish(self) -> None:
        report = self.report
        header = self._header
        assert header is not None
        if header.last_position is not None and self._last_position != header.last_position:
            report.add(
                "chain",
                "the slice",
                f"the header says it ends at position {header.last_position}; the last event "
                f"line is at {self._last_position}: events were cut off or appended",
            )
        if header.first_position is not None and header.last_position is not None:
            promised = header.last_position - header.first_position + 1
            if report.events != promised:
                report.add(
                    "chain",
                    "the slice",
                    f"the header promises {promised} events, the file has {report.events}",
                )
            if report.events and not (self._first_is_table and self._last_is_table):
                report.add(
                    "chain",
                    "the slice",
                    f"its first event must be of {self._table_stream}, and its last of it or"
                    " of a wallet, for one of its rounds",
                )
        elif report.events:
            report.add("chain", "the slice", "the header says it is empty")
        for position in sorted(self._expected_hashes):
            for source, _, _ in self._expected_hashes[position]:
                report.add("checkpoint", source, f"no event at position {position}")
        self._finish_rounds()
        self._finish_shoes()
        self._finish_wallets()

    def _finish_rounds(self) -> None:
        report = self.report
        tail = self._run_start  # the last append: its wallet events may lie past the slice
        for current in self._rounds.values():
            if current.outcome is None and current.steps:
                coup = rules.deal(
                    {s[2]: s[3] for s in current.steps if s[0] == "card" and s[3] in POINTS}.get,
                    current.first_position or 0,
                )
                if list(coup.steps[: len(current.steps)]) != current.steps:
                    report.add("tableau", current.where, "the unfinished coup breaks the rules")
            unchecked = 0
            for key, amount in sorted(self._unsettled(current).items(), key=repr):
                what = _obligation(key, amount)
                if amount < 0:
                    report.add("money", current.where, f"a wallet records {what}; the table not")
                elif current.last_position >= tail:
                    unchecked += 1
                else:
                    report.add("money", current.where, f"the table records {what}, no wallet does")
            if unchecked:
                report.notes.append(
                    f"{current.where}: {unchecked} stake movement(s) recorded by the table in "
                    "the slice's last append have their wallet side after the slice's end: "
                    "not checked"
                )
            if current.finished and current.wallet_open and current.last_position < tail:
                report.add(
                    "money",
                    current.where,
                    f"{current.wallet_open}p stays reserved in wallets after the round ended",
                )

        self._money.finish(report.notes)
        header = self._header
        if self._seamless and header is not None and header.format == EXPORT_FORMAT:
            report.add(
                "format",
                "header",
                f"{EXPORT_FORMAT} holds seamless money: its format is shoebox-export/2",
            )

    def _finish_shoes(self) -> None:
        for shoe_id in sorted(self._named_shoes - set(self._shoe_lines)):
            self.report.add("seed", f"shoe {shoe_id}", "named in the slice but has no shoe line")
        for shoe_id in sorted(set(self._shoe_lines) - self._named_shoes):
            line = self._shoe_lines[shoe_id]
            self.report.add("format", f"line {line.line}", f"shoe {shoe_id} is not in the slice")

    def _finish_wallets(self) -> None:
        report = self.report
        for player_id, wallet in sorted(self._wallets.items()):
            line = wallet.line
            if line is None:
                continue
            report.wallets += 1
            where = f"wallet {player_id}"
            if not wallet.seen:
                report.add("format", f"line {line.line}", f"{where} has no event in the slice")
            closing = line.closing
            if (wallet.available, wallet.reserved) != (closing.available, closing.reserved):
                report.add(
                    "wallet",
                    where,
                    f"its events give available {wallet.available}p and reserved "
                    f"{wallet.reserved}p; the export states {closing.available}p and "
                    f"{closing.reserved}p",
                )
            if wallet.open_stakes != closing.open_stakes:
                report.add(
                    "wallet",
                    where,
                    f"its events leave open stakes {_stakes(wallet.open_stakes)}; the export "
                    f"states {_stakes(closing.open_stakes)}",
                )


class _Where:
    """Where an event is, formatted only if a finding needs it."""

    __slots__ = ("position", "stream_id", "type")

    def __init__(self, position: int, stream_id: str, type_: str) -> None:
        self.position, self.stream_id, self.type = position, stream_id, type_

    def __str__(self) -> str:
        return f"position {self.position} ({self.stream_id} {self.type})"


def _event_shape(document: dict[str, Any], number: int) -> None:
    """Check an event line key by key; DamagedError names the first thing wrong."""
    position = document.get("position")
    fields = Fields(document, number, "", position if type(position) is int else None)
    missing = EVENT_KEYS - document.keys()
    if missing:
        fields.fail(f"the event line lacks {', '.join(sorted(missing))}")
    fields.integer("position", 1)
    fields.text("stream_id")
    fields.text("category")
    fields.integer("version", 1)
    fields.text("type")
    fields.integer("schema_version", 1)
    fields.obj("payload")
    metadata = fields.obj("metadata")
    for key, value in metadata.document.items():
        if value is not None and type(value) is not str:
            fields.fail(f"metadata.{key} is {_kind(value)}, not a string or null")
    fields.timestamp("recorded_at")
    fields.hash("prev_hash")
    fields.hash("hash")


def _kind(value: object) -> str:
    return "an integer" if type(value) is int else type(value).__name__


def _step(step: tuple[Any, ...]) -> str:
    kind = step[0]
    if kind == "card":
        return f"{step[1]} card {step[3]} at position {step[2]}"
    if kind == "stand":
        return f"{step[1]} stands"
    return f"totals {step[1]}-{step[2]}, {step[3]}"


def _obligation(key: tuple[Any, ...], amount: int) -> str:
    kind, player, spot = key[0], key[1], key[2]
    if kind == "reserve":
        return f"{abs(amount)}p more staked by {player} on {spot}"
    times = f" ({abs(amount)} times)" if abs(amount) > 1 else ""
    if kind == "return":
        return f"a {key[3]}p stake returned to {player} on {spot}{times}"
    if kind == "credit":
        return (
            f"a settlement of {player} on {spot} (stake {key[3]}p, payout {key[4]}p, "
            f"commission {key[5]}p){times}"
        )
    return f"a reversal for {player} on {spot} (stake {key[3]}p, payout {key[4]}p){times}"


def _stakes(stakes: dict[tuple[str, str, str], int]) -> str:
    if not stakes:
        return "none"
    return ", ".join(f"{r} {s} {v}p" for (_, r, s), v in sorted(stakes.items()))


def verify(path: str, **options: Any) -> Report:
    """Verify the export at `path` (see `Verifier`); DamagedError if it cannot be read."""
    return Verifier(path, **options).run()


__all__ = ["DamagedError", "Finding", "Report", "SeedError", "Verifier", "verify"]
