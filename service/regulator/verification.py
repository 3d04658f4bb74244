"""One verifier of an export: chain, seeds, cards, tableau, payouts and wallets, all offline.

It reads only the export's lines (docs/verification.md) and the published rules: no database,
no network, nothing of the service's state. `shoebox verify`, the shoes' `/verify` endpoint
and the tests all call `verify_export`, so there is one definition of "verifies".

It works on the JSON payloads rather than on decoded domain events: an export is evidence
from a possibly faulty system, and a verifier that refused to decode a corrupted payload
would report a crash instead of naming the discrepancy.
"""

from __future__ import annotations

import gc
import hashlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, NamedTuple

import orjson

from domain import wallet
from domain.cards import card_code
from domain.errors import DomainError, NotEnoughCards
from domain.outcome import Outcome, Spot
from domain.payouts import Settlement, settle
from domain.round import (
    BetPlaced,
    BetSettled,
    CardDrawn,
    CoupCompleted,
    HandStood,
    SettlementReversed,
    StakeReturned,
)
from domain.shoe import commitment, shuffle_shoe
from domain.table import ShoeOpened, ShoeRevealed
from domain.tableau import deal_coup

EXPORT_FORMAT = "shoebox-export/1"
SEAMLESS_EXPORT_FORMAT = "shoebox-export/2"
"""Version 1 plus a seamless player's money story (`seamless:` streams): stated only by an
export whose slice holds such events, so that one of internal wallets reads as before."""
EXPORT_FORMATS = (EXPORT_FORMAT, SEAMLESS_EXPORT_FORMAT)


class Check(StrEnum):
    """Which property of the export a discrepancy breaks: the names `verify` prints."""

    FORMAT = "format"
    CHAIN = "chain"
    SEED = "seed"
    CARD = "card"
    TABLEAU = "tableau"
    PAYOUT = "payout"
    WALLET = "wallet"


@dataclass(frozen=True, slots=True)
class Discrepancy:
    """One thing in the export that does not follow from the rest and the rules."""

    check: Check
    where: str
    detail: str

    def __str__(self) -> str:
        return f"{self.check}: {self.where}: {self.detail}"


@dataclass(slots=True)
class Report:
    """What a verification found: counts of what it checked, and every discrepancy."""

    events: int = 0
    shoes: int = 0
    shoes_unrevealed: int = 0
    rounds: int = 0
    cards: int = 0
    settlements: int = 0
    wallets: int = 0
    discrepancies: list[Discrepancy] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Whether nothing was found wrong."""
        return not self.discrepancies

    def add(self, check: Check, where: str, detail: str) -> None:
        """Record a discrepancy."""
        self.discrepancies.append(Discrepancy(check, where, detail))


@dataclass(slots=True)
class _Shoe:
    shoe_id: str
    server_seed_hash: str
    client_seed: str
    nonce: int
    decks: int
    hands: int
    server_seed: str | None
    cards: tuple[int, ...] | None = None


@dataclass(slots=True)
class _Round:
    """What the slice shows of one round's coup, gathered in log order."""

    deal: list[tuple[Any, ...]] = field(default_factory=list)
    first_position: int | None = None
    shoe_id: str | None = None
    outcome: str | None = None
    stakes: dict[tuple[str, str], int] = field(default_factory=dict)
    settled: dict[tuple[str, str], tuple[int, int, int]] = field(default_factory=dict)
    where: str = ""


def parse_lines(lines: Iterable[bytes | str]) -> Iterator[dict[str, Any]]:
    """The export's JSON objects, one a line, skipping blank lines."""
    loads = orjson.loads
    for line in lines:
        if line.strip():
            document = loads(line)
            if not isinstance(document, dict):
                raise ValueError(f"an export line is a JSON object, not {line[:40]!r}")
            yield document


def verify_file(path: str) -> Report:
    """Verify the export at `path`."""
    # An export is JSON: trees without cycles, all kept until the end. The cyclic collector
    # would walk the growing heap again and again for nothing, so it is paused meanwhile.
    collecting = gc.isenabled()
    gc.disable()
    try:
        with open(path, "rb") as file:
            return verify_export(parse_lines(file))
    finally:
        if collecting:
            gc.enable()


