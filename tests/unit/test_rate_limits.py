"""Rate limits per API key: a flooding key gets 429 problems while other keys are served."""

import pytest

from service.application.keys import Role
from service.runtime.settings import (
    DEFAULT_RATE_LIMIT_BURST,
    DEFAULT_RATE_LIMIT_PER_SECOND,
    Settings,
    SettingsError,
)
from service.web import rate_limits
from service.web.problems import PROBLEM_MIMETYPE
from tests.api_harness import Api


class Monotonic:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def limited_api(per_second: float, burst: int) -> tuple[Api, Monotonic]:
    api = Api()
    monotonic = Monotonic()
    api.app.extensions[rate_limits.EXTENSION] = rate_limits.RateLimiter(
        per_second, burst, monotonic
    )
    return api, monotonic


def test_a_flooding_key_gets_429_with_retry_after_while_other_keys_are_served() -> None:
    api, monotonic = limited_api(per_second=2, burst=5)
    statuses = [api.call("GET", "/v1/ping").status_code for _ in range(5)]
    assert statuses == [200] * 5

    flooded = api.call("GET", "/v1/ping")
    assert flooded.status_code == 429
    assert flooded.mimetype == PROBLEM_MIMETYPE
    assert flooded.headers["Retry-After"] == "1"
    document = flooded.get_json(force=True)
    assert document["status"] == 429
    assert document["type"].endswith("/too-many-requests")
    assert document["request_id"] == flooded.headers["X-Request-Id"]

    # The other roles' keys have buckets of their own.
    for role in (Role.OPS, Role.REGULATOR):
        assert api.call("GET", "/v1/ping", role=role).status_code == 200

    monotonic.now += 0.5  # one token at 2 a second
    assert api.call("GET", "/v1/ping").status_code == 200
    assert api.call("GET", "/v1/ping").status_code == 429


def test_retry_after_rounds_the_wait_up_to_whole_seconds() -> None:
    api, _ = limited_api(per_second=0.25, burst=1)
    assert api.call("GET", "/v1/ping").status_code == 200
    assert api.call("GET", "/v1/ping").headers["Retry-After"] == "4"


def test_a_refused_write_appends_nothing() -> None:
    api, _ = limited_api(per_second=1, burst=1)
    api.fund("alice", 1_000)  # the ops key's one token
    head = api.store.head()
    body = {"amount_pence": 500, "reason": "flood"}
    response = api.call("POST", "/v1/wallets/alice/deposits", body, role=Role.OPS)
    assert response.status_code == 429
    assert api.store.head() == head


def test_unauthenticated_requests_are_401_not_counted_against_any_key() -> None:
    api, _ = limited_api(per_second=1, burst=1)
    for _ in range(3):
        assert api.client.get("/v1/ping").status_code == 401
    assert api.call("GET", "/v1/ping").status_code == 200


def test_a_rate_of_zero_turns_limiting_off() -> None:
    api, _ = limited_api(per_second=0, burst=1)
    assert {api.call("GET", "/v1/ping").status_code for _ in range(20)} == {200}


def test_the_limits_are_read_from_the_environment() -> None:
    default = Settings.from_env({})
    assert default.rate_limit_per_second == DEFAULT_RATE_LIMIT_PER_SECOND
    assert default.rate_limit_burst == DEFAULT_RATE_LIMIT_BURST
    chosen = Settings.from_env(
        {"SHOEBOX_RATE_LIMIT_PER_SECOND": "12.5", "SHOEBOX_RATE_LIMIT_BURST": "30"}
    )
    assert (chosen.rate_limit_per_second, chosen.rate_limit_burst) == (12.5, 30)
    assert Settings.from_env({"SHOEBOX_RATE_LIMIT_PER_SECOND": "0"}).rate_limit_per_second == 0


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("SHOEBOX_RATE_LIMIT_PER_SECOND", "-1"),
        ("SHOEBOX_RATE_LIMIT_PER_SECOND", "fast"),
        ("SHOEBOX_RATE_LIMIT_PER_SECOND", "nan"),
        ("SHOEBOX_RATE_LIMIT_PER_SECOND", "inf"),
        ("SHOEBOX_RATE_LIMIT_BURST", "0"),
    ],
)
def test_a_limit_that_is_not_a_number_in_range_is_refused(name: str, value: str) -> None:
    with pytest.raises(SettingsError, match=name):
        Settings.from_env({name: value})
