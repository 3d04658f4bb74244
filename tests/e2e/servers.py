"""A private `shoebox serve` on a database of its own, and a small SSE client, for e2e tests."""

import http.client
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from click.testing import CliRunner
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from events.migrations import apply_migrations
from events.sequencer import sequence_batch
from service.cli import main
from tests.ports import listening_socket, port_of

SHOEBOX = Path(sys.executable).with_name("shoebox")
# A bound on starting at all, generous for a loaded CI machine: not a speed assertion.
START_TIMEOUT_SECONDS = 90.0


@contextmanager
def private_database(server_url: str) -> Iterator[str]:
    """A database of the test's own, dropped afterwards (owner's connection string)."""
    name = f"shoebox_e2e_{os.getpid()}_{secrets.token_hex(4)}"
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    params = conninfo_to_dict(server_url)
    params["dbname"] = name
    try:
        url = make_conninfo(**params)  # type: ignore[arg-type]
        apply_migrations(url)
        yield url
    finally:
        with psycopg.connect(server_url, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


def create_key(database_url: str, role: str, operator: str | None = None) -> str:
    """A new API key's secret, made with the CLI as an operator would."""
    arguments = ["keys", "create", "--role", role, "--name", f"e2e {role} {operator}"]
    if operator is not None:
        arguments += ["--operator", operator]
    created = CliRunner().invoke(main, arguments, env={"DATABASE_URL": database_url})
    assert created.exit_code == 0, created.output
    return str(created.stdout.strip().splitlines()[-1])


@dataclass
class Server:
    """A running `shoebox serve`: its base URL and process."""

    base: str
    process: "subprocess.Popen[bytes]"
    log: Path

    @property
    def port(self) -> int:
        """The port it listens on."""
        return int(self.base.rsplit(":", 1)[1])

    def call(
        self, method: str, path: str, secret: str | None = None, body: object = None
    ) -> tuple[int, Any]:
        """One request on its own connection: the status and the decoded JSON body."""
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            headers = {"Content-Type": "application/json"}
            if secret is not None:
                headers["Authorization"] = f"Bearer {secret}"
            payload = None if body is None else json.dumps(body).encode()
            connection.request(method, path, payload, headers)
            response = connection.getresponse()
            text = response.read()
            return response.status, json.loads(text) if text.strip() else None
        finally:
            connection.close()

    def ok(self, method: str, path: str, secret: str, body: object = None) -> Any:
        """A request that must succeed."""
        for _ in range(8):
            status, document = self.call(method, path, secret, body)
            if status != 401:  # a worker learns of a new key on its first miss
                break
        assert status < 300, (method, path, status, document)
        return document

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM, and wait for the exit status."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=timeout)
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()


@contextmanager
def serve(
    database_url: str,
    log: Path,
    environment: Mapping[str, str] | None = None,
    workers: int = 2,
    options: tuple[str, ...] = (),
) -> Iterator[Server]:
    """`shoebox serve` on a socket of ours, as the image runs it; stopped afterwards."""
    env = {**os.environ, "DATABASE_URL": database_url, **(environment or {})}
    env.pop("SHOEBOX_APP_DATABASE_URL", None)
    with listening_socket() as listener, log.open("ab") as sink:
        base = f"http://127.0.0.1:{port_of(listener)}"
        process = subprocess.Popen(
            [
                str(SHOEBOX),
                "serve",
                "--bind",
                f"fd://{listener.fileno()}",
                "--workers",
                str(workers),
                *options,
            ],
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            pass_fds=[listener.fileno()],
        )
    server = Server(base, process, log)
    try:
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while True:
            assert process.poll() is None, log.read_text()
            try:
                if server.call("GET", "/healthz")[0] == 200:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, "shoebox serve did not start listening"
            time.sleep(0.1)
        yield server
    finally:
        server.stop()


@dataclass
class Message:
    """One SSE message as received: its fields, and comments seen before it."""

    id: str | None = None
    event: str | None = None
    data: str = ""
    retry: str | None = None
    comments: list[str] = field(default_factory=list)

    @property
    def document(self) -> Any:
        """The data, decoded."""
        return json.loads(self.data)


class Feed:
    """A feed connection read message by message, with a timeout on each read."""

    def __init__(
        self, server: Server, path: str, secret: str | None, headers: Mapping[str, str] = {}
    ) -> None:
        self.connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        sent = dict(headers)
        if secret is not None:
            sent["Authorization"] = f"Bearer {secret}"
        self.connection.request("GET", path, headers=sent)
        self.response = self.connection.getresponse()
        self.status = self.response.status

    def read(self, timeout: float = 10.0) -> Message | None:
        """The next message, or None when the server closed the feed."""
        sock = self.connection.sock
        if sock is not None:
            sock.settimeout(timeout)
        message = Message()
        while True:
            try:
                raw = self.response.readline()
            except TimeoutError:
                raise TimeoutError("no message in time") from None
            if not raw:
                return None
            line = raw.decode().rstrip("\n")
            if not line:
                if message.data or message.retry or message.comments or message.event:
                    return message
                continue
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "":
                message.comments.append(value)
            elif name == "data":
                message.data += value
            elif name in {"id", "event", "retry"}:
                setattr(message, name, value)

    def events(self, count: int, timeout: float = 10.0) -> list[Message]:
        """The next `count` event messages (comments, retries and lag skipped)."""
        found: list[Message] = []
        deadline = time.monotonic() + timeout
        while len(found) < count:
            message = self.read(max(0.1, deadline - time.monotonic()))
            assert message is not None, f"the feed closed after {len(found)} of {count}"
            if message.id is not None:
                found.append(message)
        return found

    def close(self) -> None:
        """Hang up."""
        self.connection.close()


SEQUENCED_WITHIN = 15.0
"""How long a test waits for the log's backlog to be placed: generous for a busy machine."""


def wait_until_sequenced(database_url: str, timeout: float = SEQUENCED_WITHIN) -> None:
    """Wait (bounded) until every committed append has its position in `events`.

    A server answers an append once it is durable, before the sequencer places it (issue 22):
    a test that reads by position what it has just written waits for this first. The role of a
    running server places the backlog; with none running (a server stopped before its last
    appends were placed), this connection runs the batches itself.
    """
    deadline = time.monotonic() + timeout
    with psycopg.connect(database_url, autocommit=True) as conn:
        while True:
            batch = sequence_batch(conn, wait=False)
            if batch is not None and batch.events == 0:
                return
            if batch is None:  # a server holds the role: it places them
                row = conn.execute("SELECT NOT EXISTS (SELECT FROM unsequenced_events)").fetchone()
                if row is not None and row[0]:
                    return
                time.sleep(0.02)
            if time.monotonic() > deadline:
                raise AssertionError(f"the log's backlog was not sequenced within {timeout} s")
