"""Shoebox's configuration, read once from the environment and passed down from there."""

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Self

from service.application.operators import operator_of
from service.application.seamless import SeamlessWalletConfig, WalletConfigError
from service.runtime.seamless_wallet import load_wallets

DEFAULT_DATA_DIR = Path(".shoebox")
DEFAULT_API_HOST = "127.0.0.1"
DEFAULT_API_PORT = 8000
DEFAULT_FEED_HEARTBEAT_SECONDS = 10.0
MAX_FEED_HEARTBEAT_SECONDS = 15.0
MULTIPROC_VARIABLE = "PROMETHEUS_MULTIPROC_DIR"
"""Where every process of one host keeps its metrics; set before prometheus_client is imported."""
METRICS_ACCESS = ("open", "key", "off")
"""Who may read GET /metrics on the API's address: anyone, an ops or regulator key, nobody."""
# Per API key and per server process (docs/operations.md): a front end's steady rate, and the
# burst it may send above it. Sized for one casino's lobby at peak, far above any one player:
# about what one gevent worker answers on a small machine, since a 2-core server now runs one
# (it ran five of 200 a second each before).
DEFAULT_RATE_LIMIT_PER_SECOND = 1000.0
DEFAULT_RATE_LIMIT_BURST = 2000
DEFAULT_CHECKPOINT_INTERVAL_SECONDS = 60.0


class SettingsError(ValueError):
    """An environment variable holds a value Shoebox cannot use."""


