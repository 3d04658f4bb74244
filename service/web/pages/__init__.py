"""The pages: /play, the reference table page (demo mode only), and /dashboard, the ops view.

They are a small Flask app of their own beside the API, so that none of the API's hooks
(Bearer keys, JSON-only bodies, idempotency) apply to HTML and forms, and the OpenAPI document
stays the API's alone. A dispatcher in front of the API sends the pages' paths here; the pages
call the API through `ApiGateway`, inside the process, with a key only the server holds.

No build step: Jinja templates, plain ES modules and SVG, served from this package.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from functools import partial
from typing import Any, Final

from flask import Flask, Response, g, request
from werkzeug.exceptions import HTTPException

from events.sequencer import unsequenced_backlog
from events.store import Clock
from service.runtime.demo import demo_keys_by_role
from service.runtime.settings import Settings
from service.runtime.web_sessions import (
    InMemorySessionStore,
    PostgresSessionStore,
    SessionStore,
)
from service.web.api import EXTENSION, end_deadline, start_deadline
from service.web.pages import dashboard, play
from service.web.pages.context import PAGES_EXTENSION, PagesContext
from service.web.pages.gateway import ApiGateway, WsgiApp
from service.web.problems import Problem, http_problem

PAGE_PREFIXES: Final = ("/play", "/dashboard", "/pages/")
STATIC_URL_PATH: Final = "/pages/static"
# No inline script and nothing from elsewhere: a chat message that slipped through escaping
# still could not run.
CONTENT_SECURITY_POLICY: Final = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:;"
    " connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
)


class PagesDispatcher:
    """Sends the pages' paths to the pages app and everything else to the API."""

    def __init__(self, pages_app: WsgiApp, api: WsgiApp) -> None:
        self.pages_app = pages_app
        self.api = api

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        """Dispatch one request by its path."""
        path = environ.get("PATH_INFO", "")
        if path.startswith(PAGE_PREFIXES):
            return self.pages_app(environ, start_response)  # type: ignore[no-any-return]
        return self.api(environ, start_response)  # type: ignore[no-any-return]


def mount_pages(app: Flask, settings: Settings, clock: Clock) -> None:
    """Serve the pages in front of `app`: /dashboard always, /play in demo mode only."""
    wiring = app.extensions[EXTENSION]
    sessions: SessionStore = (
        PostgresSessionStore(wiring.pool, clock)
        if wiring.pool is not None
        else InMemorySessionStore(clock)
    )
    site = Flask(__name__, static_folder="static", static_url_path=STATIC_URL_PATH)
    site.extensions[PAGES_EXTENSION] = PagesContext(
        settings=settings,
        api=ApiGateway(app.wsgi_app),
        sessions=sessions,
        keys=wiring.keys,
        demo_keys=demo_keys_by_role(settings.data_dir) if settings.demo else {},
        redis_url=settings.redis_url,
        clock=clock,
        unsequenced=None if wiring.pool is None else partial(unsequenced_backlog, wiring.pool),
    )
    site.config["MAX_CONTENT_LENGTH"] = app.config["MAX_CONTENT_LENGTH"]
    site.register_blueprint(dashboard.blp)
    if settings.demo:
        site.register_blueprint(play.blp)
    # The pages' own reads (their sessions) keep to a request's deadline as the API's do; an
    # API call made for a page sets its own within it, so the earlier of the two holds.
    site.before_request(start_deadline)
    site.teardown_request(end_deadline)
    site.before_request(_assign_request_id)
    site.after_request(_protect)
    site.register_error_handler(Problem, _problem)
    site.register_error_handler(HTTPException, _http_error)
    app.wsgi_app = PagesDispatcher(site.wsgi_app, app.wsgi_app)  # type: ignore[method-assign]


def _assign_request_id() -> None:
    g.request_id = uuid.uuid4().hex


def _protect(response: Response) -> Response:
    response.headers.setdefault("Content-Security-Policy", CONTENT_SECURITY_POLICY)
    response.headers.setdefault("X-Content-Type-Options", "nosniff")
    response.headers.setdefault("Referrer-Policy", "same-origin")
    if request.path.startswith(("/play/api", "/dashboard/api")) or response.mimetype == "text/html":
        response.headers["Cache-Control"] = "no-store"
    return response


def _problem(problem: Problem) -> Response:
    return problem.response()


def _http_error(error: HTTPException) -> Response:
    return http_problem(error).response()
