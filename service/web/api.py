"""The REST API's plumbing: a typed Blueprint, blueprint discovery, and the per-request accessors.

A resource is one module of service/web/resources that exports `blp`, a `service.web.api.Blueprint`
carrying `MethodView`s whose methods declare their roles with `service.web.auth.roles`, and
may export `COMPONENTS`, JSON Schemas by name for its documentation to refer to.
`register_blueprints` mounts every such module under /v1 in the order of the module names,
so adding a resource is adding a module; no central list needs editing.

Views reach the wiring through `container()` and the caller through `actor()`.
"""

from __future__ import annotations

import http
import importlib
import json
import pkgutil
import re
from collections.abc import Callable, Sequence
from typing import Any, Final, TypeVar, cast

import flask
import marshmallow as ma

# flask-smorest ships no type information; this module is the one place that touches it
# untyped, and gives the rest of the service typed decorators in return.
from flask import current_app, g
from flask.views import MethodView
from flask_smorest import Api as _Api  # type: ignore[import-untyped]
from flask_smorest import Blueprint as _Blueprint
from flask_smorest.utils import prepare_response  # type: ignore[import-untyped]
from webargs.flaskparser import FlaskParser, abort
from werkzeug.datastructures import MultiDict

from domain.ids import ID_PATTERN
from events import deadlines
from service.application.actor import Actor
from service.application.read_models.queries import ProjectionService
from service.runtime.container import Container
from service.web.problems import PROBLEM_MIMETYPE, Problem, ProblemSchema, http_problem

__all__ = [
    "API_PREFIX",
    "REQUEST_ID_HEADER",
    "Blueprint",
    "ShoeboxApi",
    "StrictJsonParser",
    "abort",
    "actor",
    "container",
    "projections",
    "read_models",
    "register_blueprints",
]

API_PREFIX: Final = "/v1"
REQUEST_ID_HEADER: Final = "X-Request-Id"
ANSWER_BOUND_SECONDS: Final = 3.0
"""Every request is answered within this, whatever PostgreSQL or Redis do (docs/api.md)."""
REQUEST_DEADLINE_SECONDS: Final = 2.5
"""The deadline of a request's waits on PostgreSQL and Redis, all of them together
(events/deadlines.py): what is left of ANSWER_BOUND_SECONDS is for the answer itself, its
problem document, its log line, and a busy worker's other greenlets."""


def start_deadline() -> None:
    """A before-request hook: the request's waits on PostgreSQL and Redis share one deadline."""
    # A context variable, so each request's thread or greenlet has its own; ended at teardown,
    # which runs before a streamed body (the live feed) is sent, so a feed is not cut short.
    g.deadline_token = deadlines.start(REQUEST_DEADLINE_SECONDS)


def end_deadline(error: BaseException | None) -> None:
    """A teardown hook: the deadline `start_deadline` set is over."""
    token = g.pop("deadline_token", None)
    if token is not None:
        deadlines.stop(token)


"""The header that names a request in its answer and its log line; a caller may choose it."""
OPERATOR_PARAMETER: Final = "operator"
OPERATOR_QUERY_PARAMETER: Final[dict[str, Any]] = {
    "in": "query",
    "name": OPERATOR_PARAMETER,
    "required": False,
    "description": (
        "The operator (casino) whose player this names: for ops and regulator keys that see"
        " every operator; without it, the default operator. A frontend key's operator is"
        " implied by the key, and naming another is refused."
    ),
    "schema": {"type": "string", "pattern": ID_PATTERN},
}
RESOURCES: Final = "service.web.resources"
"""The package whose modules are the API's resources, one `blp` each."""
EXTENSION: Final = "shoebox"

ViewFunction = TypeVar("ViewFunction", bound=Callable[..., Any])
Resource = TypeVar("Resource", bound=type[MethodView])
SchemaArgument = type[ma.Schema] | ma.Schema


class StrictJsonParser(FlaskParser):
    """webargs' Flask parser, answering every undecodable body as malformed JSON.

    The standard decoder raises ValueError for integers of more than 4,300 digits and
    RecursionError for deeply nested arrays; both fit in a 16 KiB body and would otherwise
    reach the view's caller as a 500.
    """

    def load_querystring(self, req: flask.Request, schema: ma.Schema) -> Any:
        """The query's arguments, less `operator`: service.web.operators reads that one."""
        args = MultiDict(req.args)
        args.poplist(OPERATOR_PARAMETER)
        return self._makeproxy(args, schema)

    def _raw_load_json(self, req: flask.Request) -> Any:
        try:
            return super()._raw_load_json(req)
        except json.JSONDecodeError:
            raise
        except (ValueError, RecursionError) as error:
            # A non-empty `doc`: webargs reads an empty one as "no body" rather than a bad one.
            raise json.JSONDecodeError(str(error)[:200], "(body)", 0) from error


