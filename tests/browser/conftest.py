"""A real `shoebox serve` in demo mode, its projector, and Debian's chromium under Playwright.

Playwright's own browser download cannot be reached here, so the tests drive the system
browser (`make chromium` installs it); without it they are skipped with that instruction.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.databases import scratch_database
from tests.ports import listening_socket, port_of

SHOEBOX = Path(sys.executable).with_name("shoebox")
CHROMIUM = os.environ.get("SHOEBOX_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
START_TIMEOUT_SECONDS = 90.0  # starting at all, on a loaded machine: not a speed bound


@dataclass
class Shoebox:
    """The server under test: its address and the demo keys it acts with."""

    base: str
    keys: dict[str, str]
    # The projector's process, so that a test can hold the read models back (SIGSTOP) as a
    # slow projector would, and let them go on (SIGCONT).
    projector: subprocess.Popen[bytes] | None = None

    def call(self, method: str, path: str, body: object = None, role: str = "ops") -> Any:
        """A /v1 request with a demo key, as a casino's backend would make it."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(f"{self.base}{path}", data=data, method=method)
        request.add_header("Authorization", f"Bearer {self.keys[role]}")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as error:
            raise AssertionError(f"{method} {path}: {error.code} {error.read()!r}") from error

    def table(self, table_id: str, **settings: Any) -> str:
        """A new table."""
        self.call("POST", "/v1/tables", {"table_id": table_id, **settings})
        return table_id


@pytest.fixture(scope="session")
def browser_database(postgres_server_url: str) -> Iterator[str]:
    with scratch_database(postgres_server_url, "shoebox_pages") as url:
        yield url


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=20)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


@pytest.fixture(scope="session")
def shoebox(browser_database: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Shoebox]:
    """`shoebox serve` with SHOEBOX_DEMO=1 on loopback, and `shoebox projector` beside it."""
    data_dir = tmp_path_factory.mktemp("shoebox-data")
    environment = {
        **os.environ,
        "DATABASE_URL": browser_database,
        "SHOEBOX_DEMO": "1",
        "SHOEBOX_DATA_DIR": str(data_dir),
    }
    environment.pop("SHOEBOX_APP_DATABASE_URL", None)
    logs = data_dir / "serve.log"
    with listening_socket() as listener, logs.open("wb") as log:
        base = f"http://127.0.0.1:{port_of(listener)}"
        server = subprocess.Popen(
            [
                *(str(SHOEBOX), "serve", "--bind", f"fd://{listener.fileno()}"),
                *("--workers", "2"),
            ],
            env=environment,
            stdout=log,
            stderr=subprocess.STDOUT,
            pass_fds=[listener.fileno()],
        )
    projector = None
    try:
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while True:
            assert server.poll() is None, logs.read_text()
            try:
                with urllib.request.urlopen(f"{base}/healthz", timeout=5):
                    break
            except OSError:  # refused, reset or timed out while the workers boot
                assert time.monotonic() < deadline, "shoebox serve did not start listening"
                time.sleep(0.1)
        # The projector fills the read models that statistics, ledger and the dashboard read.
        projector = subprocess.Popen(
            [str(SHOEBOX), "projector", "--poll-interval", "0.2"],
            env=environment,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        keys = json.loads((data_dir / "demo-keys.json").read_text())
        yield Shoebox(base, {key["role"]: key["secret"] for key in keys}, projector)
    finally:
        if projector is not None:
            _stop(projector)
        _stop(server)


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    """Debian's chromium, headless, driven by Playwright."""
    if not Path(CHROMIUM).exists() and shutil.which("chromium") is None:
        pytest.skip("no chromium: `make chromium` installs Debian's package")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            launched.close()
