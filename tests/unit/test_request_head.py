"""The request head's limits: an over-long line is a 414 problem, over-large headers a 431."""

import pytest

from service.application.keys import Role
from service.web.app import MAX_HEADER_FIELD_BYTES, MAX_HEADER_FIELDS, MAX_REQUEST_LINE_BYTES
from tests.api_harness import Api, head_and_balances

DEPOSIT = {"amount_pence": 1_000, "reason": "top up"}
# "POST " + path + " HTTP/1.1": the request line around a query of padding.
PATH = "/v1/wallets/alice/deposits"
LINE_OVERHEAD = len("POST ") + len(PATH) + len("?pad=") + len(" HTTP/1.1")


@pytest.fixture
def api() -> Api:
    api = Api()
    api.fund("alice")
    return api


def deposit(api: Api, query: str = "", headers: dict[str, str] | None = None) -> tuple[int, str]:
    before = head_and_balances(api.store)
    response = api.call("POST", PATH + query, DEPOSIT, role=Role.OPS, headers=headers)
    if response.status_code >= 400:
        assert response.mimetype == "application/problem+json"
        assert response.get_json()["status"] == response.status_code
        assert head_and_balances(api.store) == before
    return response.status_code, response.get_data(as_text=True)


def test_a_request_line_over_the_limit_is_a_414_problem(api: Api) -> None:
    pad = "x" * (MAX_REQUEST_LINE_BYTES - LINE_OVERHEAD + 1)
    status, body = deposit(api, f"?pad={pad}")
    assert status == 414, body
    assert "request-line-too-long" in body


def test_a_request_line_at_the_limit_is_served(api: Api) -> None:
    pad = "x" * (MAX_REQUEST_LINE_BYTES - LINE_OVERHEAD)
    assert deposit(api, f"?pad={pad}")[0] == 201


def test_a_header_field_over_the_limit_is_a_431_problem(api: Api) -> None:
    # "X-Pad: " + value + CRLF
    value = "x" * (MAX_HEADER_FIELD_BYTES - len("X-Pad: \r\n") + 1)
    status, body = deposit(api, headers={"X-Pad": value})
    assert status == 431, body
    assert "headers-too-large" in body
    assert deposit(api, headers={"X-Pad": value[:-1]})[0] == 201


def test_more_header_fields_than_the_limit_is_a_431_problem(api: Api) -> None:
    many = {f"X-Pad-{n}": "x" for n in range(MAX_HEADER_FIELDS)}
    status, body = deposit(api, headers=many)
    assert status == 431, body
    assert "headers-too-large" in body
