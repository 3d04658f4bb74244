"""/play: the reference table page, and the small same-origin backend it talks to.

The page never holds an API key. Its session (a random id in an HttpOnly cookie) stands for a
demo player; the backend below acts for that player with the server's demo frontend key, by
forwarding to /v1 (service/web/pages/gateway.py). The player comes from the session, never
from the page, so a page can only ever move its own player's money.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from functools import wraps
from typing import Any, Final, TypeVar, cast

from flask import Blueprint, Response, g, make_response, redirect, render_template, request
from werkzeug.wrappers import Response as BaseResponse

from domain.ids import is_id
from service.runtime.web_sessions import PLAY, WebSession
from service.web.pages.context import pages
from service.web.pages.gateway import ApiAnswer
from service.web.pages.sessions import (
    FORM_TOKEN_FIELD,
    check_csrf,
    check_form_token,
    issue_form_token,
    session_id,
    set_session_cookie,
)
from service.web.problems import FieldError, Problem

blp = Blueprint("play", __name__, url_prefix="/play")

DEMO_TABLE: Final = "demo"
DEMO_FLOAT_PENCE: Final = 100_000
"""What a new demo player's wallet starts with: £1,000."""
DEMO_PLAYER_PREFIX: Final = "demo-"

View = TypeVar("View", bound=Callable[..., Any])


def _demo_key(role: str) -> str:
    key = pages().demo_keys.get(role)
    if key is None:
        raise Problem(
            503,
            "service-unavailable",
            "Demo mode has no demo keys: start the server with `shoebox serve` or `shoebox run`"
            " and SHOEBOX_DEMO=1, which make them.",
        )
    return key.secret


def _frontend(method: str, path: str, **options: Any) -> ApiAnswer:
    return pages().api.call(method, path, _demo_key("frontend"), **options)


def _session() -> WebSession | None:
    found = pages().sessions.find(session_id(PLAY))
    return found if found is not None and found.kind == PLAY else None


def _player() -> str:
    player = cast("WebSession", g.play_session).player_id
    assert player is not None
    return player


def play_api(view: View) -> View:
    """A backend call of the page: a play session, and its CSRF token on any change."""

    @wraps(view)
    def checked(*args: Any, **kwargs: Any) -> Any:
        found = _session()
        if found is None:
            raise Problem(401, "unauthenticated", "Start a demo session at /play first.")
        check_csrf(found.csrf_token)
        g.play_session = found
        table_id = kwargs.get("table_id")
        if table_id is not None and not is_id(table_id):
            raise Problem(
                422,
                "validation-failed",
                "table_id: not a table id.",
                errors=[FieldError("table_id", "Not an id.", "path")],
            )
        return view(*args, **kwargs)

    return cast("View", checked)


def _body() -> dict[str, Any]:
    body = request.get_json(silent=True)
    return body if isinstance(body, dict) else {}


def _round(sent: dict[str, Any]) -> dict[str, Any]:
    """The round the page showed open for betting when its player acted, if it named one: the
    API then refuses the action as late rather than moving it into the next round."""
    return {"round_id": sent["round_id"]} if sent.get("round_id") is not None else {}


@blp.get("")
def table_page() -> Response:
    """The table page, or the form that starts a demo session."""
    found = _session()
    table_id = request.args.get("table") or DEMO_TABLE
    if found is None:
        response = make_response()
        token = issue_form_token(response)
        response.set_data(render_template("play_start.html", form_token=token, table_id=table_id))
        return response
    if not is_id(table_id):
        table_id = DEMO_TABLE
    return make_response(
        render_template(
            "play.html",
            table_id=table_id,
            player_id=found.player_id,
            csrf_token=found.csrf_token,
        )
    )


@blp.post("/start")
def start() -> BaseResponse:
    """Start a demo session: a new demo player, funded, and the demo table if it is missing."""
    check_form_token()
    ops = _demo_key("ops")
    player_id = DEMO_PLAYER_PREFIX + secrets.token_hex(4)
    funded = pages().api.call(
        "POST",
        f"/v1/wallets/{player_id}/deposits",
        ops,
        body={"amount_pence": DEMO_FLOAT_PENCE, "reason": "demo float for /play"},
    )
    if not funded.ok:
        return funded.response()
    if _frontend("GET", f"/v1/tables/{DEMO_TABLE}").status == 404:
        # A 409 here is another session creating it first, which is as good.
        pages().api.call("POST", "/v1/tables", ops, body={"table_id": DEMO_TABLE})
    new_id, _ = pages().sessions.start(PLAY, "frontend", player_id=player_id)
    table_id = request.form.get("table", DEMO_TABLE)
    target = f"/play?table={table_id}" if is_id(table_id) else "/play"
    response = redirect(target, code=303)
    set_session_cookie(response, PLAY, new_id)
    return response


