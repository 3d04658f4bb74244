"""Which operator a request acts for, and what it may see of other operators' players.

Several casinos (operators) share one Shoebox. A frontend key acts for its own operator's
players only; an ops or regulator key sees every operator unless it was created for one, and
names an operator with the `operator` query parameter. Inside the service a player is named by
a player key (service/application/operators.py), so this module is the one place that turns
the ids a caller sends into keys and the keys a response carries back into what that caller
may see:

- a path's `{player_id}` and a body's `player_id` become keys before the view runs, so an
  operator's key can only ever name its own players: another operator's `alice` is
  unreachable, and a player it does not have answers 404 exactly as a player nobody has;
- every `player_id` in a JSON response becomes the caller's own id for its own players and a
  per-table alias for another operator's, never that operator's id.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import marshmallow as ma
from flask import Response, g, request

from domain.ids import ID_PATTERN, is_id
from service.application.keys import ApiKey
from service.application.operators import (
    DEFAULT_OPERATOR,
    PLAYER_FIELD,
    SEPARATOR,
    Audience,
    checked_operator,
    player_key,
)
from service.web.api import OPERATOR_PARAMETER, container
from service.web.problems import PROBLEM_MIMETYPE, FieldError, Problem, compact_json


def _key() -> ApiKey:
    key = g.get("api_key")
    if not isinstance(key, ApiKey):
        raise RuntimeError("no authenticated key: reached without the auth hook")
    return key


def request_operator() -> str:
    """The operator whose players this request names: the key's own, or the one it asks for."""
    key = _key()
    asked = request.args.get(OPERATOR_PARAMETER)
    if key.operator is not None:
        if asked is not None and asked != key.operator:
            raise Problem(
                422,
                "validation-failed",
                f"{OPERATOR_PARAMETER}: this key acts for its own operator only; leave it out.",
                errors=[FieldError(OPERATOR_PARAMETER, "Not this key's operator.", "query")],
            )
        return key.operator
    if asked is None:
        return DEFAULT_OPERATOR
    try:
        checked_operator(asked)
    except ValueError as error:
        raise Problem(
            422,
            "validation-failed",
            f"{OPERATOR_PARAMETER}: {error}.",
            errors=[FieldError(OPERATOR_PARAMETER, str(error), "query")],
        ) from error
    if asked not in container().keys.operators():
        raise Problem(
            404,
            "not-found",
            f"No key names the operator {asked!r}; create one with"
            f" `shoebox keys create --operator {asked}`.",
        )
    return asked


def ledger_operator() -> str | None:
    """The operator a cut of the books is for: the key's own, the one asked for, or all (None)."""
    key = _key()
    if key.operator is not None or OPERATOR_PARAMETER in request.args:
        return request_operator()
    return None


def audience() -> Audience:
    """Whom the current response is for."""
    return Audience(_key().operator, container().alias_secret)


def request_player_key(player_id: str) -> str:
    """The player key for an id this request names, in the request's operator."""
    return player_key(request_operator(), player_id)


def qualify_path_player() -> None:
    """Before the view: a path's `{player_id}` becomes the request operator's player key."""
    args = request.view_args
    if not args or not isinstance(args.get(PLAYER_FIELD), str):
        return
    if g.get("api_key") is None:
        return
    player_id = args[PLAYER_FIELD]
    if not is_id(player_id):
        return  # the view's own check answers the 422 that names the parameter
    args[PLAYER_FIELD] = request_player_key(player_id)


def known_player(key: str) -> str:
    """`key` if the request operator has this player, else a 404 `player-not-found`.

    Every view that names an existing player passes its key through here (the body's, by
    PlayerField); only the two that create a player (a deposit, a session) do not.
    """
    return container().known_players.require(key)


class PlayerField(ma.fields.String):
    """A player id in a request body, loaded as the request operator's player key.

    The player must exist (404 `player-not-found`), unless the field is the one that brings a
    player into being (`new`).
    """

    def __init__(self, *, new: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.new = new

    def _deserialize(
        self, value: Any, attr: str | None, data: Mapping[str, Any] | None, **kwargs: Any
    ) -> str:
        player_id = super()._deserialize(value, attr, data, **kwargs)
        if not is_id(player_id):
            raise ma.ValidationError(f"Must match {ID_PATTERN}.")
        key = request_player_key(player_id)
        return key if self.new else known_player(key)


def player_field(description: str, *, new: bool = False) -> PlayerField:
    """A required player id in a request body; `new`: it may name a player not yet seen."""
    return PlayerField(
        new=new,
        required=True,
        metadata={"description": description, "pattern": ID_PATTERN, "example": "alice"},
    )


def name_players(response: Response) -> Response:
    """After the view: every player key in a JSON body as this caller may see it.

    Runs before the idempotency hook stores the response, and not on a replay, which is the
    stored body already named for the same key.
    """
    key = g.get("api_key")
    if not isinstance(key, ApiKey) or key.operator is None or response.direct_passthrough:
        return response
    if g.get("idempotency_replayed") or g.get("idempotency_answered"):
        return response  # named already, when it was first built
    mimetype = response.mimetype
    if mimetype not in ("application/json", PROBLEM_MIMETYPE):
        return response
    body = response.get_data(as_text=True)
    if PLAYER_FIELD not in body and SEPARATOR not in body:
        return response
    if key.operator == DEFAULT_OPERATOR and SEPARATOR not in body:
        return response  # only the default operator's players: nothing to hide or rename
    viewer = audience()
    table_id = (request.view_args or {}).get("table_id")
    document = json.loads(body)
    renamed = viewer.rename(document, table_id if isinstance(table_id, str) else None)
    if mimetype == PROBLEM_MIMETYPE and isinstance(renamed, dict):
        detail = renamed.get("detail")
        if isinstance(detail, str):
            # A refusal names the caller's own player by key; the caller knows it by its id.
            renamed["detail"] = detail.replace(f"{key.operator}{SEPARATOR}", "")
    if renamed != document:
        response.set_data(compact_json(renamed))
    return response
