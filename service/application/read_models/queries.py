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
from typing import Any, Final

from domain.odds import exact_odds, fresh_shoe_counts
from domain.outcome import Outcome, Spot
from domain.payouts import settle
from domain.roads import Roads, roads_from
from events.postgres import Pool
from events.store import Clock
from service.application.players import PlayedBet, PlayedCard, RoundHistory
from service.application.read_models import projector
from service.application.read_models.projector import ProjectionStatus, RebuildResult
from service.application.wallets import Balance, StatementEntry

CURRENT_SHOE: Final = "shoe"
ALL_TIME: Final = "all"

_BALANCE = "SELECT available, reserved, version FROM proj_wallets WHERE player_id = %s"
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
_PLAYER_ROUNDS = (
    "SELECT " + _ROUND_COLUMNS + " FROM proj_round_players AS p"  # noqa: S608 - constants only
    " JOIN proj_rounds AS r USING (round_id)"
    " WHERE p.player_id = %s ORDER BY p.position DESC LIMIT %s"
)
_ROUND = "SELECT " + _ROUND_COLUMNS + " FROM proj_rounds AS r WHERE r.round_id = %s"  # noqa: S608
_TABLE_ROUNDS = (
    "SELECT " + _ROUND_COLUMNS + " FROM proj_rounds AS r"  # noqa: S608 - constants only
    " WHERE r.table_id = %s AND r.position < %s ORDER BY r.position DESC LIMIT %s"
)
_PLAYER_SUMMARY = """
SELECT count(*) FILTER (WHERE NOT voided), coalesce(sum(wagered), 0), coalesce(sum(won), 0),
       coalesce(sum(commission), 0)
FROM proj_player_rounds WHERE player_id = %s
"""
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
_MONEY = """
SELECT (SELECT coalesce(sum(available + reserved), 0) FROM proj_wallets),
       (SELECT coalesce(sum(credits), 0) FROM proj_wallets),
       (SELECT coalesce(sum(debits), 0) FROM proj_wallets),
       (SELECT coalesce(sum(wagered - paid_out), 0) FROM proj_ledger)
"""
_ALL_ROUNDS = (
    "SELECT " + _ROUND_COLUMNS + " FROM proj_rounds AS r"  # noqa: S608 - constants only
    " WHERE r.outcome IS NOT NULL ORDER BY r.position"
)
_WATCHED: Final = ("wallets", "ledger", "rounds")


@dataclass(frozen=True, slots=True)
class RoundRecord:
    """One round as the round history holds it."""

    round_id: str
    table_id: str
    number: int
    opened_at: datetime
    shoe_id: str | None
    status: str
    outcome: str | None
    player_total: int | None
    banker_total: int | None
    cards: tuple[dict[str, Any], ...]
    bets: tuple[dict[str, Any], ...]
    wagered: int
    paid_out: int
    commission: int
    voided: bool
    void_reason: str | None
    ended_at: datetime | None
    position: int


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


@dataclass(frozen=True, slots=True)
class LedgerLine:
    """The house's figures for one table, day and bet type."""

    day: date
    spot: str
    bets: int
    wagered: int
    paid_out: int
    commission: int
    theoretical_rtp: Fraction | None

    @property
    def hold(self) -> int:
        """What the house kept: wagered less paid out (commission is already off the payout)."""
        return self.wagered - self.paid_out

    @property
    def observed_rtp(self) -> Fraction | None:
        """Paid out per pound wagered, stakes included; None before anything was wagered."""
        return Fraction(self.paid_out, self.wagered) if self.wagered else None


@dataclass(frozen=True, slots=True)
class Violation:
    """One broken invariant, and where."""

    check: str
    subject: str
    detail: str


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

    def player_rounds(self, player_id: str, limit: int = 20) -> list[RoundHistory]:
        """The player's latest rounds, newest first, with their own bets only."""
        with self._pool.connection() as conn:
            rows = conn.execute(_PLAYER_ROUNDS, [player_id, limit]).fetchall()
        return [_history(_record(row), player_id) for row in rows]

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
        return TableStatistics(table_id, scope, shoe_id, decks, roads_from(outcomes))

    def ledger(
        self, table_id: str, first: date, last: date, operator: str | None = None
    ) -> list[LedgerLine]:
        """The house ledger of a table from day `first` to `last`, by day and bet type.

        With `operator`, only the bets of that operator's players: the cuts of every operator
        add up to the uncut ledger.
        """
        with self._pool.connection() as conn:
            rows = conn.execute(_LEDGER, [table_id, first, last, operator, operator]).fetchall()
        theoretical: dict[int, Any] = {}
        lines: list[LedgerLine] = []
        for day, spot, bets, wagered, paid_out, commission, decks in rows:
            rtp: Fraction | None = None
            if decks is not None:
                if decks not in theoretical:
                    theoretical[decks] = exact_odds(fresh_shoe_counts(decks))
                rtp = theoretical[decks].expected_return(Spot(spot))
            lines.append(LedgerLine(day, spot, bets, wagered, paid_out, commission, rtp))
        return lines

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
        checked = 0
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
            with conn.cursor(name="invariant_rounds") as rounds:
                rounds.execute(_ALL_ROUNDS)
                for row in rounds:
                    checked += 1
                    violations.extend(round_violations(_record(row)))
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


def round_violations(record: RoundRecord) -> list[Violation]:
    """How a dealt round breaks the rules: payouts against domain.payouts, sums, outcome."""
    found: list[Violation] = []
    subject = record.round_id
    if record.outcome is None:
        return found
    outcome = Outcome(record.outcome)
    player, banker = record.player_total, record.banker_total
    if player is not None and banker is not None:
        expected = (
            Outcome.PLAYER
            if player > banker
            else Outcome.BANKER
            if banker > player
            else Outcome.TIE
        )
        if expected is not outcome:
            found.append(
                Violation("outcome", subject, f"{player} v {banker} is {expected}, not {outcome}")
            )
    if not 4 <= len(record.cards) <= 6:
        found.append(
            Violation("cards", subject, f"a coup deals 4 to 6 cards, not {len(record.cards)}")
        )
    wagered = paid_out = commission = 0
    for bet in record.bets:
        if bet["payout"] is None:
            continue
        rule = settle(Spot(bet["spot"]), bet["stake"], outcome)
        if (bet["payout"], bet["commission"]) != (rule.payout, rule.commission):
            found.append(
                Violation(
                    "payout",
                    subject,
                    f"{bet['player_id']} on {bet['spot']} for {bet['stake']}p was paid "
                    f"{bet['payout']}p (commission {bet['commission']}p); the rules say "
                    f"{rule.payout}p (commission {rule.commission}p)",
                )
            )
        if bet["returned"] is None:
            wagered += bet["stake"]
            paid_out += bet["payout"]
            commission += bet["commission"]
    if (record.wagered, record.paid_out, record.commission) != (wagered, paid_out, commission):
        found.append(
            Violation(
                "round_totals",
                subject,
                f"totals {record.wagered}/{record.paid_out}/{record.commission}p do not add up"
                f" to its bets' {wagered}/{paid_out}/{commission}p",
            )
        )
    if record.voided and (record.wagered or record.paid_out):
        found.append(Violation("void", subject, "a voided round still holds money"))
    return found


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


def _history(record: RoundRecord, player_id: str) -> RoundHistory:
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
