"""The player application service: a player's own bet limit, and their round history.

The history is read from the streams themselves: the wallet names the rounds the player staked
in, and each round's events come from its table's stream. That costs a read of each table's
stream; a projection replaces it when the read models land.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from domain.player_limits import (
    PLAYER_LIMIT_EVENT_TYPES,
    PlayerLimit,
    SetPlayerLimit,
    decide_limit,
    evolve_limit,
)
from domain.round import (
    BetPlaced,
    BetSettled,
    CardDrawn,
    CoupCompleted,
    RoundOpened,
    RoundVoided,
    SettlementReversed,
    StakeReturned,
)
from domain.table import TABLE_EVENT_TYPES, is_round_event
from domain.wallet import WALLET_EVENT_TYPES, StakeReserved
from events.store import AppendResult, EventStore, StreamAppend
from service.application.actor import Actor
from service.application.appends import DEFAULT_PATIENCE, Patience, Prepared, Receipt, run_command
from service.application.errors import PlayerNotFound
from service.application.streams import (
    DomainEvent,
    StreamCache,
    from_recorded_as,
    id_of,
    player_stream,
    seamless_stream,
    table_stream,
    to_new_event,
    wallet_stream,
)


def _fold_limit(limit: PlayerLimit, event: DomainEvent) -> PlayerLimit:
    if not isinstance(event, PLAYER_LIMIT_EVENT_TYPES):
        raise TypeError(f"{event.type} is not a player limit event")
    return evolve_limit(limit, event)


class LimitCache(StreamCache[PlayerLimit]):
    """The per-process cache of players' own limits: (version, PlayerLimit) per player."""

    def __init__(self, capacity: int = 4096) -> None:
        super().__init__(lambda stream_id: PlayerLimit(id_of(stream_id)), _fold_limit, capacity)

    def limit(self, store: EventStore, player_id: str) -> tuple[int, PlayerLimit]:
        """A player's own limit and its stream's version (never set: None, version 0)."""
        return self.load(store, player_stream(player_id))


@dataclass(frozen=True, slots=True)
class PlayedBet:
    """A bet of the player's in a round and how it ended: settled, returned, or reversed."""

    seat: int
    spot: str
    stake: int
    payout: int | None
    commission: int | None
    returned: str | None


@dataclass(frozen=True, slots=True)
class PlayedCard:
    """A card of the round's coup."""

    hand: str
    position: int
    card: str
    reason: str


@dataclass(frozen=True, slots=True)
class RoundHistory:
    """One round the player staked in: their bets, the cards, the outcome and their payout."""

    table_id: str
    round_id: str
    opened_at: datetime | None
    bets: tuple[PlayedBet, ...]
    cards: tuple[PlayedCard, ...]
    outcome: str | None
    player_total: int | None
    banker_total: int | None
    payout: int
    voided: bool


class PlayerService:
    """A player's own limit (at most one change a week) and the rounds they played."""

    def __init__(
        self,
        store: EventStore,
        clock: Callable[[], datetime],
        *,
        limits: LimitCache | None = None,
        patience: Patience = DEFAULT_PATIENCE,
    ) -> None:
        self._store = store
        self._clock = clock
        self._limits = limits if limits is not None else LimitCache()
        self._patience = patience

    def set_limit(self, player_id: str, limit: int | None, actor: Actor) -> Receipt:
        """Set (None: remove) the player's own maximum stake per round, in pence."""
        stream = player_stream(player_id)

        def prepare() -> Prepared:
            version, current = self._limits.limit(self._store, player_id)
            events = decide_limit(current, SetPlayerLimit(limit), self._clock())
            after = current
            for event in events:
                after = evolve_limit(after, event)

            def recorded(result: AppendResult) -> None:
                self._limits.put(stream, result.versions[stream], after)

            return Prepared(
                [StreamAppend(stream, version, [to_new_event(e) for e in events])],
                tuple(events),
                recorded,
            )

        return run_command(self._store, actor, prepare, self._patience)

    def get_limit(self, player_id: str) -> PlayerLimit:
        """The player's own limit and when it last changed."""
        return self._limits.limit(self._store, player_id)[1]

    def rounds(self, player_id: str, limit: int = 20) -> list[RoundHistory]:
        """The player's last `limit` rounds, newest first."""
        if limit < 1:
            raise ValueError("limit must be at least 1")
        staked: dict[tuple[str, str], None] = {}
        for recorded in self._store.read_stream(wallet_stream(player_id)):
            event = from_recorded_as(recorded, WALLET_EVENT_TYPES)
            if isinstance(event, StakeReserved):
                staked[event.table_id, event.round_id] = None
        wanted = list(staked)[-limit:]
        by_table: dict[str, set[str]] = {}
        for table_id, round_id in wanted:
            by_table.setdefault(table_id, set()).add(round_id)
        histories: dict[tuple[str, str], RoundHistory] = {}
        for table_id, round_ids in by_table.items():
            for round_id, history in _histories(self._store, table_id, round_ids, player_id):
                histories[table_id, round_id] = history
        return [histories[key] for key in reversed(wanted) if key in histories]