def verify_export(documents: Iterable[Mapping[str, Any]]) -> Report:
    """Check every property docs/verification.md lists, naming each discrepancy found."""
    report = Report()
    header: Mapping[str, Any] | None = None
    chain: _Chain | None = None
    # Only what the later checks read is kept of each event, not its whole line: an export
    # of a thousand shoes is nearly two million events.
    events: list[_Event] = []
    shoes: dict[str, _Shoe] = {}
    wallets: dict[str, Mapping[str, Any]] = {}
    for document in documents:
        kind = document.get("kind")
        if kind == "event":
            if chain is None:
                chain = _Chain(header, report)
            chain.step(document)
            events.append(
                _Event(
                    document["category"],
                    document["type"],
                    document["stream_id"],
                    document["version"],
                    document["payload"],
                )
            )
        elif kind == "shoe":
            shoe = _shoe(document)
            shoes[shoe.shoe_id] = shoe
        elif kind == "wallet":
            wallets[document["player_id"]] = document
        elif kind == "header":
            header = document
        else:
            report.add(Check.FORMAT, "line", f"unknown line kind {kind!r}")
    if header is None or header.get("format") not in EXPORT_FORMATS:
        report.add(Check.FORMAT, "header", f"the first line must be a {EXPORT_FORMAT} header")
    report.events = len(events)
    _check_seeds(shoes, events, report)
    rounds = _check_rounds(events, shoes, report)
    _check_wallets(events, wallets, rounds, report)
    return report


class _Event(NamedTuple):
    category: str
    type: str
    stream_id: str
    version: int
    payload: Mapping[str, Any]


def _shoe(document: Mapping[str, Any]) -> _Shoe:
    return _Shoe(
        document["shoe_id"],
        document["server_seed_hash"],
        document["client_seed"],
        document["nonce"],
        document["decks"],
        document["hands"],
        document.get("server_seed"),
    )


def verify_shoe_rounds(
    shoe: Mapping[str, Any], table_events: Iterable[Mapping[str, Any]]
) -> Report:
    """Check one shoe's seed and every coup dealt from it, without chain or wallets.

    `table_events` are export event lines of the shoe's table stream: its shoe events and
    every event of the rounds dealt from it. The shoes' /verify endpoint uses this; an
    unrevealed shoe is counted, not checked, since nobody can re-derive it yet.
    """
    report = Report()
    events = [
        _Event(e["category"], e["type"], e["stream_id"], e["version"], e["payload"])
        for e in table_events
    ]
    report.events = len(events)
    record = _shoe(shoe)
    shoes = {record.shoe_id: record}
    _check_seeds(shoes, events, report)
    _check_rounds(events, shoes, report)
    return report


class _Chain:
    """The hash chain of docs/audit-log.md, checked one event line at a time.

    The hashed document is the line's nine document keys, canonically encoded (orjson with
    sorted keys is the reference encoder of events/canonical.py). Each break is reported and
    the walk goes on from the hash the line carries, so every edited event is named, not just
    the first.
    """

    def __init__(self, header: Mapping[str, Any] | None, report: Report) -> None:
        self._header = header
        self._report = report
        self._prev_hash: str | None = None
        self._expected_position = 0

    def step(self, line: Mapping[str, Any]) -> None:
        """Check one event line against the one before it."""
        report = self._report
        position = line["position"]
        where = f"position {position} ({line['stream_id']} {line['type']})"
        if self._prev_hash is None:
            header = self._header
            if header is not None and (
                header.get("first_position") != position
                or header.get("prev_hash") != line["prev_hash"]
            ):
                report.add(Check.CHAIN, where, "the header's first_position/prev_hash do not match")
            self._prev_hash, self._expected_position = line["prev_hash"], position
        prev_hash = self._prev_hash
        if position != self._expected_position:
            report.add(
                Check.CHAIN, where, f"expected position {self._expected_position}: rows missing"
            )
        if line["prev_hash"] != prev_hash:
            report.add(Check.CHAIN, where, f"prev_hash should be {prev_hash}")
        document = _dumps({key: line[key] for key in _DOCUMENT_KEYS}, option=_SORT_KEYS)
        digest = _sha256(prev_hash.encode("ascii") + document).hexdigest()
        if digest != line["hash"]:
            report.add(Check.CHAIN, where, f"the event hashes to {digest}, not {line['hash']}")
        self._prev_hash = line["hash"]
        self._expected_position = position + 1


