"""The reference wallet's command line: `python -m operator_wallet serve`.

`shoebox wallet-reference serve` runs the same function.

Secrets come from the environment, never the command line (which `ps` shows to every user):
OPERATOR_WALLET_KEYS holds `key_id:secret` pairs separated by commas, the first being the
current key; OPERATOR_WALLET_ADMIN_TOKEN turns the /admin endpoints on.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from collections.abc import Mapping, Sequence
from types import FrameType

from operator_wallet import running_wallet
from operator_wallet.signing import SigningKey

KEYS_VARIABLE = "OPERATOR_WALLET_KEYS"
ADMIN_VARIABLE = "OPERATOR_WALLET_ADMIN_TOKEN"


def keys_from(text: str) -> dict[str, SigningKey]:
    """The keys `key_id:secret,key_id:secret` names, or ValueError."""
    keys: dict[str, SigningKey] = {}
    for pair in text.split(","):
        key_id, separator, secret = pair.strip().partition(":")
        if not separator:
            raise ValueError(f"{KEYS_VARIABLE} holds key_id:secret pairs separated by commas")
        keys[key_id] = SigningKey(key_id, secret.encode())
    return keys


def serve(database_url: str, host: str, port: int, environ: Mapping[str, str] = os.environ) -> None:
    """Serve until SIGINT or SIGTERM."""
    keys = keys_from(environ.get(KEYS_VARIABLE, ""))
    stop = threading.Event()

    def on_signal(number: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    admin_token = environ.get(ADMIN_VARIABLE) or None
    with running_wallet(
        database_url, keys, host=host, port=port, admin_token=admin_token
    ) as server:
        # One line a supervisor (or `make run`) can read the address from.
        print(f"reference wallet serving on {server.url}", flush=True)
        stop.wait()


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the command line and run it."""
    parser = argparse.ArgumentParser(prog="python -m operator_wallet")
    commands = parser.add_subparsers(dest="command", required=True)
    serve_parser = commands.add_parser("serve", help="run the reference wallet")
    serve_parser.add_argument(
        "--database-url",
        default=os.environ.get("OPERATOR_WALLET_DATABASE_URL"),
        help="its PostgreSQL database (OPERATOR_WALLET_DATABASE_URL)",
    )
    serve_parser.add_argument("--host", default="127.0.0.1")
    serve_parser.add_argument("--port", type=int, default=8100)
    arguments = parser.parse_args(argv)
    if not arguments.database_url:
        parser.error("--database-url or OPERATOR_WALLET_DATABASE_URL is required")
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    try:
        serve(arguments.database_url, arguments.host, arguments.port)
    except ValueError as error:
        parser.error(str(error))
    return 0
