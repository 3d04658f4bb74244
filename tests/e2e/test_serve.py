"""`shoebox serve` as a real gunicorn process: migrates, serves /v1/ping to a created key, stops."""

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from service.cli import main
from tests.ports import listening_socket, port_of

START_TIMEOUT_SECONDS = 30.0
SHOEBOX = Path(sys.executable).with_name("shoebox")


def get(url: str, secret: str | None = None) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url)
    if secret is not None:
        request.add_header("Authorization", f"Bearer {secret}")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


@pytest.fixture
def server(database_url: str) -> Iterator[str]:
    """A `shoebox serve` process on a socket of ours, stopped with SIGTERM afterwards."""
    environment = {**os.environ, "DATABASE_URL": database_url}
    environment.pop("SHOEBOX_APP_DATABASE_URL", None)
    # The server accepts on our socket, which we close once it holds its own copy.
    with listening_socket() as listener:
        base = f"http://127.0.0.1:{port_of(listener)}"
        process = subprocess.Popen(
            [
                *(str(SHOEBOX), "serve", "--bind", f"fd://{listener.fileno()}"),
                *("--workers", "2", "--threads", "2"),
            ],
            env=environment,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            pass_fds=[listener.fileno()],
        )
    try:
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while True:
            assert process.poll() is None, process.stdout.read().decode() if process.stdout else ""
            try:
                get(f"{base}/v1/ping")
                break
            except (ConnectionError, urllib.error.URLError):
                assert time.monotonic() < deadline, "shoebox serve did not start listening"
                time.sleep(0.1)
        yield base
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        finally:
            if process.poll() is None:
                process.kill()
            if process.stdout is not None:
                process.stdout.close()
    assert process.returncode == 0


@pytest.mark.slow
def test_serve_migrates_and_answers_ping_to_a_created_key_only(
    server: str, database_url: str
) -> None:
    status, headers, body = get(f"{server}/v1/ping")
    assert status == 401
    assert headers["Content-Type"] == "application/problem+json"
    assert headers["WWW-Authenticate"].startswith("Bearer")

    created = CliRunner().invoke(
        main,
        ["keys", "create", "--role", "frontend", "--name", "e2e"],
        env={"DATABASE_URL": database_url},
    )
    assert created.exit_code == 0, created.output
    secret = created.stdout.strip().splitlines()[-1]

    # Every worker learns of the new key on its first miss; ask enough times to reach both.
    for _ in range(8):
        status, headers, body = get(f"{server}/v1/ping", secret)
        assert status == 200, body
        assert json.loads(body) == {"status": "ok"}
        assert headers["X-Request-Id"]
