"""A table command's answer written with orjson is what TableActionSchema and jsonify wrote."""

import json
from datetime import UTC, datetime

from service.web.table_actions import TableAction, TableActionSchema, action_json

_BET = {"seat": 1, "player_id": "alice", "spot": "player", "stake_pence": 500}


def _flask_body(action: TableAction) -> bytes:
    # Flask's default provider outside debug: sorted keys, compact, ASCII, and a newline.
    dumped = TableActionSchema().dump(action)
    return (json.dumps(dumped, sort_keys=True, separators=(",", ":")) + "\n").encode()


def test_a_bet_that_opens_a_round_is_written_as_the_schema_dumps_it() -> None:
    action = TableAction(
        table_id="t1",
        player_id="alice",
        round_id="t1-r1",
        seat=1,
        actions=["RoundOpened", "BetPlaced"],
        bets=[_BET],
        returned=[],
        excluded=[],
        coup=None,
        settlements=[],
        shoe_revealed=None,
        shoe_opened=None,
        next_round=None,
        window_closes_at=datetime(2026, 12, 7, 3, 12, 55, 123456, tzinfo=UTC),
        table_version=7,
        balance_after={"available_pence": 99_500, "reserved_pence": 500, "version": 3},
    )
    assert action_json(action) == _flask_body(action)


def test_a_deal_with_its_coup_settlements_and_next_round_is_written_as_the_schema_dumps_it() -> (
    None
):
    cards = [
        {"hand": "player", "position": n, "card": "4D", "reason": "first two", "shoe_id": "s1"}
        for n in range(4)
    ]
    action = TableAction(
        table_id="t1",
        player_id="bob",
        round_id="t1-r1",
        seat=None,
        actions=["DealPressed", "CardDrawn", "CoupCompleted", "BetSettled", "RoundOpened"],
        bets=[],
        returned=[{**_BET, "reason": "passed"}],
        excluded=[{"seat": 3, "player_id": "carol", "reason": "timed_out"}],
        coup={
            "round_id": "t1-r1",
            "shoe_id": "s1",
            "cards": cards,
            "stands": [{"hand": "banker", "reason": "stands on 7"}],
            "player_total": 8,
            "banker_total": 7,
            "outcome": "player",
        },
        settlements=[{**_BET, "payout_pence": 1_000, "commission_pence": 0}],
        shoe_revealed={"shoe_id": "s0", "server_seed": "ab" * 32},
        shoe_opened={
            "shoe_id": "s1",
            "server_seed_hash": "cd" * 32,
            "client_seed": "seed",
            "nonce": 0,
            "decks": 8,
            "hands": 70,
        },
        next_round={
            "round_id": "t1-r2",
            "number": 2,
            # No microseconds: both writers leave them out.
            "window_closes_at": datetime(2026, 12, 7, 3, 13, 10, tzinfo=UTC),
            "seats": [1, 2],
        },
        window_closes_at=None,
        table_version=19,
        balance_after=None,
    )
    assert action_json(action) == _flask_body(action)
    assert "shoe_id" not in json.loads(action_json(action))["coup"]["cards"][0]