class Blueprint(_Blueprint):  # type: ignore[misc]
    """flask-smorest's Blueprint with typed decorators, so that views stay checked by mypy.

    Every resource parses its request bodies with the strict parser; unknown fields are
    refused by marshmallow's default, RAISE.
    """

    ARGUMENTS_PARSER = StrictJsonParser()

    def route(
        self,
        rule: str,
        *,
        parameters: Sequence[Any] | None = None,
        tags: Sequence[str] | None = None,
        names_player: bool = False,
        **options: Any,
    ) -> Callable[[Resource], Resource]:
        """Register a MethodView at `rule`, below the blueprint's prefix.

        A rule that names a player documents the `operator` query parameter with it, so that
        no endpoint naming a player can leave it out (service/web/operators.py reads it).
        """
        if re.search(r"<(\w+:)?player_id>", rule) or names_player:
            parameters = [*(parameters or ()), OPERATOR_QUERY_PARAMETER]
        decorator = super().route(rule, parameters=parameters, tags=tags, **options)
        return cast("Callable[[Resource], Resource]", decorator)

    def arguments(
        self, schema: SchemaArgument, *, location: str = "json", **options: Any
    ) -> Callable[[ViewFunction], ViewFunction]:
        """Parse and validate one request location with `schema`; the view gets the result."""
        decorator = super().arguments(schema, location=location, **options)
        return cast("Callable[[ViewFunction], ViewFunction]", decorator)

    def doc(self, **documentation: Any) -> Callable[[ViewFunction], ViewFunction]:
        """Add to the operation's OpenAPI documentation what no schema says."""
        decorator = super().doc(**documentation)
        return cast("Callable[[ViewFunction], ViewFunction]", decorator)

    def response(
        self, status_code: int, schema: SchemaArgument | None = None, **options: Any
    ) -> Callable[[ViewFunction], ViewFunction]:
        """Serialise the view's return value with `schema` and document it."""
        decorator = super().response(status_code, schema, **options)
        return cast("Callable[[ViewFunction], ViewFunction]", decorator)

    def alt_response(
        self, status_code: int, **options: Any
    ) -> Callable[[ViewFunction], ViewFunction]:
        """Document another response the view can give."""
        decorator = super().alt_response(status_code, **options)
        return cast("Callable[[ViewFunction], ViewFunction]", decorator)


class ShoeboxApi(_Api):  # type: ignore[misc]
    """flask-smorest's Api, documenting and answering its errors as RFC 9457 problems."""

    ERROR_SCHEMA = ProblemSchema

    def handle_http_exception(self, error: Exception) -> Any:
        """Answer an HTTP error, flask-smorest's own abort() included, as a problem."""
        return http_problem(error).response()  # type: ignore[arg-type]

    def _register_responses(self) -> None:
        # flask-smorest's own version documents its errors as application/json; ours are
        # problems. Otherwise the same: one lazy response per status, and DEFAULT_ERROR.
        for status in http.HTTPStatus:
            response: dict[str, Any] = {"description": status.phrase}
            if status >= 400:
                response["schema"] = self.ERROR_SCHEMA
            prepare_response(response, self.spec, PROBLEM_MIMETYPE)
            self.spec.components.response(status.name, response, lazy=True)
        default = {"description": "A problem document", "schema": self.ERROR_SCHEMA}
        prepare_response(default, self.spec, PROBLEM_MIMETYPE)
        self.spec.components.response(self.DEFAULT_ERROR_RESPONSE_NAME, default, lazy=True)


def container() -> Container:
    """The current app's container."""
    wiring = current_app.extensions[EXTENSION]
    if not isinstance(wiring, Container):
        raise TypeError("the app was not built by service.web.app.create_app")
    return wiring


def read_models() -> ProjectionService | None:
    """The read models, None when this app was wired without them (an in-memory store).

    A read with a consistency token first waits, once, for the models to hold its write
    (service/web/consistency.py): every view reaches the models through here.
    """
    before = g.get("before_read_models")
    if callable(before):
        before()
    return container().projections


def projections() -> ProjectionService:
    """The read models; a 503 problem when this app was wired without them."""
    found = read_models()
    if found is None:
        raise Problem(
            503, "service-unavailable", "This server was started without its read models."
        )
    return found


def actor() -> Actor:
    """The authenticated caller of the current request."""
    caller = g.get("actor")
    if not isinstance(caller, Actor):
        raise RuntimeError("no authenticated caller: the view was reached without the auth hook")
    return caller


def register_blueprints(api: ShoeboxApi) -> list[str]:
    """Mount every resource module's `blp` under API_PREFIX; return the module names."""
    mounted: list[str] = []
    package = importlib.import_module(RESOURCES)
    for module_info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{RESOURCES}.{module_info.name}")
        blueprint = getattr(module, "blp", None)
        if not isinstance(blueprint, Blueprint):
            continue
        api.register_blueprint(blueprint, url_prefix=API_PREFIX + (blueprint.url_prefix or ""))
        # JSON Schemas the module's documentation refers to by name, that no marshmallow
        # schema of its views brings in (the feed's messages).
        for name, component in getattr(module, "COMPONENTS", {}).items():
            api.spec.components.schema(name, component)
        mounted.append(module_info.name)
    return mounted
