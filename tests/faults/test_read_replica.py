"""Reads from a streaming replica, with read-your-writes, against real servers.

A private primary and a hot standby streaming from it (pg_basebackup -R, both on loopback
ports of the test's own; never the shared PostgreSQL), and the API over both: DATABASE_URL
the primary, DATABASE_READ_URL the replica. Which pool answered a GET is in its
`Shoebox-Read-Pool` header and in /metrics; a replica whose replay is paused shows it too,
since an untokened read there misses what was written since.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner
from flask import Flask
from flask.testing import FlaskClient
from werkzeug.test import TestResponse

from events.store import EventMetadata
from service.application.keys import Role, create_key
from service.application.read_models.queries import ProjectionService
from service.application.streams import table_stream, wallet_stream
from service.cli import main
from service.runtime.consistency import HEADER, Consistency, parse
from service.runtime.container import Container
from service.runtime.settings import Settings
from service.web.api import EXTENSION
from service.web.app import create_app
from service.web.consistency import READ_POOL_HEADER
from service.web.problems import PROBLEM_MIMETYPE
from tests.faults.private_servers import (
    PrivatePostgres,
    private_postgres,
    private_replica,
)

CLI = EventMetadata(actor="cli:test", role="cli")
pytestmark = pytest.mark.slow

HANG_GUARD_SECONDS = 30.0
"""Only so that a broken feed fails the test rather than hanging it; never a speed bound."""


@dataclass
class Cluster:
    primary: PrivatePostgres
    replica: PrivatePostgres
    app: Flask
    wiring: Container
    client: FlaskClient
    keys: dict[Role, str]
    # Another API process over the same servers (as a second host is): no cache of its own
    # holds what the first one wrote, so what it reads is what its node holds.
    other: FlaskClient

    def call(
        self,
        method: str,
        path: str,
        body: object = None,
        *,
        role: Role = Role.OPS,
        token: str | None = None,
        elsewhere: bool = False,
    ) -> TestResponse:
        headers = {"Authorization": f"Bearer {self.keys[role]}"}
        if token is not None:
            headers[HEADER] = token
        client = self.other if elsewhere else self.client
        return client.open(path, method=method, json=body, headers=headers)

    def replica_sql(self, query: str) -> Any:
        with psycopg.connect(self.replica.url, autocommit=True) as conn:
            row = conn.execute(query).fetchone()
        return None if row is None else row[0]

    def pause_replay(self) -> None:
        self.replica_sql("SELECT pg_wal_replay_pause()")
        # The request is taken at once, obeyed at the next record: wait until it is.
        while self.replica_sql("SELECT pg_get_wal_replay_pause_state()") != "paused":
            self.replica_sql("SELECT pg_sleep(0.01)")

    def resume_replay(self) -> None:
        self.replica_sql("SELECT pg_wal_replay_resume()")

    def metric(self, name: str, **labels: str) -> float:
        text = self.client.get("/metrics").get_data(as_text=True)
        wanted = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        for line in text.splitlines():
            if line.startswith(f"{name}{{{wanted}}} ") or (not labels and line.startswith(name)):
                return float(line.rsplit(" ", 1)[1])
        return 0.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    logs: Path = tmp_path_factory.mktemp("replica-logs")
    with private_postgres(logs) as primary, private_replica(primary, logs) as replica:
        settings = Settings(database_url=primary.url, database_read_url=replica.url)
        app, other = create_app(settings, pool_size=4), create_app(settings, pool_size=2)
        wiring, other_wiring = app.extensions[EXTENSION], other.extensions[EXTENSION]
        assert isinstance(wiring, Container)
        assert isinstance(other_wiring, Container)
        try:
            keys = {
                role: create_key(wiring.store, f"{role.value} key", role, CLI).secret
                for role in Role
            }
            yield Cluster(
                primary, replica, app, wiring, app.test_client(), keys, other.test_client()
            )
        finally:
            other_wiring.close()
            wiring.close()


def _table(cluster: Cluster, table_id: str) -> TestResponse:
    body = {"table_id": table_id, "seats": 7, "decks": 8, "minimum_pence": 100}
    created = cluster.call("POST", "/v1/tables", {"maximum_pence": 250_000, **body})
    assert created.status_code == 201, created.get_json()
    return created


def test_a_writes_token_names_its_commit_and_last_event(cluster: Cluster) -> None:
    created = _table(cluster, "TOKEN")
    token = parse(created.headers[HEADER])
    assert (token.stream, token.version) == (table_stream("TOKEN"), 1)
    # At or past the commit: the primary's WAL is no further back than the token.
    with psycopg.connect(cluster.primary.url) as conn:
        row = conn.execute("SELECT pg_current_wal_lsn() >= %s::pg_lsn", [token.lsn_text])
        assert row.fetchone() == (True,)
    # A replay of a keyed write answers a token too: the write it replays is committed.
    headers = {"Authorization": f"Bearer {cluster.keys[Role.OPS]}", "Idempotency-Key": "k1"}
    body = {"amount_pence": 100, "reason": "float"}
    first = cluster.client.post("/v1/wallets/gus/deposits", json=body, headers=headers)
    again = cluster.client.post("/v1/wallets/gus/deposits", json=body, headers=headers)
    assert again.headers.get("Idempotent-Replayed") == "true"
    assert parse(first.headers[HEADER]).stream == wallet_stream("gus")
    assert parse(again.headers[HEADER]).lsn >= parse(first.headers[HEADER]).lsn


def test_a_bet_in_its_tables_turn_answers_the_position_the_turn_read_after_its_commit(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A contended table's bet reads its commit's WAL position in the turn's own message, and
    the token answers that: no query of its own (here it would fail), and a replica that has
    replayed that far holds the bet."""
    _table(cluster, "TURN")
    funded = {"amount_pence": 10_000, "reason": "float"}
    for player in ("ivy", "jon"):
        assert cluster.call("POST", f"/v1/wallets/{player}/deposits", funded).status_code == 201
    for seat, (player, elsewhere) in enumerate((("ivy", False), ("jon", True)), start=1):
        sat = cluster.call(
            "POST",
            "/v1/tables/TURN/seats",
            {"player_id": player, "seat": seat},
            role=Role.FRONTEND,
            elsewhere=elsewhere,
        )
        assert sat.status_code == 201, sat.get_json()

    def bet(player: str, elsewhere: bool) -> TestResponse:
        body = {"player_id": player, "spot": "player", "stake_pence": 100}
        placed = cluster.call(
            "POST", "/v1/tables/TURN/bets", body, role=Role.FRONTEND, elsewhere=elsewhere
        )
        assert placed.status_code == 201, placed.get_json()
        return placed

    # Each process writes the table in turn, so the first one has seen another write it: hot.
    bet("ivy", False)
    bet("jon", True)
    monkeypatch.setattr("service.web.consistency.WAL_POSITION", "SELECT no_such_function()")
    placed = bet("ivy", False)
    token = parse(placed.headers[HEADER])
    assert token.stream is not None
    assert token.version is not None
    with psycopg.connect(cluster.primary.url) as conn:
        row = conn.execute("SELECT pg_current_wal_lsn() >= %s::pg_lsn", [token.lsn_text])
        assert row.fetchone() == (True,)
    deadline = datetime.now(UTC) + timedelta(seconds=HANG_GUARD_SECONDS)
    replayed = f"SELECT pg_last_wal_replay_lsn() >= '{token.lsn_text}'::pg_lsn"
    while not cluster.replica_sql(replayed):
        assert datetime.now(UTC) < deadline, "the replica never replayed the token's position"
    found = (
        "SELECT (SELECT count(*) FROM events WHERE stream_id = %(s)s AND version = %(v)s)"
        " + (SELECT count(*) FROM unsequenced_events WHERE stream_id = %(s)s AND version = %(v)s)"
    )
    with psycopg.connect(cluster.replica.url, autocommit=True) as conn:
        visible = conn.execute(found, {"s": token.stream, "v": token.version}).fetchone()
    assert visible == (1,)


