"""schemathesis against the live app's own OpenAPI document, once with each role's key.

Every operation, over a real PostgreSQL database holding a table, a funded and seated player
and an open round, so that some generated requests reach past the 404s. The checks: no 5xx,
every status and content type documented, every body matching its schema, and every message
of the live feeds matching its event's schema (ST108 otherwise). A feed never ends, so it is
read for a bounded time, long enough to take every event the log holds. Examples are few and
derandomized, so that CI is repeatable and takes about a minute.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
import schemathesis
from flask import Flask
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis import APIOperation
from schemathesis.config import SchemathesisConfig
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from events.postgres import Pool, PostgresEventStore
from service.application.feed import PUBLIC_CATEGORIES
from service.application.keys import Role
from service.application.read_models import projector
from service.application.read_models.queries import ProjectionService
from service.runtime.container import Container
from service.runtime.settings import Settings
from service.web import rate_limits
from service.web.api import EXTENSION
from service.web.app import create_app
from tests.api_harness import Api

# Per operation and role; about 40 operations x 3 roles. Raise it for a deeper run by hand.
EXAMPLES = int(os.environ.get("SHOEBOX_SCHEMATHESIS_EXAMPLES", "8"))
FEED = r"/feed(/|$)"
# A feed is read until this many seconds pass (at the first message after them: heartbeats
# come every HEARTBEAT_SECONDS), or this many events: far more than the seeded log holds, so
# that a feed replayed from the start is read to its last event and each one is checked.
FEED_READ_SECONDS = 1.0
FEED_HEARTBEAT_SECONDS = 0.2
FEED_MAX_EVENTS = 10_000
FEED_CONFIG = SchemathesisConfig.from_dict(
    {"max-stream-events": FEED_MAX_EVENTS, "request-timeout": FEED_READ_SECONDS}
)


@schemathesis.check
def no_server_error_but_unavailable(
    ctx: schemathesis.CheckContext, response: schemathesis.Response, case: schemathesis.Case[Any]
) -> bool | None:
    """No 5xx but a 503, which status_code_conformance then holds to the operation's document.

    This app has no job queue (no Redis), so a rebuild without `wait` is rightly a 503.
    """
    if response.status_code >= 500 and response.status_code != 503:
        raise AssertionError(f"server error {response.status_code}: {response.text[:500]}")
    return None


CHECKS = [
    no_server_error_but_unavailable,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


@pytest.fixture
def seeded_api(app_pool: Pool) -> Api:
    """The app over PostgreSQL and its read models, with something to find at T1 and alice."""
    api = Api(
        store=PostgresEventStore(app_pool),
        projections=lambda clock: ProjectionService(app_pool, clock),
    )
    # schemathesis sends far more than a front end would; its runs are not about the limit.
    api.app.extensions[rate_limits.EXTENSION] = rate_limits.RateLimiter(0, 1)
    # No Redis: a rebuild job must not reach a queue another test's worker reads.
    wiring = api.app.extensions[EXTENSION]
    assert isinstance(wiring, Container)
    api.app.extensions[EXTENSION] = replace(
        wiring, settings=replace(wiring.settings, redis_url=None)
    )
    api.create_table("T1")
    api.fund("alice")
    api.sit("T1", "alice", 1)
    api.bet("T1", "alice", "banker", 500)
    projector.catch_up(app_pool)
    return api


@pytest.fixture(params=[Role.FRONTEND, Role.OPS, Role.REGULATOR], ids=lambda role: role.value)
def role(request: pytest.FixtureRequest) -> Role:
    assert isinstance(request.param, Role)
    return request.param


@pytest.fixture
def api_schema(seeded_api: Api, role: Role) -> schemathesis.BaseSchema:
    """The document as the app serves it at /v1/openapi.json, read with `role`'s key."""
    authorization = {"Authorization": f"Bearer {seeded_api.keys[role]}"}
    loaded = schemathesis.openapi.from_wsgi(
        "/v1/openapi.json", seeded_api.app, headers=authorization
    )
    # The feeds are read from an app with a live feed, below.
    return loaded.exclude(path_regex=FEED)


