"""Bearer API keys: stored hashed, refused when missing, malformed, unknown or revoked; roles."""

import re
from collections.abc import Collection
from datetime import UTC, datetime

import pytest
from flask import Flask
from flask.views import MethodView
from werkzeug.routing import Rule

from events.memory import InMemoryEventStore
from events.store import EventMetadata, RecordedEvent
from service.application.keys import (
    ALL_ROLES,
    KEY_PREFIX,
    ApiKeyAlreadyRevoked,
    IssuedKey,
    KeyRing,
    Role,
    UnknownApiKey,
    create_key,
    hash_key,
    list_keys,
    revoke_key,
)
from service.web.api import Blueprint
from service.web.app import create_app
from service.web.auth import (
    OPEN,
    bearer_secret,
    check_roles_declared,
    endpoint_roles,
    roles,
    routes,
)
from service.web.problems import PROBLEM_MIMETYPE

NOW = datetime(2025, 3, 7, 12, 0, tzinfo=UTC)
OPERATOR = EventMetadata(actor="cli:test", role="cli")


class FakeMonotonic:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class CountingStore(InMemoryEventStore):
    """The in-memory store, counting reads of the whole log."""

    reads = 0

    def read_all(
        self,
        from_position: int = 0,
        limit: int = 1000,
        categories: Collection[str] | None = None,
        types: Collection[str] | None = None,
        *,
        upcast: bool = True,
    ) -> list[RecordedEvent]:
        self.reads += 1
        return super().read_all(from_position, limit, categories, types, upcast=upcast)


@pytest.fixture
def store() -> InMemoryEventStore:
    return InMemoryEventStore(lambda: NOW)


@pytest.fixture
def app(store: InMemoryEventStore) -> Flask:
    return create_app(store=store, clock=lambda: NOW)


@pytest.fixture
def keys(store: InMemoryEventStore) -> dict[Role, IssuedKey]:
    return {role: create_key(store, f"{role.value} key", role, OPERATOR) for role in Role}


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


def test_a_key_is_sbx_and_256_random_bits_and_the_log_holds_only_its_hash(
    store: InMemoryEventStore,
) -> None:
    issued = create_key(store, "casino-one", Role.FRONTEND, OPERATOR)
    assert re.fullmatch(r"sbx_[A-Za-z0-9_-]{43}", issued.secret)
    (event,) = store.read_all(categories=["apikey"])
    assert event.stream_id == f"apikey:{issued.key.key_id}"
    assert event.type == "ApiKeyCreated"
    assert event.payload == {
        "key_id": issued.key.key_id,
        "name": "casino-one",
        "role": "frontend",
        "key_sha256": hash_key(issued.secret),
        "operator": "default",
    }
    assert issued.secret[len(KEY_PREFIX) :] not in repr(store.read_all())


def test_two_keys_never_share_a_secret_or_an_id(store: InMemoryEventStore) -> None:
    first = create_key(store, "a", Role.OPS, OPERATOR)
    second = create_key(store, "a", Role.OPS, OPERATOR)
    assert first.secret != second.secret
    assert first.key.key_id != second.key.key_id


@pytest.mark.parametrize("name", ["", "   ", "tab\there", "x" * 101])
def test_a_key_needs_a_printable_name_of_at_most_100_characters(
    store: InMemoryEventStore, name: str
) -> None:
    with pytest.raises(ValueError, match="key name"):
        create_key(store, name, Role.OPS, OPERATOR)
    assert store.head() == 0


def test_revoking_records_the_reason_once(store: InMemoryEventStore) -> None:
    issued = create_key(store, "a", Role.OPS, OPERATOR)
    revoked = revoke_key(store, issued.key.key_id, "laptop stolen", OPERATOR)
    assert revoked.revoked
    assert revoked.revoke_reason == "laptop stolen"
    with pytest.raises(ApiKeyAlreadyRevoked):
        revoke_key(store, issued.key.key_id, "again", OPERATOR)
    with pytest.raises(UnknownApiKey):
        revoke_key(store, "key_nope", "typo", OPERATOR)
    assert [key.revoked for key in list_keys(store)] == [True]


def test_a_new_key_works_at_once_and_a_revoked_one_stops_within_the_refresh_interval(
    store: InMemoryEventStore,
) -> None:
    monotonic = FakeMonotonic()
    ring = KeyRing(store, refresh_seconds=1.0, miss_refresh_seconds=0.1, monotonic=monotonic)
    assert ring.authenticate("sbx_unknown") is None
    monotonic.now += 0.1
    issued = create_key(store, "a", Role.REGULATOR, OPERATOR)
    key = ring.authenticate(issued.secret)
    assert key is not None
    assert key.role is Role.REGULATOR
    revoke_key(store, issued.key.key_id, "rotated", OPERATOR)
    monotonic.now += 0.5
    assert ring.authenticate(issued.secret) is not None
    monotonic.now += 0.5
    assert ring.authenticate(issued.secret) is None


def test_unknown_keys_cannot_make_the_ring_read_the_log_more_than_ten_times_a_second() -> None:
    store = CountingStore(lambda: NOW)
    monotonic = FakeMonotonic()
    ring = KeyRing(store, monotonic=monotonic)
    for attempt in range(50):
        assert ring.authenticate(f"sbx_guess{attempt}") is None
    assert store.reads == 1
    monotonic.now += 0.1
    assert ring.authenticate("sbx_guess") is None
    assert store.reads == 2


