"""The Idempotency-Key header: a retried POST, PUT, PATCH or DELETE gets its first response.

The key is optional; when sent it must be 1 to 255 printable ASCII characters. It is scoped
by API key, so two front ends cannot collide, and bound to a fingerprint of the request
(SHA-256 of method, path and query, and the body with its JSON keys sorted).

How a request with a key runs:
1. Before the view: if the store already holds the key, the request is not run again.
   Same fingerprint and a stored response: that response is replayed, with
   `Idempotent-Replayed: true`. Different fingerprint: a 422 problem. Same fingerprint
   but no response yet: the first request is still running (or died between its append
   and storing its answer); wait briefly, then a 409 problem.
2. The view runs with `actor().idempotency` set; the application service passes it to the
   one append that performs the command, in whose transaction the store records the key.
3. After the view: a success is stored against the key in one statement that returns the
   response now stored (the first stored wins, and is what this request answers too, so
   racing identical requests answer alike). A
   refusal is not stored, because nothing was appended; but if a racing twin applied the
   same request meanwhile, the refusal is replaced by the twin's response.

A view marked `answered_in_append` (the table commands: a bet, Deal, Pass) skips steps 1 and 3:
it answers through `answer_command`, which builds the answer from the command's prepared
events before the append and has the append store it with the key, in one transaction and
one call to the database. The append answers a known key with its stored answer, which the
view replays; a refusal still goes through step 3's lookup, so a retry that is no longer
allowed (Deal pressed twice) still gets the first answer. No key is then ever in the log
without its answer, and a fresh keyed bet costs one call.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any, Final, TypeVar

import marshmallow as ma
import orjson
import psycopg
from flask import Response, current_app, g, jsonify, request
from psycopg_pool import PoolTimeout

from events import deadlines
from events.deadlines import DeadlinePassed
from events.store import EventStore, Idempotency, JsonValue
from events.store import UnknownIdempotencyKey as _UnknownKey
from service.application.actor import Actor, Outcome
from service.application.appends import Receipt, note_looked_up
from service.application.keys import ApiKey
from service.web.api import actor, container
from service.web.operators import name_players
from service.web.problems import Problem, database_unavailable, idempotency_key_reused
from service.web.table_actions import TableAction, action_json

_log = logging.getLogger(__name__)
V = TypeVar("V", bound=Callable[..., Any])
A = TypeVar("A")

HEADER: Final = "Idempotency-Key"
REPLAYED_HEADER: Final = "Idempotent-Replayed"
METHODS: Final = frozenset({"POST", "PUT", "PATCH", "DELETE"})
MAX_KEY_LENGTH: Final = 255
# How long a retry waits for its first request's response before answering 409.
WAIT_SECONDS: Final = 2.0
_POLL_SECONDS: Final = 0.02
_ANSWERED_IN_APPEND: Final = "_shoebox_answered_in_append"
# Enough digits to spell an integer outside 64 bits (see _parsed).
_LONG_DIGITS: Final = re.compile(rb"[0-9]{19}")


def answered_in_append(view: V) -> V:
    """Mark a view method that answers through `answer_command`: its append stores its answer."""
    setattr(view, _ANSWERED_IN_APPEND, True)
    return view


def _view_answers_in_append() -> bool:
    view_function = current_app.view_functions.get(request.endpoint or "")
    handler = getattr(getattr(view_function, "view_class", None), request.method.lower(), None)
    return getattr(handler, _ANSWERED_IN_APPEND, False) is True


def check_key(value: str) -> str:
    """The header's value if it is 1 to 255 printable ASCII characters, else a 400 problem."""
    if not 0 < len(value) <= MAX_KEY_LENGTH or not all(" " <= c <= "~" for c in value):
        raise Problem(
            400,
            "invalid-header",
            f"{HEADER} must be 1 to {MAX_KEY_LENGTH} printable ASCII characters.",
        )
    return value


def scoped_key(api_key: ApiKey, value: str) -> str:
    """The store's key: the API key's id and the caller's key, so callers cannot collide."""
    return f"{api_key.key_id}:{value}"


