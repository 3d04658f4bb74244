"""`shoebox serve` as a real gunicorn process: migrates, serves /v1/ping to a created key, stops."""

import http.client
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

from events.postgres import PostgresEventStore, open_pool
from service.cli import main
from service.web.app import MAX_HEADER_FIELD_BYTES, MAX_HEADER_FIELDS, MAX_REQUEST_LINE_BYTES
from tests.api_harness import head_and_balances
from tests.e2e.servers import wait_until_sequenced
from tests.ports import listening_socket, port_of

START_TIMEOUT_SECONDS = 90.0  # starting at all, on a loaded machine: not a speed bound
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
            except (ConnectionError, TimeoutError, urllib.error.URLError):
                # Refused, or queued on our listening socket past the timeout while it starts.
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


def send(
    base: str, method: str, path: str, body: object, headers: dict[str, str]
) -> tuple[int, str, bytes]:
    """One request on its own connection: the status, Content-Type and body."""
    host, _, port = base.removeprefix("http://").partition(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=5)
    try:
        sent = {"Content-Type": "application/json", **headers}
        connection.request(method, path, json.dumps(body).encode(), sent)
        response = connection.getresponse()
        return response.status, response.getheader("Content-Type") or "", response.read()
    finally:
        connection.close()


@pytest.mark.slow
def test_an_over_long_request_line_or_header_is_a_problem_from_gunicorn_too(
    server: str, database_url: str
) -> None:
    created = CliRunner().invoke(
        main,
        ["keys", "create", "--role", "ops", "--name", "e2e-limits"],
        env={"DATABASE_URL": database_url},
    )
    assert created.exit_code == 0, created.output
    ops = {"Authorization": f"Bearer {created.stdout.strip().splitlines()[-1]}"}
    deposit = {"amount_pence": 1_000, "reason": "float"}
    path = "/v1/wallets/e2e-limits/deposits"
    # Every worker learns of the new key on its first miss.
    for _ in range(8):
        status, _, body = send(server, "POST", path, deposit, ops)
        assert status == 201, body

    over_line = "?pad=" + "x" * MAX_REQUEST_LINE_BYTES
    over_field = {"X-Pad": "x" * MAX_HEADER_FIELD_BYTES}
    too_many = {f"X-Pad-{n}": "x" for n in range(MAX_HEADER_FIELDS)}
    # The deposits are answered before the sequencer places them (issue 22): "nothing
    # changed" is measured from the log once they are in it.
    wait_until_sequenced(database_url)
    with open_pool(database_url, max_size=1) as pool:
        store = PostgresEventStore(pool)
        before = head_and_balances(store)
        for query, extra, expected in [
            (over_line, {}, 414),
            ("", over_field, 431),
            ("", too_many, 431),
        ]:
            status, content_type, body = send(server, "POST", path + query, deposit, ops | extra)
            assert (status, content_type) == (expected, "application/problem+json"), body
            assert json.loads(body)["status"] == expected
        assert head_and_balances(store) == before
