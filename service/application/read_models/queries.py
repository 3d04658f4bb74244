"""The read side: queries over the projection tables, rebuilds, lag and invariants.

Front ends and dashboards read here, never the event table. The models are kept by the
projector (events/projections/projector.py); this module only reads them, except for `rebuild`
and `catch_up`, which run the projection machinery on the caller's behalf.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from fractions import Fraction
from functools import cache
from typing import Any, Final

from psycopg import sql

from domain.odds import Odds, exact_odds, fresh_shoe_counts
from domain.outcome import Outcome, Spot
from domain.roads import Roads, roads_from
from domain.round import Phase
from events.postgres import EVENT_COLUMNS, Pool, event_rows
from events.store import Clock, RecordedEvent
from service.application.chat import ChatMessage
from service.application.game.views import CLOSING, IDLE
from service.application.players import PlayedBet, PlayedCard, RoundHistory
from service.application.read_models import projector
from service.application.read_models.invariants import RoundRecord, Violation
from service.application.read_models.invariants import round_violations as round_violations
from service.application.read_models.projector import ProjectionStatus, RebuildResult
from service.application.read_models.rounds import DEALT
from service.application.read_models.statistics import StatisticsProjection
from service.application.wallets import Balance, StatementEntry, WalletMovement

CURRENT_SHOE: Final = "shoe"
ALL_TIME: Final = "all"

# Through proj_wallets' primary key.
_BALANCE = "SELECT available, reserved, version FROM proj_wallets WHERE player_id = %s"
# Through proj_wallet_statement's primary key (player_id, version), backwards from the keyset.
_STATEMENT = """
SELECT version, position, recorded_at, type, amount, reserved_change, available_after,
       reserved_after, reason, table_id, round_id, spot, stake, payout, commission
FROM proj_wallet_statement
WHERE player_id = %s AND version < %s
ORDER BY version DESC LIMIT %s
"""
_ROUND_COLUMNS = """
r.round_id, r.table_id, r.number, r.opened_at, r.shoe_id, r.status, r.outcome, r.player_total,
r.banker_total, r.cards, r.bets, r.wagered, r.paid_out, r.commission, r.voided, r.void_reason,
r.ended_at, r.position
"""
# Through proj_round_players_player_position (player_id, position), backwards from the keyset,
# then proj_rounds' primary key for each of the page's rounds. The page is chosen first, in a
# materialized CTE, so the join can only ever see a page's rounds; and it is run with bitmap
# scans off (`_ORDERED_INDEX`): without statistics, as a live database has them until
# autovacuum's first analyze, the planner expects a player to have a handful of rounds and takes
# a bitmap scan of all of them and a sort (6,000 rounds read for a page of 20 at 6,000 coups).
_PLAYER_ROUNDS = (
    "WITH page AS MATERIALIZED (SELECT round_id, position FROM proj_round_players"  # noqa: S608
    " WHERE player_id = %s AND position < %s ORDER BY position DESC LIMIT %s)"
    " SELECT " + _ROUND_COLUMNS + " FROM page JOIN proj_rounds AS r USING (round_id)"
    " ORDER BY page.position DESC"
)
# For the transaction of a query that must walk an index in its order and stop at a page: with
# bitmap scans off, the only plans left that do not read in the index's order need a sort,
# which costs more than the ordered walk whatever the row estimate.
_ORDERED_INDEX = "SET LOCAL enable_bitmapscan = off"
# Through proj_rounds' primary key.
_ROUND = "SELECT " + _ROUND_COLUMNS + " FROM proj_rounds AS r WHERE r.round_id = %s"  # noqa: S608
# Through proj_rounds_table_position (table_id, position), backwards from the keyset.
_TABLE_ROUNDS = (
    "SELECT " + _ROUND_COLUMNS + " FROM proj_rounds AS r"  # noqa: S608 - constants only
    " WHERE r.table_id = %s AND r.position < %s ORDER BY r.position DESC LIMIT %s"
)
# Through proj_player_rounds' primary key (player_id, round_id): one player's rounds.
_PLAYER_SUMMARY = """
SELECT count(*) FILTER (WHERE NOT voided), coalesce(sum(wagered), 0), coalesce(sum(won), 0),
       coalesce(sum(commission), 0)