def _parsed(body: bytes) -> Any:
    """json.loads's value for `body`, by orjson where orjson reads it (several times faster).

    Where both read a document they agree (the same dicts, lists, strings, integers and
    floats, a repeated key's last value winning). orjson refuses what it does not read alike
    (NaN, infinities, lone surrogates, any encoding but UTF-8), and reads an integer past 64
    bits as a float where json.loads keeps it exact: a body with a run of 19 digits, and any
    orjson refuses, is json.loads's to read, so every fingerprint stays what it was.
    """
    if _LONG_DIGITS.search(body) is None:
        try:
            return orjson.loads(body)
        except orjson.JSONDecodeError:
            pass
    return json.loads(body)


def fingerprint(method: str, path: str, body: bytes) -> str:
    """SHA-256 of the method, the path with its query, and the body with sorted JSON keys."""
    try:
        canonical = json.dumps(
            _parsed(body), sort_keys=True, separators=(",", ":"), ensure_ascii=False
        ).encode()
    except (ValueError, UnicodeDecodeError):
        # Not JSON (or empty): the bytes as sent are the request.
        canonical = body
    digest = hashlib.sha256()
    for part in (method.upper().encode(), path.encode(), canonical):
        digest.update(len(part).to_bytes(8, "big"))
        digest.update(part)
    return digest.hexdigest()


def begin_request() -> Response | None:
    """Before the view: replay or refuse a known key, or arm the key for the view's append."""
    if request.method not in METHODS or request.routing_exception is not None:
        return None
    value = request.headers.get(HEADER)
    api_key = g.get("api_key")
    if value is None or not isinstance(api_key, ApiKey):
        return None
    idempotency = Idempotency(
        scoped_key(api_key, check_key(value)),
        fingerprint(request.method, request.full_path, request.get_data(cache=True)),
    )
    if _view_answers_in_append():
        # The append looks the key up itself, under its streams' row locks, and replays it.
        g.idempotency = idempotency
        return None
    store = container().store
    record = store.idempotency_record(idempotency.key)
    if record is not None and record.fingerprint != idempotency.fingerprint:
        raise idempotency_key_reused()
    g.idempotency = idempotency
    if record is not None:
        stored = _wait_for_response(store, idempotency, record.response)
        if stored is not None:
            g.idempotency_replayed = True
            return _replay(stored)
        # The first request's events are in the log but its response is not: it died between
        # its append and storing the answer, or is very slow. The view answers from the log,
        # since the service replays a known key's append instead of deciding again.
        return None
    # finish_request answers a refusal with a racing twin's response, so the service's own
    # lookup of this key before deciding would only repeat the one just made.
    note_looked_up(idempotency)
    return None


def finish_request(response: Response) -> Response:
    """After the view: store a success against the key; answer as the first response did."""
    idempotency = g.get("idempotency")
    if not isinstance(idempotency, Idempotency) or g.get("idempotency_replayed"):
        return response
    if g.get("idempotency_answered"):
        return response  # stored by the append, with its events
    if response.status_code == 503:
        # The database is away: there is nothing to look up, and the key stays free for the
        # retry (if the append did commit, the retry finds its record and answers from the log).
        return response
    try:
        return _finish(response, idempotency)
    except (psycopg.OperationalError, PoolTimeout, DeadlinePassed) as error:
        # An after-request hook that raises is a 500. When the lookup finds no connection
        # in the request's time (an overloaded server, issue 23's load test) or no database,
        # the answer is what the same error gets anywhere else: a 503 to retry with the
        # same key, which then finds whatever this request or a twin left.
        return database_unavailable(error).response()


def _finish(response: Response, idempotency: Idempotency) -> Response:
    store = container().store
    if response.status_code >= 400:
        record = store.idempotency_record(idempotency.key)
        if record is None:
            return response
        # Returned, not raised: an after-request hook that raises leaves Flask to send the
        # view's own response unfinished.
        if record.fingerprint != idempotency.fingerprint:
            return idempotency_key_reused().response()
        stored = _wait_for_response(store, idempotency, record.response)
        if stored is None:
            return Problem(
                409,
                "idempotency-key-in-progress",
                "The first request with this Idempotency-Key was applied but its response is"
                " not stored yet; retry in a moment, or read the resource.",
            ).response()
        return _replay(stored)
    document = _stored_form(response)
    try:
        stored = store.record_response(idempotency.key, document)
    except _UnknownKey:
        # The view appended nothing under this key (a read, or a no-op): nothing to replay.
        return response
    except (psycopg.OperationalError, PoolTimeout, DeadlinePassed) as error:
        # The command is applied and this is its true answer; only its copy for a retry is
        # missing, so a retry under the key is told the first is in progress, never applied
        # twice. A 503 here would say nothing was applied, which is false.
        _log.warning("answer for an applied command not stored for its key: %s", error)
        return response
    # A twin with the same key stored its answer first: answer as it did.
    return response if stored == document else _replay(stored)