def _histories(
    store: EventStore, table_id: str, round_ids: set[str], player_id: str
) -> list[tuple[str, RoundHistory]]:
    events: dict[str, list[DomainEvent]] = {round_id: [] for round_id in round_ids}
    for recorded in store.read_stream(table_stream(table_id)):
        event = from_recorded_as(recorded, TABLE_EVENT_TYPES)
        if is_round_event(event) and event.round_id in events:
            events[event.round_id].append(event)
    return [
        (round_id, _history(table_id, round_id, round_events, player_id))
        for round_id, round_events in events.items()
    ]


def _history(
    table_id: str, round_id: str, events: list[DomainEvent], player_id: str
) -> RoundHistory:
    opened_at: datetime | None = None
    stakes: dict[str, tuple[int, int]] = {}  # spot -> (seat, stake on the layout)
    bets: list[PlayedBet] = []
    cards: list[PlayedCard] = []
    outcome: str | None = None
    totals: tuple[int | None, int | None] = (None, None)
    voided = False
    for event in events:
        match event:
            case RoundOpened():
                opened_at = datetime.fromisoformat(event.opened_at)
            case BetPlaced(player_id=who) if who == player_id:
                seat, stake = stakes.get(event.spot, (event.seat, 0))
                stakes[event.spot] = (seat, stake + event.stake)
            case StakeReturned(player_id=who) if who == player_id:
                stakes.pop(event.spot, None)
                bets.append(
                    PlayedBet(event.seat, str(event.spot), event.stake, None, None, event.reason)
                )
            case BetSettled(player_id=who) if who == player_id:
                stakes.pop(event.spot, None)
                bets.append(
                    PlayedBet(
                        event.seat,
                        str(event.spot),
                        event.stake,
                        event.payout,
                        event.commission,
                        None,
                    )
                )
            case SettlementReversed(player_id=who) if who == player_id:
                bets = [
                    PlayedBet(b.seat, b.spot, b.stake, 0, 0, "reversed")
                    if b.spot == str(event.spot) and b.payout is not None
                    else b
                    for b in bets
                ]
            case CardDrawn():
                cards.append(PlayedCard(str(event.hand), event.position, event.card, event.reason))
            case CoupCompleted():
                outcome = str(event.outcome)
                totals = (event.player_total, event.banker_total)
            case RoundVoided():
                voided = True
    # Stakes still on the layout: the round is not over yet.
    for spot, (seat, stake) in stakes.items():
        bets.append(PlayedBet(seat, str(spot), stake, None, None, None))
    return RoundHistory(
        table_id=table_id,
        round_id=round_id,
        opened_at=opened_at,
        bets=tuple(bets),
        cards=tuple(cards),
        outcome=outcome,
        player_total=totals[0],
        banker_total=totals[1],
        payout=sum(b.payout or 0 for b in bets),
        voided=voided,
    )


class KnownPlayers:
    """Which player keys exist: an internal player once ops deposited to it, a seamless one once
    its session was opened (issue 24).

    The proof is the first event of the player's wallet stream or seamless stream: a read of
    one stream's head by its index (both the sequenced and the not-yet-sequenced rows), so a
    deposit answered a moment ago counts at once, before the sequencer gives it a position.
    A player never stops existing (the log keeps every event), so the players found are
    remembered, in a bounded set; a player not found is asked again next time.
    """

    def __init__(self, store: EventStore, capacity: int = 65536) -> None:
        self._store = store
        self._capacity = capacity
        self._known: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()

    def exists(self, player_id: str) -> bool:
        """Whether the player key has a wallet stream or a seamless stream."""
        with self._lock:
            if player_id in self._known:
                self._known.move_to_end(player_id)
                return True
        for stream in (wallet_stream(player_id), seamless_stream(player_id)):
            if self._store.last_of_stream(stream, upcast=False) is not None:
                self.remember(player_id)
                return True
        return False

    def require(self, player_id: str) -> str:
        """The player key, if it exists; else PlayerNotFound (a 404 `player-not-found`)."""
        if not self.exists(player_id):
            raise PlayerNotFound(player_id)
        return player_id

    def remember(self, player_id: str) -> None:
        """Note a player that now exists (its first event was just recorded)."""
        with self._lock:
            self._known[player_id] = None
            self._known.move_to_end(player_id)
            while len(self._known) > self._capacity:
                self._known.popitem(last=False)
