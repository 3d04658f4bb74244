"""Commands for the game concern of the `shoebox` CLI: simulating shoes and replaying one."""

import json
from collections import Counter

import click

from domain.cards import card_code
from domain.errors import InvalidShoeParameters
from domain.outcome import Outcome
from domain.shoe import (
    DEFAULT_DECKS,
    MAX_DECKS,
    MIN_DECKS,
    ServerSeed,
    commitment,
    random_client_seed,
    shuffle_shoe,
)
from domain.tableau import deal_shoe

SIMULATION_CLIENT_SEED = "simulate"

_DECKS = click.IntRange(MIN_DECKS, MAX_DECKS)


@click.command()
@click.option("--shoes", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--decks", type=_DECKS, default=DEFAULT_DECKS, show_default=True)
@click.option(
    "--seed",
    "server_seed",
    metavar="HEX",
    help="A 64-hex-character server seed for a reproducible run: shoe k is then dealt "
    f'with client seed "{SIMULATION_CLIENT_SEED}" and nonce k. Fresh seeds if omitted.',
)
def simulate(shoes: int, decks: int, server_seed: str | None) -> None:
    """Deal whole shoes and print the outcome counts as one JSON object."""
    outcomes: Counter[Outcome] = Counter()
    naturals = 0
    for nonce in range(1, shoes + 1):
        try:
            if server_seed is None:
                shoe = ServerSeed.generate().shuffle(random_client_seed(), nonce, decks)
            else:
                shoe = shuffle_shoe(server_seed, SIMULATION_CLIENT_SEED, nonce, decks)
        except InvalidShoeParameters as error:
            raise click.BadParameter(error.message, param_hint="--seed") from None
        for coup in deal_shoe(shoe):
            outcomes[coup.outcome] += 1
            naturals += coup.natural
    counts = {
        "shoes": shoes,
        "decks": decks,
        "hands": outcomes.total(),
        "banker": outcomes[Outcome.BANKER],
        "player": outcomes[Outcome.PLAYER],
        "tie": outcomes[Outcome.TIE],
        "naturals": naturals,
    }
    click.echo(json.dumps(counts))


@click.command("replay-shoe")
@click.option("--server-seed", required=True, metavar="HEX", help="The revealed server seed.")
@click.option("--client-seed", required=True, metavar="TEXT", help="The shoe's client seed.")
@click.option("--nonce", required=True, type=click.IntRange(min=0), help="The shoe's nonce.")
@click.option("--decks", type=_DECKS, default=DEFAULT_DECKS, show_default=True)
def replay_shoe(server_seed: str, client_seed: str, nonce: int, decks: int) -> None:
    """Deal a retired shoe from its revealed seeds and print it as JSON Lines (see README)."""
    try:
        shoe = shuffle_shoe(server_seed, client_seed, nonce, decks)
    except InvalidShoeParameters as error:
        raise click.UsageError(error.message) from None
    # The output is a published format that verifiers parse: keys, order and spacing are
    # part of it, so change it only together with the README.
    header = {
        "server_seed_hash": commitment(server_seed),
        "hands": shoe.hands,
        "cards": [card_code(card) for card in shoe.cards],
    }
    click.echo(json.dumps(header))
    for number, coup in enumerate(deal_shoe(shoe), start=1):
        line = {
            "coup": number,
            "positions": [drawn.position for drawn in coup.cards],
            "player": [card_code(card) for card in coup.player_cards],
            "banker": [card_code(card) for card in coup.banker_cards],
            "player_total": coup.player_total,
            "banker_total": coup.banker_total,
            "outcome": str(coup.outcome),
        }
        click.echo(json.dumps(line))


commands: list[click.Command] = [simulate, replay_shoe]