def test_a_tokened_read_on_the_replica_sees_the_write(cluster: Cluster) -> None:
    token = _table(cluster, "SEEN").headers[HEADER]
    read = cluster.call("GET", "/v1/tables/SEEN", role=Role.FRONTEND, token=token, elsewhere=True)
    assert read.status_code == 200, read.get_json()
    assert read.headers[READ_POOL_HEADER] == "replica"
    assert read.get_json()["table_id"] == "SEEN"


def test_untokened_reads_are_served_by_the_replica_and_balances_by_the_primary(
    cluster: Cluster,
) -> None:
    _table(cluster, "STALE")
    funded = {"amount_pence": 5_000, "reason": "float"}
    assert cluster.call("POST", "/v1/wallets/erin/deposits", funded).status_code == 201
    served_before = cluster.metric("shoebox_reads_total", pool="replica", reason="untokened")
    cluster.pause_replay()
    try:
        _table(cluster, "UNSEEN")
        topped_up = cluster.call("POST", "/v1/wallets/erin/deposits", funded)
        assert topped_up.status_code == 201
        # The replica stopped replaying before these writes: an untokened read there misses
        # them, which only a replica can do (from the other host, whose caches never held them).
        missed = cluster.call("GET", "/v1/tables/UNSEEN", role=Role.FRONTEND, elsewhere=True)
        assert missed.status_code == 404
        assert missed.headers[READ_POOL_HEADER] == "replica"
        assert cluster.call("GET", "/v1/tables/STALE").headers[READ_POOL_HEADER] == "replica"
        # A balance is exact: from the primary, with the deposit just made.
        balance = cluster.call("GET", "/v1/wallets/erin", role=Role.FRONTEND, elsewhere=True)
        assert balance.status_code == 200
        assert balance.headers[READ_POOL_HEADER] == "primary"
        assert balance.get_json()["available_pence"] == 10_000
        limit = cluster.call("GET", "/v1/players/erin/limit", role=Role.FRONTEND)
        assert limit.headers[READ_POOL_HEADER] == "primary"
    finally:
        cluster.resume_replay()
    served = cluster.metric("shoebox_reads_total", pool="replica", reason="untokened")
    assert served >= served_before + 2
    assert cluster.metric("shoebox_reads_total", pool="primary", reason="exact") >= 2


