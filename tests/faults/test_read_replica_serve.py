"""`shoebox serve` (gunicorn, gevent workers) reading from a real streaming replica.

The in-process tests (test_read_replica.py) show the routing rule by rule; this one shows it
holds in the server as deployed: several worker processes, each greenlet its own request
context, the metrics added up across workers, and the feed's tail polling a standby.
"""

from __future__ import annotations

import http.client
import json
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.e2e.servers import Feed, Server, create_key, serve
from tests.faults.private_servers import (
    PrivatePostgres,
    private_postgres,
    private_replica,
)

HEADER = "Shoebox-Consistency"
POOL = "Shoebox-Read-Pool"

pytestmark = pytest.mark.slow


def _call(
    server: Server,
    method: str,
    path: str,
    secret: str,
    body: object = None,
    headers: Mapping[str, str] | None = None,
) -> tuple[int, Mapping[str, str], Any]:
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        sent = {"Content-Type": "application/json", "Authorization": f"Bearer {secret}"}
        payload = None if body is None else json.dumps(body).encode()
        for _ in range(8):  # a worker learns of a new key on its first miss
            connection.request(method, path, payload, {**sent, **(headers or {})})
            response = connection.getresponse()
            text = response.read()
            if response.status != 401:
                break
        answer = dict(response.getheaders())
        return response.status, answer, json.loads(text) if text.strip() else None
    finally:
        connection.close()


def _sql(replica: PrivatePostgres, query: str) -> Any:
    with psycopg.connect(replica.url, autocommit=True) as conn:
        row = conn.execute(query).fetchone()
    return None if row is None else row[0]


@pytest.fixture(scope="module")
def servers(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[PrivatePostgres, PrivatePostgres, Server]]:
    logs = tmp_path_factory.mktemp("serve-replica")
    with private_postgres(logs) as primary, private_replica(primary, logs) as replica:
        environment = {"DATABASE_READ_URL": replica.url, "SHOEBOX_FEED_HEARTBEAT_SECONDS": "1"}
        with serve(primary.url, Path(logs) / "serve.log", environment) as server:
            yield primary, replica, server


def test_a_served_write_reads_back_from_the_replica_and_its_feed_follows_it(
    servers: tuple[PrivatePostgres, PrivatePostgres, Server],
) -> None:
    primary, replica, server = servers
    ops, frontend = create_key(primary.url, "ops"), create_key(primary.url, "frontend")
    table = {"table_id": "S1", "seats": 7, "decks": 8, "minimum_pence": 100}
    status, headers, _ = _call(server, "POST", "/v1/tables", ops, table)
    assert status == 201
    token = headers[HEADER]
    status, headers, document = _call(
        server, "GET", "/v1/tables/S1", frontend, headers={HEADER: token}
    )
    assert (status, headers[POOL], document["table_id"]) == (200, "replica", "S1")

    feed = Feed(server, "/v1/tables/S1/feed", frontend)
    try:
        assert feed.status == 200
        deposit = {"amount_pence": 1_000, "reason": "float"}
        assert _call(server, "POST", "/v1/wallets/ivy/deposits", ops, deposit)[0] == 201
        seat = {"player_id": "ivy", "seat": 3}
        assert _call(server, "POST", "/v1/tables/S1/seats", frontend, seat)[0] == 201
        events: list[str] = []
        while "PlayerSat" not in events:
            message = feed.read(timeout=30)  # a hang guard only
            assert message is not None
            events.append(message.event or "")
    finally:
        feed.close()

    # Replay paused: a tokened read gives up on the replica and reads the primary.
    _sql(replica, "SELECT pg_wal_replay_pause()")
    try:
        status, headers, _ = _call(server, "POST", "/v1/wallets/ivy/deposits", ops, deposit)
        assert status == 201
        status, headers, document = _call(
            server, "GET", "/v1/wallets/ivy/statement", ops, headers={HEADER: headers[HEADER]}
        )
        assert (status, headers[POOL]) == (200, "primary")
    finally:
        _sql(replica, "SELECT pg_wal_replay_resume()")
    status, headers, _ = _call(server, "GET", "/v1/tables/S1", frontend, headers={HEADER: "x"})
    assert status == 400

    # Summed over the workers: which pool served, and the fallback.
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    connection.request("GET", "/metrics")
    metrics = connection.getresponse().read().decode()
    connection.close()
    replica_reads = re.search(
        r'^shoebox_reads_total\{pool="replica",reason="caught-up"\} (\S+)$', metrics, re.M
    )
    assert replica_reads is not None
    assert float(replica_reads[1]) >= 1
    fallbacks = re.search(r'^shoebox_read_fallbacks_total\{reason="replay"\} (\S+)$', metrics, re.M)
    assert fallbacks is not None
    assert float(fallbacks[1]) >= 1
