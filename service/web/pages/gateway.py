"""The pages' way into the API: a /v1 request made inside this process, with a key the
server holds, exactly as a casino's own backend would make it over HTTP.

Forwarding to /v1 rather than calling the use cases keeps the pages a client of the public
API and nothing more (issue 16: "a reference client proves the API is enough"): the same
roles, operators, validation, idempotency and problems apply, and the request is logged and
measured like any other. It costs no socket, and the key never leaves the server process.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from flask import Response, g, request
from werkzeug.datastructures import Headers
from werkzeug.test import EnvironBuilder, run_wsgi_app
from werkzeug.wsgi import ClosingIterator

from service.web.api import REQUEST_ID_HEADER
from service.web.problems import PROBLEM_MIMETYPE

WsgiApp = Any
"""A WSGI callable: the API app's own `wsgi_app`, below the pages' dispatcher."""

# Headers of an API answer that a page's answer passes on; the rest (Content-Length, the
# connection's own) is the page server's to set.
_PASSED_ON = ("Content-Type", "Cache-Control", "X-Accel-Buffering", REQUEST_ID_HEADER)


@dataclass(frozen=True, slots=True)
class ApiAnswer:
    """A complete answer of the API."""

    status: int
    headers: Headers
    body: bytes

    @property
    def ok(self) -> bool:
        """A 2xx answer."""
        return 200 <= self.status < 300

    def json(self) -> Any:
        """The body as JSON (every answer of /v1 but the feed is JSON)."""
        return json.loads(self.body) if self.body else None

    def response(self) -> Response:
        """The answer, passed on to the page as it came (a problem stays a problem)."""
        passed = {name: self.headers[name] for name in _PASSED_ON if name in self.headers}
        answer = Response(self.body, status=self.status, headers=passed)
        answer.headers["Cache-Control"] = "no-store"
        return answer


class ApiGateway:
    """Makes /v1 requests in this process with a key, for a page that must never hold one."""

    def __init__(self, api: WsgiApp) -> None:
        self.api = api

    def _environ(
        self,
        method: str,
        path: str,
        key: str,
        body: Mapping[str, Any] | None,
        query: Mapping[str, str] | None,
        headers: Mapping[str, str] | None,
    ) -> dict[str, Any]:
        sent = {"Authorization": f"Bearer {key}", **(headers or {})}
        request_id = g.get("request_id")
        if isinstance(request_id, str):
            sent[REQUEST_ID_HEADER] = request_id
        builder = EnvironBuilder(
            path=path,
            method=method,
            headers=list(sent.items()),
            query_string=dict(query or {}),
            json=body,
            environ_base={"REMOTE_ADDR": request.remote_addr or "127.0.0.1"},
        )
        try:
            return builder.get_environ()
        finally:
            builder.close()

    def call(
        self,
        method: str,
        path: str,
        key: str,
        *,
        body: Mapping[str, Any] | None = None,
        query: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> ApiAnswer:
        """Make one request and read its whole answer."""
        environ = self._environ(method, path, key, body, query, headers)
        app_iter, status, answer_headers = run_wsgi_app(self.api, environ, buffered=True)
        try:
            content = b"".join(app_iter)
        finally:
            close = getattr(app_iter, "close", None)
            if callable(close):
                close()
        return ApiAnswer(int(status.split(" ", 1)[0]), Headers(answer_headers), content)

    def stream(self, path: str, key: str, *, headers: Mapping[str, str] | None = None) -> Response:
        """Follow a feed and pass it on as it comes: the page's EventSource gets each message
        as the API writes it, and closing the page's connection closes the API's feed."""
        environ = self._environ("GET", path, key, None, None, headers)
        app_iter, status, answer_headers = run_wsgi_app(self.api, environ, buffered=False)
        received = Headers(answer_headers)
        code = int(status.split(" ", 1)[0])
        passed = {name: received[name] for name in _PASSED_ON if name in received}
        if code != 200:
            content = b"".join(app_iter)
            if hasattr(app_iter, "close"):
                app_iter.close()
            passed.setdefault("Content-Type", PROBLEM_MIMETYPE)
            return Response(content, status=code, headers=passed)
        body: Iterable[bytes] = ClosingIterator(app_iter, getattr(app_iter, "close", None))
        return Response(body, status=code, headers=passed, direct_passthrough=True)
