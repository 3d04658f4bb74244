"""The `shoebox` command line: one group that collects each concern's commands."""

import click

from service.cli import (
    audit,
    game,
    keys,
    odds,
    projections,
    regulator,
    run,
    serve,
    store,
    worker,
)


@click.group()
def main() -> None:
    """Shoebox: a provably fair Punto Banco server with a tamper-evident audit log."""


for _module in (game, odds, store, audit, keys, serve, worker, run, projections, regulator):
    for _command in _module.commands:
        main.add_command(_command)
