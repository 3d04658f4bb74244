"""Reading rounds and shoes back from the log for regulators: replays, shoe records, checks.

Everything here is derived from the recorded events alone, never from the service's caches or
its shoe secrets: a replay is what the log says happened, re-enacted step by step, and a shoe
check re-derives the shoe from the seed the log revealed.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from domain.cards import CARDS_PER_DECK, card_value, parse_card
from domain.round import (
    BetPlaced,
    BetSettled,
    CardDrawn,
    CoupCompleted,
    DealPressed,
    DealResumed,
    HandStood,
    PlayerExcluded,
    PlayerPassed,
    RoundEndedWithoutPlay,
    RoundOpened,
    RoundSettled,
    RoundVoided,
    SettlementReversed,
    StakeReturned,
)
from domain.table import ShoeOpened, ShoeRetired, ShoeRevealed
from domain.wallet import (
    WALLET_EVENT_TYPES,
    StakeReserved,
    Wallet,
    WalletEvent,
    evolve_wallet,
)
from events.canonical import format_timestamp
from events.store import UNSEQUENCED, EventStore, RecordedEvent
from service.application.read_models.queries import ProjectionService
from service.application.streams import TABLE, from_recorded_as, id_of, table_stream, wallet_stream
from service.application.upcasters import upcasters
from service.regulator.export import event_line, wallet_state
from service.regulator.verification import Report, verify_shoe_rounds

_BATCH = 5000


class RoundStatus(StrEnum):
    """Where a replayed round got to."""

    IN_PROGRESS = "in_progress"
    COMPLETE = "complete"
    INTERRUPTED = "interrupted"
    VOIDED = "voided"


class NotInLogError(LookupError):
    """No round or shoe of that id is in the log."""


def _round_table(round_id: str) -> str:
    # Round ids are "{table_id}-{number}" (domain.table.round_id_for); table ids may hold "-".
    table_id, _, number = round_id.rpartition("-")
    if not table_id or not number.isdigit():
        raise NotInLogError(f"{round_id!r} is not a round id")
    return table_id


def round_replay(store: EventStore, round_id: str) -> dict[str, Any]:
    """The round's events in order and a re-enactment of them, marked as a replay.

    Events are read as recorded, which is what the replay's event lines show (the hash covers
    them), and upcast by the service's registry for everything that interprets them (the
    steps, seats, settlements and balances), whatever registry the store was given: a round
    whose wallet was funded by an old-schema Deposited replays like any other.
    """
    table_id = _round_table(round_id)
    registry = upcasters()
    as_recorded = _placed(store.read_stream(table_stream(table_id), upcast=False))
    table_events = registry.upcast_all(as_recorded)
    events = [e for e in table_events if e.payload.get("round_id") == round_id]
    if not events:
        raise NotInLogError(f"no round {round_id} in the log")
    types = {event.type for event in events}
    later_round = any(
        e.type == RoundOpened.type and e.position > events[0].position for e in table_events
    )
    dealt = CardDrawn.type in types
    if RoundVoided.type in types:
        status = RoundStatus.VOIDED
    elif RoundSettled.type in types or RoundEndedWithoutPlay.type in types:
        status = RoundStatus.COMPLETE
    elif dealt or later_round:
        # Begun but never finished, and the table has moved on or the deal stopped part-way.
        status = RoundStatus.INTERRUPTED
    else:
        status = RoundStatus.IN_PROGRESS
    players = _participants(events)
    wallet_events: dict[str, list[RecordedEvent]] = {
        player: _placed(store.read_stream(wallet_stream(player), upcast=False))
        for player in players
    }
    balances = {
        player: _balances(round_id, events[0].position, registry.upcast_all(recorded))
        for player, recorded in wallet_events.items()
    }
    # The lines as recorded: the round's table events, and its wallets' money.
    related = sorted(
        [
            *(e for e in as_recorded if _of_round(e, round_id)),
            *(e for rs in wallet_events.values() for e in rs if _of_round(e, round_id)),
        ],
        key=lambda e: e.position,
    )
    return {
        "replay": True,
        "notice": (
            "REPLAY: a re-enactment of round events already recorded in the log; "
            "nothing here was dealt or paid again"
        ),
        "round_id": round_id,
        "table_id": table_id,
        "status": status,
        "events": [event_line(event) for event in related],
        "seats": _seats(events),
        "steps": list(_steps(events)),
        "outcome": next(
            (e.payload["outcome"] for e in events if e.type == CoupCompleted.type), None
        ),
        "settlements": [
            {
                key: e.payload[key]
                for key in ("seat", "player_id", "spot", "stake", "payout", "commission")
            }
            | {"reversed": e.type == SettlementReversed.type}
            for e in events
            if e.type in (BetSettled.type, SettlementReversed.type)
        ],
        "wallets": [
            {"player_id": player, "before": before, "after": after}
            for player, (before, after) in balances.items()
        ],
    }


def _participants(events: list[RecordedEvent]) -> list[str]:
    players: dict[str, None] = {}
    for event in events:
        if event.type == RoundOpened.type:
            for _, player in _participant_pairs(event):
                players[str(player)] = None
        elif "player_id" in event.payload:
            players[str(event.payload["player_id"])] = None
    return list(players)


def _participant_pairs(event: RecordedEvent) -> list[tuple[int, str]]:
    pairs = event.payload["participants"]
    assert isinstance(pairs, list)
    return [(int(str(seat)), str(player)) for seat, player in pairs]


def _of_round(event: RecordedEvent, round_id: str) -> bool:
    return event.payload.get("round_id") == round_id


def _balances(
    round_id: str, start: int, recorded: list[RecordedEvent]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The wallet just before the round's first stake, and just after its last credit."""
    # Bounded by the wallet's own events, never by the table's: the append that settles a
    # round also opens the next, and writes the table stream (RoundOpened of the next round)
    # before the wallets (PayoutCredited of this one), so the next round's RoundOpened can
    # come before money that is still this wallet's balance when that round's first bet lands.
    mine = [e.position for e in recorded if _of_round(e, round_id)]
    stakes = [
        e.position for e in recorded if _of_round(e, round_id) and e.type == StakeReserved.type
    ]
    # A participant who staked nothing here has no event of the round: both sides are then
    # the wallet as the round opened.
    first = min(stakes or mine or [start])
    last = max(mine) if mine else first - 1
    wallet = before = Wallet(id_of(recorded[0].stream_id) if recorded else "")
    for stored in recorded:
        if stored.position > last:
            break
        wallet = evolve_wallet(wallet, _wallet_event(stored))
        if stored.position < first:
            before = wallet
    return _balance(before), _balance(wallet)


