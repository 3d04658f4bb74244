"""Commands for the game concern of the `shoebox` CLI."""

import click

commands: list[click.Command] = []
