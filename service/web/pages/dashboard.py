"""/dashboard: the ops view, signed in with an ops or regulator key that stays on the server.

The key is checked with the key ring at sign-in and at every call (a revoked key ends the
session), kept in the server-side session, and never sent back: the page's calls go to the
backend below, which forwards them to /v1 with the session's key. It reads only the read
models and the feed; a regulator's session reads the same and changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from functools import wraps
from typing import Any, Final, TypeVar, cast

from flask import Blueprint, Response, g, make_response, redirect, render_template, request
from werkzeug.wrappers import Response as BaseResponse

from domain.ids import is_id
from events.postgres import BACKLOG_BOUND
from service.application.keys import Role
from service.runtime.web_sessions import OPS, WebSession
from service.web.pages.context import pages
from service.web.pages.gateway import ApiAnswer
from service.web.pages.sessions import (
    check_csrf,
    check_csrf_field,
    check_form_token,
    clear_session_cookie,
    issue_form_token,
    session_id,
    set_session_cookie,
)
from service.web.problems import FieldError, Problem

blp = Blueprint("dashboard", __name__, url_prefix="/dashboard")

SIGNIFICANT_WINDOW: Final = timedelta(days=1)
SIGNIFICANT_SHOWN: Final = 15
_OVERSIGHT: Final = frozenset({Role.OPS, Role.REGULATOR})

View = TypeVar("View", bound=Callable[..., Any])


def _session() -> WebSession | None:
    found = pages().sessions.find(session_id(OPS))
    if found is None or found.kind != OPS or found.api_key is None:
        return None
    # The key ring decides at every call, so that a revocation ends the session too.
    key = pages().keys.authenticate(found.api_key)
    if key is None or key.role not in _OVERSIGHT:
        pages().sessions.end(session_id(OPS))
        return None
    return found


def _call(method: str, path: str, **options: Any) -> ApiAnswer:
    key = cast("WebSession", g.ops_session).api_key
    assert key is not None
    return pages().api.call(method, path, key, **options)


def dashboard_api(view: View) -> View:
    """A backend call of the dashboard: a signed-in session, and its CSRF token on changes."""

    @wraps(view)
    def checked(*args: Any, **kwargs: Any) -> Any:
        found = _session()
        if found is None:
            raise Problem(401, "unauthenticated", "Sign in at /dashboard first.")
        check_csrf(found.csrf_token)
        table_id = kwargs.get("table_id")
        if table_id is not None and not is_id(table_id):
            raise Problem(
                422,
                "validation-failed",
                "table_id: not a table id.",
                errors=[FieldError("table_id", "Not an id.", "path")],
            )
        g.ops_session = found
        return view(*args, **kwargs)

    return cast("View", checked)


@blp.get("")
def dashboard_page() -> Response:
    """The dashboard, or its sign-in form."""
    found = _session()
    if found is None:
        response = make_response()
        token = issue_form_token(response)
        error = request.args.get("error") == "key"
        response.set_data(render_template("sign_in.html", form_token=token, error=error))
        return response
    return make_response(
        render_template("dashboard.html", role=found.role, csrf_token=found.csrf_token)
    )


@blp.post("/sign-in")
def sign_in() -> BaseResponse:
    """Sign in with an ops or regulator key, which the server keeps and never sends back."""
    check_form_token()
    secret = request.form.get("key", "").strip()
    key = pages().keys.authenticate(secret) if secret else None
    if key is None or key.role not in _OVERSIGHT:
        return redirect("/dashboard?error=key", code=303)
    new_id, _ = pages().sessions.start(OPS, key.role.value, api_key=secret)
    response = redirect("/dashboard", code=303)
    set_session_cookie(response, OPS, new_id)
    return response


@blp.post("/sign-out")
def sign_out() -> BaseResponse:
    """End the session (the form carries the session's CSRF token)."""
    found = _session()
    if found is not None:
        check_csrf_field(found.csrf_token)
        pages().sessions.end(session_id(OPS))
    response = redirect("/dashboard", code=303)
    clear_session_cookie(response, OPS)
    return response


# Tables a call of the overview asks for: a page the API reads in one query (GET
# /v1/ops/tables), so a casino of 200 tables costs one call and one statement.
OVERVIEW_PAGE: Final = 200


def _tables() -> list[dict[str, Any]] | ApiAnswer:
    """Every table from the overview read model, page by page (its keyset); or the refusal."""
    tables: list[dict[str, Any]] = []
    after = 0
    while True:
        answer = _call(
            "GET", "/v1/ops/tables", query={"after": str(after), "limit": str(OVERVIEW_PAGE)}
        )
        if not answer.ok:
            return answer
        page = answer.json()
        tables.extend(page["tables"])
        if page["next_after"] is None:
            return tables
        after = int(page["next_after"])


def _queues(now: datetime) -> list[dict[str, Any]] | None:
    """Each queue's waiting work and live workers, with a warning in words; None without Redis."""
    url = pages().redis_url
    if not url:
        return None
    from redis.exceptions import RedisError

    from service.runtime.queues import queue_health
    from service.runtime.scheduler import redis_for_requests

    try:
        health = queue_health(redis_for_requests(url), now)
    except RedisError:
        return None
    return [
        {
            "queue": h.queue,
            "jobs": h.jobs,
            "deadlines": h.deadlines,
            "overdue": h.overdue,
            "workers": h.workers,
            "unconsumed": h.unconsumed,
            "warning": h.warning(),
        }
        for h in health
    ]


def _sequencer() -> dict[str, Any] | None:
    """The sequencer's backlog, and whether appends are refused for it (past 2 s)."""
    backlog = pages().unsequenced
    if backlog is None:
        return None
    appends, oldest = backlog()
    return {
        "unsequenced_appends": appends,
        "oldest_seconds": round(oldest, 3),
        "busy": oldest > BACKLOG_BOUND.total_seconds(),
    }


@blp.get("/api/overview")
@dashboard_api
def overview() -> Response:
    """Every table with its state, roads and ledger; the read models' lag; the queues and
    their workers; the latest significant events. A fixed number of calls however many
    tables there are."""
    now = pages().clock()
    tables = _tables()
    if isinstance(tables, ApiAnswer):
        return tables.response()
    significant = _call(
        "GET",
        "/v1/audit/significant-events",
        query={"from": (now - SIGNIFICANT_WINDOW).isoformat(), "limit": "500"},
    )
    events = significant.json()["events"][-SIGNIFICANT_SHOWN:] if significant.ok else []
    projections = _call("GET", "/v1/ops/projections")
    queues = _queues(now)
    return make_response(
        {
            "now": now.isoformat(),
            "role": cast("WebSession", g.ops_session).role,
            "tables": tables,
            "projections": projections.json() if projections.ok else None,
            "queues": queues,
            "sequencer": _sequencer(),
            "significant_events": list(reversed(events)),
        }
    )


@blp.get("/api/feed")
@dashboard_api
def feed() -> Response:
    """Every table's live feed, followed with the session's key."""
    key = cast("WebSession", g.ops_session).api_key
    assert key is not None
    resume = request.headers.get("Last-Event-ID")
    headers = {"Last-Event-ID": resume} if resume else None
    return pages().api.stream("/v1/feed", key, headers=headers)


def _reason() -> str:
    body = request.get_json(silent=True)
    reason = body.get("reason") if isinstance(body, dict) else None
    return reason if isinstance(reason, str) else ""


def _body() -> dict[str, Any]:
    body = request.get_json(silent=True)
    return body if isinstance(body, dict) else {}


@blp.post("/api/tables/<table_id>/malfunctions")
@dashboard_api
def declare_malfunction(table_id: str) -> Response:
    """Declare a malfunction: void the current round, the rounds named, or every round opened
    in a time range (`from` and `to`, inclusive), and suspend the table."""
    sent = _body()
    round_ids = sent.get("round_ids") or []
    start, end = sent.get("from"), sent.get("to")
    body: dict[str, Any] = {"reason": _reason()}
    if start or end:
        # The API checks the instants and that both are there; a half range is its 422.
        body.update(scope="time_range", **{"from": start, "to": end})
    elif round_ids:
        body.update(scope="rounds", round_ids=round_ids)
    else:
        body["scope"] = "current_round"
    return _call("POST", f"/v1/tables/{table_id}/malfunctions", body=body).response()


@blp.post("/api/tables/<table_id>/mutes")
@dashboard_api
def mute(table_id: str) -> Response:
    """Mute a player in the table's chat."""
    body = {"player_id": _body().get("player_id"), "reason": _reason()}
    return _call("POST", f"/v1/tables/{table_id}/mutes", body=body).response()


@blp.post("/api/tables/<table_id>/unmutes")
@dashboard_api
def unmute(table_id: str) -> Response:
    """Lift a player's mute in the table's chat."""
    player_id = _body().get("player_id")
    if not isinstance(player_id, str) or not is_id(player_id):
        raise Problem(
            422,
            "validation-failed",
            "player_id: not a player id.",
            errors=[FieldError("player_id", "Not an id.", "body")],
        )
    return _call("DELETE", f"/v1/tables/{table_id}/mutes/{player_id}").response()


@blp.post("/api/tables/<table_id>/reopenings")
@dashboard_api
def reopen(table_id: str) -> Response:
    """Reopen a table that a malfunction suspended."""
    body = {"reason": _reason()}
    return _call("POST", f"/v1/tables/{table_id}/reopenings", body=body).response()