def answer_command(
    status: int,
    schema: ma.Schema,
    command: Callable[[Actor], Receipt],
    render: Callable[[Outcome | Receipt], A],
) -> A | Response:
    """Run a command and answer it with `render`'s value dumped by `schema`, at `status`.

    Without an Idempotency-Key this is `render(command(actor()))`, which the view's
    `blp.response` dumps as usual. With one, the answer is built from the command's outcome
    before its append (named for the caller, as `name_players` would) and stored by the
    append; the view then returns that stored answer, which a retry replays byte for byte.
    """
    caller = actor()
    if caller.idempotency is None or not _view_answers_in_append():
        answer = render(command(caller))
        if isinstance(answer, TableAction):
            return _written(answer, status)
        return answer

    # The last answer built, and its stored form: the append may decide more than once.
    built: list[tuple[JsonValue, Response]] = []

    def respond(outcome: Outcome) -> JsonValue:
        answer = render(outcome)
        if isinstance(answer, TableAction):
            response = _written(answer, status)
        else:
            response = jsonify(schema.dump(answer))
            response.status_code = status
        document = _stored_form(name_players(response))
        built[:] = [(document, response)]
        return document

    receipt = command(replace(caller, respond=respond))
    if receipt.response is None:
        # A key whose first request stored no answer (before migration 0011): answer from the
        # log, and finish_request stores it as it always did.
        return render(receipt)
    g.idempotency_answered = True
    if receipt.replayed:
        g.idempotency_replayed = True
        return _replay(receipt.response)
    if built and receipt.response is built[0][0]:
        # The answer this request stored, as built: the same status, type, Location and
        # body that a response rebuilt from its stored form would carry.
        return built[0][1]
    return _stored_response(receipt.response)


def _written(action: TableAction, status: int) -> Response:
    # Written once with orjson, as the view's TableActionSchema would dump and jsonify it
    # (blp.response passes a Response through untouched).
    return Response(action_json(action), status=status, mimetype="application/json")


def _wait_for_response(
    store: EventStore, idempotency: Idempotency, stored: JsonValue | None
) -> JsonValue | None:
    """The stored response for a known key, waiting briefly for a twin still finishing."""
    # Within the request's own deadline, which may be sooner.
    deadline = time.monotonic() + (deadlines.bounded(WAIT_SECONDS) or 0.0)
    while stored is None and time.monotonic() < deadline:
        time.sleep(_POLL_SECONDS)
        later = store.idempotency_record(idempotency.key)
        stored = later.response if later is not None else None
    return stored


def _stored_form(response: Response) -> dict[str, JsonValue]:
    # The body is kept as text: any JSON the view produced (floats included) replays byte
    # for byte, and text is always canonical JSON for the store.
    return {
        "status": response.status_code,
        "content_type": response.content_type,
        "location": response.headers.get("Location"),
        "body": response.get_data(as_text=True),
    }


def _replay(stored: JsonValue) -> Response:
    response = _stored_response(stored)
    response.headers[REPLAYED_HEADER] = "true"
    return response


def _stored_response(stored: JsonValue) -> Response:
    if not isinstance(stored, dict):
        raise TypeError(f"not a stored response: {stored!r}")
    status, body = stored.get("status"), stored.get("body")
    content_type, location = stored.get("content_type"), stored.get("location")
    if not isinstance(status, int) or not isinstance(body, str):
        raise TypeError(f"not a stored response: {stored!r}")
    response = Response(body, status=status)
    if isinstance(content_type, str):
        response.headers["Content-Type"] = content_type
    if isinstance(location, str):
        response.headers["Location"] = location
    return response
