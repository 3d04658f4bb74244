"""The API platform over the real PostgreSQL store: idempotent retries, races, and wiring."""

import atexit
import threading
from types import SimpleNamespace
from typing import Any

import pytest
from flask import Flask
from flask.views import MethodView

from events.postgres import Pool, PostgresEventStore
from events.store import ConcurrencyConflict, EventMetadata, NewEvent, StreamAppend
from service.application.keys import Role, create_key
from service.cli.serve import ShoeboxServer, gunicorn_options
from service.runtime.container import Container
from service.runtime.settings import Settings
from service.web.api import EXTENSION, Blueprint, actor, container
from service.web.app import create_app
from service.web.auth import roles
from service.web.idempotency import REPLAYED_HEADER

OPERATOR = EventMetadata(actor="cli:test", role="cli")
THREADS = 8

blp = Blueprint("counters", __name__, url_prefix="/counters")


@blp.route("/<name>")
class Counter(MethodView):
    """A stream that each POST extends by one event, the way a game command would."""

    @roles(Role.FRONTEND)
    def post(self, name: str) -> tuple[dict[str, Any], int]:
        """Append one Counted event, retrying stale versions like the application services."""
        caller = actor()
        store = container().store
        stream = f"counter:{name}"
        for _ in range(20):
            version = len(store.read_stream(stream))
            try:
                result = store.append(
                    [StreamAppend(stream, version, [NewEvent("Counted", {"by": caller.actor_id})])],
                    caller.metadata(),
                    caller.idempotency,
                )
            except ConcurrencyConflict:
                continue
            return {"version": result.versions[stream], "request_id": caller.request_id}, 201
        raise AssertionError("twenty conflicts in a row")


@pytest.fixture
def store(app_pool: Pool) -> PostgresEventStore:
    return PostgresEventStore(app_pool)


@pytest.fixture
def app(store: PostgresEventStore) -> Flask:
    app = create_app(store=store)
    api = app.extensions["flask-smorest"]["apis"][""]["ext_obj"]
    api.register_blueprint(blp, url_prefix="/v1/counters")
    return app


@pytest.fixture
def secret(store: PostgresEventStore) -> str:
    return create_key(store, "front end", Role.FRONTEND, OPERATOR).secret


def post(app: Flask, secret: str, path: str, key: str | None, body: object = None) -> Any:
    headers = {"Authorization": f"Bearer {secret}"}
    if key is not None:
        headers["Idempotency-Key"] = key
    return app.test_client().post(path, headers=headers, json=body)


def counted(store: PostgresEventStore, name: str) -> int:
    return len(store.read_stream(f"counter:{name}"))


def test_a_retry_gets_the_original_response_and_applies_nothing(
    app: Flask, store: PostgresEventStore, secret: str
) -> None:
    first = post(app, secret, "/v1/counters/a", "retry-1", {"note": "x"})
    again = post(app, secret, "/v1/counters/a", "retry-1", {"note": "x"})
    assert first.status_code == again.status_code == 201
    assert again.get_data() == first.get_data()
    assert again.headers[REPLAYED_HEADER] == "true"
    assert REPLAYED_HEADER not in first.headers
    assert counted(store, "a") == 1
    (event,) = store.read_stream("counter:a")
    assert event.metadata.idempotency_key is not None
    assert event.metadata.idempotency_key.endswith(":retry-1")
    assert event.metadata.request_id == first.get_json()["request_id"]


def test_the_same_body_with_its_keys_in_another_order_is_the_same_request(
    app: Flask, store: PostgresEventStore, secret: str
) -> None:
    path = "/v1/counters/order"
    assert post(app, secret, path, "k", {"a": 1, "b": 2}).status_code == 201
    assert post(app, secret, path, "k", {"b": 2, "a": 1}).headers[REPLAYED_HEADER] == "true"
    assert counted(store, "order") == 1


@pytest.mark.parametrize(
    ("path", "body"),
    [("/v1/counters/b", {"note": "other"}), ("/v1/counters/elsewhere", {"note": "x"})],
)
def test_a_key_reused_for_a_different_request_is_refused_and_applies_nothing(
    app: Flask, store: PostgresEventStore, secret: str, path: str, body: dict[str, str]
) -> None:
    assert post(app, secret, "/v1/counters/b", "reuse", {"note": "x"}).status_code == 201
    response = post(app, secret, path, "reuse", body)
    assert response.status_code == 422
    assert response.get_json(force=True)["type"].endswith("/idempotency-key-reused")
    assert counted(store, "b") == 1
    assert counted(store, "elsewhere") == 0


