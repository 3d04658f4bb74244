"""`shoebox wallet-reference serve`: the reference operator wallet, for tests and the demo.

It is the casino's side of the seamless wallet protocol (docs/wallets.md), shipped so that an
operator has a worked example and Shoebox's tests a real wallet to fault. It shares no code
with the server; this command only starts it.
"""

from __future__ import annotations

import click

# The service image leaves the reference wallet out (it is the casino's side, for tests and
# the demo), so the variables are named here rather than imported from it.
KEYS_VARIABLE = "OPERATOR_WALLET_KEYS"
ADMIN_VARIABLE = "OPERATOR_WALLET_ADMIN_TOKEN"


@click.group("wallet-reference")
def wallet_reference() -> None:
    """Run the reference operator wallet (the casino's side of the seamless wallet)."""


@wallet_reference.command("serve")
@click.option(
    "--database-url",
    envvar="OPERATOR_WALLET_DATABASE_URL",
    required=True,
    help="Its own PostgreSQL database; it creates its tables in schema reference_wallet.",
)
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=int, default=8100, show_default=True)
def serve_command(database_url: str, host: str, port: int) -> None:
    """Serve the wallet until interrupted (the keys and admin token from the environment)."""
    try:
        from operator_wallet.command import serve
    except ImportError:
        raise click.ClickException(
            "the reference wallet (operator_wallet) is not installed here; run it from a"
            " source checkout"
        ) from None
    try:
        serve(database_url, host, port)
    except ValueError as error:
        raise click.UsageError(str(error)) from error


serve_command.help = (
    f"Serve the wallet until interrupted. Signing keys come from {KEYS_VARIABLE}"
    f" (key_id:secret,...), the admin token from {ADMIN_VARIABLE}; never the command line."
)

commands = [wallet_reference]