_dumps, _SORT_KEYS, _sha256 = orjson.dumps, orjson.OPT_SORT_KEYS, hashlib.sha256


_DOCUMENT_KEYS = (
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


def _check_seeds(shoes: dict[str, _Shoe], events: list[_Event], report: Report) -> None:
    for document in events:
        if document.category != "table":
            continue
        payload = document.payload
        if document.type == ShoeOpened.type:
            shoe = shoes.get(payload["shoe_id"])
            published = (
                payload["server_seed_hash"],
                payload["client_seed"],
                payload["nonce"],
                payload["decks"],
                payload["hands"],
            )
            if shoe is None or published != (
                shoe.server_seed_hash,
                shoe.client_seed,
                shoe.nonce,
                shoe.decks,
                shoe.hands,
            ):
                report.add(
                    Check.SEED,
                    f"shoe {payload['shoe_id']}",
                    "the shoe line differs from its ShoeOpened event",
                )
        elif document.type == ShoeRevealed.type:
            shoe = shoes.get(payload["shoe_id"])
            if shoe is None or shoe.server_seed != payload["server_seed"]:
                report.add(
                    Check.SEED,
                    f"shoe {payload['shoe_id']}",
                    "the shoe line's server_seed differs from its ShoeRevealed event",
                )
    for shoe in shoes.values():
        report.shoes += 1
        if shoe.server_seed is None:
            report.shoes_unrevealed += 1
            continue
        try:
            matches = commitment(shoe.server_seed) == shoe.server_seed_hash
            if matches:
                shuffled = shuffle_shoe(shoe.server_seed, shoe.client_seed, shoe.nonce, shoe.decks)
        except DomainError as error:
            report.add(Check.SEED, f"shoe {shoe.shoe_id}", f"cannot re-derive the shoe: {error}")
            continue
        if not matches:
            report.add(
                Check.SEED,
                f"shoe {shoe.shoe_id}",
                f"the revealed server_seed does not hash to the commitment {shoe.server_seed_hash}",
            )
            continue
        if shuffled.hands != shoe.hands:
            report.add(
                Check.SEED,
                f"shoe {shoe.shoe_id}",
                f"the seed gives {shuffled.hands} hands, the log published {shoe.hands}",
            )
        shoe.cards = shuffled.cards


def _check_rounds(
    events: list[_Event], shoes: dict[str, _Shoe], report: Report
) -> dict[str, _Round]:
    rounds: dict[str, _Round] = {}
    codes = [card_code(card) for card in range(52)]
    for document in events:
        if document.category != "table":
            continue
        type_ = document.type
        payload = document.payload
        round_id = payload.get("round_id")
        if round_id is None:
            continue
        current = rounds.get(round_id)
        if current is None:
            current = rounds[round_id] = _Round(where=f"round {round_id}")
        if type_ == CardDrawn.type:
            report.cards += 1
            shoe_id, position, card = payload["shoe_id"], payload["position"], payload["card"]
            if current.first_position is None:
                current.first_position, current.shoe_id = position, shoe_id
            current.deal.append(
                (CardDrawn.type, payload["hand"], position, card, payload["reason"])
            )
            shoe = shoes.get(shoe_id)
            if shoe is None:
                report.add(Check.CARD, current.where, f"card from unknown shoe {shoe_id}")
            elif shoe.cards is not None:
                if not 0 <= position < len(shoe.cards):
                    report.add(Check.CARD, current.where, f"no position {position} in the shoe")
                elif codes[shoe.cards[position]] != card:
                    expected = codes[shoe.cards[position]]
                    report.add(
                        Check.CARD,
                        f"{current.where}, shoe {shoe_id} position {position}",
                        f"the log says {card}, the re-derived shoe has {expected}",
                    )
        elif type_ == HandStood.type:
            current.deal.append((HandStood.type, payload["hand"], payload["reason"]))
        elif type_ == CoupCompleted.type:
            current.outcome = payload["outcome"]
            current.deal.append(
                (
                    CoupCompleted.type,
                    payload["player_total"],
                    payload["banker_total"],
                    payload["outcome"],
                )
            )
        elif type_ == BetPlaced.type:
            key = (payload["player_id"], payload["spot"])
            current.stakes[key] = current.stakes.get(key, 0) + payload["stake"]
        elif type_ == StakeReturned.type:
            current.stakes.pop((payload["player_id"], payload["spot"]), None)
        elif type_ == BetSettled.type:
            report.settlements += 1
            _check_settlement(current, payload, report)
        elif type_ == SettlementReversed.type:
            key = (payload["player_id"], payload["spot"])
            reversed_ = (payload["stake"], payload["payout"], payload["commission"])
            if key in current.settled and current.settled[key] != reversed_:
                report.add(
                    Check.PAYOUT,
                    f"{current.where}, {key[0]} on {key[1]}",
                    f"the reversal {reversed_} differs from the settlement {current.settled[key]}",
                )
    for current in rounds.values():
        if current.first_position is not None:
            report.rounds += 1
            _check_tableau(current, shoes, report)
    return rounds


_SETTLEMENTS: dict[tuple[str, int, str], Settlement] = {}


def _check_settlement(current: _Round, payload: Mapping[str, Any], report: Report) -> None:
    key = (payload["player_id"], payload["spot"])
    where = f"{current.where}, {key[0]} on {key[1]}"
    stake, payout, commission = payload["stake"], payload["payout"], payload["commission"]
    current.settled[key] = (stake, payout, commission)
    placed = current.stakes.get(key)
    if placed is not None and placed != stake:
        report.add(Check.PAYOUT, where, f"settled a stake of {stake}p, the bets placed {placed}p")
    if current.outcome is None:
        report.add(Check.PAYOUT, where, "a bet settled before the coup completed")
        return
    rule = (payload["spot"], stake, current.outcome)
    expected = _SETTLEMENTS.get(rule)
    if expected is None:
        try:
            expected = settle(Spot(payload["spot"]), stake, Outcome(current.outcome))
        except (ValueError, DomainError) as error:
            report.add(Check.PAYOUT, where, f"cannot settle: {error}")
            return
        # A few spots, stakes and outcomes recur across thousands of bets.
        if len(_SETTLEMENTS) < 10_000:
            _SETTLEMENTS[rule] = expected
    if (expected.payout, expected.commission) != (payout, commission):
        report.add(
            Check.PAYOUT,
            where,
            f"paid {payout}p with {commission}p commission on a {current.outcome} win; the rules "
            f"pay {expected.payout}p with {expected.commission}p commission",
        )


def _check_tableau(current: _Round, shoes: dict[str, _Shoe], report: Report) -> None:
    assert current.shoe_id is not None
    assert current.first_position is not None
    shoe = shoes.get(current.shoe_id)
    if shoe is None or shoe.cards is None:
        return  # unrevealed or unknown: the card check has already said which
    try:
        coup = deal_coup(shoe.cards, current.first_position)
    except NotEnoughCards as error:
        report.add(Check.TABLEAU, current.where, str(error))
        return
    expected: list[tuple[Any, ...]] = [
        (CardDrawn.type, str(drawn.hand), drawn.position, card_code(drawn.card), drawn.reason)
        for drawn in coup.cards[:4]
    ]
    third_cards = iter(coup.cards[4:])
    for decision in coup.decisions:
        if decision.draws:
            drawn = next(third_cards)
            expected.append(
                (
                    CardDrawn.type,
                    str(drawn.hand),
                    drawn.position,
                    card_code(drawn.card),
                    drawn.reason,
                )
            )
        else:
            expected.append((HandStood.type, str(decision.hand), decision.reason))
    expected.append((CoupCompleted.type, coup.player_total, coup.banker_total, str(coup.outcome)))
    recorded = current.deal
    if len(recorded) < len(expected) and recorded == expected[: len(recorded)]:
        return  # the slice ends mid-coup, or the coup is still being dealt: a prefix agrees
    if recorded != expected:
        for index, (want, got) in enumerate(zip(expected, recorded, strict=False)):
            if want != got:
                report.add(
                    Check.TABLEAU,
                    current.where,
                    f"step {index + 1} of the coup: the rules give {_step(want)}, "
                    f"the log has {_step(got)}",
                )
                return
        report.add(
            Check.TABLEAU,
            current.where,
            f"the rules deal {len(expected)} steps, the log has {len(recorded)}",
        )


def _step(step: tuple[Any, ...]) -> str:
    return " ".join(str(part) for part in step)


def _check_wallets(
    events: list[_Event],
    wallets: dict[str, Mapping[str, Any]],
    rounds: dict[str, _Round],
    report: Report,
) -> None:
    state: dict[str, tuple[int, int, dict[tuple[str, str, str], int]]] = {}
    for player_id, line in wallets.items():
        opening = line["opening"]
        stakes = {
            (table_id, round_id, spot): stake
            for table_id, round_id, spot, stake in opening.get("open_stakes", ())
        }
        state[player_id] = (opening["available"], opening["reserved"], stakes)
    for document in events:
        if document.category != "wallet":
            continue
        player_id = document.stream_id.partition(":")[2]
        where = f"wallet {player_id} version {document.version}"
        held = state.get(player_id)
        if held is None:
            report.add(Check.WALLET, where, "the export has no wallet line for this wallet")
            state[player_id] = held = (0, 0, {})
        available, reserved, stakes = held
        payload = document.payload
        type_ = document.type
        if type_ in (wallet.Deposited.type, wallet.Corrected.type):
            available += payload["amount"]
        elif type_ == wallet.Withdrawn.type:
            available -= payload["amount"]
        elif type_ == wallet.StakeReserved.type:
            key = (payload["table_id"], payload["round_id"], payload["spot"])
            stakes[key] = stakes.get(key, 0) + payload["stake"]
            available -= payload["stake"]
            reserved += payload["stake"]
        elif type_ in (wallet.StakeReturned.type, wallet.PayoutCredited.type):
            key = (payload["table_id"], payload["round_id"], payload["spot"])
            open_stake = stakes.pop(key, None)
            if open_stake != payload["stake"]:
                report.add(
                    Check.WALLET,
                    where,
                    f"releases a {payload['stake']}p stake on {key[1]} {key[2]}, "
                    f"but {open_stake}p was reserved",
                )
            credit = payload["stake"] if type_ == wallet.StakeReturned.type else payload["payout"]
            available += credit
            reserved -= payload["stake"]
            if type_ == wallet.PayoutCredited.type:
                _check_credit(rounds, player_id, payload, where, report)
        elif type_ == wallet.SettlementReversed.type:
            available += payload["stake"] - payload["payout"]
        else:
            report.add(Check.WALLET, where, f"unknown wallet event {type_}")
        state[player_id] = (available, reserved, stakes)
    for player_id, line in wallets.items():
        report.wallets += 1
        available, reserved, _ = state[player_id]
        closing = line["closing"]
        if (available, reserved) != (closing["available"], closing["reserved"]):
            report.add(
                Check.WALLET,
                f"wallet {player_id}",
                f"its events give available {available}p and reserved {reserved}p; the export "
                f"states {closing['available']}p and {closing['reserved']}p",
            )


def _check_credit(
    rounds: dict[str, _Round],
    player_id: str,
    payload: Mapping[str, Any],
    where: str,
    report: Report,
) -> None:
    current = rounds.get(payload["round_id"])
    if current is None:
        return  # the round's table events are outside the slice
    settled = current.settled.get((player_id, payload["spot"]))
    credited = (payload["stake"], payload["payout"], payload["commission"])
    if settled is None:
        round_id = payload["round_id"]
        report.add(Check.WALLET, where, f"credits a payout that round {round_id} never settled")
    elif settled != credited:
        report.add(
            Check.WALLET,
            where,
            f"credits {credited} (stake, payout, commission), the table settled {settled}",
        )
