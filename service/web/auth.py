"""Bearer API keys on every endpoint, and the roles each view method admits.

Every route needs `Authorization: Bearer <api key>`, the OpenAPI document at
/v1/openapi.json included (any role may read it; the checked-in openapi.yaml is the same
document for those without a key). A view method declares its roles with `@roles(...)`;
create_app refuses to start if any endpoint leaves a method undeclared, so a new resource
cannot be open by accident.

Unknown routes answer 404 and wrong methods 405 before any key is checked: the router, not
the key, decides those, and they reveal nothing that the OpenAPI document does not.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from copy import deepcopy
from typing import Any, Final, TypeVar

from flask import Flask, current_app, g, request
from flask.views import MethodView

from service.application.keys import ALL_ROLES, Role
from service.web.api import container
from service.web.problems import Problem

ROLES_ATTRIBUTE: Final = "_shoebox_roles"
# Routes that are not MethodViews of ours, with the roles that may call them.
FIXED_ENDPOINT_ROLES: Final[Mapping[str, frozenset[Role]]] = {
    "api-docs.openapi_json": ALL_ROLES,
}
OPEN: Final[frozenset[Role]] = frozenset()
"""The roles of an endpoint that needs no key at all: health, readiness, perhaps metrics."""
ENDPOINT_ROLES_EXTENSION: Final = "shoebox-endpoint-roles"
"""Where an app keeps the roles of its plain (non-MethodView) endpoints (web/operations.py)."""
# Flask answers these itself; they need a valid key of any role and nothing more.
AUTOMATIC_METHODS: Final = frozenset({"OPTIONS"})

ViewFunction = TypeVar("ViewFunction", bound=Callable[..., Any])


READERS: Final = (Role.FRONTEND, Role.OPS, Role.REGULATOR)
"""Every role: what anyone with a key may read."""

OVERSIGHT: Final = (Role.OPS, Role.REGULATOR)
"""The roles that oversee the casino: what front ends may not read."""


def roles(*allowed: Role) -> Callable[[ViewFunction], ViewFunction]:
    """Declare which roles may call a view method; documented as `x-roles` in the spec."""
    if not allowed:
        raise ValueError("a view method must admit at least one role")
    admitted = frozenset(allowed)

    def declare(view: ViewFunction) -> ViewFunction:
        setattr(view, ROLES_ATTRIBUTE, admitted)
        # flask-smorest merges `_apidoc["manual_doc"]` into the operation's documentation.
        apidoc: dict[str, Any] = deepcopy(getattr(view, "_apidoc", {}))
        manual = apidoc.setdefault("manual_doc", {})
        manual["x-roles"] = sorted(role.value for role in admitted)
        responses = manual.setdefault("responses", {})
        responses["401"] = "UNAUTHORIZED"
        if admitted != ALL_ROLES:
            responses["403"] = "FORBIDDEN"
        # Any operation: a key over its rate limit (service/web/rate_limits.py), and the
        # database unreachable or refusing writes; both carry Retry-After.
        responses["429"] = "TOO_MANY_REQUESTS"
        responses["503"] = "SERVICE_UNAVAILABLE"
        setattr(view, "_apidoc", apidoc)  # noqa: B010 - flask-smorest's private attribute name
        return view

    return declare


def endpoint_roles(app: Flask, endpoint: str, method: str) -> frozenset[Role] | None:
    """The roles that may call `method` on `endpoint`, or None if the view declares none."""
    fixed = FIXED_ENDPOINT_ROLES.get(endpoint)
    if fixed is None:
        fixed = app.extensions.get(ENDPOINT_ROLES_EXTENSION, {}).get(endpoint)
    if fixed is not None or method in AUTOMATIC_METHODS:
        return fixed if fixed is not None else ALL_ROLES
    view_function = app.view_functions.get(endpoint)
    view_class = getattr(view_function, "view_class", None)
    if not (isinstance(view_class, type) and issubclass(view_class, MethodView)):
        return None
    # MethodView answers HEAD with `get` when there is no `head`.
    name = method.lower()
    handler = getattr(view_class, name, None)
    if handler is None and name == "head":
        handler = getattr(view_class, "get", None)
    declared = getattr(handler, ROLES_ATTRIBUTE, None)
    return declared if isinstance(declared, frozenset) else None


def routes(app: Flask) -> Iterator[tuple[str, str, str]]:
    """Every (rule, endpoint, method) the app serves, automatic OPTIONS and HEAD aside."""
    for rule in app.url_map.iter_rules():
        for method in sorted((rule.methods or set()) - {"OPTIONS", "HEAD"}):
            yield rule.rule, rule.endpoint, method


def check_roles_declared(app: Flask) -> None:
    """Refuse an app in which some route's method admits no declared roles."""
    undeclared = [
        f"{method} {rule} ({endpoint})"
        for rule, endpoint, method in routes(app)
        if endpoint_roles(app, endpoint, method) is None
    ]
    if undeclared:
        raise RuntimeError("routes without @roles: " + ", ".join(undeclared))


def bearer_secret(authorization: str | None) -> str | None:
    """The key in an `Authorization: Bearer <key>` header, or None if the header is not that."""
    if authorization is None:
        return None
    scheme, _, secret = authorization.strip().partition(" ")
    secret = secret.strip()
    if scheme.lower() != "bearer" or not secret or " " in secret:
        return None
    return secret


def authenticate_request() -> None:
    """Before each request: a live key whose role the view admits, or a 401/403 problem."""
    if request.routing_exception is not None or request.endpoint is None:
        return
    admitted = endpoint_roles(current_app, request.endpoint, request.method)
    if admitted == OPEN:
        return
    secret = bearer_secret(request.headers.get("Authorization"))
    if secret is None:
        raise Problem(401, "unauthenticated", "Send the header `Authorization: Bearer <api key>`.")
    key = container().keys.authenticate(secret)
    if key is None:
        raise Problem(
            401,
            "unauthenticated",
            "The API key is unknown or has been revoked.",
            headers={"WWW-Authenticate": 'Bearer realm="shoebox", error="invalid_token"'},
        )
    g.api_key = key
    if admitted is None or key.role not in admitted:
        raise Problem(
            403,
            "forbidden",
            f"Role {key.role.value} may not {request.method} {request.path};"
            f" it is open to: {_names(admitted or ())}.",
        )


def _names(admitted: Iterable[Role]) -> str:
    return ", ".join(sorted(role.value for role in admitted)) or "no role"