def test_a_tokened_read_falls_back_to_the_primary_when_the_replica_lags(
    cluster: Cluster,
) -> None:
    fallbacks_before = cluster.metric("shoebox_read_fallbacks_total", reason="replay")
    cluster.pause_replay()
    try:
        token = _table(cluster, "PAUSED").headers[HEADER]
        # The other host's: this one's cache holds the table it just wrote, whatever the pool.
        read = cluster.call(
            "GET", "/v1/tables/PAUSED", role=Role.FRONTEND, token=token, elsewhere=True
        )
        # The replica never replays the write while paused: after its 2 s, the primary.
        assert read.status_code == 200, read.get_json()
        assert read.headers[READ_POOL_HEADER] == "primary"
        assert read.get_json()["table_id"] == "PAUSED"
    finally:
        cluster.resume_replay()
    fallbacks = cluster.metric("shoebox_read_fallbacks_total", reason="replay")
    assert fallbacks == fallbacks_before + 1


def test_a_read_models_read_waits_for_the_checkpoint_to_cover_the_write(
    cluster: Cluster,
) -> None:
    projections = ProjectionService(cluster.wiring.pool, cluster.wiring.clock)  # type: ignore[arg-type]
    projections.catch_up()
    created = _table(cluster, "MODEL")
    token = parse(created.headers[HEADER])
    before = cluster.metric("shoebox_read_fallbacks_total", reason="read-model")
    # No projector runs: the replica replays the write, but no model covers it in 2 s, and
    # the read goes to the primary (where no model covers it either, and it says what it has).
    read = cluster.call("GET", "/v1/tables/MODEL/rounds", token=token.encode())
    assert read.status_code == 200, read.get_json()
    assert read.headers[READ_POOL_HEADER] == "primary"
    assert cluster.metric("shoebox_read_fallbacks_total", reason="read-model") == before + 1
    # Once the models have caught up (on the primary), the replica serves it: it waits for
    # the projector's commit to be replayed there, within its bound.
    projections.catch_up()
    read = cluster.call("GET", "/v1/tables/MODEL/rounds", token=token.encode())
    assert read.status_code == 200
    assert read.headers[READ_POOL_HEADER] == "replica"


def test_a_malformed_token_is_a_400_problem(cluster: Cluster) -> None:
    for method, path in (("GET", "/v1/tables/SEEN"), ("POST", "/v1/wallets/zed/deposits")):
        body = {"amount_pence": 100, "reason": "x"} if method == "POST" else None
        refused = cluster.call(method, path, body, token="1.not-a-token")
        assert refused.status_code == 400
        assert refused.mimetype == PROBLEM_MIMETYPE
        assert HEADER in refused.get_json()["detail"]
    # Nothing was deposited by the refused write.
    with psycopg.connect(cluster.primary.url) as conn:
        found = conn.execute(
            "SELECT count(*) FROM events WHERE stream_id = %s", [wallet_stream("zed")]
        ).fetchone()
    assert found == (0,)


def test_the_feed_on_the_replica_delivers_new_events(cluster: Cluster) -> None:
    token = _table(cluster, "FEED").headers[HEADER]
    assert cluster.wiring.feed is not None
    # With the token: the feed's replica has the table before the feed looks for it.
    stream = cluster.call("GET", "/v1/tables/FEED/feed", role=Role.FRONTEND, token=token)
    assert stream.status_code == 200
    assert stream.headers[READ_POOL_HEADER] == "replica"
    received: queue.Queue[str] = queue.Queue()

    def read() -> None:
        for chunk in stream.response:
            text = chunk.decode() if isinstance(chunk, bytes) else str(chunk)
            received.put(text)
            if "SeatTaken" in text or "PlayerSat" in text:
                return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    funded = {"amount_pence": 1_000, "reason": "float"}
    assert cluster.call("POST", "/v1/wallets/fay/deposits", funded).status_code == 201
    seat = {"player_id": "fay", "seat": 1}
    sat = cluster.call("POST", "/v1/tables/FEED/seats", seat, role=Role.FRONTEND)
    assert sat.status_code == 201, sat.get_json()
    seen = ""
    while "fay" not in seen:
        seen += received.get(timeout=HANG_GUARD_SECONDS)
    stream.close()
    # The tail follows the replica, which refuses LISTEN: it polls positions there.
    assert not cluster.wiring.feed.tail._listen


