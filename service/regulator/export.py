"""Writing a regulator's export: a contiguous slice of the log, its shoes and its wallets.

The format is docs/verification.md. The slice is every event from the table's first event in
the time range to its last, or further to the last wallet event (stake, return, credit,
reversal) of any round the table has an event of in the range, whatever its stream, because
the hash chain links each event to the one before it in the whole log: leaving other streams
out would leave nothing to verify, and a round's money must be whole in the file.
"""

from __future__ import annotations

import itertools
from collections.abc import Collection, Iterator
from datetime import datetime
from typing import Any, Protocol

import orjson

from domain.audit import CheckpointSigned
from domain.table import ShoeOpened, ShoeRevealed
from domain.wallet import WALLET_EVENT_TYPES, Wallet, WalletEvent, evolve_wallet
from events.canonical import format_timestamp, metadata_document
from events.store import EventStore, RecordedEvent
from service.application.checkpoints import document, from_recorded
from service.application.operators import operator_of
from service.application.streams import (
    SEAMLESS,
    WALLET,
    from_recorded_as,
    id_of,
    table_stream,
)
from service.regulator.verification import EXPORT_FORMAT, SEAMLESS_EXPORT_FORMAT

BATCH_SIZE = 5000


def event_line(event: RecordedEvent) -> dict[str, Any]:
    """An event as an export line: every column of its row, exactly as recorded."""
    return {
        "kind": "event",
        "position": event.position,
        "stream_id": event.stream_id,
        "category": event.category,
        "version": event.version,
        "type": event.type,
        "schema_version": event.schema_version,
        "payload": event.payload,
        "metadata": metadata_document(event.metadata),
        "recorded_at": format_timestamp(event.recorded_at),
        "prev_hash": event.prev_hash,
        "hash": event.hash,
    }


def wallet_state(wallet: Wallet) -> dict[str, Any]:
    """A wallet's balances and open stakes as an export states them."""
    return {
        "available": wallet.available,
        "reserved": wallet.reserved,
        "open_stakes": [
            [table_id, round_id, str(spot), stake]
            for (table_id, round_id, spot), stake in sorted(wallet.open_stakes.items())
        ],
    }


def _all_events(store: EventStore) -> Iterator[RecordedEvent]:
    after = 0
    while True:
        batch = store.read_all(after, BATCH_SIZE, upcast=False)
        if not batch:
            return
        yield from batch
        after = batch[-1].position


class LogIndex(Protocol):
    """Where an export's slice lies and its shoes' published facts, found through indexes."""

    def slice_bounds(
        self, table_id: str, start: datetime, end: datetime
    ) -> tuple[int | None, int | None]:
        """The slice's first and last positions (see `_slice_bounds`), or None and None."""

    def shoe_events(self, stream_id: str, shoe_ids: Collection[str]) -> list[RecordedEvent]:
        """The ShoeOpened and ShoeRevealed events of these shoes of one table, as recorded."""

    def wallet_before(self, stream_id: str, version: int) -> tuple[int, Wallet] | None:
        """A wallet's state at a version at or before `version`, and that version, if known."""

    def stream_batches(
        self, stream_id: str, to_version: int, from_version: int = 1
    ) -> Iterator[list[RecordedEvent]]:
        """A stream's events from `from_version` to `to_version`, upcast, a batch at a time."""

    def holds_category(self, first: int, last: int, category: str) -> bool:
        """Whether any event from position `first` to `last` is of `category`."""


def build_export(
    store: EventStore,
    table_id: str,
    start: datetime,
    end: datetime,
    index: LogIndex | None = None,
) -> Iterator[dict[str, Any]]:
    """The export's lines for one table's events recorded from `start` to `end` inclusive.

    The lines are produced as the slice is read, a batch at a time, so memory stays flat
    however long the slice: only the shoes, wallets and checkpoints it names are kept for the
    lines that follow the events. With an `index` (PostgreSQL) the slice's bounds and its
    shoes come from indexes; without one (the in-memory store) the log is scanned for them.
    """
    first, last = (
        index.slice_bounds(table_id, start, end)
        if index is not None
        else _slice_bounds(store, table_id, start, end)
    )
    batches = _range(store, first, last) if first is not None and last is not None else iter(())
    opening = next(batches, [])
    seamless = (
        first is not None
        and last is not None
        and (
            index.holds_category(first, last, SEAMLESS)
            if index is not None
            else any(e.category == SEAMLESS for b in _range(store, first, last) for e in b)
        )
    )
    yield {
        "kind": "header",
        # Version 2 only where there is seamless money: an export of internal wallets stays
        # readable by a version-1 verifier.
        "format": SEAMLESS_EXPORT_FORMAT if seamless else EXPORT_FORMAT,
        "table_id": table_id,
        "from": format_timestamp(start),
        "to": format_timestamp(end),
        "first_position": first,
        "last_position": last,
        "prev_hash": opening[0].prev_hash if opening else None,
    }
    shoes: dict[str, set[str]] = {}
    wallets: dict[str, tuple[int, int]] = {}
    checkpoints: list[RecordedEvent] = []
    for batch in itertools.chain([opening], batches):
        for event in batch:
            _note(event, shoes, wallets, checkpoints)
            yield event_line(event)
    yield from _shoe_lines(store, shoes, index)
    yield from _wallet_lines(store, wallets, index)
    if first is not None and last is not None:
        yield from _checkpoint_lines(checkpoints, first, last)