# The backend: each call forwards one /v1 request for the session's player.


@blp.get("/api/tables/<table_id>/state")
@play_api
def state(table_id: str) -> Response:
    """The table's state, to draw it before following the feed (and after a reconnect)."""
    return _frontend("GET", f"/v1/tables/{table_id}/state").response()


@blp.get("/api/tables/<table_id>")
@play_api
def table(table_id: str) -> Response:
    """The table's settings: seats, chips, limits, betting window."""
    return _frontend("GET", f"/v1/tables/{table_id}").response()


@blp.get("/api/tables/<table_id>/statistics")
@play_api
def statistics(table_id: str) -> Response:
    """The table's roads and counts."""
    return _frontend("GET", f"/v1/tables/{table_id}/statistics").response()


@blp.get("/api/tables/<table_id>/chat")
@play_api
def chat(table_id: str) -> Response:
    """The table's latest chat."""
    return _frontend("GET", f"/v1/tables/{table_id}/chat").response()


@blp.get("/api/tables/<table_id>/feed")
@play_api
def feed(table_id: str) -> Response:
    """The table's live feed, followed with the server's key (EventSource sends no header)."""
    resume = request.headers.get("Last-Event-ID")
    headers = {"Last-Event-ID": resume} if resume else None
    return pages().api.stream(f"/v1/tables/{table_id}/feed", _demo_key("frontend"), headers=headers)


@blp.get("/api/rounds/<round_id>")
@play_api
def round_(round_id: str) -> Response:
    """One round as the API records it."""
    if not is_id(round_id):
        raise Problem(422, "validation-failed", "round_id: not a round id.")
    return _frontend("GET", f"/v1/rounds/{round_id}").response()


@blp.get("/api/me")
@play_api
def me() -> Response:
    """The session's player: their balance and their own limit."""
    player = _player()
    wallet = _frontend("GET", f"/v1/wallets/{player}")
    if not wallet.ok:
        return wallet.response()
    limit = _frontend("GET", f"/v1/players/{player}/limit")
    if not limit.ok:
        return limit.response()
    return make_response({"player_id": player, "wallet": wallet.json(), "limit": limit.json()})


@blp.post("/api/tables/<table_id>/seats")
@play_api
def sit(table_id: str) -> Response:
    """Sit down, or move to another seat between hands in one step."""
    player = _player()
    seat = _body().get("seat")
    current = _frontend("GET", f"/v1/tables/{table_id}/state")
    if current.ok and any(taken["player_id"] == player for taken in current.json()["seats"]):
        # A move is one command, so the player never stands unseated between two, and it is
        # refused whole while their bets are on the round.
        moved = _frontend("PUT", f"/v1/tables/{table_id}/seats/{player}", body={"seat": seat})
        return moved.response()
    answer = _frontend(
        "POST", f"/v1/tables/{table_id}/seats", body={"player_id": player, "seat": seat}
    )
    return answer.response()


@blp.post("/api/tables/<table_id>/bets")
@play_api
def bet(table_id: str) -> Response:
    """Place the planned wager on a spot."""
    sent = _body()
    body = {
        "player_id": _player(),
        "spot": sent.get("spot"),
        "stake_pence": sent.get("stake_pence"),
        **_round(sent),
    }
    return _frontend("POST", f"/v1/tables/{table_id}/bets", body=body).response()


@blp.delete("/api/tables/<table_id>/bets")
@play_api
def remove_bets(table_id: str) -> Response:
    """Withdraw the player's whole wager."""
    return _frontend("DELETE", f"/v1/tables/{table_id}/bets/{_player()}").response()


@blp.post("/api/tables/<table_id>/<any(deal, pass, rebet):action>")
@play_api
def act(table_id: str, action: str) -> Response:
    """Deal, Pass, or repeat the last bet."""
    body = {"player_id": _player(), **_round(_body())}
    return _frontend("POST", f"/v1/tables/{table_id}/{action}", body=body).response()


@blp.post("/api/tables/<table_id>/chat")
@play_api
def say(table_id: str) -> Response:
    """Post to the table's chat (a muted player gets the server's refusal)."""
    body = {"player_id": _player(), "text": _body().get("text")}
    return _frontend("POST", f"/v1/tables/{table_id}/chat", body=body).response()


@blp.put("/api/limit")
@play_api
def set_limit() -> Response:
    """Change the player's own limit (once a week, as the rules say)."""
    body = {"limit_pence": _body().get("limit_pence")}
    return _frontend("PUT", f"/v1/players/{_player()}/limit", body=body).response()


__all__ = ["FORM_TOKEN_FIELD", "blp"]
