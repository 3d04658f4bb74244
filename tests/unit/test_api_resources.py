"""The resources one by one: tables, seats, wallets, player limits, chat and moderation."""

from datetime import timedelta

import pytest

from service.application.keys import Role
from service.web import idempotency
from service.web.idempotency import REPLAYED_HEADER
from tests.api_harness import FLOAT, T0, Api


def test_ops_create_a_table_that_anyone_can_list_and_read() -> None:
    api = Api()
    created = api.create_table("T1", seats=5, decks=6, betting_window_ms=20_000)
    assert api.responses[-1].headers["Location"] == "/v1/tables/T1"
    expected = {
        "table_id": "T1",
        "seats": 5,
        "decks": 6,
        "minimum_pence": 100,
        "maximum_pence": 250_000,
        "chips_pence": [100, 500, 2_500, 10_000, 50_000],
        "currency": "GBP",
        "betting_window_ms": 20_000,
    }
    assert created == expected
    api.create_table("T2", chips_pence=[500, 1_000], minimum_pence=500)
    for role in Role:
        assert api.ok("GET", "/v1/tables/T1", role=role) == expected
        listed = api.ok("GET", "/v1/tables", role=role)["tables"]
        assert [table["table_id"] for table in listed] == ["T1", "T2"]
    assert api.ok("GET", "/v1/tables/T2")["chips_pence"] == [500, 1_000]


def test_a_table_created_with_only_an_id_takes_the_seed_rules_defaults() -> None:
    api = Api()
    created = api.ok("POST", "/v1/tables", {"table_id": "T9"}, role=Role.OPS, status=201)
    assert created["seats"] == 7
    assert created["decks"] == 8
    assert created["minimum_pence"] == 100
    assert created["maximum_pence"] == 250_000
    assert created["betting_window_ms"] == 15_000
    assert created["currency"] == "GBP"


def test_an_idle_table_shows_its_seats_and_no_round_or_shoe() -> None:
    api = Api()
    api.create_table("T1", seats=3)
    api.fund("alice")
    sat = api.sit("T1", "alice", 2)
    assert (sat["seat"], sat["actions"]) == (2, ["PlayerSat"])
    state = api.state()
    assert (state["phase"], state["round_id"], state["shoe"], state["window_closes_at"]) == (
        "idle",
        None,
        None,
        None,
    )
    assert [seat["player_id"] for seat in state["seats"]] == [None, "alice", None]
    assert state["seats"][1]["waiting"] is False


def test_leaving_returns_unconfirmed_bets_and_frees_the_seat() -> None:
    api = Api()
    api.create_table("T1")
    for seat, player in enumerate(("alice", "bob"), start=1):
        api.fund(player)
        api.sit("T1", player, seat)
    api.bet("T1", "alice", "player", 2_000)
    left = api.ok("DELETE", "/v1/tables/T1/seats/alice")
    assert left["seat"] == 1
    assert left["returned"][0]["stake_pence"] == 2_000
    assert api.available("alice") == FLOAT
    assert api.state()["seats"][0]["player_id"] is None


def test_changing_seat_between_hands_is_one_action_answered_with_the_new_seat() -> None:
    api = Api()
    api.create_table("T1")
    api.fund("alice")
    api.sit("T1", "alice", 1)
    api.fund("bob")
    api.sit("T1", "bob", 2)
    head = api.store.head()
    moved = api.ok("PUT", "/v1/tables/T1/seats/alice", {"seat": 5})
    assert (moved["seat"], moved["actions"]) == (5, ["PlayerChangedSeat"])
    assert [event.type for event in api.store.read_all(head)] == ["PlayerChangedSeat"]
    seats = api.state()["seats"]
    assert [seat["player_id"] for seat in seats][:5] == [None, "bob", None, None, "alice"]
    status, problem = api.refused("PUT", "/v1/tables/T1/seats/alice", {"seat": 2})
    assert (status, problem["rule"]) == (409, "seat.taken")


