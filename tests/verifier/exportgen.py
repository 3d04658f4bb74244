"""Exports for the verifier's tests, made by the server's own domain and hash chain.

A table is played through `domain.table.decide`/`evolve` (the decisions the service makes),
with the wallet events each bet, return, settlement and reversal causes, chained by
`events.canonical.chain_events` (the hashing every store uses) and written in the export
format of docs/verification.md. Nothing of `service/` is used: it is being restructured, and
the verifier must agree with the domain and the chain, not with the service's plumbing.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson

from domain.outcome import Spot
from domain.payloads import schema_version_of, to_payload
from domain.round import (
    BetSettled,
    Phase,
    RoundEvent,
    SettlementReversed,
    StakeReturned,
    replay_round,
)
from domain.shoe import ServerSeed
from domain.table import (
    CreateTable,
    DealCoup,
    DeclareMalfunction,
    MalfunctionScope,
    OpenShoe,
    Pass,
    PlaceBet,
    PressDeal,
    ReopenTable,
    RetireShoe,
    RevealShoe,
    SitDown,
    Table,
    TableEvent,
    decide,
    evolve,
)
from domain.wallet import (
    Deposited,
    PayoutCredited,
    StakeReserved,
    Wallet,
    WalletEvent,
    evolve_wallet,
)
from domain.wallet import SettlementReversed as WalletReversed
from domain.wallet import StakeReturned as WalletReturned
from events.canonical import chain_events, format_timestamp, metadata_document
from events.store import GENESIS_HASH, EventMetadata, NewEvent, RecordedEvent, StreamAppend

START = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
METADATA = EventMetadata(actor="dealer", role="system")


def _new(event: Any) -> NewEvent:
    return NewEvent(
        type=event.type,
        payload=to_payload(event),  # type: ignore[arg-type]
        schema_version=schema_version_of(event),
    )


@dataclass
class Played:
    """A played log: its records, the wallet event each wallet record holds, and the shoes."""

    table_id: str
    records: list[RecordedEvent] = field(default_factory=list)
    wallet_events: dict[int, WalletEvent] = field(default_factory=dict)
    shoes: dict[str, dict[str, Any]] = field(default_factory=dict)


class Simulation:
    """A table dealing shoes to seated players: bets, passes, deals, and an optional void."""

    def __init__(
        self,
        table_id: str = "T1",
        players: int = 3,
        seed: int = 1,
        on_record: Callable[[RecordedEvent], None] | None = None,
        on_append: Callable[[list[StreamAppend], datetime], None] | None = None,
    ) -> None:
        self.table_id = table_id
        self.players = [f"{table_id}-p{index}" for index in range(1, players + 1)]
        self.random = random.Random(seed)
        self.table: Table | None = None
        self.versions: dict[str, int] = {}
        self.wallets: dict[str, Wallet] = {p: Wallet(p) for p in self.players}
        self.clock = START
        self.played = Played(table_id)
        self.last_round: list[RoundEvent] = []
        # With on_record, records go there as they are made and are not kept.
        self.on_record = on_record
        self.head = (0, GENESIS_HASH)
        # With on_append, each append also goes there (e.g. into a real store).
        self.on_append = on_append

    def _tick(self) -> datetime:
        self.clock += timedelta(seconds=1)
        return self.clock

    def _decide(self, command: Any) -> list[TableEvent]:
        events = decide(self.table, command, self.clock)
        for event in events:
            self.table = evolve(self.table, event)
        return events

    def _append(self, table: list[TableEvent], wallets: dict[str, list[WalletEvent]]) -> None:
        streams: list[StreamAppend] = []
        kinds: list[WalletEvent | None] = []
        if table:
            stream = f"table:{self.table_id}"
            streams.append(
                StreamAppend(stream, self.versions.get(stream, 0), [_new(e) for e in table])
            )
            self.versions[stream] = self.versions.get(stream, 0) + len(table)
            kinds.extend([None] * len(table))
        for player, events in wallets.items():
            if not events:
                continue
            stream = f"wallet:{player}"
            streams.append(
                StreamAppend(stream, self.versions.get(stream, 0), [_new(e) for e in events])
            )
            self.versions[stream] = self.versions.get(stream, 0) + len(events)
            kinds.extend(events)
            for event in events:
                self.wallets[player] = evolve_wallet(self.wallets[player], event)
        if self.on_append is not None:
            self.on_append(streams, self.clock)
        new = chain_events(streams, METADATA, self.clock, *self.head)
        self.head = (new[-1].position, new[-1].hash)
        for record, kind in zip(new, kinds, strict=True):
            if kind is not None and self.on_record is None:
                self.played.wallet_events[record.position] = kind
            if record.type == "ShoeOpened":
                self.played.shoes[str(record.payload["shoe_id"])] = {
                    "kind": "shoe",
                    "table_id": self.table_id,
                    **record.payload,
                    "server_seed": None,
                }
            elif record.type == "ShoeRevealed":
                shoe = self.played.shoes[str(record.payload["shoe_id"])]
                shoe["server_seed"] = record.payload["server_seed"]
        if self.on_record is None:
            self.played.records.extend(new)
        else:
            for record in new:
                self.on_record(record)

    def play(self, shoes: int = 1, void_at: int | None = None) -> Played:
        """Deal `shoes` shoes; with `void_at`, void the last settled round after that many coups."""
        self._tick()
        self._append(self._decide(CreateTable(self.table_id)), {})
        for number, player in enumerate(self.players, start=1):
            self._append(
                self._decide(SitDown(player, number)),
                {player: [Deposited(1_000_000, "float", None)]},
            )
        coups = 0
        for nonce in range(1, shoes + 1):
            seed = ServerSeed.generate()
            assert self.table is not None
            decks = self.table.settings.decks
            shuffled = seed.shuffle(f"client-{nonce}", nonce, decks)
            shoe_id = f"{self.table_id}-shoe-{nonce}"
            self._tick()
            self._append(
                self._decide(
                    OpenShoe(
                        shoe_id, seed.commitment, f"client-{nonce}", nonce, decks, shuffled.hands
                    )
                ),
                {},
            )
            while True:
                self._coup(shoe_id, shuffled.cards)
                coups += 1
                if void_at is not None and coups == void_at:
                    self._void(seed.reveal())
                    break
                assert self.table is not None
                assert self.table.shoe is not None
                if not self.table.shoe.can_deal:
                    self._tick()
                    events = self._decide(RetireShoe())
                    events += self._decide(RevealShoe(shoe_id, seed.reveal()))
                    self._append(events, {})
                    break
        return self.played

    def _coup(self, shoe_id: str, cards: tuple[int, ...]) -> None:
        self._tick()
        table_events: list[TableEvent] = []
        wallets: dict[str, list[WalletEvent]] = {p: [] for p in self.players}
        passing = self.random.choice([None, *self.players[1:]])
        for player in self.players:
            for _ in range(self.random.choice((1, 1, 2))):
                spot = self.random.choice((Spot.PLAYER, Spot.BANKER, Spot.BANKER, Spot.TIE))
                stake = self.random.choice((100, 500, 1000, 2500))
                placed = self._decide(PlaceBet(player, spot, stake))
                table_events.extend(placed)
                assert self.table is not None
                assert self.table.round is not None
                round_id = self.table.round.round_id
                wallets[player].append(StakeReserved(self.table_id, round_id, spot, stake))
        for player in self.players:
            if player == passing:
                for event in self._decide(Pass(player)):
                    table_events.append(event)
                    if isinstance(event, StakeReturned):
                        wallets[player].append(
                            WalletReturned(
                                self.table_id, event.round_id, event.spot, event.stake, event.reason
                            )
                        )
            else:
                table_events.extend(self._decide(PressDeal(player)))
        assert self.table is not None
        assert self.table.shoe is not None
        dealt = self._decide(DealCoup(shoe_id, cards, self.table.shoe.next_position))
        table_events.extend(dealt)
        for event in dealt:
            if isinstance(event, BetSettled):
                wallets[event.player_id].append(
                    PayoutCredited(
                        self.table_id,
                        event.round_id,
                        event.spot,
                        event.stake,
                        event.payout,
                        event.commission,
                    )
                )
        assert self.table.round is not None
        assert self.table.round.phase is Phase.SETTLED
        self.last_round = [e for e in table_events if hasattr(e, "round_id")]  # type: ignore[misc]
        self._append(table_events, wallets)

    def _void(self, server_seed: str) -> None:
        """Void the round just settled, as a malfunction: reversals and returns on both sides."""
        self._tick()
        settled = replay_round(self.last_round)
        events = self._decide(
            DeclareMalfunction(
                "m-1",
                "card reader fault",
                MalfunctionScope.ROUNDS,
                (settled,),
                server_seed=server_seed,
            )
        )
        wallets: dict[str, list[WalletEvent]] = {p: [] for p in self.players}
        for event in events:
            if isinstance(event, SettlementReversed):
                wallets[event.player_id].append(
                    WalletReversed(
                        self.table_id,
                        event.round_id,
                        event.spot,
                        event.stake,
                        event.payout,
                        event.commission,
                    )
                )
            elif isinstance(event, StakeReturned):
                wallets[event.player_id].append(
                    WalletReturned(
                        self.table_id, event.round_id, event.spot, event.stake, event.reason
                    )
                )
        self._append(events, wallets)
        self._tick()
        self._append(self._decide(ReopenTable("fixed")), {})


def event_line(record: RecordedEvent) -> dict[str, Any]:
    """An event as an export line (docs/verification.md)."""
    return {
        "kind": "event",
        "position": record.position,
        "stream_id": record.stream_id,
        "category": record.category,
        "version": record.version,
        "type": record.type,
        "schema_version": record.schema_version,
        "payload": record.payload,
        "metadata": metadata_document(record.metadata),
        "recorded_at": format_timestamp(record.recorded_at),
        "prev_hash": record.prev_hash,
        "hash": record.hash,
    }


def _wallet_state(wallet: Wallet) -> dict[str, Any]:
    return {
        "available": wallet.available,
        "reserved": wallet.reserved,
        "open_stakes": [
            [table_id, round_id, str(spot), stake]
            for (table_id, round_id, spot), stake in sorted(wallet.open_stakes.items())
        ],
    }


def export_lines(
    played: Played, start: datetime | None = None, end: datetime | None = None
) -> Iterator[dict[str, Any]]:
    """The export of the period, sliced as service/export.py does.

    The slice runs from the table's first event recorded in the period to its last, whatever
    the stream of the events in between.
    """
    stream = f"table:{played.table_id}"
    table_positions = [
        r.position
        for r in played.records
        if r.stream_id == stream
        and (start is None or r.recorded_at >= start)
        and (end is None or r.recorded_at <= end)
    ]
    low, high = min(table_positions), max(table_positions)
    slice_ = [r for r in played.records if low <= r.position <= high]
    yield {
        "kind": "header",
        "format": "shoebox-export/1",
        "table_id": played.table_id,
        "from": format_timestamp(start or slice_[0].recorded_at),
        "to": format_timestamp(end or slice_[-1].recorded_at),
        "first_position": low,
        "last_position": high,
        "prev_hash": slice_[0].prev_hash,
    }
    for record in slice_:
        yield event_line(record)
    named = {
        str(r.payload["shoe_id"])
        for r in slice_
        if r.category == "table" and isinstance(r.payload.get("shoe_id"), str)
    }
    for shoe_id in sorted(named):
        shoe = played.shoes[str(shoe_id)]
        revealed = any(
            r.type == "ShoeRevealed" and r.payload["shoe_id"] == shoe_id for r in played.records
        )
        yield shoe if revealed else {**shoe, "server_seed": None}
    players = sorted({r.stream_id.partition(":")[2] for r in slice_ if r.category == "wallet"})
    for player in players:
        opening = closing = Wallet(player)
        for record in played.records:
            if record.position > high:
                break
            if record.stream_id != f"wallet:{player}":
                continue
            closing = evolve_wallet(closing, played.wallet_events[record.position])
            if record.position < low:
                opening = closing
        yield {
            "kind": "wallet",
            "player_id": player,
            "opening": _wallet_state(opening),
            "closing": _wallet_state(closing),
        }


def write(path: Path, lines: Iterator[dict[str, Any]] | list[dict[str, Any]]) -> Path:
    """Write lines as JSON Lines, as the server's exporter does."""
    path.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    return path


def rechain(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The lines with positions, prev_hash and hash recomputed after a tamperer's edit.

    This is what someone able to rewrite the export would do to hide an edit from the chain
    check, leaving the other checks to catch it.
    """
    from events.canonical import chain_hash

    header = dict(lines[0])
    events = [dict(line) for line in lines if line["kind"] == "event"]
    position = header["first_position"]
    prev = header["prev_hash"]
    versions: dict[str, int] = {}
    for line in events:
        stream = line["stream_id"]
        line["version"] = versions[stream] = versions.get(stream, line["version"] - 1) + 1
        line["position"] = position
        line["prev_hash"] = prev
        document = {
            key: line[key]
            for key in (
                "position",
                "stream_id",
                "category",
                "version",
                "type",
                "schema_version",
                "payload",
                "metadata",
                "recorded_at",
            )
        }
        line["hash"] = chain_hash(prev, orjson.dumps(document, option=orjson.OPT_SORT_KEYS))
        prev = line["hash"]
        position += 1
    header["last_position"] = position - 1
    rest = [line for line in lines[1:] if line["kind"] != "event"]
    return [header, *events, *rest]