def _failures(
    operation: APIOperation[Any, Any, Any, Any], role: Role, api: Api, count: int = EXAMPLES
) -> list[str]:
    """Run one operation's examples; the first failure's report, if any."""
    headers = {"Authorization": f"Bearer {api.keys[role]}"}

    @given(operation.as_strategy())
    @settings(
        max_examples=count,
        derandomize=True,
        deadline=None,
        database=None,
        # Shrinking a failure is worth it locally; in CI the first report is enough.
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    def examples(case: schemathesis.Case[Any]) -> None:
        case.call_and_validate(headers=headers, checks=CHECKS)

    try:
        examples()
    except Exception as error:  # schemathesis' FailureGroup, an exception group
        return [f"{operation.label} as {role.value}: {error}"]
    return []


@pytest.mark.slow
def test_every_operation_answers_as_documented_to_every_role(
    api_schema: schemathesis.BaseSchema, seeded_api: Api, role: Role
) -> None:
    failures: list[str] = []
    operations = 0
    for result in api_schema.get_all_operations():
        operation = result.ok()  # type: ignore[union-attr] # an Err raises here, failing the test
        operations += 1
        failures += _failures(operation, role, seeded_api)
    assert operations >= 40, "the document lost its operations"
    assert not failures, "\n\n".join(failures)


@pytest.fixture
def feed_app(seeded_api: Api, fresh_database: str) -> Iterator[Flask]:
    """The app as `shoebox serve` builds it, over the seeded database, with its live feed."""
    settings = Settings(
        database_url=fresh_database,
        feed_heartbeat_seconds=FEED_HEARTBEAT_SECONDS,
        rate_limit_per_second=0,
    )
    app = create_app(settings, pool_size=4)
    try:
        yield app
    finally:
        wiring = app.extensions[EXTENSION]
        assert isinstance(wiring, Container)
        wiring.close()


def _replayed_from_the_start(
    operation: APIOperation[Any, Any, Any, Any], role: Role, api: Api
) -> tuple[int, int]:
    """Replay the feed from position 0 and validate every message; (status, events read)."""
    seeded = {"table_id": "T1"} if "{table_id}" in operation.path else {}
    case = operation.Case(path_parameters=seeded, query={"after": 0})
    response = case.call_and_validate(
        headers={"Authorization": f"Bearer {api.keys[role]}"}, checks=CHECKS
    )
    # Each event's message has an `id:` line; the stream opens with `retry:`, never an id.
    return response.status_code, response.content.count(b"\nid: ")


@pytest.mark.slow
def test_every_feed_message_matches_its_events_schema_for_every_role(
    feed_app: Flask, seeded_api: Api, role: Role, app_pool: Pool
) -> None:
    authorization = {"Authorization": f"Bearer {seeded_api.keys[role]}"}
    loaded = schemathesis.openapi.from_wsgi(
        "/v1/openapi.json", feed_app, headers=authorization, config=FEED_CONFIG
    ).include(path_regex=FEED)
    with app_pool.connection() as conn:
        row = conn.execute(
            "SELECT count(*) FROM events WHERE category = ANY(%s)", [sorted(PUBLIC_CATEGORIES)]
        ).fetchone()
    assert row is not None
    public = int(row[0])
    failures: list[str] = []
    readable = 0
    for result in loaded.get_all_operations():
        operation = result.ok()  # type: ignore[union-attr]
        failures += _failures(operation, role, seeded_api, count=EXAMPLES // 2)
        status, read = _replayed_from_the_start(operation, role, seeded_api)
        if status == 200:
            readable += 1
            assert read == public, f"{operation.label} read {read} of the {public} events"
    assert not failures, "\n\n".join(failures)
    # Every role reads a table's feed; ops and regulators read the global one too.
    assert readable == (1 if role is Role.FRONTEND else 2)
