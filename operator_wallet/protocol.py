"""The calls the reference wallet answers, as Shoebox sends them (docs/wallets.md).

Parsing is strict: a field missing, of the wrong type, a float where an integer amount
belongs, or a name the protocol does not have is a BAD_REQUEST, and nothing is applied.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

# The answer's `status`, one per outcome. Shoebox sorts them into its four classes.
OK: Final = "OK"
INSUFFICIENT_FUNDS: Final = "INSUFFICIENT_FUNDS"
LIMIT_REACHED: Final = "LIMIT_REACHED"
PLAYER_BLOCKED: Final = "PLAYER_BLOCKED"
SESSION_EXPIRED: Final = "SESSION_EXPIRED"
TRANSACTION_ROLLED_BACK: Final = "TRANSACTION_ROLLED_BACK"
"""The transaction's id was rolled back before it arrived: it is never applied."""
UNKNOWN_TRANSACTION: Final = "UNKNOWN_TRANSACTION"
TRANSACTION_CONFLICT: Final = "TRANSACTION_CONFLICT"
"""The transaction id is taken by a call with other fields, or would pay a bet twice."""
WRONG_CURRENCY: Final = "WRONG_CURRENCY"
BAD_REQUEST: Final = "BAD_REQUEST"
BAD_SIGNATURE: Final = "BAD_SIGNATURE"

CALLS: Final = ("balance", "bet", "win", "rollback")

MINOR_UNIT_EXPONENTS: Final[Mapping[str, int]] = {
    # ISO 4217's minor units of the currencies a reference wallet is likely to be set up in.
    "GBP": 2,
    "EUR": 2,
    "USD": 2,
    "CHF": 2,
    "SEK": 2,
    "JPY": 0,
    "KWD": 3,
}
MAX_AMOUNT: Final = 10**15
"""Far above any stake, and far below PostgreSQL's bigint, so no sum can overflow."""

_ID: Final = re.compile(r"[A-Za-z0-9_.:-]{1,128}")


class BadRequestError(ValueError):
    """The request is not a well-formed call of the protocol."""


@dataclass(frozen=True, slots=True)
class Call:
    """One parsed call. `reference` is the win's bets, or the rollback's one transaction."""

    kind: str
    request_uuid: str
    player_id: str
    session_token: str
    """Empty when a win or a rollback came without one."""
    currency: str
    exponent: int
    transaction_uuid: str | None = None
    table_id: str | None = None
    round_id: str | None = None
    amount: int | None = None
    reference: tuple[str, ...] = ()

    def fields(self) -> dict[str, Any]:
        """What makes two calls under one transaction id the same call (not the request id)."""
        return {
            "kind": self.kind,
            "player_id": self.player_id,
            "table_id": self.table_id,
            "round_id": self.round_id,
            "amount": self.amount,
            "currency": self.currency,
            "reference": list(self.reference),
        }


def _uuid(body: Mapping[str, Any], name: str) -> str:
    value = body.get(name)
    if not isinstance(value, str):
        raise BadRequestError(f"{name} must be a UUID string")
    try:
        return str(uuid.UUID(value))
    except ValueError:
        raise BadRequestError(f"{name} must be a UUID string, not {value!r}") from None


def _id(body: Mapping[str, Any], name: str) -> str:
    value = body.get(name)
    if not isinstance(value, str) or not _ID.fullmatch(value):
        raise BadRequestError(f"{name} must be 1 to 128 of A-Z a-z 0-9 _ . : -")
    return value


def _int(body: Mapping[str, Any], name: str, minimum: int) -> int:
    value = body.get(name)
    # bool is an int in Python, and a float is never an amount.
    if type(value) is not int or not minimum <= value <= MAX_AMOUNT:
        raise BadRequestError(f"{name} must be an integer from {minimum} to {MAX_AMOUNT}")
    return value


def parse(kind: str, body: Any) -> Call:
    """The call `body` makes of `kind`, or BadRequestError saying what is wrong with it."""
    if kind not in CALLS:
        raise BadRequestError(f"no call {kind!r}")
    if not isinstance(body, dict):
        raise BadRequestError("the body must be a JSON object")
    allowed = {"request_uuid", "player_id", "session_token", "currency", "exponent"}
    if kind != "balance":
        allowed |= {"transaction_uuid", "table_id", "round_id", "amount"}
    if kind in ("win", "rollback"):
        allowed.add("reference_transaction_uuid")
    unknown = sorted(set(body) - allowed)
    if unknown:
        raise BadRequestError(f"unknown fields: {', '.join(unknown)}")
    # A win or a rollback is owed whatever became of the session, so it may come without one.
    token = body.get("session_token", "" if kind in ("win", "rollback") else None)
    if not isinstance(token, str) or len(token) > 256 or (not token and "session_token" in body):
        raise BadRequestError("session_token must be a string of 1 to 256 characters")
    currency = body.get("currency")
    if not isinstance(currency, str) or not re.fullmatch(r"[A-Z]{3}", currency):
        raise BadRequestError("currency must be an ISO 4217 code")
    exponent = _int(body, "exponent", 0)
    request_uuid, player_id = _uuid(body, "request_uuid"), _id(body, "player_id")
    if kind == "balance":
        return Call(kind, request_uuid, player_id, token, currency, exponent)
    reference: tuple[str, ...] = ()
    if kind == "win":
        references = body.get("reference_transaction_uuid")
        if not isinstance(references, list) or not 0 < len(references) <= 100:
            raise BadRequestError(
                "a win's reference_transaction_uuid is a list of 1 to 100 bet ids"
            )
        reference = tuple(
            _uuid({"reference_transaction_uuid": item}, "reference_transaction_uuid")
            for item in references
        )
        if len(set(reference)) != len(reference):
            raise BadRequestError("a win names each bet once")
    elif kind == "rollback":
        reference = (_uuid(body, "reference_transaction_uuid"),)
    return Call(
        kind,
        request_uuid,
        player_id,
        token,
        currency,
        exponent,
        transaction_uuid=_uuid(body, "transaction_uuid"),
        table_id=_id(body, "table_id"),
        round_id=_id(body, "round_id"),
        # A bet moves money; a win of a lost bet is 0; a rollback names its debit's amount.
        amount=_int(body, "amount", 1 if kind == "bet" else 0),
        reference=reference,
    )