FROM proj_player_rounds WHERE player_id = %s
"""
# Through proj_tables' primary key, then proj_coups_table_position (table_id, position).
_TABLE = "SELECT decks, current_shoe FROM proj_tables WHERE table_id = %s"
_OUTCOMES = """
SELECT outcome FROM proj_coups
WHERE table_id = %s AND NOT voided AND (%s::text IS NULL OR shoe_id = %s)
ORDER BY position
"""
# Through proj_ledger's primary key (table_id, day, spot, operator): one table's days.
_LEDGER = """
SELECT l.day, l.spot, sum(l.bets)::integer, sum(l.wagered)::bigint, sum(l.paid_out)::bigint,
       sum(l.commission)::bigint, min(t.decks)
FROM proj_ledger AS l LEFT JOIN proj_ledger_tables AS t USING (table_id)
WHERE l.table_id = %s AND l.day >= %s AND l.day <= %s
  AND (%s::text IS NULL OR l.operator = %s)
GROUP BY l.day, l.spot
ORDER BY l.day, l.spot
"""
# Every wallet's row and every ledger row: these grow with players and with table-days, not
# with the log, so the sums stay cheap however long the tables deal.
_MONEY = """
SELECT (SELECT coalesce(sum(available + reserved), 0) FROM proj_wallets),
       (SELECT coalesce(sum(credits), 0) FROM proj_wallets),
       (SELECT coalesce(sum(debits), 0) FROM proj_wallets),
       (SELECT coalesce(sum(wagered - paid_out), 0) FROM proj_ledger)