def test_keys_are_scoped_by_api_key(app: Flask, store: PostgresEventStore, secret: str) -> None:
    other = create_key(store, "other front end", Role.FRONTEND, OPERATOR).secret
    assert post(app, secret, "/v1/counters/c", "shared", {}).status_code == 201
    assert REPLAYED_HEADER not in post(app, other, "/v1/counters/c", "shared", {}).headers
    assert counted(store, "c") == 2


def test_requests_without_a_key_are_applied_every_time(
    app: Flask, store: PostgresEventStore, secret: str
) -> None:
    for _ in range(3):
        assert post(app, secret, "/v1/counters/d", None, {}).status_code == 201
    assert counted(store, "d") == 3


@pytest.mark.parametrize("key", ["", "x" * 256, "tab\there", "é"])
def test_a_malformed_idempotency_key_is_a_400(
    app: Flask, store: PostgresEventStore, secret: str, key: str
) -> None:
    response = post(app, secret, "/v1/counters/e", key, {})
    assert response.status_code == 400
    assert counted(store, "e") == 0


def test_concurrent_identical_requests_apply_once_and_answer_alike(
    app: Flask, store: PostgresEventStore, secret: str
) -> None:
    barrier = threading.Barrier(THREADS)
    responses: list[tuple[int, bytes]] = []
    lock = threading.Lock()

    def send() -> None:
        barrier.wait()
        response = post(app, secret, "/v1/counters/race", "race-1", {"note": "x"})
        with lock:
            responses.append((response.status_code, response.get_data()))

    threads = [threading.Thread(target=send) for _ in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert counted(store, "race") == 1
    assert len(responses) == THREADS
    assert {status for status, _ in responses} == {201}
    assert len({body for _, body in responses}) == 1


def test_concurrent_requests_with_different_keys_all_apply(
    app: Flask, store: PostgresEventStore, secret: str
) -> None:
    barrier = threading.Barrier(THREADS)

    def send(n: int) -> None:
        barrier.wait()
        assert post(app, secret, "/v1/counters/many", f"many-{n}", {}).status_code == 201

    threads = [threading.Thread(target=send, args=(n,)) for n in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert counted(store, "many") == THREADS


def test_create_app_opens_its_own_pool_as_the_application_role(fresh_database: str) -> None:
    app = create_app(Settings(database_url=fresh_database))
    shoebox = app.extensions["shoebox"]
    try:
        secret = create_key(shoebox.store, "fe", Role.FRONTEND, OPERATOR).secret
        response = app.test_client().get("/v1/ping", headers={"Authorization": f"Bearer {secret}"})
        assert response.status_code == 200
        assert response.get_json() == {"status": "ok"}
        assert shoebox.pool is not None
        with shoebox.pool.connection() as conn:
            row = conn.execute("SELECT current_user").fetchone()
        assert row == ("shoebox_app",)
    finally:
        shoebox.close()


def own_pool(app: Flask) -> tuple[Container, Pool]:
    """The app's container and the pool create_app opened for it."""
    wiring = app.extensions[EXTENSION]
    assert isinstance(wiring, Container)
    assert wiring.pool is not None
    return wiring, wiring.pool


def test_a_disposed_apps_pool_is_closed(fresh_database: str) -> None:
    wiring, pool = own_pool(create_app(Settings(database_url=fresh_database)))
    assert not pool.closed
    wiring.close()
    assert pool.closed


def test_create_app_leaves_nothing_to_interpreter_exit(
    fresh_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A pool closed only at exit outlives every test and gunicorn worker that built an app.
    registered: list[object] = []
    monkeypatch.setattr(atexit, "register", lambda f, *a, **k: registered.append(f))
    wiring, _ = own_pool(create_app(Settings(database_url=fresh_database)))
    try:
        assert registered == []
    finally:
        wiring.close()


def test_a_gunicorn_worker_closes_its_apps_pool_as_it_exits(fresh_database: str) -> None:
    app = create_app(Settings(database_url=fresh_database))
    wiring, pool = own_pool(app)
    try:
        server = ShoeboxServer(lambda: app, gunicorn_options("127.0.0.1:0", 1, 1))
        worker_exit = server.cfg.worker_exit
        # The master calls the hook too, for a worker object that never loaded an app.
        worker_exit(server, SimpleNamespace())
        assert not pool.closed
        worker_exit(server, SimpleNamespace(wsgi=app))
        assert pool.closed
    finally:
        wiring.close()