def test_changing_seat_is_refused_while_ones_bets_are_on_the_round() -> None:
    api = Api()
    api.create_table("T1")
    api.fund("alice")
    api.sit("T1", "alice", 1)
    api.bet("T1", "alice", "banker", 1_000)
    head = api.store.head()
    status, problem = api.refused("PUT", "/v1/tables/T1/seats/alice", {"seat": 3})
    assert (status, problem["rule"]) == (409, "seat.bets_in_play")
    assert "seat.bets_in_play" in problem["detail"]
    assert api.store.head() == head
    assert api.state()["seats"][0]["player_id"] == "alice"


def test_removing_bets_returns_every_stake_of_the_player() -> None:
    api = Api()
    api.create_table("T1")
    api.fund("alice")
    api.sit("T1", "alice", 1)
    api.bet("T1", "alice", "player", 1_000)
    api.bet("T1", "alice", "tie", 500)
    removed = api.ok("DELETE", "/v1/tables/T1/bets/alice")
    assert removed["round_id"] == "T1-1"
    assert sorted(r["stake_pence"] for r in removed["returned"]) == [500, 1_000]
    assert api.available("alice") == FLOAT


def test_wallet_movements_carry_reasons_and_the_statement_pages_newest_first() -> None:
    api = Api()
    deposit = api.ok(
        "POST",
        "/v1/wallets/alice/deposits",
        {"amount_pence": 5_000, "reason": "card payment"},
        role=Role.OPS,
        status=201,
    )
    assert deposit == {
        "player_id": "alice",
        "type": "Deposited",
        "amount_pence": 5_000,
        "reason": "card payment",
        "available_pence": 5_000,
        "reserved_pence": 0,
        "version": 1,
    }
    body = {"amount_pence": 1_500, "reason": "bank transfer"}
    api.ok("POST", "/v1/wallets/alice/withdrawals", body, role=Role.OPS, status=201)
    body = {"amount_pence": -250, "reason": "duplicate bonus"}
    corrected = api.ok("POST", "/v1/wallets/alice/corrections", body, role=Role.OPS, status=201)
    assert corrected["available_pence"] == 5_000 - 1_500 - 250
    for role in Role:
        assert api.ok("GET", "/v1/wallets/alice", role=role) == {
            "player_id": "alice",
            "available_pence": 3_250,
            "reserved_pence": 0,
            "version": 3,
        }
    first = api.ok("GET", "/v1/wallets/alice/statement?limit=2", role=Role.REGULATOR)
    assert [(e["type"], e["amount_pence"], e["reason"]) for e in first["entries"]] == [
        ("Corrected", -250, "duplicate bonus"),
        ("Withdrawn", -1_500, "bank transfer"),
    ]
    assert first["entries"][0]["available_after_pence"] == 3_250
    assert first["next_before"] == 2
    rest = api.ok("GET", "/v1/wallets/alice/statement?limit=2&before=2")
    assert [e["type"] for e in rest["entries"]] == ["Deposited"]
    assert rest["next_before"] is None


def test_a_deposit_retried_with_its_idempotency_key_is_applied_once() -> None:
    api = Api()
    headers = {"Idempotency-Key": "deposit-42"}
    body = {"amount_pence": 1_000, "reason": "card payment"}
    first = api.call("POST", "/v1/wallets/bob/deposits", body, role=Role.OPS, headers=headers)
    again = api.call("POST", "/v1/wallets/bob/deposits", body, role=Role.OPS, headers=headers)
    assert first.status_code == again.status_code == 201
    assert again.get_data() == first.get_data()
    assert again.headers[REPLAYED_HEADER] == "true"
    assert api.available("bob") == 1_000


