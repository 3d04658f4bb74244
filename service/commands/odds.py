"""Commands for the odds concern of the `shoebox` CLI."""

import click

commands: list[click.Command] = []