def _range(store: EventStore, first: int, last: int) -> Iterator[list[RecordedEvent]]:
    """The events from `first` to `last`, a batch at a time, through the primary key."""
    after = first - 1
    while after < last:
        batch = [e for e in store.read_all(after, BATCH_SIZE, upcast=False) if e.position <= last]
        if not batch:
            return
        yield batch
        after = batch[-1].position


def _note(
    event: RecordedEvent,
    shoes: dict[str, set[str]],
    wallets: dict[str, tuple[int, int]],
    checkpoints: list[RecordedEvent],
) -> None:
    """Remember what the lines after the events need of one event of the slice."""
    if event.category == "table":
        shoe_id = event.payload.get("shoe_id")
        if isinstance(shoe_id, str):
            shoes.setdefault(event.stream_id, set()).add(shoe_id)
    elif event.category == WALLET:
        low, _ = wallets.get(event.stream_id, (event.version, event.version))
        wallets[event.stream_id] = (low, event.version)
    elif event.type == CheckpointSigned.type:
        checkpoints.append(event)


def _checkpoint_lines(
    checkpoints: list[RecordedEvent], first: int, last: int
) -> Iterator[dict[str, Any]]:
    """The signed checkpoints recorded in the slice whose signed head lies in it too."""
    for event in checkpoints:
        checkpoint = from_recorded(event)
        if first <= checkpoint.position <= last:
            yield document(checkpoint)


def _slice_bounds(
    store: EventStore, table_id: str, start: datetime, end: datetime
) -> tuple[int | None, int | None]:
    """From the table's first event in the period to the last event its rounds' money needs.

    This scans the whole log: the in-memory store's way. PostgreSQL answers the same from
    indexes (service/regulator/log_index.py).
    """
    stream = table_stream(table_id)
    first = last = None
    rounds: set[object] = set()
    # The last wallet event of each of this table's rounds, wherever it falls: the append that
    # settles a coup writes the table stream before the wallets, so a period ending with the
    # coup's table events would end before its PayoutCredited, and a later void reverses it.
    money: dict[object, int] = {}
    for event in _all_events(store):
        if event.stream_id == stream and start <= event.recorded_at <= end:
            first = event.position if first is None else first
            last = event.position
            if "round_id" in event.payload:
                rounds.add(event.payload["round_id"])
        elif event.category == WALLET and event.payload.get("table_id") == table_id:
            money[event.payload.get("round_id")] = event.position
    if last is not None:
        last = max([last, *(money[r] for r in rounds if r in money)])
    return first, last


def _shoe_lines(
    store: EventStore, wanted: dict[str, set[str]], index: LogIndex | None
) -> Iterator[dict[str, Any]]:
    """Every shoe a card or shoe event in the slice names, with its seed once revealed."""
    for stream_id, shoe_ids in sorted(wanted.items()):
        opened: dict[str, dict[str, Any]] = {}
        revealed: dict[str, str] = {}
        # A shoe may open before the slice and be revealed after it: through the index of shoe
        # events, or else the whole stream.
        found = (
            index.shoe_events(stream_id, shoe_ids)
            if index is not None
            else store.read_stream(stream_id, upcast=False)
        )
        for event in found:
            shoe_id = event.payload.get("shoe_id")
            if shoe_id not in shoe_ids:
                continue
            if event.type == ShoeOpened.type:
                opened[str(shoe_id)] = dict(event.payload)
            elif event.type == ShoeRevealed.type:
                revealed[str(shoe_id)] = str(event.payload["server_seed"])
        for shoe_id in sorted(opened):
            published = opened[shoe_id]
            yield {
                "kind": "shoe",
                "table_id": id_of(stream_id),
                "shoe_id": shoe_id,
                "server_seed_hash": published["server_seed_hash"],
                "client_seed": published["client_seed"],
                "nonce": published["nonce"],
                "decks": published["decks"],
                "hands": published["hands"],
                "server_seed": revealed.get(shoe_id),
            }


def _wallet_lines(
    store: EventStore, versions: dict[str, tuple[int, int]], index: LogIndex | None
) -> Iterator[dict[str, Any]]:
    """Each wallet in the slice: its state before its first event there and after its last."""
    for stream_id, (low, high) in sorted(versions.items()):
        player_id = id_of(stream_id)
        wallet = opening = Wallet(player_id)
        # With the index: from the wallet's kept snapshot at or before the slice (one in every
        # WALLET_KEEP_EVERY versions), so a player's years of play before it are not
        # replayed, then in batches, so a long slice is never held in memory whole. Without
        # a usable snapshot, from the wallet's first event.
        start = index.wallet_before(stream_id, low - 1) if index is not None and low > 1 else None
        if start is not None:
            wallet = opening = start[1]
        found = (
            itertools.chain.from_iterable(
                index.stream_batches(stream_id, high, (start[0] if start else 0) + 1)
            )
            if index is not None
            else store.read_stream(stream_id)
        )
        for stored in found:
            if stored.version > high:
                break
            event: WalletEvent = from_recorded_as(stored, WALLET_EVENT_TYPES)
            wallet = evolve_wallet(wallet, event)
            if stored.version == low - 1:
                opening = wallet
        yield {
            "kind": "wallet",
            "player_id": player_id,
            # The player key names the operator too; said outright for the regulator's tools.
            "operator": operator_of(player_id),
            "opening": wallet_state(opening),
            "closing": wallet_state(wallet),
        }


def write_lines(lines: Iterator[dict[str, Any]], path: str) -> int:
    """Write the lines as JSON Lines; the number written."""
    count = 0
    dumps = orjson.dumps
    with open(path, "wb") as file:
        for line in lines:
            file.write(dumps(line))
            file.write(b"\n")
            count += 1
    return count
