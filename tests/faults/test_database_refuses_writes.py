"""Disk full and a read-only database: every write is a 503 with Retry-After, nothing half-applied.

Disk full is PostgreSQL's own error, SQLSTATE 53100, raised inside the server by a trigger
the test adds to the events table as the database's owner (a failpoint in the database, so
that the error reaches the service through the real driver and the real append function).
Read-only is `default_transaction_read_only` set for a private PostgreSQL server of the test's
own (ALTER SYSTEM and a reload), never the shared one. Once the fault
is gone, the same requests retried with the same Idempotency-Keys each apply exactly once.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest

from events.postgres import Pool, PostgresEventStore, app_conninfo, open_pool
from service.application.keys import Role
from service.web import rate_limits
from service.web.problems import PROBLEM_MIMETYPE
from tests.api_harness import Api, head_and_balances
from tests.faults.figures import Figures, count_found
from tests.faults.private_servers import private_postgres

WRITES = 12
RELOAD_SECONDS = 10.0
DISK_FULL = """
CREATE FUNCTION failpoint_disk_full() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'could not extend file: No space left on device (test failpoint)'
        USING ERRCODE = 'disk_full';
END $$;
CREATE TRIGGER failpoint_disk_full BEFORE INSERT ON events
    FOR EACH ROW EXECUTE FUNCTION failpoint_disk_full();
CREATE TRIGGER failpoint_disk_full BEFORE INSERT ON unsequenced_events
    FOR EACH ROW EXECUTE FUNCTION failpoint_disk_full();
"""
# Both tables since migration 0030: an append writes unsequenced_events, the sequencer events.
HEALED = (
    "DROP TRIGGER failpoint_disk_full ON events;"
    " DROP TRIGGER failpoint_disk_full ON unsequenced_events;"
    " DROP FUNCTION failpoint_disk_full();"
)


@contextmanager
def api_over(database_url: str) -> Iterator[Api]:
    pool = open_pool(app_conninfo(database_url, environ={}), max_size=4, timeout=5)
    try:
        api = Api(store=PostgresEventStore(pool))
        api.app.extensions[rate_limits.EXTENSION] = rate_limits.RateLimiter(0, 1)
        yield api
    finally:
        pool.close()


def writes(api: Api) -> list[tuple[str, str, dict[str, object], Role]]:
    """Deposits and bets, each with its idempotency key: what front ends and ops would send."""
    sent: list[tuple[str, str, dict[str, object], Role]] = []
    for number in range(WRITES):
        if number % 2:
            body = {"player_id": "alice", "spot": "banker", "stake_pence": 100}
            sent.append((f"bet-{number}", "/v1/tables/T1/bets", body, Role.FRONTEND))
        else:
            body = {"amount_pence": 1_000 + number, "reason": "fault test"}
            sent.append((f"deposit-{number}", "/v1/wallets/bob/deposits", body, Role.OPS))
    return sent


def send(api: Api, key: str, path: str, body: dict[str, object], role: Role, rid: str) -> int:
    """Send one write; its status, and for a 503 the problem and Retry-After are checked."""
    headers = {"Idempotency-Key": key, "X-Request-Id": rid}
    response = api.call("POST", path, body, role=role, headers=headers)
    if response.status_code == 503:
        assert response.mimetype == PROBLEM_MIMETYPE
        assert int(response.headers["Retry-After"]) > 0
    return response.status_code


def prove_refused_then_applied_once(api: Api, fault: str, heal: object) -> None:
    before = head_and_balances(api.store)
    planned = writes(api)
    statuses = [send(api, *write, uuid.uuid4().hex) for write in planned]
    assert statuses == [503] * len(planned), statuses
    assert head_and_balances(api.store) == before, "a refused write changed the log"

    heal()  # type: ignore[operator]
    acknowledged, replays_matching = [], 0
    for key, path, body, role in planned:
        first_rid, replay_rid = uuid.uuid4().hex, uuid.uuid4().hex
        first = api.call(
            "POST",
            path,
            body,
            role=role,
            headers={"Idempotency-Key": key, "X-Request-Id": first_rid},
        )
        # A duplicate retry: answered as the first was, applied once.
        again = api.call(
            "POST",
            path,
            body,
            role=role,
            headers={"Idempotency-Key": key, "X-Request-Id": replay_rid},
        )
        assert first.status_code == again.status_code == 201, (first.status_code, again.status_code)
        acknowledged.append(first_rid)
        replays_matching += again.get_json() == first.get_json()
    found = count_found(acknowledged, api.store)
    Figures(
        fault,
        sent=3 * len(planned),
        acknowledged=2 * len(planned),
        found_in_log=found + replays_matching,
    ).record()
    _, balances = head_and_balances(api.store)
    deposits = sum(b["amount_pence"] for k, _, b, _ in planned if k.startswith("deposit"))  # type: ignore[misc]
    bets = sum(1 for k, *_ in planned if k.startswith("bet"))
    assert balances["bob"] == (before[1].get("bob", (0, 0))[0] + deposits, 0)
    assert balances["alice"] == (
        before[1]["alice"][0] - 100 * bets,
        before[1]["alice"][1] + 100 * bets,
    )


def seed(api: Api) -> None:
    api.create_table("T1")
    api.fund("alice")
    api.sit("T1", "alice", 1)


@pytest.fixture
def seeded(fresh_database: str) -> Iterator[Api]:
    with api_over(fresh_database) as api:
        seed(api)
        yield api


@pytest.mark.slow
def test_disk_full_is_a_503_and_nothing_is_half_applied(seeded: Api, fresh_database: str) -> None:
    with psycopg.connect(fresh_database, autocommit=True) as owner:
        owner.execute(DISK_FULL)
        prove_refused_then_applied_once(
            seeded, "disk full (SQLSTATE 53100)", lambda: owner.execute(HEALED)
        )


def read_only(server_url: str, on: bool, pool: Pool) -> None:
    """Set the whole server read-only, or back, as an operator would: ALTER SYSTEM and reload."""
    with psycopg.connect(server_url, autocommit=True) as superuser:
        superuser.execute("SET default_transaction_read_only = off")  # this session only
        if on:
            superuser.execute("ALTER SYSTEM SET default_transaction_read_only = on")
        else:
            superuser.execute("ALTER SYSTEM RESET default_transaction_read_only")
        superuser.execute("SELECT pg_reload_conf()")
    # The reload reaches each backend when it next looks: wait until a new session sees it,
    # and renew the pool's sessions so that none of them is caught before its backend has.
    wanted = "on" if on else "off"
    deadline = time.monotonic() + RELOAD_SECONDS
    while True:
        with psycopg.connect(server_url) as probe:
            row = probe.execute("SHOW default_transaction_read_only").fetchone()
        if row is not None and row[0] == wanted:
            break
        assert time.monotonic() < deadline, "the reload did not take effect"
        time.sleep(0.05)
    pool.drain()


@pytest.mark.slow
def test_a_read_only_database_is_a_503_and_nothing_is_half_applied(tmp_path: Path) -> None:
    # default_transaction_read_only is set for the whole server, so on a private one.
    with private_postgres(tmp_path / "postgres") as postgres, api_over(postgres.url) as api:
        seed(api)
        pool = api.store._pool  # type: ignore[attr-defined]
        read_only(postgres.server_url, True, pool)
        prove_refused_then_applied_once(
            api, "database read-only", lambda: read_only(postgres.server_url, False, pool)
        )
