"""A whole multi-player round through the HTTP API: mixed bets, a Pass, a timeout, payouts."""

from datetime import timedelta

from domain.outcome import Outcome
from domain.shoe import ServerSeed
from tests.api_harness import FLOAT, T0, Api, expected_cards, seed_dealing


def test_a_round_with_mixed_bets_a_pass_and_a_timeout_then_a_tie_pays_by_the_rules() -> None:
    seed = seed_dealing((Outcome.BANKER, Outcome.TIE))
    api = Api(seeds=(seed,))
    api.create_table("T1")
    for seat, player in enumerate(("alice", "bob", "carol", "dave"), start=1):
        api.fund(player)
        api.sit("T1", player, seat)

    # Alice's bet at the idle table opens round 1 and its 15 s window, over a new shoe.
    opened = api.bet("T1", "alice", "banker", 1_000)
    assert opened["round_id"] == "T1-1"
    assert opened["next_round"] is None
    # Its answer says when the window closes, under the one name the state and feed use too.
    window_closes_at = (T0 + timedelta(seconds=15)).isoformat()
    assert opened["window_closes_at"] == window_closes_at
    assert opened["shoe_opened"]["nonce"] == 1
    assert opened["actions"] == ["ShoeOpened", "RoundOpened", "BetPlaced"]
    assert opened["bets"] == [
        {"seat": 1, "player_id": "alice", "spot": "banker", "stake_pence": 1_000}
    ]
    api.bet("T1", "bob", "player", 2_000)
    api.bet("T1", "bob", "tie", 500)
    api.bet("T1", "carol", "banker", 1_000)
    api.bet("T1", "dave", "player", 1_000)
    assert api.ok("GET", "/v1/wallets/bob")["reserved_pence"] == 2_500

    # Erin sits down during the round: she waits for the next one.
    api.fund("erin")
    api.sit("T1", "erin", 5)
    state = api.state()
    assert state["phase"] == "betting"
    assert state["round_id"] == "T1-1"
    assert state["window_closes_at"] == window_closes_at
    seats = {seat["player_id"]: seat for seat in state["seats"] if seat["player_id"]}
    assert seats["erin"]["waiting"] is True
    assert seats["erin"]["in_round"] is False
    assert seats["alice"]["waiting"] is False
    assert seats["bob"]["bets"] == [
        {"spot": "player", "stake_pence": 2_000},
        {"spot": "tie", "stake_pence": 500},
    ]
    assert state["shoe"]["server_seed_hash"] == ServerSeed(seed).commitment

    dealt = api.act("T1", "deal", "alice")
    assert dealt["round_id"] == "T1-1"
    assert dealt["coup"] is None
    api.act("T1", "deal", "bob")
    passed = api.act("T1", "pass", "carol")
    assert passed["returned"] == [
        {
            "seat": 3,
            "player_id": "carol",
            "spot": "banker",
            "stake_pence": 1_000,
            "reason": "passed",
        }
    ]
    seats = {seat["player_id"]: seat for seat in api.state()["seats"] if seat["player_id"]}
    assert (seats["alice"]["action"], seats["alice"]["acted"]) == ("pressed_deal", True)
    assert (seats["carol"]["action"], seats["carol"]["acted"]) == ("passed", True)
    assert (seats["dave"]["action"], seats["dave"]["acted"]) == ("pending", False)

    # Dave never acts. Past the deadline the state shows the window closing; reading it
    # writes nothing. The next write to the table (here Erin's chat message) closes the
    # window, excludes him, deals and settles, and opens round 2 for everyone seated.
    api.clock.advance(15)
    head = api.store.head()
    closing = api.state()
    assert (closing["round_id"], closing["phase"]) == ("T1-1", "closing")
    assert api.store.head() == head
    api.ok("POST", "/v1/tables/T1/chat", {"player_id": "erin", "text": "deal!"}, status=201)
    state = api.state()
    assert state["round_id"] == "T1-2"
    assert state["phase"] == "betting"
    assert [seat["in_round"] for seat in state["seats"][:5]] == [True] * 5
    (history,) = api.ok("GET", "/v1/players/alice/rounds")["rounds"]
    assert history["round_id"] == "T1-1"
    assert history["outcome"] == "banker"
    assert history["cards"] == expected_cards(seed, 0)
    # Banker £10 wins even money less 5% commission on the win: £19.50 back, 50p kept.
    assert history["bets"] == [
        {
            "seat": 1,
            "spot": "banker",
            "stake_pence": 1_000,
            "payout_pence": 1_950,
            "commission_pence": 50,
            "returned": None,
        }
    ]
    (dave_round,) = api.ok("GET", "/v1/players/dave/rounds")["rounds"]
    assert dave_round["bets"][0]["returned"] == "excluded"
    assert api.available("alice") == FLOAT - 1_000 + 1_950
    assert api.available("bob") == FLOAT - 2_000 - 500  # Player and Tie both lose
    assert api.available("carol") == FLOAT  # passed: stake back
    assert api.available("dave") == FLOAT  # timed out: stake back
    assert api.available("erin") == FLOAT

    # Round 2 is a tie: Player and Banker bets push, the Tie pays 8 to 1.
    rebet = api.act("T1", "rebet", "alice", status=201)
    assert rebet["bets"] == [
        {"seat": 1, "player_id": "alice", "spot": "banker", "stake_pence": 1_000}
    ]
    assert api.act("T1", "rebet", "bob", status=201)["round_id"] == "T1-2"
    api.bet("T1", "carol", "tie", 500)
    for player in ("alice", "bob", "carol"):
        api.act("T1", "deal", player)
    api.act("T1", "pass", "dave")
    last = api.act("T1", "pass", "erin")
    coup = last["coup"]
    assert coup["round_id"] == last["round_id"] == "T1-2"
    assert coup["outcome"] == "tie"
    assert coup["player_total"] == coup["banker_total"]
    first_position = len(history["cards"])
    assert [
        {k: card[k] for k in ("hand", "position", "card", "reason")} for card in coup["cards"]
    ] == expected_cards(seed, first_position)
    assert sorted(
        (s["player_id"], s["spot"], s["stake_pence"], s["payout_pence"], s["commission_pence"])
        for s in last["settlements"]
    ) == [
        ("alice", "banker", 1_000, 1_000, 0),  # push
        ("bob", "player", 2_000, 2_000, 0),  # push
        ("bob", "tie", 500, 4_500, 0),  # £5 at 8 to 1: £45 back
        ("carol", "tie", 500, 4_500, 0),
    ]
    assert last["next_round"]["round_id"] == "T1-3"
    assert last["next_round"]["window_closes_at"] == api.state()["window_closes_at"]
    assert last["window_closes_at"] is None  # it opened no round of its own
    assert api.available("alice") == FLOAT + 950
    assert api.available("bob") == FLOAT - 2_500 - 2_500 + 2_000 + 4_500
    assert api.available("carol") == FLOAT - 500 + 4_500
    assert api.available("dave") == FLOAT
    assert api.available("erin") == FLOAT
    for player in ("alice", "bob", "carol", "dave", "erin"):
        assert api.ok("GET", f"/v1/wallets/{player}")["reserved_pence"] == 0


