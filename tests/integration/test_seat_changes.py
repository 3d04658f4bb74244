"""Changing seat over the real PostgreSQL store: one step, raced fairly, played where moved."""

from domain.outcome import Outcome
from events.postgres import Pool, PostgresEventStore
from tests.api_harness import Api, seed_dealing
from tests.integration.test_api_postgres import in_threads


def test_two_players_racing_for_one_free_seat_one_moves_and_the_other_is_told_it_is_taken(
    app_pool: Pool,
) -> None:
    api = Api(store=PostgresEventStore(app_pool))
    api.create_table("T1")
    api.fund("alice")
    api.fund("bob")
    api.sit("T1", "alice", 1)
    api.sit("T1", "bob", 2)

    responses = in_threads(
        api,
        [
            ("PUT", "/v1/tables/T1/seats/alice", {"seat": 4}),
            ("PUT", "/v1/tables/T1/seats/bob", {"seat": 4}),
        ],
    )

    statuses = sorted(response.status_code for response in responses)
    assert statuses == [200, 409], [r.get_json() for r in responses]
    [refused] = [r.get_json() for r in responses if r.status_code == 409]
    assert refused["rule"] == "seat.taken"
    moves = api.store.read_all(types=["PlayerChangedSeat"])
    assert len(moves) == 1
    assert not api.store.read_all(types=["PlayerLeft"])
    seats = [seat["player_id"] for seat in api.state()["seats"]]
    winner = moves[0].payload["player_id"]
    assert seats[3] == winner
    assert seats.count(winner) == 1


def test_a_player_who_moved_is_dealt_and_paid_at_the_new_seat(app_pool: Pool) -> None:
    api = Api(store=PostgresEventStore(app_pool), seeds=(seed_dealing((Outcome.PLAYER,)),))
    api.create_table("T1")
    api.fund("alice")
    api.sit("T1", "alice", 1)
    api.ok("PUT", "/v1/tables/T1/seats/alice", {"seat": 3})
    api.bet("T1", "alice", "player", 1_000)
    status, problem = api.refused("PUT", "/v1/tables/T1/seats/alice", {"seat": 5})
    assert (status, problem["rule"]) == (409, "seat.bets_in_play")
    dealt = api.act("T1", "deal", "alice")
    assert [(s["seat"], s["payout_pence"]) for s in dealt["settlements"]] == [(3, 2_000)]
    # The round is over: the next move is between hands again.
    moved = api.ok("PUT", "/v1/tables/T1/seats/alice", {"seat": 5})
    assert moved["seat"] == 5