@pytest.mark.parametrize(
    ("header", "secret"),
    [
        ("Bearer sbx_abc", "sbx_abc"),
        ("bearer   sbx_abc  ", "sbx_abc"),
        ("Basic dXNlcjpwYXNz", None),
        ("Bearer", None),
        ("Bearer ", None),
        ("Bearer a b", None),
        ("sbx_abc", None),
        (None, None),
    ],
)
def test_only_a_bearer_header_carries_a_key(header: str | None, secret: str | None) -> None:
    assert bearer_secret(header) == secret


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Basic dXNlcjpwYXNz"},
        {"Authorization": "Bearer"},
        {"Authorization": "Bearer sbx_not_a_key"},
        {"Authorization": "Bearer " + "sbx_" + "A" * 500},
    ],
    ids=["missing", "basic", "empty-bearer", "unknown", "oversized"],
)
def test_a_request_without_a_live_key_is_a_401_asking_for_a_bearer(
    app: Flask, headers: dict[str, str]
) -> None:
    response = app.test_client().get("/v1/ping", headers=headers)
    assert response.status_code == 401
    assert response.mimetype == PROBLEM_MIMETYPE
    assert response.headers["WWW-Authenticate"].startswith("Bearer")


def test_a_revoked_key_is_a_401(app: Flask, store: InMemoryEventStore) -> None:
    issued = create_key(store, "a", Role.FRONTEND, OPERATOR)
    client = app.test_client()
    assert client.get("/v1/ping", headers=bearer(issued.secret)).status_code == 200
    revoke_key(store, issued.key.key_id, "rotated", OPERATOR)
    app.extensions["shoebox"].keys.refresh()
    response = client.get("/v1/ping", headers=bearer(issued.secret))
    assert response.status_code == 401
    assert "revoked" in response.get_json(force=True)["detail"]


def test_the_openapi_document_needs_a_key_of_any_role(
    app: Flask, keys: dict[Role, IssuedKey]
) -> None:
    client = app.test_client()
    assert client.get("/v1/openapi.json").status_code == 401
    for role in Role:
        response = client.get("/v1/openapi.json", headers=bearer(keys[role].secret))
        assert response.status_code == 200
        assert response.get_json()["info"]["title"] == "Shoebox"


def _sample_path(rule: Rule) -> str:
    """The rule's path with every variable filled in with a plausible value."""
    path = rule.rule
    for argument in rule.arguments:
        converter = rule._converters[argument]
        value = "1" if type(converter).__name__ in {"IntegerConverter", "NumberConverter"} else "x1"
        path = re.sub(rf"<(?:[^:<>]+:)?{argument}>", value, path)
    return path


def test_every_endpoint_refuses_no_key_with_401_and_other_roles_with_403(
    app: Flask, keys: dict[Role, IssuedKey]
) -> None:
    client = app.test_client()
    checked = 0
    for rule in app.url_map.iter_rules():
        path = _sample_path(rule)
        for _, endpoint, method in routes(app):
            if endpoint != rule.endpoint:
                continue
            admitted = endpoint_roles(app, endpoint, method)
            if admitted == OPEN:
                continue  # the probes and metrics: test_the_probes_need_no_key
            assert admitted, f"{method} {rule.rule} admits no role"
            response = client.open(path, method=method, json={})
            assert response.status_code == 401, f"{method} {path} without a key"
            for role in Role:
                response = client.open(
                    path, method=method, json={}, headers=bearer(keys[role].secret)
                )
                if role in admitted:
                    assert response.status_code not in (401, 403), f"{role} {method} {path}"
                else:
                    assert response.status_code == 403, f"{role} {method} {path}"
                    assert response.mimetype == PROBLEM_MIMETYPE
            checked += 1
    assert checked >= 2  # /v1/ping and /v1/openapi.json at least


def test_the_probes_need_no_key_and_are_the_only_open_endpoints(app: Flask) -> None:
    client = app.test_client()
    open_endpoints = {
        rule.rule
        for rule in app.url_map.iter_rules()
        if endpoint_roles(app, rule.endpoint, "GET") == OPEN
    }
    assert open_endpoints == {"/healthz", "/readyz", "/metrics"}
    for path in open_endpoints:
        assert client.get(path).status_code == 200, path


def test_ping_admits_every_role(app: Flask) -> None:
    assert endpoint_roles(app, "ping.Ping", "GET") == ALL_ROLES


def test_an_app_with_a_method_that_declares_no_roles_is_refused(app: Flask) -> None:
    careless = Blueprint("careless", __name__)

    @careless.route("/careless")
    class Careless(MethodView):
        @roles(Role.OPS)
        def get(self) -> str:
            return "fine"

        def delete(self) -> str:
            return "open to anyone"

    app.register_blueprint(careless, url_prefix="/v1")
    with pytest.raises(RuntimeError, match=r"DELETE /v1/careless"):
        check_roles_declared(app)


def test_a_role_not_admitted_is_a_403_that_names_the_admitted_roles(
    app: Flask, keys: dict[Role, IssuedKey]
) -> None:
    ops_only = Blueprint("ops_only", __name__)

    @ops_only.route("/ops-only")
    class OpsOnly(MethodView):
        @roles(Role.OPS)
        def get(self) -> dict[str, str]:
            return {"ok": "yes"}

    app.register_blueprint(ops_only, url_prefix="/v1")
    client = app.test_client()
    assert client.get("/v1/ops-only", headers=bearer(keys[Role.OPS].secret)).status_code == 200
    response = client.get("/v1/ops-only", headers=bearer(keys[Role.REGULATOR].secret))
    assert response.status_code == 403
    assert "open to: ops" in response.get_json(force=True)["detail"]