def test_a_timed_out_round_is_dealt_by_any_request_to_its_table_even_a_command() -> None:
    api = Api(seeds=(seed_dealing((Outcome.PLAYER,)),))
    api.create_table("T1")
    for seat, player in enumerate(("alice", "bob"), start=1):
        api.fund(player)
        api.sit("T1", player, seat)
    api.bet("T1", "alice", "player", 1_000)
    api.act("T1", "deal", "alice")
    api.clock.advance(16)
    # Bob's late bet finds the window closed: the table deals round 1 first, then his bet
    # goes into round 2, which the settlement opened.
    late = api.bet("T1", "bob", "banker", 1_000)
    assert late["round_id"] == "T1-2"
    assert api.available("alice") == FLOAT - 1_000 + 2_000  # Player £10 wins 1 to 1


def test_a_late_action_that_names_its_round_is_refused_not_moved_into_the_next_round() -> None:
    api = Api(seeds=(seed_dealing((Outcome.PLAYER, Outcome.BANKER)),))
    api.create_table("T1")
    for seat, player in enumerate(("alice", "bob"), start=1):
        api.fund(player)
        api.sit("T1", player, seat)
    opened = api.bet("T1", "alice", "player", 1_000)
    bets = "/v1/tables/T1/bets"
    # Named and open: the bet, Deal and Pass go in as unnamed ones would.
    named = {"player_id": "bob", "spot": "banker", "stake_pence": 500, "round_id": "T1-1"}
    assert api.ok("POST", bets, named, status=201)["round_id"] == opened["round_id"] == "T1-1"
    assert api.ok("POST", "/v1/tables/T1/pass", {"player_id": "bob", "round_id": "T1-1"})
    api.clock.advance(16)

    # Past the deadline a named bet, Deal, Pass or Rebet is refused as late. The first request
    # to the table closes the overdue window as any would (Alice, who never pressed Deal, is
    # excluded and her stake comes back); the refused actions themselves record nothing, and
    # no round 2 is opened under the player.
    heads = []
    for path, body in (
        (bets, {**named, "player_id": "alice"}),
        ("/v1/tables/T1/deal", {"player_id": "alice", "round_id": "T1-1"}),
        ("/v1/tables/T1/pass", {"player_id": "alice", "round_id": "T1-1"}),
        ("/v1/tables/T1/rebet", {"player_id": "alice", "round_id": "T1-1"}),
    ):
        status, problem = api.refused("POST", path, body)
        assert (status, problem["rule"]) == (409, "round.betting_window_closed"), problem
        assert "T1-1" in problem["detail"]
        heads.append(api.store.head())
    assert len(set(heads)) == 1
    assert api.available("alice") == FLOAT
    assert (api.state()["round_id"], api.state()["phase"]) == ("T1-1", "idle")

    # Unnamed, the same bet opens round 2.
    late = api.bet("T1", "alice", "banker", 1_000)
    assert late["round_id"] == "T1-2"
    # Named after the round it meant, it is late; named for a round this table never had, it
    # is not found; neither changes anything.
    for round_id, rule in (
        ("T1-1", "round.betting_window_closed"),
        ("T1-3", "round.not_found"),
        ("T1-02", "round.not_found"),
        ("T2-2", "round.not_found"),
    ):
        status, problem = api.refused("POST", bets, {**named, "round_id": round_id})
        assert (status, problem["rule"]) == (409, rule), (round_id, problem)
    assert api.ok("POST", bets, {**named, "round_id": "T1-2"}, status=201)["round_id"] == "T1-2"
    assert api.refused("POST", bets, {**named, "round_id": "not an id!"})[0] == 422
