"""The seamless operators' wallets, wired: a metered client each, and the services on them."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from events.postgres import Pool
from events.store import EventStore, utc_now
from service.application.game.tables import GameService
from service.application.seamless import SeamlessWalletConfig, WalletCall, WalletResult
from service.application.seamless_bets import SeamlessService, WalletSender
from service.application.seamless_calls import SeamlessCalls
from service.application.seamless_owed import OwedCalls
from service.application.wallet_modes import conflicts_message, mode_conflicts
from service.application.wallets import WalletService
from service.runtime.metrics import WALLET_CALLS
from service.runtime.seamless_wallet import SeamlessWalletClient
from service.runtime.settings import Settings, SettingsError


class MeteredSender:
    """A wallet client whose every call is counted by class in /metrics."""

    def __init__(self, config: SeamlessWalletConfig, client: WalletSender) -> None:
        self._operator = config.operator
        self._client = client

    def send(self, call: WalletCall, within_seconds: float | None = None) -> WalletResult:
        """One attempt at `call` (bounded by `within_seconds` if given), counted."""
        result = self._client.send(call, within_seconds)
        WALLET_CALLS.labels(self._operator, call.kind, str(result.outcome)).inc()
        return result


def is_seamless(settings: Settings) -> Callable[[str], bool]:
    """Whether a player key's operator is a seamless one, by the settings."""
    return settings.is_seamless


def owed_calls(
    settings: Settings, pool: Pool | None, clock: Callable[[], datetime] = utc_now
) -> OwedCalls | None:
    """What each append owes the seamless wallets, written with it; None without any."""
    if pool is None or not settings.seamless_wallets:
        return None
    return OwedCalls(pool, clock, settings.is_seamless)


def senders(
    settings: Settings, clock: Callable[[], datetime]
) -> dict[str, tuple[SeamlessWalletConfig, WalletSender]]:
    """Each seamless operator's configuration and metered client."""
    return {
        config.operator: (config, MeteredSender(config, SeamlessWalletClient(config, clock)))
        for config in settings.seamless_wallets
    }


def seamless_service(
    settings: Settings,
    store: EventStore,
    clock: Callable[[], datetime],
    pool: Pool,
    games: GameService,
) -> SeamlessService:
    """Sessions and bets of the seamless operators' players."""
    return SeamlessService(
        store,
        clock,
        pool,
        games,
        senders(settings, clock),
        owed=OwedCalls(pool, clock, settings.is_seamless),
    )


def seamless_calls(
    settings: Settings,
    store: EventStore,
    clock: Callable[[], datetime],
    pool: Pool,
    games: GameService,
) -> SeamlessCalls:
    """The owed calls' projection and delivery."""
    return SeamlessCalls(pool, clock, seamless_service(settings, store, clock, pool, games))


def refuse_wallet_mode_changes(settings: Settings, database_url: str) -> None:
    """Refuse to start (SettingsError) when the wallets file moves an operator's money away.

    Run by `shoebox serve`, `shoebox worker` and `shoebox wallet check-mode`, after the
    migrations: service/application/wallet_modes.py says what is checked and why.
    """
    from events.postgres import PostgresEventStore, app_conninfo, open_pool
    from service.application.upcasters import upcasters

    conninfo = settings.app_database_url or app_conninfo(database_url, environ={})
    pool = open_pool(conninfo, max_size=1)
    try:
        wallets = WalletService(PostgresEventStore(pool, utc_now, upcasters()), utc_now)
        operators = [config.operator for config in settings.seamless_wallets]
        conflicts = mode_conflicts(pool, wallets, operators)
    finally:
        pool.close()
    if conflicts:
        raise SettingsError(conflicts_message(conflicts))
