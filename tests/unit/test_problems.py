"""Every error a client can cause comes out as one RFC 9457 problem shape, with the right status."""

import inspect
import logging
from datetime import UTC, datetime
from typing import Any

import marshmallow as ma
import pytest
from flask import Flask
from flask.testing import FlaskClient
from flask.views import MethodView

import domain.chat
import domain.errors
import domain.player_limits
import domain.round_errors
import domain.wallet
from domain.errors import BetBelowMinimum, DomainError
from domain.round_errors import BettingWindowClosed, SeatTaken, TableNotFound
from events.memory import InMemoryEventStore
from events.store import (
    AppendTimedOut,
    ConcurrencyConflict,
    EventMetadata,
    IdempotencyKeyReused,
    LogBusy,
)
from service.application import errors as service_errors
from service.application.keys import Role, create_key
from service.web.api import Blueprint, abort
from service.web.app import MAX_BODY_BYTES, create_app
from service.web.auth import roles
from service.web.problems import (
    DOMAIN_RULE_STATUS,
    PROBLEM_MIMETYPE,
    PROBLEM_TYPE_BASE,
    domain_problem,
    domain_status,
    log_busy_reason,
)
from tests.api_harness import Api

NOW = datetime(2025, 3, 7, 12, 0, tzinfo=UTC)
SECRET_INTERNALS = "password=hunter2 at 10.0.0.7"

blp = Blueprint("probe", __name__, url_prefix="/probe")


class StakeSchema(ma.Schema):
    """A strict request body, as resources write them."""

    spot = ma.fields.String(required=True, validate=ma.validate.OneOf(["player", "banker", "tie"]))
    stake = ma.fields.Integer(required=True, strict=True, validate=ma.validate.Range(min=1))


RAISES: dict[str, Exception] = {
    "bet-below-minimum": BetBelowMinimum("a £0 bet is below the table minimum of £1"),
    "window-closed": BettingWindowClosed("the betting window of round R1 closed at 12:00:15"),
    "seat-taken": SeatTaken("seat 3 is taken"),
    "domain-table-missing": TableNotFound("no table 'T9'"),
    "service-table-missing": service_errors.TableNotFound("T9"),
    "retries-exhausted": service_errors.Conflict(["table:T1"], 8),
    "stale-append": ConcurrencyConflict("table:T1", 4, 5),
    "key-reused": IdempotencyKeyReused("k1"),
    "bug": RuntimeError(SECRET_INTERNALS),
}


@blp.route("/stakes")
class Stakes(MethodView):
    """A view with a validated body."""

    @roles(Role.FRONTEND)
    @blp.arguments(StakeSchema)
    @blp.response(201, StakeSchema)
    def post(self, stake: dict[str, Any]) -> dict[str, Any]:
        """Echo a valid stake."""
        return stake


@blp.route("/raise/<kind>")
class Raise(MethodView):
    """A view that fails in the way its path names."""

    @roles(Role.FRONTEND)
    def get(self, kind: str) -> dict[str, str]:
        """Raise the error named by `kind`."""
        if kind == "abort":
            abort(404, message="No wallet for player P7.")
        raise RAISES[kind]


@pytest.fixture
def app() -> Flask:
    app = create_app(store=InMemoryEventStore(lambda: NOW), clock=lambda: NOW)
    api = app.extensions["flask-smorest"]["apis"][""]["ext_obj"]
    api.register_blueprint(blp, url_prefix="/v1/probe")
    return app


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    store = app.extensions["shoebox"].store
    issued = create_key(store, "front end", Role.FRONTEND, EventMetadata("test", "cli"))
    client = app.test_client()
    client.environ_base["HTTP_AUTHORIZATION"] = f"Bearer {issued.secret}"
    return client


def assert_problem(response: Any, status: int, slug: str | None = None) -> dict[str, Any]:
    assert response.status_code == status, response.get_data(as_text=True)
    assert response.mimetype == PROBLEM_MIMETYPE
    document: dict[str, Any] = response.get_json(force=True)
    assert {"type", "title", "status", "detail", "request_id"} <= set(document)
    assert document["status"] == status
    assert document["request_id"] == response.headers["X-Request-Id"]
    if slug is not None:
        assert document["type"] == PROBLEM_TYPE_BASE + slug
    return document


