"""Commands for the odds concern of the `shoebox` CLI."""

import json

import click

from domain.odds import exact_odds, fresh_shoe_counts

# The shoe deals from 1 to 8 decks; odds for other sizes would describe no table of ours.
MIN_DECKS = 1
MAX_DECKS = 8


@click.command("odds")
@click.option(
    "--decks",
    type=click.IntRange(MIN_DECKS, MAX_DECKS),
    default=MAX_DECKS,
    show_default=True,
    help="Decks in the fresh shoe.",
)
def odds(decks: int) -> None:
    """Print the exact outcome probabilities and house edges of a fresh shoe as one JSON object."""
    exact = exact_odds(fresh_shoe_counts(decks))
    click.echo(json.dumps({"decks": decks, **exact.to_dict()}))


commands: list[click.Command] = [odds]
