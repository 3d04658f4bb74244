"""`shoebox run`, behind `make run`: everything Shoebox needs, started and stopped as one.

It resolves PostgreSQL and Redis (starting the embedded servers when DATABASE_URL or REDIS_URL
is unset), applies migrations, makes sure there is a demo API key for each role, then runs
`shoebox serve`, `shoebox worker` and `shoebox projector` as child processes until SIGINT or
SIGTERM, and stops them, then the embedded servers, in that order. Unless told not to (or given
a wallets file of one's own), it first starts the reference operator wallet on a loopback port
for the demo's seamless operator `casino` (service/cli/demo_wallet.py).

Each child runs in a session of its own, so that a Ctrl+C in the terminal reaches this process
alone and the shutdown happens once, in order: the API, the worker and the projector first
(each stopping its own workers and scheduler), then a sweep of whatever their sessions left,
then the databases.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Final

import click

from events.migrations import apply_migrations
from service.cli.demo_wallet import DEMO_OPERATOR, DEMO_WALLET_FILE, DemoWallet, prepare_demo_wallet
from service.embedded import database_url, redis_url
from service.runtime.demo import DEMO_KEYS_FILE, DemoKey, ensure_demo_keys
from service.runtime.settings import MULTIPROC_VARIABLE, Settings

READY_TIMEOUT_SECONDS: Final = 60.0
WALLETS_VARIABLE: Final = "SHOEBOX_SEAMLESS_WALLETS_FILE"
# Gunicorn waits up to 10 s for requests in flight; an rq job is a few milliseconds.
STOP_TIMEOUT_SECONDS: Final = 20.0
_POLL_SECONDS: Final = 0.1


class _Stop(Exception):  # noqa: N818 -- a request, not an error
    """SIGINT or SIGTERM arrived: stop everything."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@click.command("run")
@click.option("--workers", type=click.IntRange(min=1), help="Gunicorn workers (serve's default).")
@click.option(
    "--threads",
    type=click.IntRange(min=1),
    help="Threads per gunicorn worker, with gthread workers instead of gevent.",
)
@click.option(
    "--demo-keys/--no-demo-keys",
    default=True,
    show_default=True,
    help="Make sure there is a demo API key for each role, and print them.",
)
@click.option(
    "--demo-wallet/--no-demo-wallet",
    default=True,
    show_default=True,
    help="Start the reference operator wallet for a demo seamless operator `casino`"
    " (not when SHOEBOX_SEAMLESS_WALLETS_FILE is set).",
)
@click.option(
    "--demo-wallet-port",
    type=click.IntRange(min=0, max=65535),
    default=0,
    show_default=True,
    help="The demo wallet's loopback port; 0 for one free now.",
)
def run(
    workers: int | None,
    threads: int | None,
    demo_keys: bool,
    demo_wallet: bool,
    demo_wallet_port: int,
) -> None:
    """Start PostgreSQL and Redis if needed, migrate, then run the API, worker and projector."""
    settings = Settings.from_env()
    previous = {
        signum: signal.signal(signum, _raise_stop) for signum in (signal.SIGINT, signal.SIGTERM)
    }
    children: list[_Child] = []
    failed = False
    try:
        with (
            contextlib.ExitStack() as stack,
            database_url(settings) as db_url,
            redis_url(settings) as queue_url,
        ):
            applied = apply_migrations(db_url)
            if applied:
                click.echo(f"applied {len(applied)} migration(s)", err=True)
            keys = ensure_demo_keys(db_url, settings.data_dir) if demo_keys else []
            environment = {**os.environ, "DATABASE_URL": db_url, "REDIS_URL": queue_url}
            # `make run` is the demo: /play is served (docs/operations.md, "Demo mode").
            environment.setdefault("SHOEBOX_DEMO", "1")
            # One metrics directory for the API's workers, the worker and the projector, so
            # /metrics adds up every process of this host (service/runtime/metrics.py).
            metrics_dir = stack.enter_context(
                tempfile.TemporaryDirectory(prefix="shoebox-metrics-")
            )
            environment.setdefault(MULTIPROC_VARIABLE, metrics_dir)
            wallet: DemoWallet | None = None
            if demo_wallet and settings.seamless_wallets_file is None:
                wallet = prepare_demo_wallet(db_url, settings.data_dir, demo_wallet_port)
                environment[WALLETS_VARIABLE] = str(wallet.wallets_file)
            address = f"{settings.api_host}:{settings.api_port}"
            serve_arguments = ["serve", "--bind", address]
            if workers is not None:
                serve_arguments += ["--workers", str(workers)]
            if threads is not None:
                # Threads a worker means the thread-per-request model (docs/operations.md).
                serve_arguments += ["--worker-class", "gthread", "--threads", str(threads)]
            try:
                if wallet is not None:
                    # Before Shoebox: a session opened at once must find the wallet answering.
                    children.append(
                        _Child.start(
                            "reference wallet",
                            wallet.arguments(),
                            {**environment, **wallet.environment()},
                        )
                    )
                    _await_port(wallet.port, children)
                children.append(_Child.start("serve", serve_arguments, environment))
                children.append(_Child.start("worker", ["worker"], environment))
                # Rebuilds in a worker of their own, so windows close on time while one runs.
                children.append(
                    _Child.start("rebuild worker", ["worker", "--rebuilds"], environment)
                )
                # The read models follow the log in a process of their own: PostgreSQL only,
                # so they keep up even while Redis (the worker's half) is down.
                children.append(_Child.start("projector", ["projector"], environment))
                base_url = f"http://{address}"
                _await_ready(base_url, children)
                click.echo(_banner(base_url, settings, db_url, queue_url, keys, wallet))
                failed = _watch(children)
            finally:
                # Further signals would only interrupt the orderly stop below.
                for signum in previous:
                    signal.signal(signum, signal.SIG_IGN)
                _stop(children)
    except _Stop as stop:
        click.echo(f"\n{stop}: Shoebox stopped", err=True)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if failed:
        raise click.ClickException("a Shoebox process exited unexpectedly; everything stopped")