def _wallet_event(stored: RecordedEvent) -> WalletEvent:
    event: WalletEvent = from_recorded_as(stored, WALLET_EVENT_TYPES)
    return event


def _balance(wallet: Wallet) -> dict[str, Any]:
    state = wallet_state(wallet)
    return {"available": state["available"], "reserved": state["reserved"]}


def _seats(events: list[RecordedEvent]) -> list[dict[str, Any]]:
    seats: dict[str, dict[str, Any]] = {}
    for event in events:
        payload = event.payload
        if event.type == RoundOpened.type:
            for number, player in _participant_pairs(event):
                seats[player] = {"seat": number, "player_id": player, "bets": {}, "action": None}
        elif (
            event.type in (BetPlaced.type, StakeReturned.type)
            and str(payload["player_id"]) in seats
        ):
            bets = seats[str(payload["player_id"])]["bets"]
            sign = 1 if event.type == BetPlaced.type else -1
            spot = str(payload["spot"])
            bets[spot] = bets.get(spot, 0) + sign * int(str(payload["stake"]))
        elif event.type in (DealPressed.type, PlayerPassed.type, PlayerExcluded.type):
            acted = seats.get(str(payload["player_id"]))
            if acted is not None:
                acted["action"] = event.type
    return [
        {**seat, "bets": [{"spot": s, "stake": p} for s, p in seat["bets"].items() if p]}
        for seat in seats.values()
    ]


def _steps(events: list[RecordedEvent]) -> Iterator[str]:
    """The round told step by step, as a dealer would call it, from the recorded facts."""
    hands: dict[str, list[int]] = {"player": [], "banker": []}
    for event in events:
        payload = event.payload
        when = format_timestamp(event.recorded_at)
        match event.type:
            case RoundOpened.type:
                yield f"{when} round {payload['number']} opens; betting until {payload['deadline']}"
            case BetPlaced.type:
                yield (
                    f"{when} seat {payload['seat']} ({payload['player_id']}) bets "
                    f"{payload['stake']}p on {payload['spot']}"
                )
            case StakeReturned.type:
                yield (
                    f"{when} seat {payload['seat']} ({payload['player_id']}) gets back "
                    f"{payload['stake']}p on {payload['spot']} ({payload['reason']})"
                )
            case DealPressed.type | PlayerPassed.type:
                verb = "presses Deal" if event.type == DealPressed.type else "passes"
                yield f"{when} seat {payload['seat']} ({payload['player_id']}) {verb}"
            case PlayerExcluded.type:
                yield f"{when} seat {payload['seat']} is excluded ({payload['reason']})"
            case CardDrawn.type:
                hand = str(payload["hand"])
                hands[hand].append(card_value(parse_card(str(payload["card"]))))
                total = sum(hands[hand]) % 10
                yield (
                    f"{when} {hand} draws {payload['card']} from shoe position "
                    f"{payload['position']}: {payload['reason']}; {hand} total {total}"
                )
            case HandStood.type:
                yield f"{when} {payload['hand']} stands: {payload['reason']}"
            case CoupCompleted.type:
                yield (
                    f"{when} Player {payload['player_total']}, Banker {payload['banker_total']}: "
                    f"{payload['outcome']} wins"
                )
            case BetSettled.type:
                yield (
                    f"{when} seat {payload['seat']} ({payload['player_id']}) {payload['stake']}p "
                    f"on {payload['spot']} is paid {payload['payout']}p "
                    f"(commission {payload['commission']}p)"
                )
            case SettlementReversed.type:
                yield (
                    f"{when} VOID: {payload['player_id']}'s payout of {payload['payout']}p is "
                    f"taken back and the {payload['stake']}p stake returned"
                )
            case RoundVoided.type:
                yield f"{when} the round is VOIDED: {payload['reason']}"
            case DealResumed.type:
                yield f"{when} an interrupted deal is resumed from the committed shoe"
            case RoundSettled.type:
                yield f"{when} the round is settled"
            case RoundEndedWithoutPlay.type:
                yield f"{when} the round ends without play: no card was dealt"
            case _:
                yield f"{when} {event.type}"


