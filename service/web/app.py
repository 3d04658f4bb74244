"""create_app: the one place the Flask API is wired. Nothing connects at import time."""

from __future__ import annotations

import inspect
import re
import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import Any, Final
from urllib.parse import quote

from flask import Flask, Response, current_app, g, request
from webargs.core import is_json

from events.postgres import DeadlinePool, Pool, PostgresEventStore, app_conninfo, open_pool
from events.store import Clock, EventStore, utc_now
from service.application.actor import Actor
from service.application.game.tables import WindowScheduler
from service.application.keys import ApiKey
from service.application.read_models.queries import ProjectionService
from service.application.upcasters import upcasters
from service.runtime.container import wire
from service.runtime.read_pools import RoutingPool
from service.runtime.scheduler import RedisWindowScheduler
from service.runtime.sequencing import start_sequencer_role
from service.runtime.settings import Settings, SettingsError
from service.web import consistency, idempotency, operators, rate_limits
from service.web.api import (
    API_PREFIX,
    EXTENSION,
    REQUEST_ID_HEADER,
    ShoeboxApi,
    end_deadline,
    register_blueprints,
    start_deadline,
)
from service.web.auth import authenticate_request, check_roles_declared
from service.web.fields import IdConverter, check_path_ids, id_parameter_schema
from service.web.operations import register_operations
from service.web.pages import mount_pages
from service.web.problems import Problem, register_problem_handlers

API_TITLE: Final = "Shoebox"
API_VERSION: Final = "1.0.0"
OPENAPI_VERSION: Final = "3.1.0"
MAX_BODY_BYTES: Final = 16 * 1024
# The request head's limits, gunicorn's defaults, enforced here rather than by gunicorn so
# that they are answered as problems; `shoebox serve` sets gunicorn's own limits above them.
MAX_REQUEST_LINE_BYTES: Final = 4094
MAX_HEADER_FIELD_BYTES: Final = 8190
MAX_HEADER_FIELDS: Final = 100
DEFAULT_POOL_SIZE: Final = 8
# How long a checkout waits for a database connection before it is a 503, outside a request
# (a request's own deadline, below, is shorter).
POOL_WAIT_SECONDS: Final = 5.0
BEARER_SCHEME: Final = "bearerAuth"
# A caller's request id is echoed in a header and recorded in the log, so it is held to
# printable ASCII without spaces; anything else is replaced by one of ours.
_REQUEST_ID: Final = re.compile(r"[!-~]{1,128}")
_BODY_METHODS: Final = frozenset({"POST", "PUT", "PATCH", "DELETE"})

API_DESCRIPTION: Final = """\
Multi-player Punto Banco (Atlantic City rules) with a provably fair shoe.

Every request needs `Authorization: Bearer <api key>`; keys are made with
`shoebox keys create --role {frontend,ops,regulator} --name NAME`. Each operation lists the
roles it admits in `x-roles`.

Every POST, PUT, PATCH and DELETE accepts an `Idempotency-Key` header (1 to 255 printable
ASCII characters, scoped to the API key): a retry gets the first response, marked
`Idempotent-Replayed: true`, and nothing is applied twice. The same key with a different
request is a 422 problem; a key whose first request is still running, a 409.

Every POST, PUT, PATCH and DELETE answered 2xx carries a `Shoebox-Consistency` token. A GET
that sends it back is answered only once its database node holds that write (and, for a read
model, once the model does), waiting at most 2 s before it reads the primary instead; a token
this server did not write is a 400 problem. Balances are always exact and need none.

Errors are RFC 9457 `application/problem+json` documents with `type`, `title`, `status`,
`detail` and `request_id`; validation errors add `errors` (field, message, location), and a
refused game rule adds `rule`. Send `X-Request-Id` to choose the request id; it is echoed.
A request the server cannot read at all (a request line or headers too large, not HTTP) is
answered with a problem too.

The live feeds are `text/event-stream`. This document is OpenAPI 3.1, which has no
`itemSchema` (3.2): following schemathesis's convention for event streams under 3.1, a feed's
`schema` describes one message (`id`, `event`, and `data`, whose JSON `contentSchema` names).
"""


_SYNCED_MAX: Final = 1024


class _Flask(Flask):
    """Flask, deciding once per function whether it is a coroutine function.

    Flask asks `inspect.iscoroutinefunction` of every hook and view on every request (a dozen
    hooks a bet: 3% of a saturated worker's CPU under py-spy, docs/benchmarks.md issue 23);
    the answer never changes for a function, so it is kept.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._synced: dict[Callable[..., Any], Callable[..., Any]] = {}

    def ensure_sync(self, func: Callable[..., Any]) -> Callable[..., Any]:
        """Flask's, remembered per function (bound methods are equal when their parts are)."""
        try:
            return self._synced[func]
        except KeyError:
            synced = super().ensure_sync(func)
            # A closure (an after_this_request callback) is a new function each request, and
            # keeping it would keep what it captured: only plain functions and methods are kept.
            if getattr(func, "__closure__", None) is None and len(self._synced) < _SYNCED_MAX:
                self._synced[func] = synced
            return synced
        except TypeError:  # an unhashable callable: ask Flask every time
            return super().ensure_sync(func)