def test_a_retry_whose_first_answer_was_never_stored_gets_it_from_the_log(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    api = Api()
    api.create_table("T1")
    api.fund("alice")
    api.sit("T1", "alice", 1)
    headers = {"Idempotency-Key": "bet-7"}
    body = {"player_id": "alice", "spot": "banker", "stake_pence": 1_000}
    # The first request dies between its append and storing its response.
    with monkeypatch.context() as patch:
        patch.setattr(api.store, "record_response", lambda key, response: response)
        first = api.call("POST", "/v1/tables/T1/bets", body, headers=headers)
    monkeypatch.setattr(idempotency, "WAIT_SECONDS", 0.0)
    again = api.call("POST", "/v1/tables/T1/bets", body, headers=headers)
    assert first.status_code == again.status_code == 201
    assert again.get_json() == first.get_json()
    assert api.available("alice") == FLOAT - 1_000
    placed = [e for e in api.store.read_all(limit=10_000) if e.type == "BetPlaced"]
    assert len(placed) == 1


def test_a_bet_over_the_players_own_limit_is_refused_and_the_limit_changes_once_a_week() -> None:
    api = Api()
    api.create_table("T1")
    api.fund("alice")
    api.sit("T1", "alice", 1)
    assert api.ok("GET", "/v1/players/alice/limit")["limit_pence"] is None
    limit = api.ok("PUT", "/v1/players/alice/limit", {"limit_pence": 2_000})
    # T0 is Friday 3 May 2024 at 20:00 UTC: the next week starts Friday 10 May at 00:00 GMT.
    assert limit["limit_pence"] == 2_000
    assert limit["next_change_at"] == "2024-05-10T00:00:00+00:00"
    status, problem = api.refused(
        "POST", "/v1/tables/T1/bets", {"player_id": "alice", "spot": "tie", "stake_pence": 2_500}
    )
    assert (status, problem["rule"]) == (422, "bet.above_player_limit")
    status, problem = api.refused("PUT", "/v1/players/alice/limit", {"limit_pence": None})
    assert (status, problem["rule"]) == (409, "player_limit.changed_this_week")
    assert problem["next_change_at"] == "2024-05-10T00:00:00+00:00"
    assert "2024-05-10T00:00:00+00:00" in problem["detail"]
    # The document's Problem admits no other members: this one must be among them (found by
    # schemathesis, tests/integration/test_schemathesis.py).
    spec = api.ok("GET", "/v1/openapi.json")
    assert set(problem) <= set(spec["components"]["schemas"]["Problem"]["properties"])
    api.clock.now = T0 + timedelta(days=6, hours=4)
    assert api.ok("PUT", "/v1/players/alice/limit", {"limit_pence": None})["limit_pence"] is None


def test_chat_is_stored_and_answered_exactly_as_sent() -> None:
    api = Api()
    api.create_table("T1")
    api.fund("alice")
    api.sit("T1", "alice", 1)
    text = "<script>alert('hi')</script> & 🎲\nsecond line"
    posted = api.ok("POST", "/v1/tables/T1/chat", {"player_id": "alice", "text": text}, status=201)
    assert (posted["text"], posted["version"]) == (text, 1)
    assert posted["posted_at"] == T0.isoformat()
    for role in Role:
        (message,) = api.ok("GET", "/v1/tables/T1/chat?limit=10", role=role)["messages"]
        assert message["text"] == text


def test_a_muted_player_is_refused_until_unmuted_and_a_removed_one_cannot_sit_again() -> None:
    api = Api()
    api.create_table("T1")
    api.fund("alice")
    api.sit("T1", "alice", 1)
    say = {"player_id": "alice", "text": "hello"}
    muted = api.ok(
        "POST",
        "/v1/tables/T1/mutes",
        {"player_id": "alice", "reason": "spam"},
        role=Role.OPS,
        status=201,
    )
    assert muted["actions"] == ["PlayerMuted"]
    status, problem = api.refused("POST", "/v1/tables/T1/chat", say)
    assert (status, problem["rule"]) == (409, "chat.player_muted")
    api.ok("DELETE", "/v1/tables/T1/mutes/alice", role=Role.OPS)
    api.ok("POST", "/v1/tables/T1/chat", say, status=201)
    removal = {"player_id": "alice", "reason": "abusive language"}
    removed = api.ok("POST", "/v1/tables/T1/removals", removal, role=Role.OPS, status=201)
    assert (removed["actions"], removed["seat"]) == (["PlayerRemoved"], 1)
    status, problem = api.refused("POST", "/v1/tables/T1/chat", say)
    assert (status, problem["rule"]) == (409, "chat.player_removed")
    status, problem = api.refused("POST", "/v1/tables/T1/seats", {"player_id": "alice", "seat": 2})
    assert (status, problem["rule"]) == (409, "seat.player_removed_from_table")
