"""Commands for the projections concern of the `shoebox` CLI."""

import click

commands: list[click.Command] = []