def test_a_valid_body_passes_through_the_platform(client: FlaskClient) -> None:
    response = client.post("/v1/probe/stakes", json={"spot": "tie", "stake": 5})
    assert response.status_code == 201
    assert response.get_json() == {"spot": "tie", "stake": 5}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"spot": "banker", "stake": -5}, "stake"),
        ({"spot": "banker", "stake": 2.5}, "stake"),
        ({"spot": "banker", "stake": "10"}, "stake"),
        ({"spot": "banker", "stake": 10**30 + 0.5}, "stake"),
        ({"spot": "dragon", "stake": 10}, "spot"),
        ({"spot": "banker"}, "stake"),
        ({"spot": "banker", "stake": 10, "colour": "red"}, "colour"),
    ],
)
def test_a_body_that_fails_its_schema_is_a_422_naming_the_field(
    client: FlaskClient, body: dict[str, Any], field: str
) -> None:
    document = assert_problem(client.post("/v1/probe/stakes", json=body), 422, "validation-failed")
    assert [error["field"] for error in document["errors"]] == [field]
    assert all(error["message"] and error["location"] == "json" for error in document["errors"])
    assert field in document["detail"]


def test_a_body_that_is_not_an_object_is_a_422_about_the_whole_body(client: FlaskClient) -> None:
    document = assert_problem(client.post("/v1/probe/stakes", json=[1, 2]), 422)
    assert document["errors"][0]["field"] == "$"


def test_malformed_json_is_a_400(client: FlaskClient) -> None:
    response = client.post(
        "/v1/probe/stakes", data=b'{"spot": "banker", "stake": 1', content_type="application/json"
    )
    document = assert_problem(response, 400, "malformed-json")
    assert "errors" not in document


def test_a_body_that_is_not_json_is_a_415(client: FlaskClient) -> None:
    response = client.post("/v1/probe/stakes", data="spot=banker&stake=5")
    assert_problem(response, 415, "unsupported-media-type")


def test_a_body_over_the_limit_is_a_413(client: FlaskClient) -> None:
    body = {"spot": "banker", "stake": 5, "padding": "x" * MAX_BODY_BYTES}
    assert_problem(client.post("/v1/probe/stakes", json=body), 413, "body-too-large")


def test_an_unknown_route_is_a_404_and_a_wrong_method_a_405(client: FlaskClient) -> None:
    assert_problem(client.get("/v1/no-such-thing"), 404, "not-found")
    assert_problem(client.delete("/v1/probe/stakes"), 405, "method-not-allowed")


def test_a_refused_amount_rule_is_a_422_whose_detail_names_the_rule(client: FlaskClient) -> None:
    document = assert_problem(client.get("/v1/probe/raise/bet-below-minimum"), 422)
    assert document["rule"] == "bet.below_table_minimum"
    assert document["type"] == PROBLEM_TYPE_BASE + "rules/bet.below_table_minimum"
    assert "bet.below_table_minimum" in document["detail"]
    assert "below the table minimum of £1" in document["detail"]
    assert document["title"] == "Every bet is at least the table minimum."


@pytest.mark.parametrize(
    ("kind", "rule"),
    [("window-closed", "round.betting_window_closed"), ("seat-taken", "seat.taken")],
)
def test_a_refused_state_rule_is_a_409_naming_the_rule(
    client: FlaskClient, kind: str, rule: str
) -> None:
    document = assert_problem(client.get(f"/v1/probe/raise/{kind}"), 409)
    assert document["rule"] == rule
    assert rule in document["detail"]


@pytest.mark.parametrize("message", ["seat 3 is taken", "seat 3 is taken (rule seat.taken)"])
def test_a_refusal_names_its_rule_once_whether_or_not_its_message_did(message: str) -> None:
    problem = domain_problem(SeatTaken(message))

    assert problem.detail == "seat 3 is taken (rule seat.taken)"


def test_a_refusal_from_the_game_names_its_rule_once() -> None:
    api = Api()
    api.create_table("T1")
    api.fund("alice")
    api.fund("bob")
    api.sit("T1", "alice", 1)

    _, document = api.refused("POST", "/v1/tables/T1/seats", {"player_id": "bob", "seat": 1})

    assert document["rule"] == "seat.taken"
    assert document["detail"].count("(rule seat.taken)") == 1
    assert "rule" not in document["detail"].removesuffix("(rule seat.taken)")


