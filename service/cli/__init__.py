"""The `shoebox` command line: one group that collects each concern's commands, lazily.

Each concern's module is imported only when one of its commands runs, so `shoebox --help`
and `shoebox odds` do not pay for Flask, psycopg, rq and the whole service. The table below
is the one list of commands; a test holds it equal to what the modules define.
"""

from __future__ import annotations

import importlib
from typing import Final

import click

COMMANDS: Final[dict[str, tuple[str, str]]] = {
    # name: (module under service.cli, its one-line help)
    "simulate": ("game", "Deal whole shoes and print the outcome counts as one JSON object."),
    "replay-shoe": (
        "game",
        "Deal a retired shoe from its revealed seeds and print it as JSON Lines.",
    ),
    "odds": ("odds", "Print the exact outcome probabilities and house edges of a fresh shoe."),
    "restore": ("restore", "Restore PostgreSQL with pgBackRest to a named log position."),
    "migrate": ("store", "Apply pending schema migrations (the embedded server's if unset)."),
    "audit": ("audit", "Check the tamper-evident event log; sign checkpoints of it."),
    "keys": ("keys", "Create, revoke and list API keys; make checkpoint signing keys."),
    "serve": ("serve", "Apply migrations, then serve the API under gunicorn until interrupted."),
    "worker": ("worker", "Run the jobs that close betting windows and sign checkpoints."),
    "run": ("run", "Start PostgreSQL and Redis if needed, migrate, then run everything."),
    "projector": ("projections", "Follow the log into every read model until interrupted."),
    "projections": ("projections", "Rebuild the read models and see how far they have read."),
    "export": ("regulator", "Write a table's events in a time range, with its seeds, as JSONL."),
    "verify": ("regulator", "Check an export offline with the independent verifier."),
    "recover": ("regulator", "Complete rounds left due but undealt by a crash, or void them."),
    "wallet": (
        "wallet",
        "Reconcile a seamless operator's wallet; resume parked calls; check wallet modes.",
    ),
    "wallet-reference": (
        "wallet_reference",
        "Run the reference operator wallet: the casino's side of the seamless wallet.",
    ),
}


class LazyGroup(click.Group):
    """A group that imports a command's module only when the command is asked for."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        """Every command's name, in order, without importing any module."""
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        """The named command, importing its module now."""
        entry = COMMANDS.get(cmd_name)
        if entry is None:
            return None
        module = importlib.import_module(f"{__name__}.{entry[0]}")
        commands: list[click.Command] = module.commands
        for command in commands:
            if command.name == cmd_name:
                return command
        raise RuntimeError(f"service.cli.{entry[0]} defines no command {cmd_name!r}")

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """List the commands with the help of the table, so that listing imports nothing."""
        rows = [(name, help_text) for name, (_, help_text) in sorted(COMMANDS.items())]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup)
def main() -> None:
    """Shoebox: a provably fair Punto Banco server with a tamper-evident audit log."""