"""
# Through proj_round_violations_position: only the rounds that broke a rule, which the rounds
# projection checked as it applied them (read_models/rounds.py).
_VIOLATIONS = (
    'SELECT "check", round_id, detail FROM proj_round_violations ORDER BY position, round_id, seq'
)
# Through proj_round_totals' primary key.
_CHECKED = "SELECT checked FROM proj_round_totals WHERE name = %s"
# Through proj_chat's primary key (table_id, version), backwards from the keyset.
_CHAT = """
SELECT version, player_id, text, posted_at FROM proj_chat
WHERE table_id = %s AND version < %s ORDER BY version DESC LIMIT %s
"""
# Messages the chat projection has not applied yet, through events' (stream_id, version) key.
_CHAT_TAIL = (
    "SELECT " + EVENT_COLUMNS + " FROM events"  # noqa: S608 - constants only
    " WHERE stream_id = %s AND version > %s AND version < %s ORDER BY version DESC LIMIT %s"
)
_CHAT_PROJECTED = "SELECT coalesce(max(version), 0) FROM proj_chat WHERE table_id = %s"
_CHECKPOINT = "SELECT coalesce(max(position), 0) FROM checkpoints WHERE subscription = %s"
# Through events' primary key: the significant events of a page, by position.
_EVENTS_AT = (
    "SELECT " + EVENT_COLUMNS + " FROM events"  # noqa: S608 - constants only
    " WHERE position = ANY(%s) ORDER BY position"
)
# Through proj_shoes' primary key.
_SHOE = "SELECT table_id, first_version, last_version FROM proj_shoes WHERE shoe_id = %s"
# Through events' unique (stream_id, version): one shoe's range of its table's stream.
_STREAM_RANGE = (
    "SELECT " + EVENT_COLUMNS + " FROM events"  # noqa: S608 - constants only
    " WHERE stream_id = %s AND version >= %s AND version <= %s ORDER BY version"
)
# Through events' primary key from the checkpoint: what a projection has not applied yet.
# Materialized first, so the planner cannot AND it with events_stream_recorded_at, which
# would read the whole stream's index. Bounded above by the log's head as well as below by the
# checkpoint: a one-sided `position > $1` is a third of the log to a planner without
# statistics (a live database until autovacuum's first analyze), which then reads the whole
# log in a sequential scan (82 ms at 146,000 events); a range bounded on both sides is
# estimated at half a percent, and read through the primary key.
_STREAM_AFTER = (
    "WITH tail AS MATERIALIZED (SELECT " + EVENT_COLUMNS + " FROM events"  # noqa: S608
    " WHERE position > %s AND position <= (SELECT max(position) FROM events))"
    " SELECT * FROM tail WHERE stream_id = %s ORDER BY position"
)
# Every table of a page in one statement, however many there are: proj_table_overview by its
# position index (the keyset); for each table, its rounds ended since `since` through
# proj_rounds_table_ended_at, its current shoe's outcomes through proj_tables' primary key and
# proj_coups_table_position, and its ledger by spot through proj_ledger's primary key.
_OVERVIEW = """
SELECT o.table_id, o.position, o.version, o.settings, o.seats, o.round_id, o.round_number,
       o.round_phase, o.window_closes_at, o.shoe_id, o.shoe_hash, o.shoe_hands, o.shoe_coups,
       o.latest_coup, o.suspended,
       (SELECT count(*) FROM proj_rounds AS r
        WHERE r.table_id = o.table_id AND r.ended_at >= %(since)s AND r.status = 'settled'),
       (SELECT coalesce(array_agg(c.outcome ORDER BY c.position), '{}')
        FROM proj_tables AS t JOIN proj_coups AS c
          ON c.table_id = t.table_id AND c.shoe_id = t.current_shoe
        WHERE t.table_id = o.table_id AND NOT c.voided),
       (SELECT coalesce(jsonb_agg(jsonb_build_array(l.spot, l.bets, l.wagered, l.paid_out,
                                                    l.commission) ORDER BY l.spot), '[]')
        FROM (SELECT spot, sum(bets)::bigint AS bets, sum(wagered)::bigint AS wagered,
                     sum(paid_out)::bigint AS paid_out, sum(commission)::bigint AS commission
              FROM proj_ledger
              WHERE table_id = o.table_id AND day >= %(first)s AND day <= %(last)s
                AND (%(operator)s::text IS NULL OR operator = %(operator)s)
              GROUP BY spot) AS l)
FROM proj_table_overview AS o
WHERE o.position > %(after)s
ORDER BY o.position
LIMIT %(limit)s
"""

# An operator's wallet movements in [from, to), a page after the keyset (recorded_at, position):
# through proj_wallet_statement_operator_time (operator, recorded_at, position), or, for every
# operator's, proj_wallet_statement_time (recorded_at, position); walked in order and left after
# a page, with bitmap scans off (`_ORDERED_INDEX`): a bitmap scan would read every movement of
# the range and sort them.
_MOVEMENT_COLUMNS = """
player_id, version, position, recorded_at, type, amount, reserved_change, available_after,
reserved_after, reason, table_id, round_id, spot, stake, payout, commission
"""
_OPERATOR_MOVEMENTS = (
    "SELECT " + _MOVEMENT_COLUMNS + " FROM proj_wallet_statement"  # noqa: S608 - constants only
    " WHERE operator = %s AND (recorded_at, position) > (%s, %s) AND recorded_at < %s"
    " ORDER BY recorded_at, position LIMIT %s"
)
_ALL_MOVEMENTS = (
    "SELECT " + _MOVEMENT_COLUMNS + " FROM proj_wallet_statement"  # noqa: S608 - constants only
    " WHERE (recorded_at, position) > (%s, %s) AND recorded_at < %s"
    " ORDER BY recorded_at, position LIMIT %s"
)
# Through events' primary key: when the movement a cursor names was recorded.
_MOVEMENT_AT = "SELECT recorded_at FROM events WHERE position = %s AND category = 'wallet'"
_WATCHED: Final = ("wallets", "ledger", "rounds")
_OVER_PHASES: Final = frozenset(
    str(p) for p in (Phase.SETTLED, Phase.ENDED_WITHOUT_PLAY, Phase.VOIDED)
)


@dataclass(frozen=True, slots=True)
class PlayerSummary:
    """A player's rounds played (voided ones not counted), wagered, won and net, in pence."""

    player_id: str
    rounds_played: int
    wagered: int
    won: int
    commission: int

    @property
    def net(self) -> int:
        """What the player is up (negative: down) over every settled bet."""
        return self.won - self.wagered


