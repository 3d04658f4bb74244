"""Commands for the regulator concern of the `shoebox` CLI."""

import click

commands: list[click.Command] = []
