"""gunicorn's workers, answering what gunicorn refuses itself as problems, not HTML.

gunicorn reads the request head before the app sees it, and answers what it cannot read (a
request line or headers over its limits, a malformed line, a bad chunk) with an HTML page of
its own from `Worker.handle_error`. Every answer of the API is `application/problem+json`,
so `shoebox serve` runs these subclasses, whose `handle_error` writes a problem document with
the same status gunicorn would have given.

gunicorn's limits sit above the app's (service/cli/serve.py), so a head the app could have
refused is refused by the app, and these answers are the backstop for heads too large to read.
"""

from __future__ import annotations

import http
import ssl
import uuid
from dataclasses import dataclass
from typing import Any, Final

from gunicorn import util
from gunicorn.http.errors import (
    ConfigurationProblem,
    ExpectationFailed,
    ForbiddenProxyRequest,
    InvalidHeader,
    InvalidHeaderName,
    InvalidResponseHeader,
    InvalidResponseHeaderName,
    LimitRequestHeaders,
    LimitRequestLine,
    ParseException,
    UnsupportedTransferCoding,
)
from gunicorn.workers.base import Worker
from gunicorn.workers.ggevent import GeventWorker
from gunicorn.workers.gthread import ThreadWorker
from gunicorn.workers.sync import SyncWorker

from service.web.api import REQUEST_ID_HEADER
from service.web.app import MAX_HEADER_FIELD_BYTES, MAX_HEADER_FIELDS, MAX_REQUEST_LINE_BYTES
from service.web.problems import PROBLEM_MIMETYPE, Problem, compact_json

# The longest part of gunicorn's own message a detail repeats: it quotes what the client sent.
_QUOTED_CHARACTERS: Final = 200


@dataclass(frozen=True, slots=True)
class Refusal:
    """How one of gunicorn's refusals is answered: the problem, and whether it is the client's."""

    problem: Problem
    client_error: bool


def refusal(error: BaseException) -> Refusal:
    """The problem gunicorn's `error` is answered with; the statuses are gunicorn's own."""
    said = str(error)[:_QUOTED_CHARACTERS]
    # A header the app tried to send, or gunicorn's own configuration: the server's fault.
    if isinstance(error, InvalidResponseHeader | InvalidResponseHeaderName | ConfigurationProblem):
        return Refusal(_internal(), client_error=False)
    if isinstance(error, LimitRequestLine):
        detail = f"The request line holds at most {MAX_REQUEST_LINE_BYTES} bytes; this is longer."
        return Refusal(Problem(414, "request-line-too-long", detail), client_error=True)
    if isinstance(error, LimitRequestHeaders):
        detail = (
            f"A request holds at most {MAX_HEADER_FIELDS} header fields of at most"
            f" {MAX_HEADER_FIELD_BYTES} bytes each; this one holds more ({said})."
        )
        return Refusal(Problem(431, "headers-too-large", detail), client_error=True)
    if isinstance(error, InvalidHeader | InvalidHeaderName):
        return Refusal(Problem(400, "invalid-header", f"{said}."), client_error=True)
    if isinstance(error, UnsupportedTransferCoding):
        detail = f"{said}; send the body with Content-Length or chunked."
        return Refusal(Problem(501, "unsupported-transfer-coding", detail), client_error=True)
    if isinstance(error, ExpectationFailed):
        detail = f"{said}; the only expectation met is 100-continue."
        return Refusal(Problem(417, "expectation-failed", detail), client_error=True)
    if isinstance(error, ForbiddenProxyRequest | ssl.SSLError):
        detail = "This server does not accept requests over this connection."
        return Refusal(Problem(403, "connection-refused", detail), client_error=True)
    if isinstance(error, ParseException):
        detail = f"The request could not be read as HTTP/1.1: {said}."
        return Refusal(Problem(400, "bad-request", detail), client_error=True)
    return Refusal(_internal(), client_error=False)


def _internal() -> Problem:
    return Problem(
        500,
        "internal-error",
        "The server failed to answer this request. The failure is logged with its request id.",
    )


def problem_response(problem: Problem, request_id: str) -> bytes:
    """The problem as a whole HTTP/1.1 response that closes the connection."""
    document = {**problem.document(), "request_id": request_id}
    body = compact_json(document).encode()
    head = [
        f"HTTP/1.1 {problem.status} {http.HTTPStatus(problem.status).phrase}",
        "Connection: close",
        f"Content-Type: {PROBLEM_MIMETYPE}",
        f"Content-Length: {len(body)}",
        f"{REQUEST_ID_HEADER}: {request_id}",
        *(f"{name}: {value}" for name, value in problem.headers.items()),
    ]
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body


class ProblemErrors(Worker):  # type: ignore[misc]  # gunicorn is untyped
    """A worker whose own error answers are problem documents (put it first among the bases)."""

    def handle_error(self, req: Any, client: Any, addr: Any, exc: BaseException) -> None:
        """Log `exc` as gunicorn does, and answer with its problem instead of an HTML page."""
        answer = refusal(exc)
        request_id = uuid.uuid4().hex
        # The fields of the app's own request lines, so that a refusal is found the same way.
        fields = {"request_id": request_id, "status": answer.problem.status}
        if answer.client_error:
            source = (addr or ("", -1))[0]
            self.log.warning("Invalid request from ip=%s: %s", source, exc, extra=fields)
        else:
            self.log.exception(
                "Error handling request %s %s",
                getattr(req, "method", "-"),
                getattr(req, "uri", "(no URI read)"),
                extra=fields,
            )
        try:
            util.write_nonblock(client, problem_response(answer.problem, request_id))
        except Exception:
            self.log.debug("Failed to send error message.")


class ProblemThreadWorker(ProblemErrors, ThreadWorker):  # type: ignore[misc]
    """gunicorn's gthread worker, answering its refusals as problems."""


class ProblemSyncWorker(ProblemErrors, SyncWorker):  # type: ignore[misc]
    """gunicorn's sync worker, answering its refusals as problems."""


class ProblemGeventWorker(ProblemErrors, GeventWorker):  # type: ignore[misc]
    """gunicorn's gevent worker, answering its refusals as problems."""


WORKER_CLASS_PATHS: Final = {
    "gevent": f"{__name__}.ProblemGeventWorker",
    "gthread": f"{__name__}.ProblemThreadWorker",
    "sync": f"{__name__}.ProblemSyncWorker",
}
"""gunicorn's `worker_class` for each name `shoebox serve --worker-class` takes."""