@pytest.mark.parametrize("kind", ["domain-table-missing", "service-table-missing"])
def test_an_unknown_table_is_a_404(client: FlaskClient, kind: str) -> None:
    document = assert_problem(client.get(f"/v1/probe/raise/{kind}"), 404)
    assert "T9" in document["detail"]


@pytest.mark.parametrize("kind", ["retries-exhausted", "stale-append"])
def test_writes_that_keep_losing_races_are_a_409(client: FlaskClient, kind: str) -> None:
    assert_problem(client.get(f"/v1/probe/raise/{kind}"), 409, "concurrent-update")


def test_a_reused_idempotency_key_is_a_422(client: FlaskClient) -> None:
    assert_problem(client.get("/v1/probe/raise/key-reused"), 422, "idempotency-key-reused")


def test_flask_smorest_abort_comes_out_in_the_same_shape(client: FlaskClient) -> None:
    document = assert_problem(client.get("/v1/probe/raise/abort"), 404, "not-found")
    assert document["detail"] == "No wallet for player P7."


def test_an_unexpected_error_is_a_500_that_leaks_nothing_and_is_logged_with_its_request_id(
    client: FlaskClient, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR, logger="service.web.problems"):
        response = client.get("/v1/probe/raise/bug", headers={"X-Request-Id": "req-42"})
    document = assert_problem(response, 500, "internal-error")
    body = response.get_data(as_text=True)
    assert SECRET_INTERNALS not in body
    assert "RuntimeError" not in body
    assert "Traceback" not in body
    assert document["request_id"] == "req-42"
    (record,) = caplog.records
    assert "req-42" in record.getMessage()
    assert record.exc_info is not None
    assert record.exc_info[1] is RAISES["bug"]


def test_a_request_id_is_echoed_when_sensible_and_made_up_otherwise(client: FlaskClient) -> None:
    assert client.get("/v1/ping", headers={"X-Request-Id": "abc-1"}).headers["X-Request-Id"] == (
        "abc-1"
    )
    made_up = client.get("/v1/ping", headers={"X-Request-Id": "two words"}).headers["X-Request-Id"]
    assert made_up != "two words"
    assert len(made_up) == 32


def _domain_error_classes() -> list[type[DomainError]]:
    modules = [domain.errors, domain.round_errors, domain.wallet, domain.player_limits, domain.chat]
    return [
        cls
        for module in modules
        for _, cls in inspect.getmembers(module, inspect.isclass)
        if issubclass(cls, DomainError)
    ]


@pytest.mark.parametrize("error_class", _domain_error_classes(), ids=lambda c: c.rule)
def test_every_game_rule_maps_to_404_409_or_422(error_class: type[DomainError]) -> None:
    assert domain_status(error_class.rule) in {404, 409, 422}


def test_every_game_rule_family_in_the_domain_has_an_explicit_status() -> None:
    families = {cls.rule.partition(".")[0] for cls in _domain_error_classes()}
    assert families - {"domain"} <= set(DOMAIN_RULE_STATUS)


@pytest.mark.parametrize(
    ("rule", "status"),
    [
        ("bet.above_player_limit", 422),
        ("bet.not_whole_pounds", 422),
        ("table.invalid_settings", 422),
        ("seat.out_of_range", 422),
        ("round.already_pressed_deal", 409),
        ("round.betting_window_closed", 409),
        ("seat.taken", 409),
        ("wallet.insufficient_funds", 409),
        ("player_limit.changed_this_week", 409),
        ("chat.player_muted", 409),
        ("chat.message_length", 422),
        ("table.not_found", 404),
        ("some.rule_from_the_future", 422),
    ],
)
def test_amounts_and_limits_are_422_and_phases_and_seats_are_409(rule: str, status: int) -> None:
    assert domain_status(rule) == status


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (LogBusy(2.5), "sequencer-behind"),
        (AppendTimedOut("its streams' locks"), "stream-lock"),
        (AppendTimedOut("the log within the request's time", by_deadline=True), "request-deadline"),
    ],
)
def test_a_log_busy_refusal_is_counted_under_why_it_happened(
    error: AppendTimedOut | LogBusy, reason: str
) -> None:
    assert log_busy_reason(error) == reason
