import json

from click.testing import CliRunner

from domain.cards import card_code
from domain.shoe import shuffle_shoe
from service.cli import game

SEED_A = "a" * 64
REPLAY_VECTOR_2 = [
    "--server-seed",
    SEED_A,
    "--client-seed",
    "table-1",
    "--nonce",
    "1",
]


def test_the_game_concern_offers_simulate_and_replay_shoe() -> None:
    assert {command.name for command in game.commands} == {"simulate", "replay-shoe"}


def replay(*args: str) -> list[dict[str, object]]:
    result = CliRunner().invoke(game.replay_shoe, list(args))
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in result.stdout.splitlines()]


def test_replay_starts_with_the_commitment_the_hands_and_the_whole_shoe() -> None:
    header = replay(*REPLAY_VECTOR_2)[0]
    assert list(header) == ["server_seed_hash", "hands", "cards"]
    assert header["server_seed_hash"] == (
        "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb"
    )
    assert header["hands"] == 75
    cards = header["cards"]
    assert isinstance(cards, list)
    assert len(cards) == 416
    assert " ".join(cards[:16]) == "4D JS 3S KC JS QS 7S 2C 8H 4C QS QD TD 2H TH 2D"


def test_replay_prints_vector_twos_first_coups_as_the_spec_describes() -> None:
    lines = replay(*REPLAY_VECTOR_2)
    assert lines[1] == {
        "coup": 1,
        "positions": [0, 1, 2, 3, 4],
        "player": ["4D", "3S"],
        "banker": ["JS", "KC", "JS"],
        "player_total": 7,
        "banker_total": 0,
        "outcome": "player",
    }
    assert lines[2] == {
        "coup": 2,
        "positions": [5, 6, 7, 8, 9, 10],
        "player": ["QS", "2C", "4C"],
        "banker": ["7S", "8H", "QS"],
        "player_total": 6,
        "banker_total": 5,
        "outcome": "player",
    }
    assert list(lines[1]) == [
        "coup",
        "positions",
        "player",
        "banker",
        "player_total",
        "banker_total",
        "outcome",
    ]


def test_replay_prints_one_line_per_coup_following_the_shoe_card_by_card() -> None:
    lines = replay(*REPLAY_VECTOR_2)
    header, coups = lines[0], lines[1:]
    assert len(coups) == header["hands"]
    assert [coup["coup"] for coup in coups] == list(range(1, 76))
    positions = [position for coup in coups for position in coup["positions"]]  # type: ignore[attr-defined]
    assert positions == list(range(len(positions)))
    cards = header["cards"]
    assert isinstance(cards, list)
    for coup in coups:
        dealt = [cards[position] for position in coup["positions"]]  # type: ignore[attr-defined]
        assert sorted(dealt) == sorted(coup["player"] + coup["banker"])  # type: ignore[operator]


def test_replay_output_is_stable_to_the_byte() -> None:
    result = CliRunner().invoke(game.replay_shoe, REPLAY_VECTOR_2)
    second_line = result.stdout.splitlines()[1]
    assert second_line == (
        '{"coup": 1, "positions": [0, 1, 2, 3, 4], "player": ["4D", "3S"], '
        '"banker": ["JS", "KC", "JS"], "player_total": 7, "banker_total": 0, '
        '"outcome": "player"}'
    )


def test_replay_honours_the_deck_count() -> None:
    lines = replay(*REPLAY_VECTOR_2, "--decks", "1")
    cards = lines[0]["cards"]
    expected = shuffle_shoe(SEED_A, "table-1", 1, decks=1).cards
    assert cards == [card_code(card) for card in expected]
    assert len(lines) - 1 < 75  # a one-deck shoe runs out of cards before its hands


def test_replay_refuses_a_malformed_server_seed_with_a_usage_error() -> None:
    result = CliRunner().invoke(
        game.replay_shoe, ["--server-seed", "xyz", "--client-seed", "c", "--nonce", "0"]
    )
    assert result.exit_code == 2
    assert "64 lowercase hex characters" in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_replay_refuses_nine_decks_and_negative_nonces() -> None:
    runner = CliRunner()
    assert runner.invoke(game.replay_shoe, [*REPLAY_VECTOR_2, "--decks", "9"]).exit_code == 2
    negative = ["--server-seed", SEED_A, "--client-seed", "c", "--nonce", "-1"]
    assert runner.invoke(game.replay_shoe, negative).exit_code == 2


def simulate(*args: str) -> dict[str, int]:
    result = CliRunner().invoke(game.simulate, list(args))
    assert result.exit_code == 0, result.output
    counts: dict[str, int] = json.loads(result.stdout)
    return counts


def test_simulate_counts_every_hand_of_every_shoe() -> None:
    counts = simulate("--shoes", "3", "--seed", SEED_A)
    assert counts["shoes"] == 3
    assert counts["decks"] == 8
    assert counts["banker"] + counts["player"] + counts["tie"] == counts["hands"]
    expected_hands = sum(shuffle_shoe(SEED_A, "simulate", nonce).hands for nonce in (1, 2, 3))
    assert counts["hands"] == expected_hands
    assert 0 < counts["naturals"] < counts["hands"]


def test_simulate_with_a_seed_is_reproducible() -> None:
    assert simulate("--shoes", "2", "--seed", SEED_A) == simulate("--shoes", "2", "--seed", SEED_A)


def test_simulate_without_a_seed_deals_shoes_of_the_given_decks() -> None:
    counts = simulate("--shoes", "2", "--decks", "6")
    assert counts["decks"] == 6
    # Six decks (312 cards) run short of cards before 70 hands, so only the cap is certain.
    assert 0 < counts["hands"] <= 150
    assert counts["banker"] + counts["player"] + counts["tie"] == counts["hands"]


def test_simulate_refuses_a_malformed_seed() -> None:
    result = CliRunner().invoke(game.simulate, ["--seed", "not-hex"])
    assert result.exit_code == 2
    assert "64 lowercase hex characters" in result.output
