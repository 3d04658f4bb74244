"""gunicorn's own refusals map to the statuses gunicorn gives them, as problem documents."""

import json

import pytest
from gunicorn import util
from gunicorn.http.errors import (
    ConfigurationProblem,
    ExpectationFailed,
    ForbiddenProxyRequest,
    InvalidChunkSize,
    InvalidHeaderName,
    InvalidHTTPVersion,
    InvalidRequestLine,
    InvalidResponseHeader,
    LimitRequestHeaders,
    LimitRequestLine,
    UnsupportedTransferCoding,
)

from service.cli.serve import WORKER_CLASSES
from service.cli.workers import WORKER_CLASS_PATHS, ProblemErrors, problem_response, refusal


@pytest.mark.parametrize(
    ("error", "status", "client_error"),
    [
        (LimitRequestLine(10_000, 8190), 414, True),
        (LimitRequestHeaders("limit request headers fields"), 431, True),
        (InvalidRequestLine("GARBAGE"), 400, True),
        (InvalidHTTPVersion("HTTP/7.1"), 400, True),
        (InvalidHeaderName("Bad Name"), 400, True),
        (InvalidChunkSize("zz"), 400, True),
        (UnsupportedTransferCoding("gzip"), 501, True),
        (ExpectationFailed("200-ok"), 417, True),
        (ForbiddenProxyRequest("10.0.0.1"), 403, True),
        (InvalidResponseHeader("X-Bad\n"), 500, False),
        (ConfigurationProblem("bad"), 500, False),
        (RuntimeError("a bug"), 500, False),
    ],
)
def test_each_refusal_keeps_gunicorns_status(
    error: BaseException, status: int, client_error: bool
) -> None:
    answer = refusal(error)
    assert (answer.problem.status, answer.client_error) == (status, client_error)


def test_a_refusal_is_a_whole_problem_response_that_closes_the_connection() -> None:
    raw = problem_response(refusal(LimitRequestLine(10_000, 8190)).problem, "r1")
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    assert lines[0] == "HTTP/1.1 414 Request-URI Too Long"
    assert "Content-Type: application/problem+json" in lines
    assert "Connection: close" in lines
    assert f"Content-Length: {len(body)}" in lines
    document = json.loads(body)
    assert document["status"] == 414
    assert document["request_id"] == "r1"
    assert document["type"] == "https://shoebox.example/problems/request-line-too-long"


def test_every_worker_class_serve_offers_answers_in_problems() -> None:
    assert set(WORKER_CLASS_PATHS) == set(WORKER_CLASSES)
    for path in WORKER_CLASS_PATHS.values():
        assert issubclass(util.load_class(path), ProblemErrors)