@dataclass(frozen=True, slots=True)
class TableStatistics:
    """A table's roads and counts, for its current shoe or for all time."""

    table_id: str
    scope: str
    shoe_id: str | None
    decks: int
    roads: Roads
    # The log position the statistics projection had applied when the roads were read: every
    # coup at or before it is in them.
    checkpoint: int


class _HouseFigures:
    """What the house kept and paid back, derived from what was wagered and paid out."""

    __slots__ = ()
    wagered: int
    paid_out: int

    @property
    def hold(self) -> int:
        """What the house kept: wagered less paid out (commission is already off the payout)."""
        return self.wagered - self.paid_out

    @property
    def observed_rtp(self) -> Fraction | None:
        """Paid out per pound wagered, stakes included; None before anything was wagered."""
        return Fraction(self.paid_out, self.wagered) if self.wagered else None


@dataclass(frozen=True, slots=True)
class LedgerLine(_HouseFigures):
    """The house's figures for one table, day and bet type."""

    day: date
    spot: str
    bets: int
    wagered: int
    paid_out: int
    commission: int
    theoretical_rtp: Fraction | None


@dataclass(frozen=True, slots=True)
class SpotTotals(_HouseFigures):
    """The house's figures for one table and bet type over a range of days."""

    spot: str
    bets: int
    wagered: int
    paid_out: int
    commission: int
    theoretical_rtp: Fraction | None


@dataclass(frozen=True, slots=True)
class TableOverview:
    """A table at a glance, as the ops dashboard shows it."""

    table_id: str
    position: int
    version: int
    settings: dict[str, Any]
    seats: tuple[str | None, ...]
    phase: str
    round_id: str | None
    round_number: int | None
    window_closes_at: datetime | None
    shoe_id: str | None
    server_seed_hash: str | None
    hands_left: int | None
    latest_coup: dict[str, Any] | None
    suspended: bool
    rounds_last_minute: int
    roads: Roads
    ledger: tuple[SpotTotals, ...]


@dataclass(frozen=True, slots=True)
class InvariantReport:
    """Money conservation and the payout rules, checked over the read models."""

    checkpoints: dict[str, int]
    comparable: bool
    wallets_total: int
    house_net: int
    credits: int
    debits: int
    rounds_checked: int
    violations: tuple[Violation, ...]

    @property
    def ok(self) -> bool:
        """Whether every check could run and passed."""
        return self.comparable and not self.violations


@cache
def fresh_shoe_odds(decks: int) -> Odds:
    """The exact odds of a fresh shoe of `decks` decks: tens of milliseconds to work out, and
    the same every time, so worked out once per process."""
    return exact_odds(fresh_shoe_counts(decks))


