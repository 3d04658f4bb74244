"""Properties of the reference wallet's ledger under any sequence of calls, on real PostgreSQL.

Whatever Shoebox sends (bets, wins, rollbacks of known or unknown transactions, replays),
the balance moves by exactly the sum of the recorded transactions, a replay moves nothing,
no bet is refunded or paid twice, and the balance goes below zero only by the amount of
wins taken back (a void after settlement, which the protocol says applies below zero).
"""

from __future__ import annotations

import secrets
import uuid
from datetime import timedelta
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from operator_wallet import WalletServer
from operator_wallet.ledger import Ledger
from operator_wallet.protocol import Call

OPERATIONS = st.lists(
    st.one_of(
        st.tuples(st.just("bet"), st.integers(1, 600)),
        st.tuples(st.just("win"), st.integers(0, 1500), st.sets(st.integers(0, 30), max_size=3)),
        st.tuples(st.just("rollback"), st.integers(0, 30)),
        st.tuples(st.just("rollback-unknown"), st.integers(1, 600)),
        st.tuples(st.just("replay"), st.integers(0, 30)),
        st.tuples(st.just("deposit"), st.integers(1, 500)),
    ),
    max_size=25,
)


def _call(kind: str, player: str, token: str, amount: int, reference: tuple[str, ...]) -> Call:
    return Call(
        kind,
        str(uuid.uuid4()),
        player,
        token,
        "GBP",
        2,
        str(uuid.uuid4()),
        "t1",
        "r1",
        amount,
        reference,
    )


def _moves(ledger: Ledger, player: str) -> list[tuple[str, int, int, list[str]]]:
    with ledger.connection() as conn:
        rows = conn.execute(
            "SELECT kind, amount, moved, reference::text[]"
            " FROM reference_wallet.transactions WHERE player_id = %s ORDER BY seq",
            (player,),
        ).fetchall()
    return [(row[0], row[1], row[2], list(row[3])) for row in rows]


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(operations=OPERATIONS)
def test_the_balance_is_the_sum_of_the_ledger_whatever_is_sent(
    running_reference: WalletServer, operations: list[tuple[Any, ...]]
) -> None:
    ledger = running_reference.ledger
    player = "prop-" + secrets.token_hex(6)
    ledger.open_account(player, "GBP", 1000)
    token, _ = ledger.open_session(player, timedelta(hours=1))
    sent: list[Call] = []
    kinds: dict[str, str] = {}
    for operation in operations:
        before = ledger.balance_of(player)
        if operation[0] == "deposit":
            ledger.open_account(player, "GBP", operation[1])
            continue
        if operation[0] == "replay":
            if sent:
                ledger.answer(sent[operation[1] % len(sent)])
                assert ledger.balance_of(player) == before, "a replay moved money"
            continue
        if operation[0] == "bet":
            call = _call("bet", player, token, operation[1], ())
        elif operation[0] == "win":
            bets = [item for item in sent if item.kind == "bet"]
            if not bets:
                continue
            chosen = tuple(
                sorted({str(bets[i % len(bets)].transaction_uuid) for i in operation[2]})
            )
            if not chosen:
                continue
            call = _call("win", player, token, operation[1], chosen)
        elif operation[0] == "rollback":
            money = [item for item in sent if item.kind in ("bet", "win")]
            if not money:
                continue
            target = money[operation[1] % len(money)]
            assert target.amount is not None
            call = _call("rollback", player, token, target.amount, (str(target.transaction_uuid),))
        else:
            call = _call("rollback", player, token, operation[1], (str(uuid.uuid4()),))
        ledger.answer(call)
        sent.append(call)
        kinds[str(call.transaction_uuid)] = call.kind

        moves = _moves(ledger, player)
        balance = ledger.balance_of(player)
        assert balance == sum(moved for _, _, moved, _ in moves)
        taken_back = sum(
            moved
            for kind, _, moved, reference in moves
            if kind == "rollback" and reference and kinds.get(reference[0]) == "win"
        )
        assert balance is not None
        assert balance - taken_back >= 0, "below zero by more than the wins taken back"

    moves = _moves(ledger, player)
    refunded: dict[str, int] = {}
    paid: dict[str, int] = {}
    for kind, _, moved, reference in moves:
        if kind == "rollback" and moved != 0:
            refunded[reference[0]] = refunded.get(reference[0], 0) + 1
        if kind == "win":
            for bet in reference:
                paid[bet] = paid.get(bet, 0) + 1
    assert all(count == 1 for count in refunded.values()), "a transaction was cancelled twice"
    assert all(count == 1 for count in paid.values()), "a bet was paid twice"