def _raise_stop(signum: int, frame: FrameType | None) -> None:
    raise _Stop(signum)


@dataclass(frozen=True, slots=True)
class _Child:
    name: str
    process: subprocess.Popen[bytes]

    @classmethod
    def start(cls, name: str, arguments: list[str], environment: Mapping[str, str]) -> _Child:
        process = subprocess.Popen(  # noqa: S603 - our own executable, a fixed argument list
            [*_shoebox_command(), *arguments],
            env=dict(environment),
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        return cls(name, process)


def _shoebox_command() -> list[str]:
    """How to run the `shoebox` CLI from this very environment."""
    # The entry point beside this interpreter, else this interpreter running the CLI module.
    script = Path(sys.executable).with_name("shoebox")
    if script.is_file():
        return [str(script)]
    return [sys.executable, "-c", "from service.cli import main; main()"]


def _await_ready(base_url: str, children: list[_Child]) -> None:
    """Wait until the API answers its health check."""
    deadline = time.monotonic() + READY_TIMEOUT_SECONDS
    while True:
        for child in children:
            if child.process.poll() is not None:
                raise click.ClickException(
                    f"shoebox {child.name} exited with status {child.process.returncode}"
                    " while starting"
                )
        try:
            with urllib.request.urlopen(f"{base_url}/healthz", timeout=2):  # noqa: S310
                return
        except urllib.error.HTTPError:
            return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            if time.monotonic() > deadline:
                raise click.ClickException(
                    f"the API did not answer at {base_url} within {READY_TIMEOUT_SECONDS:g} s"
                ) from None
            time.sleep(_POLL_SECONDS)


def _await_port(port: int, children: list[_Child]) -> None:
    """Wait until something listens on the loopback `port` (the demo wallet)."""
    deadline = time.monotonic() + READY_TIMEOUT_SECONDS
    while True:
        for child in children:
            if child.process.poll() is not None:
                raise click.ClickException(
                    f"{child.name} exited with status {child.process.returncode} while starting"
                )
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=2):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise click.ClickException(
                    f"nothing answered on port {port} within {READY_TIMEOUT_SECONDS:g} s"
                ) from None
            time.sleep(_POLL_SECONDS)


def _watch(children: list[_Child]) -> bool:
    """Wait until a child exits (True: it should not have) or a signal interrupts."""
    while True:
        for child in children:
            code = child.process.poll()
            if code is not None:
                click.echo(f"shoebox {child.name} exited with status {code}", err=True)
                return True
        time.sleep(_POLL_SECONDS)


def _stop(children: list[_Child]) -> None:
    """SIGTERM every child, wait, SIGKILL the stragglers, then sweep their sessions."""
    for child in children:
        if child.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                child.process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_SECONDS
    for child in children:
        try:
            child.process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            click.echo(f"shoebox {child.name} did not stop in time; killing it", err=True)
            child.process.kill()
            child.process.wait()
    for child in children:
        # Each child leads its own session (and process group): anything still in it, a
        # gunicorn worker or rq's scheduler orphaned by a crash, goes too.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.process.pid, signal.SIGKILL)


def _banner(
    base_url: str,
    settings: Settings,
    db_url: str,
    queue_url: str,
    keys: list[DemoKey],
    wallet: DemoWallet | None = None,
) -> str:
    api = f"{base_url}/v1"
    lines = [
        "",
        f"Shoebox is running: {api}",
        f"  PostgreSQL {_where(db_url, settings.database_url, settings.data_dir / 'postgres')}",
        f"  Redis      {_where(queue_url, settings.redis_url, settings.data_dir / 'redis')}",
        f"  OpenAPI    {api}/openapi.json",
        f"  Play       {base_url}/play        (the reference table page, demo mode)",
        f"  Dashboard  {base_url}/dashboard   (sign in with the ops or regulator key)",
    ]
    if keys:
        lines += ["", f"Demo API keys (kept in {settings.data_dir / DEMO_KEYS_FILE}, mode 0600):"]
        lines += [f"  {key.role:<10} {key.secret}" for key in keys]
        frontend = next((key for key in keys if key.role == "frontend"), keys[0])
        lines += [
            "",
            "Try:",
            f"  curl -s -H 'Authorization: Bearer {frontend.secret}' {api}/tables",
        ]
    if wallet is not None:
        lines += [
            "",
            f"Seamless operator {DEMO_OPERATOR!r}: its players' money is in the reference wallet"
            f" (kept in {settings.data_dir / DEMO_WALLET_FILE}, mode 0600):",
            f"  wallet     {wallet.url}   (the casino's side: /admin/players, /admin/sessions)",
            f"  admin      {wallet.admin_token}",
            f"  {DEMO_OPERATOR} frontend {wallet.frontend_key}",
            "  A first seamless bet with curl: README, 'A seamless bet with curl'.",
        ]
    lines += ["", "Press Ctrl+C to stop.", ""]
    return "\n".join(lines)


def _where(url: str, configured: str | None, data_dir: Path) -> str:
    if configured:
        return "from the environment"
    return f"embedded, {_redacted(url)}, data in {data_dir}"


def _redacted(url: str) -> str:
    # Embedded servers trust local connections, so their URLs carry no password; be safe.
    scheme, separator, rest = url.partition("://")
    credentials, at, host = rest.rpartition("@")
    if not at or ":" not in credentials:
        return url
    return f"{scheme}{separator}{credentials.split(':')[0]}:***@{host}"


commands: list[click.Command] = [run]
