"""The read models' pure parts: the wallet fold, COPY text, payout rule checks, ledger figures."""

from __future__ import annotations

import random
from datetime import UTC, date, datetime
from fractions import Fraction
from typing import Any

import pytest
from psycopg.types.json import Jsonb

from domain.odds import exact_odds, fresh_shoe_counts
from domain.outcome import Spot
from domain.wallet import (
    Corrected,
    Deposited,
    PayoutCredited,
    SettlementReversed,
    StakeReserved,
    StakeReturned,
    Wallet,
    WalletEvent,
    Withdrawn,
    evolve_wallet,
)
from events.projections.base import _copy_text, copy_text_or_null
from events.store import EventMetadata, RecordedEvent
from service.application.read_models import projector
from service.application.read_models.invariants import RoundRecord, round_violations
from service.application.read_models.queries import LedgerLine
from service.application.read_models.wallets import _fold
from service.application.streams import to_new_event

AT = datetime(2026, 3, 1, 12, tzinfo=UTC)


def _recorded(event: WalletEvent, version: int) -> RecordedEvent:
    new = to_new_event(event)
    return RecordedEvent(
        version, "wallet:alice", "wallet", version, new.type, 1, new.payload,
        EventMetadata("ops", "ops"), AT, "0" * 64, "0" * 64,
    )  # fmt: skip


def _random_wallet_events(rng: random.Random, count: int) -> list[WalletEvent]:
    events: list[WalletEvent] = [Deposited(100_000, "float", None)]
    open_bets: list[tuple[str, Spot, int]] = []
    for n in range(count):
        roll = rng.random()
        if roll < 0.35:
            stake = rng.choice((100, 500, 1_000))
            bet = (f"T1-{n}", rng.choice(list(Spot)), stake)
            open_bets.append(bet)
            events.append(StakeReserved("T1", *bet))
        elif roll < 0.6 and open_bets:
            round_id, spot, stake = open_bets.pop(0)
            payout = rng.choice((0, stake, 2 * stake - stake // 20, 9 * stake))
            events.append(PayoutCredited("T1", round_id, spot, stake, payout, 0))
            if rng.random() < 0.2:
                events.append(SettlementReversed("T1", round_id, spot, stake, payout, 0))
        elif roll < 0.7 and open_bets:
            round_id, spot, stake = open_bets.pop()
            events.append(StakeReturned("T1", round_id, spot, stake, "passed"))
        elif roll < 0.8:
            events.append(Corrected(rng.choice((-250, 400)), "goodwill"))
        else:
            events.append(Withdrawn(50, "cash out"))
    return events


def test_wallet_projection_moves_balances_exactly_as_the_wallet_aggregate() -> None:
    rng = random.Random(5)
    events = _random_wallet_events(rng, 400)
    wallet = Wallet("alice")
    projected: list[Any] = [0, 0, 0, 0, 0, 0, None]
    for version, event in enumerate(events, start=1):
        before = wallet
        wallet = evolve_wallet(wallet, event)
        line = _fold(projected, "alice", _recorded(event, version))
        assert (projected[0], projected[1]) == (wallet.available, wallet.reserved)
        assert line.endswith("\n")
        assert [int(v) for v in line.split("\t")[5:9]] == [
            wallet.available - before.available,
            wallet.reserved - before.reserved,
            wallet.available,
            wallet.reserved,
        ]


def test_wallet_projection_counts_credits_and_debits_for_money_conservation() -> None:
    events: list[WalletEvent] = [
        Deposited(1_000, "float", None),
        Corrected(-300, "fix"),
        Corrected(200, "goodwill"),
        Withdrawn(400, "cash out"),
    ]
    projected: list[Any] = [0, 0, 0, 0, 0, 0, None]
    for version, event in enumerate(events, start=1):
        _fold(projected, "alice", _recorded(event, version))
    credits, debits = projected[4], projected[5]
    assert (credits, debits) == (1_200, 700)
    assert projected[0] == credits - debits


def test_copy_text_escapes_what_copy_would_misread() -> None:
    assert _copy_text(None) == "\\N"
    assert _copy_text("tab\there\nnew\\line") == "tab\\there\\nnew\\\\line"
    assert _copy_text(True) == "t"
    assert _copy_text(-250) == "-250"
    assert _copy_text(date(2026, 3, 1)) == "2026-03-01"
    assert _copy_text(AT) == "2026-03-01T12:00:00+00:00"
    assert _copy_text(Jsonb([{"card": "4D"}])) == '[{"card": "4D"}]'


def test_statement_text_escapes_free_text_and_writes_null() -> None:
    assert copy_text_or_null(None) == "\\N"
    assert copy_text_or_null(1_950) == "1950"
    assert copy_text_or_null("refund\tfor\nmisdeal") == "refund\\tfor\\nmisdeal"


def test_copy_text_refuses_a_value_it_cannot_write() -> None:
    with pytest.raises(TypeError):
        _copy_text(1.5)


def _round(bets: list[dict[str, Any]], outcome: str = "banker", **changes: Any) -> RoundRecord:
    fields: dict[str, Any] = {
        "round_id": "T1-1",
        "table_id": "T1",
        "number": 1,
        "opened_at": AT,
        "shoe_id": "S1",
        "status": "settled",
        "outcome": outcome,
        "player_total": 3,
        "banker_total": 7,
        "cards": tuple({"card": c} for c in ("2C", "5D", "AH", "6S")),
        "bets": tuple(bets),
        "wagered": sum(b["stake"] for b in bets),
        "paid_out": sum(b["payout"] for b in bets),
        "commission": sum(b["commission"] for b in bets),
        "voided": False,
        "void_reason": None,
        "ended_at": AT,
        "position": 10,
    }
    fields.update(changes)
    return RoundRecord(**fields)


def _bet(spot: str, stake: int, payout: int, commission: int = 0) -> dict[str, Any]:
    return {
        "seat": 1,
        "player_id": "alice",
        "spot": spot,
        "stake": stake,
        "payout": payout,
        "commission": commission,
        "returned": None,
    }


def test_a_round_paid_by_the_rules_has_no_violation() -> None:
    record = _round([_bet("banker", 1_000, 1_950, 50), _bet("player", 500, 0)])
    assert round_violations(record) == []


def test_banker_win_paid_without_commission_breaks_the_payout_rule() -> None:
    record = _round([_bet("banker", 1_000, 2_000, 0)])
    assert [v.check for v in round_violations(record)] == ["payout"]


def test_an_outcome_that_contradicts_the_totals_is_a_violation() -> None:
    record = _round([_bet("player", 1_000, 2_000)], outcome="player")
    assert "outcome" in [v.check for v in round_violations(record)]


def test_a_voided_round_that_still_holds_money_is_a_violation() -> None:
    record = _round([_bet("player", 1_000, 0)], voided=True)
    assert "void" in [v.check for v in round_violations(record)]


def test_ledger_hold_is_wagered_less_paid_and_rtp_sits_beside_the_exact_odds() -> None:
    theoretical = exact_odds(fresh_shoe_counts(8)).expected_return(Spot.BANKER)
    line = LedgerLine(date(2026, 3, 1), "banker", 4, 4_000, 3_900, 100, theoretical)
    assert line.hold == 100
    assert line.observed_rtp == Fraction(39, 40)
    assert line.theoretical_rtp is not None
    assert 0.98 < float(line.theoretical_rtp) < 0.99


def test_an_unknown_projection_name_lists_the_known_ones() -> None:
    with pytest.raises(ValueError, match="wallets, rounds, statistics, players, ledger"):
        projector.projection_class("balances")
