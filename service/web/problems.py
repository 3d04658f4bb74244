"""RFC 9457 problem details: the one shape of every error response.

Every error a client can cause is `application/problem+json` with `type`, `title`, `status`,
`detail` and `request_id`; validation adds `errors` (a list of {field, message, location}),
and a refused game rule adds `rule`. `type` is `https://shoebox.example/problems/<slug>`,
or `.../problems/rules/<rule>` for a game rule; the slugs are the keys of PROBLEM_TITLES.

Game rules get a status by one table, DOMAIN_RULE_STATUS (exact rule, then the rule's
family, the part before its first dot):
- 404 when the thing the request names does not exist;
- 422 when the request is wrong whatever the table's state: amounts, limits, settings;
- 409 when it would be right at another moment: the phase, the seat, the turn, the balance.

Idempotency follows draft-ietf-httpapi-idempotency-key-header: a key reused with a different
request is 422, a key whose first request has not finished is 409.

An append that waited too long for the log is a 503 `log-busy` with `Retry-After`: nothing was
written, and the same request (with the same Idempotency-Key) may simply be sent again. A
request whose time ran out waiting on the database (service/web/api.py, REQUEST_DEADLINE_SECONDS)
is a 503 `service-unavailable` with `Retry-After`, as is a database that is away.

A 500 is always a bug: its document says nothing of the cause, which is logged with the
request id that the response also carries.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

import marshmallow as ma
import psycopg
from flask import Flask, Response, g, json
from psycopg_pool import PoolTimeout
from werkzeug.exceptions import HTTPException

from domain.errors import DomainError
from events.deadlines import DeadlinePassed
from events.store import (
    AppendTimedOut,
    ConcurrencyConflict,
    IdempotencyKeyReused,
    JsonValue,
    LogBusy,
)
from service.application.errors import Conflict, NotFound, PlayerNotFound, ServiceError
from service.application.operators import player_ref
from service.application.seamless_bets import (
    SessionRequired,
    WalletNotSeamless,
    WalletRefused,
    WalletUnavailable,
)

_logger = logging.getLogger(__name__)

PROBLEM_MIMETYPE: Final = "application/problem+json"
PROBLEM_TYPE_BASE: Final = "https://shoebox.example/problems/"

PROBLEM_TITLES: Final[Mapping[str, str]] = {
    "bad-request": "The request is malformed",
    "malformed-json": "The request body is not valid JSON",
    "invalid-header": "A request header is malformed",
    "unauthenticated": "A valid API key is required",
    "forbidden": "This API key's role may not do this",
    "not-found": "No such resource",
    "method-not-allowed": "This resource does not accept this method",
    "conflict": "The request conflicts with the resource's current state",
    "concurrent-update": "Others kept changing the resource; try again",
    "idempotency-key-in-progress": "A request with this idempotency key is still in progress",
    "idempotency-key-reused": "This idempotency key was used for a different request",
    "body-too-large": "The request body is too large",
    "request-line-too-long": "The request line is too long",
    "headers-too-large": "The request's headers are too large",
    "unsupported-transfer-coding": "The request body's transfer coding is not supported",
    "expectation-failed": "The request's Expect header cannot be met",
    "connection-refused": "The server does not take requests over this connection",
    "unsupported-media-type": "The request body must be application/json",
    "validation-failed": "The request did not validate",
    "too-many-requests": "Too many requests from this API key",
    "internal-error": "Internal server error",
    "service-unavailable": "The service is unavailable",
    "log-busy": "The log is too busy to record this now; retry shortly",
    "tree-behind": "The log's Merkle tree does not reach that size yet",
    "proof-unavailable": "No signed tree checkpoint can prove this at that size",
    "wallet-refused": "The operator's wallet refused the call",
    "wallet-unavailable": "The operator's wallet did not confirm the call",
    "wallet-not-seamless": "The operator keeps its players' money in Shoebox's own wallet",
    "session-required": "The player has no session with the operator's wallet",
    "player-not-found": "The operator has no such player",
}

_SLUG_BY_STATUS: Final[Mapping[int, str]] = {
    400: "bad-request",
    401: "unauthenticated",
    403: "forbidden",
    404: "not-found",
    405: "method-not-allowed",
    409: "conflict",
    413: "body-too-large",
    414: "request-line-too-long",
    415: "unsupported-media-type",
    422: "validation-failed",
    429: "too-many-requests",
    431: "headers-too-large",
    500: "internal-error",
    503: "service-unavailable",
}

DOMAIN_RULE_STATUS: Final[Mapping[str, int]] = {
    # Exact rules: the exceptions to their family.
    "table.not_found": 404,
    "table.already_exists": 409,
    "seat.out_of_range": 422,
    "bet.none_to_remove": 409,
    "shoe.invalid_parameters": 422,
    "shoe.decks_out_of_range": 422,
    "shoe.server_seed_invalid": 422,
    "shoe.client_seed_invalid": 422,
    "shoe.nonce_negative": 422,
    "shoe.counts_invalid": 422,
    "wallet.insufficient_funds": 409,
    "wallet.stake_not_reserved": 409,
    "player_limit.changed_this_week": 409,
    "player_limit.unchanged": 409,
    "chat.player_muted": 409,
    "chat.player_removed": 409,
    "chat.player_not_seated": 409,
    "moderation.reason_required": 422,
    # The scope is well formed; the table's state leaves it nothing to void.
    "void.scope_voids_nothing": 409,
    # Families.
    "bet": 422,
    "table": 422,
    "settlement": 422,
    "void": 422,
    "wallet": 422,
    "player_limit": 422,
    "chat": 422,
    "shoe": 409,
    "seat": 409,
    "round": 409,
    "deal": 409,
    "rebet": 409,
    "moderation": 409,
}
DEFAULT_DOMAIN_STATUS: Final = 422


def compact_json(value: object) -> str:
    """JSON as every body of the API is written: keys sorted, no spaces (Flask's compact form)."""
    return json.dumps(value, separators=(",", ":"))


@dataclass(frozen=True, slots=True)
class FieldError:
    """One field that did not validate, where it was, and why."""

    field: str
    message: str
    location: str = "json"

    def to_json(self) -> dict[str, JsonValue]:
        """The member of a problem's `errors` list."""
        return {"field": self.field, "message": self.message, "location": self.location}


class Problem(Exception):  # noqa: N818 - it is the RFC's name for the thing
    """An error answered as a problem document; raise it from a view or a request hook."""

    def __init__(
        self,
        status: int,
        slug: str,
        detail: str,
        *,
        title: str | None = None,
        type_uri: str | None = None,
        errors: Sequence[FieldError] = (),
        extensions: Mapping[str, JsonValue] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.slug = slug
        self.title = title if title is not None else PROBLEM_TITLES[slug]
        self.type_uri = type_uri if type_uri is not None else PROBLEM_TYPE_BASE + slug
        self.detail = detail
        self.errors = tuple(errors)
        self.extensions = dict(extensions or {})
        self.headers = dict(headers or {})
        if status == 401:
            self.headers.setdefault("WWW-Authenticate", 'Bearer realm="shoebox"')

    def document(self) -> dict[str, JsonValue]:
        """The problem's JSON document."""
        document: dict[str, JsonValue] = {
            "type": self.type_uri,
            "title": self.title,
            "status": self.status,
            "detail": self.detail,
        }
        if self.errors:
            document["errors"] = [error.to_json() for error in self.errors]
        document.update(self.extensions)
        request_id = g.get("request_id") if g else None
        if isinstance(request_id, str):
            document["request_id"] = request_id
        return document

    def response(self) -> Response:
        """The problem as a Flask response."""
        return Response(
            compact_json(self.document()),
            status=self.status,
            headers=self.headers,
            mimetype=PROBLEM_MIMETYPE,
        )


class ProblemFieldErrorSchema(ma.Schema):
    """One entry of a validation problem's `errors`."""

    field = ma.fields.String(required=True)
    message = ma.fields.String(required=True)
    location = ma.fields.String(metadata={"description": "json, query, path or headers"})


class ProblemSchema(ma.Schema):
    """An RFC 9457 problem document; documentation only, as responses are built by Problem."""

    type = ma.fields.String(required=True, metadata={"format": "uri"})
    title = ma.fields.String(required=True)
    status = ma.fields.Integer(required=True)
    detail = ma.fields.String(required=True)
    request_id = ma.fields.String()
    errors = ma.fields.List(ma.fields.Nested(ProblemFieldErrorSchema))
    rule = ma.fields.String(
        metadata={"description": "The game rule refused, e.g. bet.below_table_minimum"}
    )
    next_change_at = ma.fields.DateTime(
        metadata={
            "description": "With rule player_limit.changed_this_week: when the player's"
            " limit may next be changed."
        }
    )


def domain_status(rule: str) -> int:
    """The HTTP status of a refused game rule: by exact rule, then by family, else 422."""
    status = DOMAIN_RULE_STATUS.get(rule)
    if status is None:
        status = DOMAIN_RULE_STATUS.get(rule.partition(".")[0], DEFAULT_DOMAIN_STATUS)
    return status


def domain_problem(error: DomainError) -> Problem:
    """A refused game rule as a problem whose type, title and `rule` name the rule."""
    rule = error.rule
    # The class docstring states the rule in words, the same for every refusal of it.
    doc = (type(error).__doc__ or "").strip().splitlines()
    return Problem(
        domain_status(rule),
        "conflict",
        error.message,  # which already ends with "(rule <rule>)": see DomainError
        title=doc[0] if doc else rule,
        type_uri=f"{PROBLEM_TYPE_BASE}rules/{rule}",
        extensions={"rule": rule},
    )


def http_problem(error: HTTPException) -> Problem:
    """A werkzeug or flask-smorest HTTP error, validation errors included, as a problem."""
    status = error.code or 500
    if status >= 500:
        return _internal_problem(error)
    data = getattr(error, "data", None) or {}
    messages = data.get("errors") or data.get("messages")
    headers = dict(data.get("headers") or {})
    message = data.get("message")
    detail = str(message) if message else str(error.description or error.name)
    slug = _SLUG_BY_STATUS.get(status, "bad-request")
    if status == 400 and isinstance(messages, Mapping) and "json" in messages:
        # webargs reports an unparseable body as a 400 with this one message.
        return Problem(400, "malformed-json", "The request body is not valid JSON.")
    field_errors = flatten_messages(messages) if isinstance(messages, Mapping) else []
    if status == 422 and field_errors and not message:
        detail = "; ".join(f"{e.field}: {e.message}" for e in field_errors)
    # One title per problem type (RFC 9457 §3.1.3), not the HTTP reason phrase.
    return Problem(status, slug, detail, errors=field_errors, headers=headers)


def flatten_messages(messages: Mapping[str, object]) -> list[FieldError]:
    """webargs' {location: {field: [message]}} tree as a flat list of field errors."""
    errors: list[FieldError] = []
    for location, tree in messages.items():
        _flatten(errors, str(location), "", tree)
    return errors


def _flatten(errors: list[FieldError], location: str, path: str, tree: object) -> None:
    if isinstance(tree, Mapping):
        for name, subtree in tree.items():
            # "_schema" holds errors about the object as a whole, not about a field in it.
            child = path if name == "_schema" else f"{path}.{name}" if path else str(name)
            _flatten(errors, location, child, subtree)
    elif isinstance(tree, list | tuple):
        for item in tree:
            _flatten(errors, location, path, item)
    else:
        errors.append(FieldError(path or "$", str(tree), location))


def _internal_problem(error: BaseException) -> Problem:
    request_id = g.get("request_id", "-") if g else "-"
    _logger.error("request %s failed", request_id, exc_info=_cause(error))
    return Problem(
        500,
        "internal-error",
        "The server failed to answer this request. The failure is logged with its request id.",
    )


def _cause(error: BaseException) -> BaseException:
    original = getattr(error, "original_exception", None)
    return original if isinstance(original, BaseException) else error


def register_problem_handlers(app: Flask) -> None:
    """Answer every error the app can raise with a problem document."""

    @app.errorhandler(Problem)
    def _problem(error: Problem) -> Response:
        return error.response()

    @app.errorhandler(HTTPException)
    def _http(error: HTTPException) -> Response:
        return http_problem(error).response()

    @app.errorhandler(DomainError)
    def _domain(error: DomainError) -> Response:
        return domain_problem(error).response()

    @app.errorhandler(NotFound)
    def _not_found(error: NotFound) -> Response:
        return Problem(
            404, "not-found", f"{error.message[:1].upper()}{error.message[1:]}."
        ).response()

    @app.errorhandler(PlayerNotFound)
    def _player_not_found(error: PlayerNotFound) -> Response:
        # The same answer for a player nobody has and another operator's player: the key is
        # the request operator's, so neither says whether the id exists elsewhere.
        return Problem(
            404,
            "player-not-found",
            f"No player {player_ref(error.player_id).player_id!r}: an internal wallet's player"
            " exists once ops deposit to it, a seamless wallet's once its session is opened."
            " Nothing changed.",
        ).response()

    @app.errorhandler(WalletRefused)
    def _wallet_refused(error: WalletRefused) -> Response:
        return Problem(
            409,
            "wallet-refused",
            f"The operator's wallet said no ({error.reason}); nothing was placed.",
            extensions={"reason": error.reason},
        ).response()

    @app.errorhandler(WalletUnavailable)
    def _wallet_unavailable(error: WalletUnavailable) -> Response:
        return Problem(
            503,
            "wallet-unavailable",
            f"{error.message[:1].upper()}{error.message[1:]}. Nothing was placed; any stake"
            " the wallet may have taken is rolled back.",
            extensions={"reason": error.reason},
            headers={"Retry-After": str(WALLET_RETRY_AFTER_SECONDS)},
        ).response()

    @app.errorhandler(WalletNotSeamless)
    def _not_seamless(error: WalletNotSeamless) -> Response:
        return Problem(409, "wallet-not-seamless", f"{error.message}.").response()

    @app.errorhandler(SessionRequired)
    def _session_required(error: SessionRequired) -> Response:
        return Problem(409, "session-required", f"{error.message}.").response()

    @app.errorhandler(ServiceError)
    def _service(error: ServiceError) -> Response:
        # Every ServiceError the service raises has its own handler; a new one is a bug
        # until it is given one.
        return _internal_problem(error).response()

    @app.errorhandler(ConcurrencyConflict)
    @app.errorhandler(Conflict)
    def _conflict(error: Exception) -> Response:
        return Problem(
            409,
            "concurrent-update",
            "Others kept changing this resource at the same moment; retry the request.",
        ).response()

    @app.errorhandler(AppendTimedOut)
    @app.errorhandler(LogBusy)
    def _busy(error: AppendTimedOut | LogBusy) -> Response:
        # Why, in the log and in shoebox_log_busy_total.
        from service.runtime import metrics  # as operations.py: only once the app runs

        metrics.LOG_BUSY.labels(log_busy_reason(error)).inc()
        _logger.warning("request %s: %s", g.get("request_id", "-"), error)
        return log_busy().response()

    @app.errorhandler(IdempotencyKeyReused)
    def _reused(error: IdempotencyKeyReused) -> Response:
        return idempotency_key_reused().response()

    @app.errorhandler(psycopg.OperationalError)
    @app.errorhandler(psycopg.errors.ReadOnlySqlTransaction)
    @app.errorhandler(PoolTimeout)
    @app.errorhandler(DeadlinePassed)
    def _database_unavailable(error: Exception) -> Response:
        return database_unavailable(error).response()

    @app.errorhandler(Exception)
    def _unexpected(error: Exception) -> Response:
        return _internal_problem(error).response()


RETRY_AFTER_SECONDS: Final = 1
WALLET_RETRY_AFTER_SECONDS: Final = 2
"""What a 503 wallet-unavailable tells a client to wait before betting again."""
"""What a 503 log-busy tells a client to wait: an append's lock wait is bounded at seconds."""


def log_busy_reason(error: AppendTimedOut | LogBusy) -> str:
    """Why a write was refused as log-busy, as shoebox_log_busy_total's `reason` says it."""
    if isinstance(error, LogBusy):
        return "sequencer-behind"  # behind (or absent) by more than its bound
    if error.by_deadline:
        return "request-deadline"  # the request's time ran out first (issue 21)
    return "stream-lock"  # a stream's row lock, or the statement's own bound


def log_busy() -> Problem:
    """The answer to an append that gave up waiting for the log: retry, nothing was written."""
    return Problem(
        503,
        "log-busy",
        "The log could not take this write in time and nothing was recorded; send the same"
        " request again (with the same Idempotency-Key, if it had one).",
        headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
    )


# Seconds a client is told to wait when the database is away: about a reconnect attempt.
DATABASE_RETRY_AFTER_SECONDS: Final = 2


def database_unavailable(error: Exception) -> Problem:
    """The answer when PostgreSQL is unreachable, out of disk, or read-only: retry later.

    The append is one statement, so a failed one applied nothing; a connection lost after
    the commit leaves it applied, and a retry with the same Idempotency-Key gets its answer.
    """
    request_id = g.get("request_id", "-") if g else "-"
    sqlstate = getattr(error, "sqlstate", None)
    _logger.warning(
        "request %s: database unavailable (%s, SQLSTATE %s): %s",
        request_id,
        type(error).__name__,
        sqlstate,
        str(error).strip().splitlines()[0] if str(error).strip() else "",
    )
    return Problem(
        503,
        "service-unavailable",
        "The database is unavailable or refusing writes; nothing was applied by this attempt."
        " Retry after the Retry-After seconds, with the same Idempotency-Key.",
        headers={"Retry-After": str(DATABASE_RETRY_AFTER_SECONDS)},
    )


def idempotency_key_reused() -> Problem:
    """The answer to an idempotency key sent again with a different request."""
    return Problem(
        422,
        "idempotency-key-reused",
        "This Idempotency-Key was first used with a different method, path or body;"
        " use a new key for a new request.",
    )