def create_app(
    settings: Settings | None = None,
    *,
    store: EventStore | None = None,
    clock: Clock | None = None,
    scheduler: WindowScheduler | None = None,
    pool_size: int = DEFAULT_POOL_SIZE,
    projections: ProjectionService | None = None,
    sequencer: bool = False,
) -> Flask:
    """Build the API over `store`, or over a pool on the settings' database if none is given.

    `scheduler` closes betting windows on time: by default the RQ scheduler when the settings
    name a Redis; with neither, windows are closed lazily by the next request to their table.
    Reads come from the read models: over the app's own pool, or `projections` when a store is
    handed in; with neither (an in-memory store), the read endpoints fold the streams instead.

    With `sequencer` (`shoebox serve`), the process stands for the sequencer's role and its
    appends are answered without waiting for their positions; otherwise the store over the
    app's pool places each append itself before answering (docs/scaling.md).
    """
    settings = settings if settings is not None else Settings.from_env()
    clock = clock if clock is not None else utc_now
    if scheduler is None and settings.redis_url:
        # Connects to nothing yet; a Redis that is down only costs windows their promptness.
        scheduler = RedisWindowScheduler.from_url(settings.redis_url)
    pool: Pool | None = None
    read_pool: Pool | None = None
    if store is None:
        read_pool = _open_read_pool(settings, pool_size)
        pool = _open_pool(settings, pool_size, routing=read_pool is not None)
        store = PostgresEventStore(
            pool, clock, upcasters(), sequencing="background" if sequencer else "inline"
        )
        # Closed with the app by Container.close, not at exit: gunicorn's worker_exit hook
        # calls it (service/cli/serve.py), and a test that builds an app disposes of it.

    app = _Flask(__name__, static_folder=None)
    # Before any rule is added, since each rule takes these when it is bound to the map.
    # A path variable that names no converter is an id too, so no route takes an unchecked
    # string by accident.
    app.url_map.converters["id"] = app.url_map.converters["default"] = IdConverter
    # Werkzeug would answer `//` in a path, which it merges, with an HTML redirect; the API
    # answers in problems only, and an empty segment is no resource's path: a 404.
    app.url_map.merge_slashes = False
    app.config.update(
        MAX_CONTENT_LENGTH=MAX_BODY_BYTES,
        API_TITLE=API_TITLE,
        API_VERSION=API_VERSION,
        OPENAPI_VERSION=OPENAPI_VERSION,
        OPENAPI_URL_PREFIX=API_PREFIX,
        OPENAPI_JSON_PATH="openapi.json",
        API_SPEC_OPTIONS={
            "info": {"description": API_DESCRIPTION},
            "security": [{BEARER_SCHEME: []}],
        },
    )
    if projections is None and pool is not None:
        projections = ProjectionService(pool, clock)
    wiring = wire(settings, store, clock, scheduler, pool, projections, read_pool)
    if sequencer and pool is not None:
        conninfo = pool.conninfo
        role = start_sequencer_role(
            conninfo() if callable(conninfo) else conninfo, settings.redis_url
        )
        wiring = replace(wiring, sequencer=role)
    app.extensions[EXTENSION] = wiring

    api = ShoeboxApi(app)
    api.register_converter(IdConverter, id_parameter_schema)
    api.spec.components.security_scheme(
        BEARER_SCHEME, {"type": "http", "scheme": "bearer", "description": "An API key."}
    )
    register_problem_handlers(app)
    register_blueprints(api)
    register_operations(app)
    check_roles_declared(app)
    rate_limits.install(app, settings.rate_limit_per_second, settings.rate_limit_burst)

    # Before the view, in this order; a hook that raises a Problem ends the request.
    app.before_request(start_deadline)
    app.teardown_request(end_deadline)
    app.before_request(_assign_request_id)
    app.before_request(_check_request_head)
    app.before_request(authenticate_request)
    # Right after the key is known, so that a flood costs no more than a dict lookup.
    app.before_request(rate_limits.limit_request_rate)
    app.before_request(check_path_ids)
    app.before_request(consistency.check_token)
    app.before_request(_check_body)
    app.before_request(idempotency.begin_request)
    app.before_request(_identify_caller)
    app.before_request(operators.qualify_path_player)
    # Last: a read waits for its consistency token only once it is admitted.
    consistency.install(app)
    # After the view, in the reverse of this order: players named for the caller, the
    # response stored for its idempotency key, then labelled.
    app.after_request(_echo_request_id)
    app.after_request(idempotency.finish_request)
    app.after_request(operators.name_players)
    mount_pages(app, settings, clock)
    merge_hooks(app)
    return app


