"""Round history: one row per round with its bets, cards, outcome, money, shoe and any void.

Also records which rounds each player staked in, for the player's own history page.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import orjson
from psycopg import Connection, sql
from psycopg.rows import TupleRow
from psycopg.types.json import Jsonb

from domain.round import (
    BetPlaced,
    BetSettled,
    CardDrawn,
    CoupCompleted,
    RoundEndedWithoutPlay,
    RoundOpened,
    RoundSettled,
    RoundVoided,
    SettlementReversed,
    StakeReturned,
)
from events.projections.base import (
    Projection,
    add_rows,
    by_key,
    copy_rows,
    insert_new,
    load_rows,
    upsert,
)
from events.store import RecordedEvent
from service.application.read_models.invariants import RoundRecord, round_violations

ROUND_COLUMNS: Final = (
    "table_id",
    "number",
    "position",
    "opened_at",
    "shoe_id",
    "status",
    "outcome",
    "player_total",
    "banker_total",
    "cards",
    "bets",
    "wagered",
    "paid_out",
    "commission",
    "voided",
    "void_reason",
    "ended_at",
)
(
    _TABLE,
    _NUMBER,
    _POSITION,
    _OPENED,
    _SHOE,
    _STATUS,
    _OUTCOME,
    _PLAYER_TOTAL,
    _BANKER_TOTAL,
    _CARDS,
    _BETS,
    _WAGERED,
    _PAID,
    _COMMISSION,
    _VOIDED,
    _VOID_REASON,
    _ENDED,
) = range(len(ROUND_COLUMNS))

BETTING: Final = "betting"
DEALING: Final = "dealing"
SETTLED: Final = "settled"
ENDED_WITHOUT_PLAY: Final = "ended_without_play"
VOIDED: Final = "voided"
DEALT: Final = "dealt"
"""The proj_round_totals row counting the dealt rounds checked against the rules."""
REVERSED: Final = "reversed"
"""A bet's `returned` once a void took its settlement back."""

# The table-stream events this model reads; the rest (seats, chat moderation) it skips.
_ROUND_TYPES: Final = frozenset(
    {
        RoundOpened.type,
        BetPlaced.type,
        StakeReturned.type,
        CardDrawn.type,
        CoupCompleted.type,
        BetSettled.type,
        RoundSettled.type,
        RoundEndedWithoutPlay.type,
        SettlementReversed.type,
        RoundVoided.type,
    }
)


class RoundsProjection(Projection):
    """One row per round, the (player, round) pairs of every stake, and the rules' check.

    Each round a batch changes is checked against the rules there and then, and its
    violations replace the ones it had: the invariants check reads only what is broken.
    """

    name = "rounds"
    categories = ("table",)
    tables = ("proj_rounds", "proj_round_players", "proj_round_violations", "proj_round_totals")

    def apply(self, conn: Connection[TupleRow], events: Sequence[RecordedEvent]) -> None:
        """Fold the batch's round events into their rounds' rows."""
        mine = [e for e in events if e.category == "table" and e.type in _ROUND_TYPES]
        if not mine:
            return
        rounds = load_rows(
            conn,
            self.table("proj_rounds"),
            ROUND_COLUMNS,
            "round_id",
            {e.payload["round_id"] for e in mine if e.type != RoundOpened.type},  # type: ignore[misc]
        )
        for loaded in rounds.values():
            loaded[_CARDS], loaded[_BETS] = _json(loaded[_CARDS]), _json(loaded[_BETS])
        dealt_before = {key for key, loaded in rounds.items() if loaded[_OUTCOME] is not None}
        players: list[tuple[str, str, int]] = []
        for event in mine:
            payload: Any = event.payload
            round_id = payload["round_id"]
            if event.type == RoundOpened.type:
                rounds[round_id] = _opened(event)
                continue
            row = rounds.get(round_id)
            if row is None:
                raise ValueError(f"{event.type} at {event.position} is for unknown {round_id}")
            _fold(row, event, payload)
            if event.type == BetPlaced.type:
                players.append((payload["player_id"], round_id, row[_POSITION]))
        upsert(conn, self.table("proj_rounds"), ("round_id",), ROUND_COLUMNS, by_key(rounds))
        insert_new(
            conn,
            self.table("proj_round_players"),
            ("player_id", "round_id", "position"),
            set(players),
        )
        self._check(conn, rounds, dealt_before)

    def _check(
        self, conn: Connection[TupleRow], rounds: dict[str, list[Any]], dealt_before: set[str]
    ) -> None:
        dealt = {key: row for key, row in rounds.items() if row[_OUTCOME] is not None}
        if not dealt:
            return
        violations_table = sql.Identifier(self.table("proj_round_violations"))
        conn.execute(
            sql.SQL("DELETE FROM {} WHERE round_id = ANY(%s)").format(violations_table),
            [sorted(dealt)],
        )
        found = [
            (key, seq, row[_POSITION], violation.check, violation.detail)
            for key, row in dealt.items()
            for seq, violation in enumerate(round_violations(_round_record(key, row)))
        ]
        if found:
            copy_rows(
                conn,
                self.table("proj_round_violations"),
                ("round_id", "seq", "position", "check", "detail"),
                found,
            )
        newly = len(dealt.keys() - dealt_before)
        if newly:
            totals = self.table("proj_round_totals")
            add_rows(conn, totals, ("name",), ("checked",), [(DEALT, newly)])