class ProjectionService:
    """Reads the projection tables, and rebuilds, catches up and reports on them."""

    def __init__(self, pool: Pool, clock: Clock) -> None:
        self._pool = pool
        self._clock = clock

    def balance(self, player_id: str) -> Balance:
        """A wallet's balances as projected (an unused wallet holds nothing, at version 0)."""
        with self._pool.connection() as conn:
            row = conn.execute(_BALANCE, [player_id]).fetchone()
        if row is None:
            return Balance(player_id, 0, 0, 0)
        return Balance(player_id, int(row[0]), int(row[1]), int(row[2]))

    def statement(
        self, player_id: str, limit: int = 50, before: int | None = None
    ) -> list[StatementEntry]:
        """Up to `limit` movements before version `before` (all if None), newest first."""
        if limit < 1:
            raise ValueError("limit must be at least 1")
        bound = before if before is not None else 2**31 - 1
        with self._pool.connection() as conn:
            rows = conn.execute(_STATEMENT, [player_id, bound, limit]).fetchall()
        return [StatementEntry(*row) for row in rows]

    def wallet_movements(
        self,
        operator: str | None,
        start: datetime,
        end: datetime,
        limit: int = 50,
        after: int | None = None,
    ) -> list[WalletMovement]:
        """Up to `limit` wallet movements recorded in [start, end), oldest first, of `operator`'s
        players (every operator's if None), after the movement at log position `after`.

        ValueError when `after` is the position of no wallet movement.
        """
        if limit < 1:
            raise ValueError("limit must be at least 1")
        with self._pool.connection() as conn, conn.transaction():
            # One snapshot: the cursor's movement and the page read at the same moment.
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            # The keyset starts before the range's first instant, or at the cursor's movement.
            keyset: tuple[datetime, int] = (start, -1)
            if after is not None:
                found = conn.execute(_MOVEMENT_AT, [after]).fetchone()
                if found is None:
                    raise ValueError(f"no wallet movement is at log position {after}")
                keyset = (max(start, found[0]), after if found[0] >= start else -1)
            conn.execute(_ORDERED_INDEX)
            if operator is None:
                rows = conn.execute(_ALL_MOVEMENTS, [*keyset, end, limit]).fetchall()
            else:
                rows = conn.execute(_OPERATOR_MOVEMENTS, [operator, *keyset, end, limit]).fetchall()
        return [WalletMovement(str(row[0]), StatementEntry(*row[1:])) for row in rows]

    def player_rounds(
        self, player_id: str, limit: int = 20, before: int | None = None
    ) -> list[RoundHistory]:
        """The player's latest rounds before log position `before`, newest first, own bets only."""
        return [history(r, player_id) for r in self.player_round_records(player_id, limit, before)]

    def player_round_records(
        self, player_id: str, limit: int = 20, before: int | None = None
    ) -> list[RoundRecord]:
        """The rounds a player staked in, newest first, before log position `before` if given."""
        bound = before if before is not None else 2**62
        with self._pool.connection() as conn, conn.transaction():
            conn.execute(_ORDERED_INDEX)
            rows = conn.execute(_PLAYER_ROUNDS, [player_id, bound, limit]).fetchall()
        return [_record(row) for row in rows]

    def chat(self, table_id: str, limit: int = 50, before: int | None = None) -> list[ChatMessage]:
        """A table's latest messages before chat version `before`, oldest first.

        From the chat read model, and from the log for any message it has not applied yet, so
        a message is readable as soon as its post returns.
        """
        if limit < 1:
            raise ValueError("limit must be at least 1")
        bound = before if before is not None else 2**31 - 1
        stream = "chat:" + table_id
        with self._pool.connection() as conn, conn.transaction():
            # One snapshot: the model and the log's tail are read at the same moment.
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            # The page through the primary key in its order, not a bitmap of the whole chat.
            conn.execute(_ORDERED_INDEX)
            projected_row = conn.execute(_CHAT_PROJECTED, [table_id]).fetchone()
            projected = 0 if projected_row is None else int(projected_row[0])
            cursor = conn.cursor(row_factory=event_rows)
            tail = cursor.execute(_CHAT_TAIL, [stream, projected, bound, limit]).fetchall()
            rows = conn.execute(_CHAT, [table_id, min(bound, projected + 1), limit]).fetchall()
        messages = [
            ChatMessage(
                table_id,
                str(e.payload["player_id"]),
                str(e.payload["text"]),
                datetime.fromisoformat(str(e.payload["posted_at"])),
                e.version,
            )
            for e in tail
        ] + [ChatMessage(table_id, row[1], row[2], row[3], int(row[0])) for row in rows]
        return sorted(messages[:limit], key=lambda m: m.version)

    def significant(
        self,
        after: int,
        limit: int,
        *,
        type: str | None = None,
        actor: str | None = None,
        table_id: str | None = None,
        start: datetime | None = None,
        end: datetime | None = None,
    ) -> tuple[list[tuple[str, RecordedEvent]], int]:
        """Up to `limit` significant events after `after` that the read model holds, with their
        kinds, and the position the model has read to: later ones are still only in the log."""
        conditions: list[sql.Composable] = [sql.SQL("position > %s"), sql.SQL("position <= %s")]
        params: list[object] = [after]
        # Each filter has its own index ending in the position: proj_significant_type_position,
        # _actor_position, _table_position, and _recorded_at for a time range.
        for column, value, operator in (
            ("type", type, "="),
            ("actor", actor, "="),
            ("table_id", table_id, "="),
            ("recorded_at", start, ">="),
            ("recorded_at", end, "<="),
        ):
            if value is not None:
                conditions.append(
                    sql.SQL("{} {} %s").format(sql.Identifier(column), sql.SQL(operator))
                )
                params.append(value)
        query = sql.SQL(
            "SELECT position, kind FROM proj_significant WHERE {} ORDER BY position LIMIT %s"
        ).format(sql.SQL(" AND ").join(conditions))
        with self._pool.connection() as conn, conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            # The page through an index in its order, not a bitmap of every entry and a sort.
            conn.execute(_ORDERED_INDEX)
            checkpoint_row = conn.execute(_CHECKPOINT, ["significant"]).fetchone()
            checkpoint = 0 if checkpoint_row is None else int(checkpoint_row[0])
            params.insert(1, checkpoint)
            found = conn.execute(query, [*params, limit]).fetchall()
            kinds = {int(position): str(kind) for position, kind in found}
            cursor = conn.cursor(row_factory=event_rows)
            recorded = cursor.execute(_EVENTS_AT, [sorted(kinds)]).fetchall() if kinds else []
        return [(kinds[e.position], e) for e in recorded], checkpoint

    def shoe_events(self, shoe_id: str) -> tuple[str, list[RecordedEvent]] | None:
        """A shoe's table stream and the events of it that may be the shoe's, as recorded.

        The shoes read model says which versions of the stream hold the shoe; events appended
        after the model's checkpoint are added from the log. None when the model does not know
        the shoe yet (or there is no such shoe): the caller then reads the log.
        """
        with self._pool.connection() as conn, conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            checkpoint_row = conn.execute(_CHECKPOINT, ["shoes"]).fetchone()
            checkpoint = 0 if checkpoint_row is None else int(checkpoint_row[0])
            row = conn.execute(_SHOE, [shoe_id]).fetchone()
            if row is None:
                return None
            stream = "table:" + str(row[0])
            cursor = conn.cursor(row_factory=event_rows)
            ranged = cursor.execute(_STREAM_RANGE, [stream, row[1], row[2]]).fetchall()
            later = cursor.execute(_STREAM_AFTER, [checkpoint, stream]).fetchall()
        seen = {e.position for e in ranged}
        return stream, ranged + [e for e in later if e.position not in seen]

    def player_summary(self, player_id: str) -> PlayerSummary:
        """A player's rounds played, wagered, won and net."""
        with self._pool.connection() as conn:
            row = conn.execute(_PLAYER_SUMMARY, [player_id]).fetchone()
        assert row is not None  # an aggregate always answers
        return PlayerSummary(player_id, int(row[0]), int(row[1]), int(row[2]), int(row[3]))

    def round(self, round_id: str) -> RoundRecord | None:
        """One round's history, or None if the log holds no such round."""
        with self._pool.connection() as conn:
            row = conn.execute(_ROUND, [round_id]).fetchone()
        return None if row is None else _record(row)

    def table_rounds(
        self, table_id: str, limit: int = 20, before: int | None = None
    ) -> list[RoundRecord]:
        """A table's latest rounds, newest first, before log position `before` if given."""
        bound = before if before is not None else 2**62
        with self._pool.connection() as conn:
            rows = conn.execute(_TABLE_ROUNDS, [table_id, bound, limit]).fetchall()
        return [_record(row) for row in rows]

    def statistics(self, table_id: str, scope: str = CURRENT_SHOE) -> TableStatistics | None:
        """The roads of a table's current shoe or of all time; None for an unknown table."""
        with self._pool.connection() as conn:
            # Read first: the projection commits its rows and its checkpoint together, so
            # whatever the rows read after it hold is at least as new as this position.
            checkpoint_row = conn.execute(_CHECKPOINT, [StatisticsProjection.name]).fetchone()
            checkpoint = 0 if checkpoint_row is None else int(checkpoint_row[0])
            table = conn.execute(_TABLE, [table_id]).fetchone()
            if table is None:
                return None
            decks, shoe_id = int(table[0]), table[1]
            shoe = shoe_id if scope == CURRENT_SHOE else None
            if scope == CURRENT_SHOE and shoe_id is None:
                outcomes: list[Outcome] = []
            else:
                rows = conn.execute(_OUTCOMES, [table_id, shoe, shoe]).fetchall()
                outcomes = [Outcome(row[0]) for row in rows]
        return TableStatistics(table_id, scope, shoe_id, decks, roads_from(outcomes), checkpoint)

    def ledger(
        self, table_id: str, first: date, last: date, operator: str | None = None
    ) -> list[LedgerLine]:
        """The house ledger of a table from day `first` to `last`, by day and bet type.

        With `operator`, only the bets of that operator's players: the cuts of every operator
        add up to the uncut ledger.
        """
        with self._pool.connection() as conn:
            rows = conn.execute(_LEDGER, [table_id, first, last, operator, operator]).fetchall()
        lines: list[LedgerLine] = []
        for day, spot, bets, wagered, paid_out, commission, decks in rows:
            rtp: Fraction | None = None
            if decks is not None:
                rtp = fresh_shoe_odds(decks).expected_return(Spot(spot))
            lines.append(LedgerLine(day, spot, bets, wagered, paid_out, commission, rtp))
        return lines

    def overview(
        self,
        *,
        after: int,
        limit: int,
        since: datetime,
        first: date,
        last: date,
        operator: str | None = None,
    ) -> list[TableOverview]:
        """Up to `limit` tables created after position `after`, in creation order, each with
        its rounds ended since `since`, its current shoe's roads and its ledger by spot from
        day `first` to `last`: one statement for the whole page."""
        if limit < 1:
            raise ValueError("limit must be at least 1")
        now = self._clock()
        params = {
            "after": after,
            "limit": limit,
            "since": since,
            "first": first,
            "last": last,
            "operator": operator,
        }
        with self._pool.connection() as conn:
            rows = conn.execute(_OVERVIEW, params).fetchall()
        found: list[TableOverview] = []
        for row in rows:
            (table_id, position, version, settings, seats, round_id, round_number, round_phase,
             closes_at, shoe_id, shoe_hash, shoe_hands, shoe_coups, latest_coup, suspended,
             ended, outcomes, ledger) = row  # fmt: skip
            theory = fresh_shoe_odds(int(settings["decks"]))
            over = round_phase is None or round_phase in _OVER_PHASES
            phase = IDLE if over else str(round_phase)
            if phase == Phase.BETTING and closes_at is not None and closes_at <= now:
                phase = CLOSING  # lapsed; the deal follows within moments
            found.append(
                TableOverview(
                    table_id=table_id,
                    position=int(position),
                    version=int(version),
                    settings=settings,
                    seats=tuple(seats),
                    phase=phase,
                    round_id=round_id,
                    round_number=round_number,
                    window_closes_at=None if over else closes_at,
                    shoe_id=shoe_id,
                    server_seed_hash=shoe_hash,
                    hands_left=None if shoe_id is None else max(shoe_hands - shoe_coups, 0),
                    latest_coup=latest_coup,
                    suspended=bool(suspended),
                    rounds_last_minute=int(ended),
                    roads=roads_from([Outcome(o) for o in outcomes]),
                    ledger=tuple(
                        SpotTotals(
                            spot,
                            int(bets),
                            int(wagered),
                            int(paid_out),
                            int(commission),
                            theory.expected_return(Spot(spot)),
                        )
                        for spot, bets, wagered, paid_out, commission in ledger
                    ),
                )
            )
        return found

    def status(self) -> list[ProjectionStatus]:
        """Each projection's checkpoint, the log's head, and the lag in events and seconds."""
        return projector.status(self._pool, self._clock())

    def catch_up(self, names: Iterable[str] = projector.NAMES) -> int:
        """Apply everything the log holds to the named projections now; the events applied."""
        return projector.catch_up(self._pool, names)

    def rebuild(self, names: Iterable[str] = projector.NAMES) -> RebuildResult:
        """Rebuild the named projections from position 0 and swap them in atomically."""
        return projector.rebuild(self._pool, names, clock=self._clock)

    def invariants(self) -> InvariantReport:
        """Money conservation and the payout rules, over one snapshot of the read models."""
        violations: list[Violation] = []
        with self._pool.connection() as conn, conn.transaction():
            # One REPEATABLE READ snapshot, so the sums and checkpoints are read at one moment.
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            checkpoints = {
                str(name): int(position)
                for name, position in conn.execute(
                    "SELECT subscription, position FROM checkpoints WHERE subscription = ANY(%s)",
                    [list(_WATCHED)],
                )
            }
            money = conn.execute(_MONEY).fetchone()
            assert money is not None
            wallets_total, credits, debits, house_net = (int(v) for v in money)
            checked_row = conn.execute(_CHECKED, [DEALT]).fetchone()
            checked = 0 if checked_row is None else int(checked_row[0])
            violations.extend(
                Violation(str(check), str(subject), str(detail))
                for check, subject, detail in conn.execute(_VIOLATIONS)
            )
        comparable = len(checkpoints) == len(_WATCHED) and len(set(checkpoints.values())) == 1
        if comparable and wallets_total + house_net != credits - debits:
            violations.append(
                Violation(
                    "money_conservation",
                    "house",
                    f"wallets {wallets_total}p + house net {house_net}p != credits {credits}p"
                    f" - debits {debits}p",
                )
            )
        return InvariantReport(
            checkpoints,
            comparable,
            wallets_total,
            house_net,
            credits,
            debits,
            checked,
            tuple(violations),
        )