def merge_hooks(app: Flask) -> None:
    """The app's before-request hooks as one hook, and its after-request hooks as another.

    Flask calls each hook through `ensure_sync` and its bookkeeping, a dozen before the view and
    four after it on every request; one function calling them in Flask's own order (before:
    as registered, stopping at the first that answers; after: in reverse) does the same work
    in two calls (docs/benchmarks.md, "the web tier's CPU a request"). Hooks registered later
    (a test's) run after these, as they would have. Each merged hook keeps its parts in `hooks`.
    """
    before = tuple(app.before_request_funcs.get(None, ()))
    after = tuple(reversed(app.after_request_funcs.get(None, ())))
    if any(inspect.iscoroutinefunction(hook) for hook in (*before, *after)):
        return  # Flask would run a coroutine in its own loop; leave them to it

    def before_request() -> Any:
        for hook in before:
            answer = hook()
            if answer is not None:
                return answer
        return None

    def after_request(response: Response) -> Response:
        for hook in after:
            response = hook(response)
        return response

    before_request.hooks = before  # type: ignore[attr-defined]
    after_request.hooks = after  # type: ignore[attr-defined]
    app.before_request_funcs[None] = [before_request]
    app.after_request_funcs[None] = [after_request]


def _open_pool(settings: Settings, pool_size: int, *, routing: bool = False) -> Pool:
    if settings.database_url is None:
        raise SettingsError(
            "create_app needs DATABASE_URL; `shoebox serve` sets it, starting the embedded"
            " PostgreSQL when it is unset"
        )
    conninfo = settings.app_database_url or app_conninfo(settings.database_url, environ={})
    # With a replica, the primary's pool hands a routed GET's checkouts to the replica's.
    return open_pool(
        conninfo,
        max_size=pool_size,
        timeout=POOL_WAIT_SECONDS,
        pool_class=RoutingPool if routing else DeadlinePool,
    )


def _open_read_pool(settings: Settings, pool_size: int) -> Pool | None:
    """The replica's pool (DATABASE_READ_URL), as the application's role; None without one.

    Opened without waiting for a connection: a replica that is down at start only sends the
    reads to the primary (service/runtime/read_pools.py, ReplicaHealth).
    """
    if settings.database_read_url is None:
        return None
    conninfo = settings.app_database_read_url or app_conninfo(
        settings.database_read_url, environ={}
    )
    return open_pool(conninfo, max_size=pool_size, timeout=POOL_WAIT_SECONDS)


def _assign_request_id() -> None:
    offered = request.headers.get(REQUEST_ID_HEADER, "")
    g.request_id = offered if _REQUEST_ID.fullmatch(offered) else uuid.uuid4().hex


def _check_request_head() -> None:
    environ = request.environ
    target = environ.get("RAW_URI") or quote(environ.get("PATH_INFO", "")) + (
        f"?{environ['QUERY_STRING']}" if environ.get("QUERY_STRING") else ""
    )
    # As sent: METHOD SP request-target SP HTTP-version.
    line = len(request.method) + len(target) + len(environ.get("SERVER_PROTOCOL", "")) + 2
    if line > MAX_REQUEST_LINE_BYTES:
        raise Problem(
            414,
            "request-line-too-long",
            f"The request line holds at most {MAX_REQUEST_LINE_BYTES} bytes, not {line}.",
        )
    # Each field as sent, `Name: value` and its CRLF, which is how gunicorn measures one. A
    # field sent twice reaches the app joined, and is measured so.
    fields = [(name, len(name) + len(str(value)) + 4) for name, value in request.headers.items()]
    if len(fields) > MAX_HEADER_FIELDS:
        raise Problem(
            431,
            "headers-too-large",
            f"A request holds at most {MAX_HEADER_FIELDS} header fields, not {len(fields)}.",
        )
    for name, size in fields:
        if size > MAX_HEADER_FIELD_BYTES:
            raise Problem(
                431,
                "headers-too-large",
                f"A header field holds at most {MAX_HEADER_FIELD_BYTES} bytes; {name} has {size}.",
            )


def _check_body() -> None:
    if request.method not in _BODY_METHODS:
        return
    length = request.content_length
    limit = current_app.config["MAX_CONTENT_LENGTH"]
    if length is not None and length > limit:
        raise Problem(413, "body-too-large", f"A request body holds at most {limit} bytes.")
    has_body = bool(length) or "chunked" in request.headers.get("Transfer-Encoding", "")
    if has_body and not is_json(request.mimetype):
        raise Problem(
            415,
            "unsupported-media-type",
            f"Send the body as application/json, not {request.mimetype or 'untyped'}.",
        )


def _identify_caller() -> None:
    api_key = g.get("api_key")
    if isinstance(api_key, ApiKey):
        g.actor = Actor(
            actor_id=api_key.key_id,
            role=api_key.role.value,
            request_id=g.request_id,
            idempotency=g.get("idempotency"),
        )


def _echo_request_id(response: Response) -> Response:
    request_id = g.get("request_id")
    if isinstance(request_id, str):
        response.headers[REQUEST_ID_HEADER] = request_id
    return response
