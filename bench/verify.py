"""How fast `shoebox verify` checks an export, in rounds a second, against merely parsing it.

The export is generated, not played through the service: a table's shoes are dealt through
the domain's own `decide` and `evolve` (the same decisions the service makes), the wallet
events a bet and a settlement cause are added beside them, and the appends are chained with
`events.canonical.chain_events` (the hashing every store uses) and written straight to a
file. That produces a valid export of 1,000 shoes in about the time verifying it takes,
where the HTTP service would need hours.

Run: .venv/bin/python -m bench.verify [--shoes 1000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson

from domain.outcome import Spot
from domain.round import BetSettled, CoupCompleted, Phase
from domain.shoe import ServerSeed
from domain.table import (
    CreateTable,
    DealCoup,
    OpenShoe,
    PlaceBet,
    PressDeal,
    RetireShoe,
    RevealShoe,
    ShoeOpened,
    ShoeRevealed,
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
from events.canonical import chain_events
from events.store import GENESIS_HASH, EventMetadata, RecordedEvent, StreamAppend
from service.application.streams import table_stream, to_new_event, wallet_stream
from service.regulator.export import event_line, wallet_state
from service.regulator.verification import EXPORT_FORMAT, parse_lines, verify_file

START = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
DEPOSIT = 1_000_000_00
METADATA = EventMetadata(actor="bench", role="ops")


@dataclass(frozen=True, slots=True)
class Append:
    """One atomic append of the simulated table: its streams and when it was recorded."""

    streams: list[StreamAppend]
    recorded_at: datetime


class Simulation:
    """A table dealing shoe after shoe to seated players, as appends the service would make."""

    def __init__(self, table_id: str, players: int, seed: int = 1) -> None:
        self.table_id = table_id
        self.players = [f"{table_id}-p{index}" for index in range(1, players + 1)]
        self.random = random.Random(seed)
        self.table: Table | None = None
        self.table_version = 0
        self.wallets: dict[str, tuple[int, Wallet]] = {
            player: (0, Wallet(player)) for player in self.players
        }
        self.clock = START

    def _tick(self) -> datetime:
        self.clock += timedelta(seconds=1)
        return self.clock

    def _table(self, events: list[TableEvent]) -> StreamAppend:
        append = StreamAppend(
            table_stream(self.table_id), self.table_version, [to_new_event(e) for e in events]
        )
        for event in events:
            self.table = evolve(self.table, event)
        self.table_version += len(events)
        return append

    def _wallet(self, player: str, events: list[WalletEvent]) -> StreamAppend:
        version, wallet = self.wallets[player]
        for event in events:
            wallet = evolve_wallet(wallet, event)
        self.wallets[player] = (version + len(events), wallet)
        return StreamAppend(wallet_stream(player), version, [to_new_event(e) for e in events])

    def _decide(self, *commands: Any) -> list[TableEvent]:
        events: list[TableEvent] = []
        for command in commands:
            decided = decide(self.table, command, self.clock)
            for event in decided:
                self.table = evolve(self.table, event)
            events.extend(decided)
        return events

    def appends(self, shoes: int) -> Iterator[Append]:
        """The appends that set the table up and deal `shoes` shoes to the end."""
        now = self._tick()
        yield Append([self._table(decide(None, CreateTable(self.table_id), now))], now)
        for number, player in enumerate(self.players, start=1):
            seated = self._table(decide(self.table, SitDown(player, number), now))
            funded = self._wallet(player, [Deposited(DEPOSIT, "bench float", None)])
            yield Append([seated, funded], now)
        for nonce in range(1, shoes + 1):
            yield from self._shoe(nonce)

    def _shoe(self, nonce: int) -> Iterator[Append]:
        assert self.table is not None
        seed = ServerSeed.generate()
        client_seed = f"bench-{nonce}"
        shuffled = seed.shuffle(client_seed, nonce, self.table.settings.decks)
        shoe_id = f"{self.table_id}-shoe-{nonce}"
        command = OpenShoe(
            shoe_id, seed.commitment, client_seed, nonce, self.table.settings.decks, shuffled.hands
        )
        base = self.table_version
        events = decide(self.table, command, self._tick())
        yield Append([self._table_appended(base, events)], self.clock)
        while True:
            yield self._coup(shoe_id, shuffled.cards)
            shoe = self.table.shoe
            assert shoe is not None
            if not shoe.can_deal:
                break
        base = self.table_version
        events = self._decide(RetireShoe(), RevealShoe(shoe_id, seed.reveal()))
        yield Append([self._appended(base, events)], self._tick())

    def _table_appended(self, base: int, events: list[TableEvent]) -> StreamAppend:
        for event in events:
            self.table = evolve(self.table, event)
        self.table_version = base + len(events)
        return self._appended(base, events)

    def _appended(self, base: int, events: list[TableEvent]) -> StreamAppend:
        self.table_version = base + len(events)
        return StreamAppend(table_stream(self.table_id), base, [to_new_event(e) for e in events])

    def _coup(self, shoe_id: str, cards: tuple[int, ...]) -> Append:
        """One round: every player bets and presses Deal; the deal settles in one append."""
        now = self._tick()
        base = self.table_version
        bets: list[TableEvent] = []
        wallets: dict[str, list[WalletEvent]] = {}
        for player in self.players:
            spot = self.random.choice((Spot.PLAYER, Spot.BANKER, Spot.BANKER, Spot.TIE))
            stake = self.random.choice((100, 500, 1000, 2500))
            placed = self._decide(PlaceBet(player, spot, stake))
            bets.extend(placed)
            round_id = self.table.round.round_id if self.table and self.table.round else ""
            wallets.setdefault(player, []).append(
                StakeReserved(self.table_id, round_id, spot, stake)
            )
        for player in self.players:
            bets.extend(self._decide(PressDeal(player)))
        assert self.table is not None
        assert self.table.shoe is not None
        position = self.table.shoe.next_position
        dealt = self._decide(DealCoup(shoe_id, cards, position))
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
        streams = [self._appended(base, bets + dealt)]
        streams.extend(self._wallet(player, events) for player, events in wallets.items())
        return Append(streams, now)


def write_export(path: str, shoes: int, players: int = 3) -> tuple[int, int]:
    """Simulate `shoes` shoes at one table and write their export; (rounds, events) written."""
    simulation = Simulation("bench", players)
    head_position, head_hash = 0, GENESIS_HASH
    rounds = events = 0
    shoe_lines: dict[str, dict[str, Any]] = {}
    dumps = orjson.dumps
    with open(path, "wb") as file:
        file.write(
            dumps(
                {
                    "kind": "header",
                    "format": EXPORT_FORMAT,
                    "table_id": simulation.table_id,
                    "from": None,
                    "to": None,
                    "first_position": 1,
                    "last_position": None,
                    "prev_hash": GENESIS_HASH,
                }
            )
            + b"\n"
        )
        for append in simulation.appends(shoes):
            records: list[RecordedEvent] = chain_events(
                append.streams, METADATA, append.recorded_at, head_position, head_hash
            )
            for record in records:
                file.write(dumps(event_line(record)) + b"\n")
                payload = record.payload
                if record.type == ShoeOpened.type:
                    shoe_lines[str(payload["shoe_id"])] = {
                        "kind": "shoe",
                        "table_id": simulation.table_id,
                        **payload,
                        "server_seed": None,
                    }
                elif record.type == ShoeRevealed.type:
                    shoe_lines[str(payload["shoe_id"])]["server_seed"] = payload["server_seed"]
                elif record.type == CoupCompleted.type:
                    rounds += 1
            events += len(records)
            head_position, head_hash = records[-1].position, records[-1].hash
        for line in shoe_lines.values():
            file.write(dumps(line) + b"\n")
        for player, (_, wallet) in simulation.wallets.items():
            empty = wallet_state(Wallet(player))
            line = {"kind": "wallet", "player_id": player, "opening": empty}
            file.write(dumps({**line, "closing": wallet_state(wallet)}) + b"\n")
    return rounds, events


def parse_only(path: str) -> int:
    """The baseline: read and parse every line of the file, and do nothing else."""
    with open(path, "rb") as file:
        return sum(1 for _ in parse_lines(file))


def main() -> None:
    """Generate the export, then time parsing it and verifying it, interleaved."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--shoes", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "export.jsonl")
        started = time.perf_counter()
        rounds, events = write_export(path, arguments.shoes)
        generated = time.perf_counter() - started
        size = os.path.getsize(path)
        print(
            f"export: {arguments.shoes} shoes, {rounds} rounds, {events} events, "
            f"{size / 1e6:.0f} MB, generated in {generated:.1f} s"
        )
        parsing: list[float] = []
        verifying: list[float] = []
        for _ in range(arguments.repeats):
            started = time.perf_counter()
            parse_only(path)
            parsing.append(time.perf_counter() - started)
            started = time.perf_counter()
            report = verify_file(path)
            verifying.append(time.perf_counter() - started)
            if not report.ok:
                raise SystemExit(
                    f"the generated export does not verify: {report.discrepancies[:3]}"
                )
        parse_s, verify_s = statistics.median(parsing), statistics.median(verifying)
        print(f"parse only: median {parse_s:.2f} s = {rounds / parse_s:,.0f} rounds/s")
        print(f"verify:     median {verify_s:.2f} s = {rounds / verify_s:,.0f} rounds/s")
        print(f"verify costs {verify_s / parse_s:.1f}x parsing ({arguments.repeats} repeats)")


if __name__ == "__main__":
    main()
