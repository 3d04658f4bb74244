"""A reference operator wallet: the casino's side of Shoebox's seamless wallet protocol.

It stands in for a casino's own system, so it shares no code with Shoebox's server (an
import-linter contract holds that), and an operator can read it as a worked example of
docs/wallets.md: integer balances in minor units, transactions under a unique key, idempotent
replays, remembered rollbacks, signed calls both ways, and a transaction list for
reconciliation. It can also be told to misbehave (operator_wallet.faults).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime

from psycopg_pool import ConnectionPool

from operator_wallet.ledger import Ledger
from operator_wallet.server import WalletServer
from operator_wallet.signing import SigningKey


def utc_now() -> datetime:
    """The wall clock, in UTC."""
    return datetime.now(UTC)


@contextmanager
def running_wallet(
    database_url: str,
    keys: Mapping[str, SigningKey],
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    admin_token: str | None = None,
    clock: Callable[[], datetime] = utc_now,
    pool_size: int = 8,
) -> Iterator[WalletServer]:
    """A wallet serving from a background thread on its own tables, stopped on exit."""
    with ConnectionPool(
        database_url, min_size=1, max_size=pool_size, open=True, kwargs={"autocommit": True}
    ) as pool:
        ledger = Ledger(pool, clock)
        ledger.create_schema()
        server = WalletServer(
            ledger, keys, host=host, port=port, admin_token=admin_token, clock=clock
        )
        server.start()
        try:
            yield server
        finally:
            server.stop()


__all__ = ["Ledger", "SigningKey", "WalletServer", "running_wallet", "utc_now"]
