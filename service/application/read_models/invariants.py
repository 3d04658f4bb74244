"""The rules every dealt round must keep, checked by the rounds projection as each round
changes (so the invariants check reads the violations found so far, never every round)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from domain.outcome import Outcome, Spot
from domain.payouts import settle


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
class Violation:
    """One broken invariant, and where."""

    check: str
    subject: str
    detail: str


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
