"""`deploy/hosts`, the application tier of `make cluster`: two API hosts behind HAProxy.

Started as `make cluster` starts it (here against a database of this test's own on the test
server, where `make cluster` gives it the Patroni cluster's HAProxy): both hosts serve requests
through the proxy, a host killed outright costs clients only 503 problem documents with
Retry-After until the proxy has taken it out, and `down` stops every process `up` started.
"""

from __future__ import annotations

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
from typing import Any

import pytest

from tests.databases import scratch_database
from tests.faults.load import cli_key
from tests.ports import port_block

ROOT = Path(__file__).resolve().parents[2]
HOSTS = ROOT / "deploy" / "hosts"
PYTHON = sys.executable

pytestmark = pytest.mark.skipif(
    subprocess.run(["which", "haproxy"], capture_output=True, check=False).returncode != 0,
    reason="haproxy is not installed (`make ha-packages` installs Debian's)",
)


@pytest.fixture
def base() -> Iterator[int]:
    """A base port for deploy/hosts, whose services listen from base + 30 to base + 35."""
    with port_block(36) as claimed:
        yield claimed


@pytest.fixture
def own_database(postgres_server_url: str) -> Iterator[str]:
    with scratch_database(postgres_server_url, "shoebox_hosts") as url:
        yield url


def call(base: str, method: str, path: str, secret: str, body: object = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        base + path,
        data=data,
        method=method,
        headers={"Authorization": f"Bearer {secret}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as error:
        text = error.read()
        return error.code, {
            "content_type": error.headers.get("Content-Type"),
            "retry_after": error.headers.get("Retry-After"),
            "body": json.loads(text) if text.strip() else None,
        }


def test_make_clusters_app_tier_serves_through_haproxy_survives_a_lost_host_and_stops(
    own_database: str, base: int, tmp_path: Path
) -> None:
    root = tmp_path / "hosts"
    environment = {k: v for k, v in os.environ.items() if k != "SHOEBOX_APP_DATABASE_URL"}
    started = subprocess.run(
        [
            PYTHON,
            str(HOSTS),
            "up",
            str(root),
            "--database-url",
            own_database,
            "--base-port",
            str(base),
        ],
        capture_output=True,
        text=True,
        env=environment,
        timeout=180,
        check=False,
    )
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        where = json.loads(started.stdout.strip().splitlines()[-1])
        state = json.loads((root / "hosts.json").read_text())
        api = where["api"]
        ops = cli_key(own_database, "ops")

        table = {"table_id": "H1", "seats": 7, "decks": 8, "minimum_pence": 100}
        table["maximum_pence"] = 10_000
        assert call(api, "POST", "/v1/tables", ops, table)[0] == 201
        for _ in range(6):
            assert call(api, "GET", "/v1/tables/H1/state", ops)[0] == 200
        # HAProxy shares the requests between the two hosts: each one's log has some.
        for name in ("api1", "api2"):
            assert "/v1/tables/<id:table_id>/state" in (root / f"{name}.log").read_text(), name

        # Host 1 lost outright: its gunicorn master and workers, its whole session.
        os.killpg(state["pids"]["api1"], signal.SIGKILL)
        answers: list[tuple[int, Any]] = []
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            answers.append(call(api, "GET", "/v1/tables/H1/state", ops))
            time.sleep(0.05)
        failed = [a for a in answers if a[0] != 200]
        # Until the proxy takes the host out (about 1.5 s), its share gets Shoebox's 503.
        for status, document in failed:
            assert status == 503, (status, document)
            assert document["content_type"] == "application/problem+json"
            assert document["retry_after"] == "1"
            assert document["body"]["status"] == 503
        # And then the other host serves every request.
        assert [status for status, _ in answers[-5:]] == [200] * 5
    finally:
        subprocess.run([PYTHON, str(HOSTS), "down", str(root)], timeout=120, check=False)
    assert not (root / "hosts.json").exists()
    for name, pid in state["pids"].items():
        try:
            stat = Path(f"/proc/{pid}/stat").read_text().split()[2]
        except OSError:
            continue
        assert stat == "Z", f"{name} ({pid}) still runs after down"