def _dumps(document: object) -> str:
    # orjson rather than the standard library's json, which psycopg would use: a round's bets
    # and cards are written at every batch that touches the round.
    return orjson.dumps(document).decode()


def _json(document: list[dict[str, Any]]) -> Jsonb:
    return Jsonb(document, dumps=_dumps)


def _opened(event: RecordedEvent) -> list[Any]:
    payload: Any = event.payload
    return [
        event.stream_id.partition(":")[2],
        payload["number"],
        event.position,
        payload["opened_at"],
        None,
        BETTING,
        None,
        None,
        None,
        _json([]),
        _json([]),
        0,
        0,
        0,
        False,
        None,
        None,
    ]


def _bet(bets: list[dict[str, Any]], player_id: str, spot: str) -> dict[str, Any] | None:
    # The latest bet of a player on a spot: placements add to it until it is returned.
    for bet in reversed(bets):
        if bet["player_id"] == player_id and bet["spot"] == spot:
            found: dict[str, Any] = bet
            return found
    return None


def _fold(row: list[Any], event: RecordedEvent, payload: Any) -> None:
    kind = event.type
    bets: list[dict[str, Any]] = row[_BETS].obj
    if kind == BetPlaced.type:
        bet = _bet(bets, payload["player_id"], payload["spot"])
        if bet is None or bet["returned"] is not None:
            bets.append(
                {
                    "seat": payload["seat"],
                    "player_id": payload["player_id"],
                    "spot": payload["spot"],
                    "stake": payload["stake"],
                    "payout": None,
                    "commission": None,
                    "returned": None,
                }
            )
        else:
            bet["stake"] += payload["stake"]
    elif kind == StakeReturned.type:
        bet = _bet(bets, payload["player_id"], payload["spot"])
        if bet is not None:
            bet["returned"] = payload["reason"]
    elif kind == CardDrawn.type:
        row[_SHOE] = payload["shoe_id"]
        row[_STATUS] = DEALING
        row[_CARDS].obj.append(
            {
                "hand": payload["hand"],
                "position": payload["position"],
                "card": payload["card"],
                "reason": payload["reason"],
            }
        )
    elif kind == CoupCompleted.type:
        row[_OUTCOME] = payload["outcome"]
        row[_PLAYER_TOTAL] = payload["player_total"]
        row[_BANKER_TOTAL] = payload["banker_total"]
    elif kind == BetSettled.type:
        bet = _bet(bets, payload["player_id"], payload["spot"])
        if bet is None:
            raise ValueError(f"BetSettled at {event.position} settles a bet never placed")
        bet["payout"], bet["commission"] = payload["payout"], payload["commission"]
        row[_WAGERED] += payload["stake"]
        row[_PAID] += payload["payout"]
        row[_COMMISSION] += payload["commission"]
    elif kind == RoundSettled.type:
        row[_STATUS], row[_ENDED] = SETTLED, event.recorded_at
    elif kind == RoundEndedWithoutPlay.type:
        row[_STATUS], row[_ENDED] = ENDED_WITHOUT_PLAY, event.recorded_at
    elif kind == SettlementReversed.type:
        bet = _bet(bets, payload["player_id"], payload["spot"])
        if bet is not None:
            bet["returned"] = REVERSED
        row[_WAGERED] -= payload["stake"]
        row[_PAID] -= payload["payout"]
        row[_COMMISSION] -= payload["commission"]
    elif kind == RoundVoided.type:
        row[_STATUS], row[_VOIDED], row[_VOID_REASON] = VOIDED, True, payload["reason"]
        row[_ENDED] = event.recorded_at


def _round_record(round_id: str, row: list[Any]) -> RoundRecord:
    return RoundRecord(
        round_id=round_id,
        table_id=row[_TABLE],
        number=row[_NUMBER],
        opened_at=row[_OPENED],
        shoe_id=row[_SHOE],
        status=row[_STATUS],
        outcome=row[_OUTCOME],
        player_total=row[_PLAYER_TOTAL],
        banker_total=row[_BANKER_TOTAL],
        cards=tuple(row[_CARDS].obj),
        bets=tuple(row[_BETS].obj),
        wagered=row[_WAGERED],
        paid_out=row[_PAID],
        commission=row[_COMMISSION],
        voided=row[_VOIDED],
        void_reason=row[_VOID_REASON],
        ended_at=row[_ENDED],
        position=row[_POSITION],
    )
