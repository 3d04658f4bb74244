"""The REST API's plumbing: a typed Blueprint, blueprint discovery, and the per-request accessors.

A resource is one module in this package that exports `blp`, a `service.api.Blueprint`
carrying `MethodView`s whose methods declare their roles with `service.auth.roles`.
`register_blueprints` mounts every such module under /v1 in the order of the module names,
so adding a resource is adding a module; no central list needs editing.

Views reach the wiring through `container()` and the caller through `actor()`.
"""

from __future__ import annotations

import http
import importlib
import pkgutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeVar, cast

import marshmallow as ma

# flask-smorest ships no type information; this module is the one place that touches it
# untyped, and gives the rest of the service typed decorators in return.
from flask import current_app, g
from flask.views import MethodView
from flask_smorest import Api as _Api  # type: ignore[import-untyped]
from flask_smorest import Blueprint as _Blueprint
from flask_smorest.utils import prepare_response  # type: ignore[import-untyped]
from psycopg_pool import ConnectionPool
from webargs.flaskparser import abort

from events.store import Clock, EventStore
from service.actor import Actor
from service.chat import ChatService
from service.game import GameService
from service.keys import KeyRing
from service.players import PlayerService
from service.problems import PROBLEM_MIMETYPE, Problem, ProblemSchema, http_problem
from service.projections import ProjectionService
from service.settings import Settings
from service.wallets import WalletService

__all__ = [
    "API_PREFIX",
    "Blueprint",
    "Container",
    "ShoeboxApi",
    "abort",
    "actor",
    "container",
    "projections",
    "register_blueprints",
]

API_PREFIX: Final = "/v1"
EXTENSION: Final = "shoebox"

ViewFunction = TypeVar("ViewFunction", bound=Callable[..., Any])
Resource = TypeVar("Resource", bound=type[MethodView])
SchemaArgument = type[ma.Schema] | ma.Schema


class Blueprint(_Blueprint):  # type: ignore[misc]
    """flask-smorest's Blueprint with typed decorators, so that views stay checked by mypy."""

    def route(
        self,
        rule: str,
        *,
        parameters: Sequence[Any] | None = None,
        tags: Sequence[str] | None = None,
        **options: Any,
    ) -> Callable[[Resource], Resource]:
        """Register a MethodView at `rule`, below the blueprint's prefix."""
        decorator = super().route(rule, parameters=parameters, tags=tags, **options)
        return cast("Callable[[Resource], Resource]", decorator)

    def arguments(
        self, schema: SchemaArgument, *, location: str = "json", **options: Any
    ) -> Callable[[ViewFunction], ViewFunction]:
        """Parse and validate one request location with `schema`; the view gets the result."""
        decorator = super().arguments(schema, location=location, **options)
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


@dataclass(frozen=True, slots=True)
class Container:
    """Everything a view needs, wired once by create_app."""

    settings: Settings
    store: EventStore
    clock: Clock
    keys: KeyRing
    games: GameService
    wallets: WalletService
    players: PlayerService
    chat: ChatService
    # The pool create_app opened, closed with the app; None when the store was handed in.
    pool: ConnectionPool[Any] | None = None
    # The read models. None only when an in-memory store was handed in (the unit tests' wiring),
    # where there is no PostgreSQL to project into: see `reads_from_projections`.
    projections: ProjectionService | None = None

    def close(self) -> None:
        """Release the connections create_app opened."""
        if self.pool is not None:
            self.pool.close()


def container() -> Container:
    """The current app's container."""
    wiring = current_app.extensions[EXTENSION]
    if not isinstance(wiring, Container):
        raise TypeError("the app was not built by service.app.create_app")
    return wiring


def projections() -> ProjectionService:
    """The read models; a 503 problem when this app was wired without them."""
    found = container().projections
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
    for module_info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{__name__}.{module_info.name}")
        blueprint = getattr(module, "blp", None)
        if not isinstance(blueprint, Blueprint):
            continue
        api.register_blueprint(blueprint, url_prefix=API_PREFIX + (blueprint.url_prefix or ""))
        mounted.append(module_info.name)
    return mounted
