"""The pages' cookies and CSRF tokens: the browser holds a random session id and nothing else.

- The session cookie is HttpOnly (no script reads it), SameSite=Strict (no other site's page
  sends it) and Secure when the page was served over HTTPS. It holds only the session's random
  id; what it stands for lives on the server (service/runtime/web_sessions.py).
- Every state-changing request from a page carries the session's CSRF token in the
  `X-CSRF-Token` header (the page reads it from its own HTML); without it, or with another,
  the answer is a 403 problem and nothing is forwarded.
- The forms that start a session (the demo's start, the dashboard's sign-in) have no session
  yet: they carry a token that must equal a short-lived cookie's (a double submit), so that no
  other site can sign a browser in behind its user's back.
"""

from __future__ import annotations

import hmac
from typing import Final

from flask import request
from werkzeug.wrappers import Response

from service.runtime.web_sessions import OPS, PLAY, SESSION_LIFETIME, new_secret
from service.web.problems import Problem

SESSION_COOKIES: Final = {PLAY: ("shoebox_play", "/play"), OPS: ("shoebox_ops", "/dashboard")}
"""Each page's session cookie and the path it is sent to: a browser may play and oversee at
once, and neither page's requests carry the other's session."""
FORM_COOKIE: Final = "shoebox_form"
CSRF_HEADER: Final = "X-CSRF-Token"
FORM_TOKEN_FIELD: Final = "form_token"  # noqa: S105 - a form field's name, not a secret
_FORM_TOKEN_SECONDS: Final = 3600
SAFE_METHODS: Final = frozenset({"GET", "HEAD", "OPTIONS"})


def session_id(kind: str) -> str | None:
    """The session id of this kind that the browser sent, if any."""
    return request.cookies.get(SESSION_COOKIES[kind][0])


def set_session_cookie(response: Response, kind: str, value: str) -> None:
    """Give the browser its session id, and nothing else."""
    name, path = SESSION_COOKIES[kind]
    response.set_cookie(
        name,
        value,
        max_age=int(SESSION_LIFETIME.total_seconds()),
        path=path,
        httponly=True,
        samesite="Strict",
        secure=request.is_secure,
    )


def clear_session_cookie(response: Response, kind: str) -> None:
    """Forget the session id in the browser."""
    name, path = SESSION_COOKIES[kind]
    response.delete_cookie(name, path=path, httponly=True, samesite="Strict")


def issue_form_token(response: Response) -> str:
    """A token for a sign-in form, also set as a cookie that the form's POST must match."""
    token = request.cookies.get(FORM_COOKIE) or new_secret()
    response.set_cookie(
        FORM_COOKIE,
        token,
        max_age=_FORM_TOKEN_SECONDS,
        path="/",
        httponly=True,
        samesite="Strict",
        secure=request.is_secure,
    )
    return token


def check_form_token() -> None:
    """Refuse a sign-in form whose token does not match its cookie's."""
    cookie = request.cookies.get(FORM_COOKIE, "")
    sent = request.form.get(FORM_TOKEN_FIELD, "")
    if not cookie or not hmac.compare_digest(cookie, sent):
        raise csrf_refusal()


def check_csrf(expected: str) -> None:
    """Refuse a state-changing request that does not carry the session's CSRF token."""
    if request.method in SAFE_METHODS:
        return
    sent = request.headers.get(CSRF_HEADER, "")
    if not sent or not hmac.compare_digest(sent, expected):
        raise csrf_refusal()


def check_csrf_field(expected: str) -> None:
    """A form's CSRF token, sent as the `csrf_token` field since a form cannot set headers."""
    sent = request.form.get("csrf_token", "")
    if not sent or not hmac.compare_digest(sent, expected):
        raise csrf_refusal()


def csrf_refusal() -> Problem:
    """The 403 a change without its CSRF token gets."""
    return Problem(
        403,
        "csrf-token-missing",
        f"A change from a page carries the page's CSRF token in the {CSRF_HEADER} header;"
        " reload the page to get one.",
        title="The request lacks the page's CSRF token",
    )