def test_the_replica_keeps_long_queries_from_replay_conflicts(cluster: Cluster) -> None:
    assert cluster.replica_sql("SHOW hot_standby_feedback") == "on"
    assert cluster.replica_sql("SELECT pg_is_in_recovery()") is True


def test_without_a_replica_a_tokened_read_is_answered_by_the_primary(
    cluster: Cluster,
) -> None:
    app = create_app(Settings(database_url=cluster.primary.url), pool_size=2)
    wiring = app.extensions[EXTENSION]
    assert isinstance(wiring, Container)
    try:
        client = app.test_client()
        key = {"Authorization": f"Bearer {cluster.keys[Role.OPS]}"}
        body = {"table_id": "ALONE", "seats": 7, "decks": 8, "minimum_pence": 100}
        created = client.post("/v1/tables", json={"maximum_pence": 250_000, **body}, headers=key)
        assert created.status_code == 201
        token = Consistency(parse(created.headers[HEADER]).lsn).encode()
        read = client.get("/v1/tables/ALONE", headers={**key, HEADER: token})
        assert read.status_code == 200
        assert READ_POOL_HEADER not in read.headers
    finally:
        wiring.close()


def _export(cluster: Cluster, path: Path, *, replica: bool) -> str:
    today = datetime.now(UTC).date()
    span = ["--from", str(today - timedelta(days=1)), "--to", str(today + timedelta(days=1))]
    env = {"DATABASE_URL": cluster.primary.url, "DATABASE_READ_URL": ""}
    if replica:
        env["DATABASE_READ_URL"] = cluster.replica.url
    arguments = ["export", "--table", "EXPORT", *span, "-o", str(path)]
    result = CliRunner().invoke(main, arguments, env=env)
    assert result.exit_code == 0, result.output
    return path.read_text()


def test_a_regulators_export_reads_the_replica(cluster: Cluster, tmp_path: Path) -> None:
    token = _table(cluster, "EXPORT").headers[HEADER]
    # Until the replica has the table (a tokened read waits for it).
    seen = cluster.call("GET", "/v1/tables/EXPORT", token=token, elsewhere=True)
    assert seen.headers[READ_POOL_HEADER] == "replica"
    cluster.pause_replay()
    try:
        funded = {"amount_pence": 1_000, "reason": "float"}
        assert cluster.call("POST", "/v1/wallets/hal/deposits", funded).status_code == 201
        seat = {"player_id": "hal", "seat": 2}
        sat = cluster.call("POST", "/v1/tables/EXPORT/seats", seat, role=Role.FRONTEND)
        assert sat.status_code == 201
        from_primary = _export(cluster, tmp_path / "primary.jsonl", replica=False)
        from_replica = _export(cluster, tmp_path / "replica.jsonl", replica=True)
    finally:
        cluster.resume_replay()
    # The replica stopped replaying before the seat was taken: its export ends before it.
    assert "PlayerSat" in from_primary
    assert "TableCreated" in from_replica
    assert "PlayerSat" not in from_replica


def test_with_the_replica_stopped_reads_go_to_the_primary_and_never_fail_with_500(
    cluster: Cluster,
) -> None:
    """Last in this module: it stops the replica for good."""
    token = _table(cluster, "DOWN").headers[HEADER]
    # The replica has the table before it stops: a read there answers it, not a 404.
    lsn = parse(token).lsn_text
    while not cluster.replica_sql(f"SELECT pg_last_wal_replay_lsn() >= '{lsn}'::pg_lsn"):
        cluster.replica_sql("SELECT pg_sleep(0.01)")
    cluster.replica.stop()
    statuses: list[int] = []
    pools: list[str] = []
    # A read routed to the replica in the moment before a process looks at it again is lost
    # with it (503, as any lost database); within a look or two, reads go to the primary.
    while pools[-3:] != ["primary"] * 3:
        assert len(statuses) < 200, (statuses, pools)
        read = cluster.call("GET", "/v1/tables/DOWN", role=Role.FRONTEND)
        statuses.append(read.status_code)
        pools.append(read.headers.get(READ_POOL_HEADER, ""))
        if read.status_code != 200:
            assert read.status_code == 503, read.get_data(as_text=True)
            assert read.headers["Retry-After"]
    assert cluster.metric("shoebox_read_fallbacks_total", reason="replica-down") >= 3
