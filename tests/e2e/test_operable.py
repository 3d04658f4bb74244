"""Shoebox as operators run it: the image's commands, probes, metrics, logs, and a drain on SIGTERM.

No Docker engine is here, so the image's entrypoint commands run the way the image runs them:
an installed `shoebox` with the compose file's environment, the migrations found through
SHOEBOX_MIGRATIONS_DIR rather than beside the source, and a database of the test's own.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from events.migrations import MIGRATIONS_DIR
from events.postgres import open_pool
from service.web.operations import readiness
from tests.e2e.servers import SHOEBOX, Server, create_key, private_database, serve

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


@pytest.fixture
def database(postgres_server_url: str) -> Iterator[str]:
    with private_database(postgres_server_url) as url:
        yield url


def compose() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return document


def test_compose_runs_every_process_from_one_image_with_health_checks_and_migrations_first() -> (
    None
):
    services = compose()["services"]
    assert set(services) == {
        "postgres",
        "redis",
        "migrate",
        "api",
        "worker",
        "projector",
        "prometheus",
        "grafana",
    }
    commands = {
        name: services[name]["command"] for name in ("migrate", "api", "worker", "projector")
    }
    # The worker and the projector serve their own /metrics for Prometheus to scrape.
    metrics = ["--metrics-host", "0.0.0.0", "--metrics-port", "9100"]
    assert commands == {
        "migrate": ["migrate"],
        "api": ["serve"],
        "worker": ["worker", *metrics],
        "projector": ["projector", *metrics],
    }
    assert {services[name]["image"] for name in commands} == {"shoebox:latest"}
    for name in ("postgres", "redis", "api", "worker", "projector"):
        assert services[name]["healthcheck"]["test"], name
    assert "/readyz" in " ".join(services["api"]["healthcheck"]["test"])
    assert any("/var/lib/postgresql/data" in v for v in services["postgres"]["volumes"])
    assert compose()["volumes"] == {
        "postgres-data": None,
        "prometheus-data": None,
        "grafana-data": None,
    }
    for name in ("api", "worker", "projector"):
        assert services[name]["depends_on"]["migrate"] == {
            "condition": "service_completed_successfully"
        }, name
    assert services["migrate"]["restart"] == "no"
    assert services["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"


def test_the_image_is_multi_stage_non_root_serves_by_default_and_ships_no_embedded_servers() -> (
    None
):
    dockerfile = (ROOT / "Dockerfile").read_text()
    instructions = [line for line in dockerfile.splitlines() if line and not line.startswith("#")]
    assert sum(1 for line in instructions if line.startswith("FROM ")) >= 2
    user = next(line for line in reversed(instructions) if line.startswith("USER "))
    assert user.split()[1] not in {"root", "0"}
    assert 'ENTRYPOINT ["shoebox"]' in instructions
    assert instructions[-1] == 'CMD ["serve"]'
    installs = " ".join(line for line in instructions if "pip " in line)
    assert "embedded" not in installs
    assert "verifier" not in installs
    directory = re.search(r"SHOEBOX_MIGRATIONS_DIR=(\S+)", dockerfile)
    assert directory is not None
    assert f"COPY migrations {directory.group(1)}" in dockerfile


def test_the_images_commands_migrate_then_serve_and_readyz_says_when_migrations_are_behind(
    database: str, tmp_path: Path
) -> None:
    # The image's layout: the migrations outside the source tree, named by the variable.
    migrations = tmp_path / "app" / "migrations"
    shutil.copytree(MIGRATIONS_DIR, migrations)
    service = compose()["services"]["api"]["environment"]
    environment = {
        "DATABASE_URL": database,
        "SHOEBOX_MIGRATIONS_DIR": str(migrations),
        "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "metrics"),
        "REDIS_URL": "redis://127.0.0.1:9/0",  # nothing listens: reported, never fatal
    }
    assert set(service) >= {"DATABASE_URL", "REDIS_URL", "PROMETHEUS_MULTIPROC_DIR"}
    migrated = subprocess.run(
        [str(SHOEBOX), "migrate"],
        env={**_base_environment(), **environment},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert migrated.returncode == 0, migrated.stderr
    with serve(database, tmp_path / "serve.log", environment) as server:
        status, ready = server.call("GET", "/readyz")
        assert status == 200, ready
        assert ready["status"] == "ready"
        assert ready["checks"]["migrations"]["pending"] == []
        assert ready["checks"]["redis"]["status"] == "unreachable"
        assert server.call("GET", "/healthz") == (200, {"status": "ok"})
        # A newer image whose migrations have not been applied yet: not ready.
        (migrations / "9999_from_the_future.sql").write_text("SELECT 1;\n")
        status, behind = server.call("GET", "/readyz")
        assert status == 503
        assert behind["checks"]["migrations"]["pending"] == ["9999_from_the_future"]
        text = json.dumps(behind)
        assert "postgresql://" not in text
        assert "redis://" not in text


def _base_environment() -> dict[str, str]:
    import os

    environment = dict(os.environ)
    environment.pop("SHOEBOX_APP_DATABASE_URL", None)
    return environment


def test_readyz_fails_when_postgresql_is_unreachable() -> None:
    with open_pool("host=127.0.0.1 port=9 user=nobody dbname=none connect_timeout=1") as pool:
        ready, checks = readiness(pool, None)
    assert not ready
    assert checks["postgres"] == {"status": "unreachable"}
    assert checks["redis"] == {"status": "not configured"}


def test_sigterm_lets_a_request_in_flight_finish_and_the_server_exit_cleanly(
    database: str, tmp_path: Path
) -> None:
    marker = tmp_path / "deal.delayed"
    # Within the request's 2.5 s deadline (service/web/app.py), or the deal would be a 503.
    environment = {
        "SHOEBOX_TEST_FAILPOINT": "delay-before-deal-append",
        "SHOEBOX_TEST_FAILPOINT_CONSENT": "this process may hang forever, it is a test",
        "SHOEBOX_TEST_FAILPOINT_SECONDS": "1",
        "SHOEBOX_TEST_FAILPOINT_MARKER": str(marker),
    }
    ops, frontend = create_key(database, "ops"), create_key(database, "frontend")
    with serve(database, tmp_path / "serve.log", environment) as server:
        server.ok("POST", "/v1/tables", ops, {"table_id": "T1"})
        server.ok(
            "POST", "/v1/wallets/alice/deposits", ops, {"amount_pence": 10_000, "reason": "x"}
        )
        server.ok("POST", "/v1/tables/T1/seats", frontend, {"player_id": "alice", "seat": 1})
        bet = {"player_id": "alice", "spot": "banker", "stake_pence": 500}
        server.ok("POST", "/v1/tables/T1/bets", frontend, bet)
        answers: list[tuple[int, Any]] = []
        deal = threading.Thread(
            target=lambda: answers.append(
                server.call("POST", "/v1/tables/T1/deal", frontend, {"player_id": "alice"})
            )
        )
        deal.start()
        deadline = time.monotonic() + 30
        while not (marker.exists() and marker.read_text().strip()):
            assert time.monotonic() < deadline, "the deal never reached its failpoint"
            time.sleep(0.01)
        # The deal is now waiting at the failpoint, inside the request.
        server.process.send_signal(15)
        deal.join(timeout=30)
        assert answers, "the deal in flight got no answer"
        status, dealt = answers[0]
        assert status == 200, dealt
        assert dealt["coup"] is not None
        assert server.stop() == 0


def _workers_of(master: int) -> set[int]:
    children = Path(f"/proc/{master}/task/{master}/children").read_text().split()
    return {int(pid) for pid in children}


def test_a_worker_that_stops_leaves_the_masters_metrics_and_database_to_the_others(
    database: str, tmp_path: Path
) -> None:
    """A worker is forked inside the master's context managers; leaving must not unwind them.

    It once did: the first worker to stop deleted the metrics directory, and every later count
    in the other workers failed with a 500 (and would have released an embedded PostgreSQL).
    """
    ops = create_key(database, "ops")
    with serve(database, tmp_path / "serve.log", workers=1) as server:
        server.ok("POST", "/v1/tables", ops, {"table_id": "T1"})
        (first,) = _workers_of(server.process.pid)
        os.kill(first, signal.SIGTERM)
        deadline = time.monotonic() + 30
        while not (_workers_of(server.process.pid) - {first}):
            assert time.monotonic() < deadline, "gunicorn did not replace the worker"
            time.sleep(0.1)
        status, body = 0, None
        while time.monotonic() < deadline:
            status, body = server.call("POST", "/v1/tables", ops, {"table_id": "T2"})
            if status != 503:  # the new worker may still be building its app
                break
            time.sleep(0.1)
        assert status == 201, body
        assert _sample(_metrics(server), "shoebox_events_appended_total", type="TableCreated") == 2
        assert server.stop() == 0


def test_metrics_add_up_across_workers_and_logs_are_one_json_line_a_request(
    database: str, tmp_path: Path
) -> None:
    ops, frontend = create_key(database, "ops"), create_key(database, "frontend")
    log = tmp_path / "serve.log"
    # The queue's metrics need a Redis: the environment's, else the machine's default one (as
    # the other e2e tests), so that `make test` without REDIS_URL checks them too.
    redis_url = os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/0"
    with serve(database, log, {"REDIS_URL": redis_url}, workers=2) as server:
        server.ok("POST", "/v1/tables", ops, {"table_id": "T1"})
        server.ok(
            "POST", "/v1/wallets/alice/deposits", ops, {"amount_pence": 10_000, "reason": "x"}
        )
        server.ok("POST", "/v1/tables/T1/seats", frontend, {"player_id": "alice", "seat": 1})
        for _ in range(3):
            bet = {"player_id": "alice", "spot": "banker", "stake_pence": 100}
            server.ok("POST", "/v1/tables/T1/bets", frontend, bet)
        server.ok("POST", "/v1/tables/T1/deal", frontend, {"player_id": "alice"})
        pings = 0
        while pings < 40:  # each on a new connection, so both workers answer some
            pings += server.call("GET", "/v1/ping", frontend)[0] == 200
        text = _metrics(server)
    assert _sample(text, "shoebox_http_request_duration_seconds_count", route="/v1/ping") == pings
    assert _sample(text, "shoebox_events_appended_total", type="BetPlaced") == 3
    assert _sample(text, "shoebox_events_appended_total", type="RoundOpened") == 2
    assert _sample(text, "shoebox_rounds_total") == 1  # the coup, by its outcome
    for family in (
        "shoebox_projection_lag_events",
        "shoebox_rq_queue_depth",
        "shoebox_rq_workers",
        "shoebox_rounds_total",
        "shoebox_rounds_voided_total",
        "shoebox_window_close_delay_seconds",
        "shoebox_feed_clients",
    ):
        assert f"# TYPE {family} " in text, family
    for secret_or_id in ("alice", "T1", ops, frontend, "key_"):
        assert secret_or_id not in text
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    requests = [line for line in lines if line.get("logger") == "shoebox.request"]
    assert len([r for r in requests if r["route"] == "/v1/ping"]) == pings
    bets = [r for r in requests if r["route"] == "/v1/tables/<id:table_id>/bets"]
    assert [r["status"] for r in bets] == [201, 201, 201]
    assert all(r["role"] == "frontend" and r["request_id"] and r["duration_ms"] >= 0 for r in bets)
    assert all(line["process"] == "api" for line in lines)
    whole = log.read_text()
    assert ops not in whole
    assert frontend not in whole


def _metrics(server: Server) -> str:
    import http.client

    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        connection.request("GET", "/metrics")
        response = connection.getresponse()
        assert response.status == 200
        assert response.getheader("Content-Type", "").startswith("text/plain")
        return response.read().decode()
    finally:
        connection.close()


def _sample(text: str, name: str, **labels: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        if all(f'{key}="{value}"' in line for key, value in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total
