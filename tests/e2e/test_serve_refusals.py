"""What gunicorn refuses before the app sees it is a problem too, and every line logged is JSON.

Through a real `shoebox serve` (gevent workers, its default): a request head too large for
gunicorn to read, or not HTTP at all, never reaches Flask, so the worker answers it itself.
"""

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.servers import Server, private_database, serve


@pytest.fixture
def database(postgres_server_url: str) -> Iterator[str]:
    with private_database(postgres_server_url) as url:
        yield url


def exchange(server: Server, request: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send raw bytes, read the whole answer (the server closes): status, headers, body."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as connection:
        connection.sendall(request)
        answer = b""
        while chunk := connection.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    status_line, *fields = head.decode("latin-1").split("\r\n")
    headers = {name.lower(): value.strip() for name, _, value in (f.partition(":") for f in fields)}
    return int(status_line.split()[1]), headers, body


def many_fields(count: int) -> bytes:
    return b"".join(b"X-Pad-%d: x\r\n" % n for n in range(count))


REFUSED = {
    "a 10,000-character path": (b"GET /v1/" + b"a" * 10_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 414),
    "a 20,000-byte header field": (
        b"GET /v1/ping HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"x" * 20_000 + b"\r\n\r\n",
        431,
    ),
    "1,000 header fields": (
        b"GET /v1/ping HTTP/1.1\r\nHost: x\r\n" + many_fields(1000) + b"\r\n",
        431,
    ),
    "a malformed request line": (b"GARBAGE\r\n\r\n", 400),
    "a header name that is not a token": (b"GET /v1/ping HTTP/1.1\r\nBad Name: x\r\n\r\n", 400),
    "an unsupported HTTP version": (b"GET /v1/ping HTTP/7.1\r\nHost: x\r\n\r\n", 400),
}


@pytest.mark.slow
@pytest.mark.parametrize(
    "options", [(), ("--worker-class", "gthread", "--threads", "2")], ids=["gevent", "gthread"]
)
def test_what_gunicorn_refuses_itself_is_answered_as_a_problem(
    database: str, tmp_path: Path, options: tuple[str, ...]
) -> None:
    log = tmp_path / "serve.log"
    with serve(database, log, options=options) as server:
        for case, (request, expected) in REFUSED.items():
            status, headers, body = exchange(server, request)
            assert status == expected, (case, body)
            assert headers["content-type"] == "application/problem+json", (case, body)
            document = json.loads(body)
            assert document["status"] == expected, case
            assert document["type"].startswith("https://shoebox.example/problems/"), case
            assert document["title"], case
            assert document["detail"], case
            assert document["request_id"] == headers["x-request-id"], case
        # The server goes on answering.
        assert server.call("GET", "/v1/ping")[0] == 401
    # Each refusal is logged with the request id and status its answer carries.
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    refusals = [line for line in lines if str(line["message"]).startswith("Invalid request")]
    assert sorted(line["status"] for line in refusals) == sorted(s for _, s in REFUSED.values())
    assert all(len(line["request_id"]) == 32 for line in refusals)


@pytest.mark.slow
def test_every_line_shoebox_serve_writes_is_json(database: str, tmp_path: Path) -> None:
    log = tmp_path / "serve.log"
    with serve(database, log) as server:
        server.call("GET", "/v1/ping")
        exchange(server, b"GARBAGE\r\n\r\n")
    lines = log.read_text().splitlines()
    assert any("Booting worker" in line for line in lines), lines
    for line in lines:
        try:
            assert isinstance(json.loads(line), dict)
        except ValueError:
            pytest.fail(f"not a JSON line: {line!r}")