def _record(row: Sequence[Any]) -> RoundRecord:
    return RoundRecord(
        round_id=row[0],
        table_id=row[1],
        number=row[2],
        opened_at=row[3],
        shoe_id=row[4],
        status=row[5],
        outcome=row[6],
        player_total=row[7],
        banker_total=row[8],
        cards=tuple(row[9]),
        bets=tuple(row[10]),
        wagered=int(row[11]),
        paid_out=int(row[12]),
        commission=int(row[13]),
        voided=bool(row[14]),
        void_reason=row[15],
        ended_at=row[16],
        position=int(row[17]),
    )


def history(record: RoundRecord, player_id: str) -> RoundHistory:
    """A round as one player's history shows it: their own bets only."""
    bets = tuple(
        PlayedBet(
            b["seat"],
            b["spot"],
            b["stake"],
            0 if b["returned"] == "reversed" else b["payout"],
            0 if b["returned"] == "reversed" else b["commission"],
            b["returned"],
        )
        for b in record.bets
        if b["player_id"] == player_id
    )
    return RoundHistory(
        table_id=record.table_id,
        round_id=record.round_id,
        opened_at=record.opened_at,
        bets=bets,
        cards=tuple(
            PlayedCard(c["hand"], c["position"], c["card"], c["reason"]) for c in record.cards
        ),
        outcome=record.outcome,
        player_total=record.player_total,
        banker_total=record.banker_total,
        payout=sum(b.payout or 0 for b in bets),
        voided=record.voided,
    )
