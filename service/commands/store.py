"""Commands for the store concern of the `shoebox` CLI."""

import click

commands: list[click.Command] = []