@dataclass(frozen=True, slots=True)
class Settings:
    """Where Shoebox keeps its data and which servers it talks to."""

    # None means "start the embedded server": see service.embedded.
    database_url: str | None = None
    redis_url: str | None = None
    data_dir: Path = DEFAULT_DATA_DIR
    # The role that may only INSERT and SELECT on the event log; None means database_url's role.
    app_database_url: str | None = None
    # A streaming replica (or HAProxy's port for them) that serves reads: GETs, the feed,
    # regulators' exports (docs/scaling.md, "Reads from replicas"). None: all on the primary.
    # Its user is replaced by the application's role, as DATABASE_URL's is, unless
    # SHOEBOX_APP_DATABASE_READ_URL names the connection in full.
    database_read_url: str | None = None
    app_database_read_url: str | None = None
    # None means any free port; a fixed one lets other tools find the embedded servers.
    embedded_postgres_port: int | None = None
    embedded_redis_port: int | None = None
    api_host: str = DEFAULT_API_HOST
    api_port: int = DEFAULT_API_PORT
    # The checkpoint signing key: a file holding its 64 hex characters, or the hex itself.
    # Never in the database (docs/operations.md). None means no checkpoints are signed.
    signing_key_file: Path | None = None
    signing_key: str | None = None
    # The key used before a rotation, to endorse the new one in its first checkpoint.
    previous_signing_key_file: Path | None = None
    previous_signing_key: str | None = None
    # Where each checkpoint is also appended as a JSON line, e.g. a regulator's mount.
    checkpoint_file: Path | None = None
    # How often the workers' periodic job signs the log's head (if anything was appended): the
    # most a signed checkpoint trails the log by, and how soon signing resumes on another host.
    checkpoint_interval_seconds: float = DEFAULT_CHECKPOINT_INTERVAL_SECONDS
    # The Merkle tree's checkpoints (docs/verification.md, "Proving one round"): the log's
    # origin line, which names this log to verifiers and witnesses; None signs no tree notes
    # (demo mode signs as the example origin). The latest note is also written to note_file.
    log_origin: str | None = None
    note_file: Path | None = None
    # Witnesses each tree checkpoint is shown to: "URL VKEY" pairs, one per witness.
    witnesses: tuple[tuple[str, str], ...] = ()
    # How often an idle live feed sends a comment, so proxies and clients know it is alive.
    feed_heartbeat_seconds: float = DEFAULT_FEED_HEARTBEAT_SECONDS
    # GET /metrics on the API's address (docs/operations.md, "Metrics").
    metrics_access: str = "open"
    # Also serve the metrics on this port of metrics_host, from gunicorn's master process.
    metrics_port: int | None = None
    metrics_host: str = DEFAULT_API_HOST
    # Requests a second one API key may sustain in one server process, and the burst above it
    # (a token bucket: service/web/rate_limits.py). A rate of 0 turns the limit off.
    rate_limit_per_second: float = DEFAULT_RATE_LIMIT_PER_SECOND
    rate_limit_burst: int = DEFAULT_RATE_LIMIT_BURST
    # Demo mode (SHOEBOX_DEMO=1, set by `shoebox run`): serve the /play reference table page,
    # which plays with the demo keys on the browser's behalf (docs/operations.md, "Demo mode").
    demo: bool = False
    # Seamless operators (docs/wallets.md): SHOEBOX_SEAMLESS_WALLETS_FILE, a TOML file of
    # `[operators.NAME]` tables, each checked when read: a currency other than the tables' is
    # refused here, at startup. Every other operator uses the internal wallet.
    seamless_wallets_file: Path | None = None
    seamless_wallets: tuple[SeamlessWalletConfig, ...] = ()

    def is_seamless(self, player_id: str) -> bool:
        """Whether a player key's operator keeps its players' money in its own wallet."""
        return self.seamless_wallet(operator_of(player_id)) is not None

    def seamless_wallet(self, operator: str) -> SeamlessWalletConfig | None:
        """The wallet of a seamless operator; None for an operator of the internal wallet."""
        for config in self.seamless_wallets:
            if config.operator == operator:
                return config
        return None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> Self:
        """Read the settings from `environ`, treating an empty variable as unset."""

        def text(name: str) -> str | None:
            return environ.get(name) or None

        def path(name: str) -> Path | None:
            value = text(name)
            return None if value is None else Path(value)

        def port(name: str) -> int | None:
            value = text(name)
            if value is None:
                return None
            if not value.isdecimal() or not 0 < int(value) < 65536:
                raise SettingsError(f"{name} must be a TCP port from 1 to 65535, not {value!r}")
            return int(value)

        heartbeat = text("SHOEBOX_FEED_HEARTBEAT_SECONDS")
        try:
            heartbeat_seconds = (
                DEFAULT_FEED_HEARTBEAT_SECONDS if heartbeat is None else float(heartbeat)
            )
        except ValueError:
            heartbeat_seconds = -1.0
        if not 0 < heartbeat_seconds <= MAX_FEED_HEARTBEAT_SECONDS:
            raise SettingsError(
                "SHOEBOX_FEED_HEARTBEAT_SECONDS must be a number of seconds above 0 and at most"
                f" {MAX_FEED_HEARTBEAT_SECONDS:g}, not {heartbeat!r}"
            )
        metrics_access = text("SHOEBOX_METRICS_ACCESS") or "open"
        if metrics_access not in METRICS_ACCESS:
            raise SettingsError(
                f"SHOEBOX_METRICS_ACCESS must be one of {', '.join(METRICS_ACCESS)},"
                f" not {metrics_access!r}"
            )

        def number(name: str, default: float, minimum: float) -> float:
            value = text(name)
            if value is None:
                return default
            try:
                parsed = float(value)
            except ValueError:
                parsed = float("nan")
            if not parsed >= minimum or parsed == float("inf"):
                raise SettingsError(
                    f"{name} must be a finite number of at least {minimum:g}, not {value!r}"
                )
            return parsed

        wallets_file = path("SHOEBOX_SEAMLESS_WALLETS_FILE")
        try:
            wallets = () if wallets_file is None else tuple(load_wallets(wallets_file).values())
        except WalletConfigError as error:
            # The error names the operator and the setting, never a secret's value.
            raise SettingsError(f"SHOEBOX_SEAMLESS_WALLETS_FILE: {error}") from None
        return cls(
            seamless_wallets_file=wallets_file,
            seamless_wallets=wallets,
            database_url=text("DATABASE_URL"),
            redis_url=text("REDIS_URL"),
            data_dir=Path(text("SHOEBOX_DATA_DIR") or DEFAULT_DATA_DIR),
            app_database_url=text("SHOEBOX_APP_DATABASE_URL"),
            database_read_url=text("DATABASE_READ_URL"),
            app_database_read_url=text("SHOEBOX_APP_DATABASE_READ_URL"),
            embedded_postgres_port=port("SHOEBOX_POSTGRES_PORT"),
            embedded_redis_port=port("SHOEBOX_REDIS_PORT"),
            api_host=text("SHOEBOX_API_HOST") or DEFAULT_API_HOST,
            api_port=port("SHOEBOX_API_PORT") or DEFAULT_API_PORT,
            signing_key_file=path("SHOEBOX_SIGNING_KEY_FILE"),
            signing_key=text("SHOEBOX_SIGNING_KEY"),
            previous_signing_key_file=path("SHOEBOX_PREVIOUS_SIGNING_KEY_FILE"),
            previous_signing_key=text("SHOEBOX_PREVIOUS_SIGNING_KEY"),
            checkpoint_file=path("SHOEBOX_CHECKPOINT_FILE"),
            checkpoint_interval_seconds=number(
                "SHOEBOX_CHECKPOINT_INTERVAL_SECONDS", DEFAULT_CHECKPOINT_INTERVAL_SECONDS, 1
            ),
            log_origin=text("SHOEBOX_LOG_ORIGIN"),
            note_file=path("SHOEBOX_NOTE_FILE"),
            witnesses=_witnesses(text("SHOEBOX_WITNESSES")),
            feed_heartbeat_seconds=heartbeat_seconds,
            metrics_access=metrics_access,
            metrics_port=port("SHOEBOX_METRICS_PORT"),
            metrics_host=text("SHOEBOX_METRICS_HOST") or DEFAULT_API_HOST,
            rate_limit_per_second=number(
                "SHOEBOX_RATE_LIMIT_PER_SECOND", DEFAULT_RATE_LIMIT_PER_SECOND, 0
            ),
            rate_limit_burst=int(number("SHOEBOX_RATE_LIMIT_BURST", DEFAULT_RATE_LIMIT_BURST, 1)),
            demo=_flag(environ, "SHOEBOX_DEMO"),
        )


def _witnesses(value: str | None) -> tuple[tuple[str, str], ...]:
    # "URL VKEY" pairs separated by commas or newlines: a vkey holds neither.
    if value is None:
        return ()
    pairs = []
    for entry in value.replace("\n", ",").split(","):
        if not entry.strip():
            continue
        parts = entry.split()
        if len(parts) != 2 or not parts[0].startswith(("http://", "https://")):
            raise SettingsError(
                f"SHOEBOX_WITNESSES takes 'URL VKEY' pairs separated by commas, not {entry!r}"
            )
        pairs.append((parts[0], parts[1]))
    return tuple(pairs)


def _flag(environ: Mapping[str, str], name: str) -> bool:
    value = (environ.get(name) or "").strip().lower()
    if value in ("", "0", "false", "no", "off"):
        return False
    if value in ("1", "true", "yes", "on"):
        return True
    raise SettingsError(f"{name} must be 1 or 0 (or true/false), not {value!r}")