# Shoes.


@dataclass(frozen=True, slots=True)
class ShoeRecord:
    """What the log says of a shoe: where it was opened, its published facts, its events."""

    table_id: str
    opened: Mapping[str, Any]
    server_seed: str | None
    retired: bool
    events: list[RecordedEvent]


def find_shoe(
    store: EventStore, shoe_id: str, read_models: ProjectionService | None = None
) -> ShoeRecord:
    """The shoe's record from the table stream that opened it.

    The shoes read model names the range of the table's stream that holds the shoe (through
    proj_shoes' primary key, then events' unique (stream_id, version)), and the log after the
    model's checkpoint adds what it has not applied yet. A shoe the model does not know yet,
    or the in-memory wiring, is looked for by scanning the log's ShoeOpened events.
    """
    if read_models is not None:
        found = read_models.shoe_events(shoe_id)
        if found is not None:
            stream_id, events = found
            return _shoe_from(events, stream_id, shoe_id)
    after = 0
    while True:
        batch = store.read_all(after, _BATCH, categories=[TABLE], types=[ShoeOpened.type])
        for event in batch:
            if event.payload.get("shoe_id") == shoe_id:
                return _shoe_record(store, event.stream_id, shoe_id)
        if not batch or after >= store.head():
            raise NotInLogError(f"no shoe {shoe_id} in the log")
        after = batch[-1].position


def _shoe_record(store: EventStore, stream_id: str, shoe_id: str) -> ShoeRecord:
    return _shoe_from(_placed(store.read_stream(stream_id, upcast=False)), stream_id, shoe_id)


def _shoe_from(events: list[RecordedEvent], stream_id: str, shoe_id: str) -> ShoeRecord:
    rounds = {
        str(e.payload["round_id"])
        for e in events
        if e.type == CardDrawn.type and e.payload.get("shoe_id") == shoe_id
    }
    mine = [
        e
        for e in events
        if e.payload.get("shoe_id") == shoe_id or e.payload.get("round_id") in rounds
    ]
    opened = next(e.payload for e in mine if e.type == ShoeOpened.type)
    revealed = next((e.payload for e in mine if e.type == ShoeRevealed.type), None)
    return ShoeRecord(
        table_id=id_of(stream_id),
        opened=opened,
        server_seed=None if revealed is None else str(revealed["server_seed"]),
        retired=any(e.type == ShoeRetired.type for e in mine),
        events=mine,
    )


def shoe_view(record: ShoeRecord) -> dict[str, Any]:
    """The shoe as published: the seed only once the shoe has retired and it was revealed."""
    opened = record.opened
    dealt = sum(1 for e in record.events if e.type == CoupCompleted.type)
    cards = sum(1 for e in record.events if e.type == CardDrawn.type)
    return {
        "shoe_id": opened["shoe_id"],
        "table_id": record.table_id,
        "server_seed_hash": opened["server_seed_hash"],
        "client_seed": opened["client_seed"],
        "nonce": opened["nonce"],
        "decks": opened["decks"],
        "hands": opened["hands"],
        "hands_dealt": dealt,
        "cards_dealt": cards,
        "cards_left": int(str(opened["decks"])) * CARDS_PER_DECK - cards,
        "retired": record.retired,
        "server_seed": record.server_seed if record.retired else None,
    }


def verify_shoe(record: ShoeRecord) -> Report:
    """Re-derive the shoe from its revealed seed and check every coup dealt from it."""
    shoe = {"kind": "shoe", **shoe_view(record), "server_seed": record.server_seed}
    return verify_shoe_rounds(shoe, [event_line(event) for event in record.events])


def _placed(events: list[RecordedEvent]) -> list[RecordedEvent]:
    """The events the sequencer has placed in the log: a replay reads the log, by position.

    A stream read by version also has the events committed but not yet sequenced (position
    UNSEQUENCED); they are not in the log yet, and a regulator's view is of the log.
    """
    return [e for e in events if e.position != UNSEQUENCED]
