"""The seamless wallet protocol, Shoebox's side: the calls, their ids, signatures, and classes.

A seamless operator keeps its players' money in its own wallet, and Shoebox calls that
wallet's API to take a stake (`bet`), pay a result (`win`, 0 for a lost bet), or cancel either
(`rollback`); `balance` checks a session. docs/wallets.md is the protocol's reference.

Everything here is pure: building a call's body, deriving its ids from the event that asks for
it, signing, and sorting an answer into exactly one of four classes, each with its own rule
(docs/wallets.md, "The four classes"). The HTTP exchange itself is
service/runtime/seamless_wallet.py; the bet path that uses it is
service/application/seamless_bets.py.

The signature rule is implemented again by the reference wallet (operator_wallet.signing),
which stands in for a casino and shares no code with Shoebox; tests/wallet_signing_vectors.json
holds the two equal.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

from domain.ids import is_id
from domain.table import TableSettings

SIGNATURE_HEADER: Final = "Wallet-Signature"
SIGNATURE_TOLERANCE_SECONDS: Final = 300
"""How far an answer's signature timestamp may be from Shoebox's clock, either way."""
MINOR_UNIT_EXPONENTS: Final[Mapping[str, int]] = {"GBP": 2}
"""ISO 4217 minor units of the currencies Shoebox can play in: every amount is an integer of
10**-exponent of the currency, and every call states the exponent it means."""
MAX_TIMEOUT_SECONDS: Final = 60.0

BALANCE: Final = "balance"
BET: Final = "bet"
WIN: Final = "win"
ROLLBACK: Final = "rollback"
CALLS: Final = (BALANCE, BET, WIN, ROLLBACK)

# The statuses of docs/wallets.md, as a wallet answers them.
OK_STATUS: Final = "OK"
REFUSALS: Final = frozenset(
    {"INSUFFICIENT_FUNDS", "LIMIT_REACHED", "PLAYER_BLOCKED", "SESSION_EXPIRED"}
)
ROLLED_BACK_STATUS: Final = "TRANSACTION_ROLLED_BACK"
UNKNOWN_TRANSACTION_STATUS: Final = "UNKNOWN_TRANSACTION"
FATAL_STATUSES: Final = frozenset(
    {"WRONG_CURRENCY", "TRANSACTION_CONFLICT", "BAD_SIGNATURE", "BAD_REQUEST"}
)

# uuid5 namespaces: the ids are a function of the event, so a replay sends the same calls.
_TRANSACTION_NAMESPACE: Final = uuid.UUID("5b0e6a43-6f1c-4b47-9c2a-8f3c1d2e7a10")
_REQUEST_NAMESPACE: Final = uuid.UUID("a7d4c5e2-2b9f-4e61-8d0a-3c6b9e1f4d22")
_KEY_ID: Final = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_HEADER_VALUE: Final = re.compile(
    r"key_id=(?P<key_id>[A-Za-z0-9_.-]{1,64}),timestamp=(?P<timestamp>[0-9]{1,12}),"
    r"hmac_sha256=(?P<signature>[0-9a-f]{64})"
)


class WalletConfigError(ValueError):
    """A seamless operator's wallet configuration Shoebox cannot use; said when configured."""


class Outcome(StrEnum):
    """The four classes of answer, each with its own rule (docs/wallets.md)."""

    OK = "ok"
    REFUSED = "refused"
    """The wallet said no and moved nothing: the bet is refused with a problem document."""
    UNCERTAIN = "uncertain"
    """Nobody knows whether money moved: a bet is refused and a rollback of it is owed."""
    FATAL = "fatal"
    """The wallet and Shoebox disagree about the protocol: park the call, raise an alert."""


@dataclass(frozen=True, slots=True)
class Secret:
    """A secret string (a signing secret, a session token) that no repr or log line shows."""

    value: str = field(repr=False)

    def __repr__(self) -> str:
        return "Secret(<hidden>)"

    def __str__(self) -> str:
        return "<hidden>"


@dataclass(frozen=True, slots=True)
class SeamlessWalletConfig:
    """Where a seamless operator's wallet is and how to talk to it; checked when built."""

    operator: str
    base_url: str
    key_id: str
    secret: Secret
    currency: str
    connect_timeout_seconds: float = 1.0
    read_timeout_seconds: float = 2.0
    previous_keys: tuple[tuple[str, Secret], ...] = ()
    """Keys being rotated out: answers signed with them are still accepted, requests are
    signed with `key_id` alone."""
    flag_after_seconds: float = 600.0
    """How long an owed call may keep failing before it is flagged for an operator."""

    def __post_init__(self) -> None:
        if not is_id(self.operator):
            raise WalletConfigError(f"{self.operator!r} is not an operator id")
        url = urlsplit(self.base_url)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise WalletConfigError(f"{self.operator}: base_url must be an http(s) URL")
        if url.username is not None or url.password is not None or url.query or url.fragment:
            # Credentials in a URL end up in logs; the signing key is the only credential.
            raise WalletConfigError(
                f"{self.operator}: base_url may carry no credentials, query or fragment"
            )
        if not _KEY_ID.fullmatch(self.key_id):
            raise WalletConfigError(f"{self.operator}: key_id is 1 to 64 of A-Z a-z 0-9 _ . -")
        if len(self.secret.value.encode()) < 16:
            raise WalletConfigError(f"{self.operator}: the signing secret is at least 16 bytes")
        table_currency = TableSettings().currency
        if self.currency != table_currency:
            raise WalletConfigError(
                f"{self.operator}: the wallet's currency {self.currency!r} is not the tables'"
                f" {table_currency!r}; a seamless operator plays in the tables' currency"
            )
        for old_id, old_secret in self.previous_keys:
            if not _KEY_ID.fullmatch(old_id) or old_id == self.key_id:
                raise WalletConfigError(
                    f"{self.operator}: a previous key id is 1 to 64 of A-Z a-z 0-9 _ . -,"
                    " and not the current key's"
                )
            if len(old_secret.value.encode()) < 16:
                raise WalletConfigError(
                    f"{self.operator}: previous key {old_id}'s secret is at least 16 bytes"
                )
        if not self.flag_after_seconds > 0:
            raise WalletConfigError(f"{self.operator}: flag_after_seconds must be above 0")
        for name in ("connect_timeout_seconds", "read_timeout_seconds"):
            seconds = getattr(self, name)
            if not 0 < seconds <= MAX_TIMEOUT_SECONDS:
                raise WalletConfigError(
                    f"{self.operator}: {name} must be above 0 and at most"
                    f" {MAX_TIMEOUT_SECONDS:g}, not {seconds!r}"
                )

    def secret_of(self, key_id: str) -> Secret | None:
        """The secret of an accepted key id: the current one or one being rotated out."""
        if key_id == self.key_id:
            return self.secret
        return dict(self.previous_keys).get(key_id)

    @property
    def exponent(self) -> int:
        """The currency's minor-unit exponent, stated in every call."""
        return MINOR_UNIT_EXPONENTS[self.currency]

    @property
    def path_prefix(self) -> str:
        """The base URL's path, without its trailing slash, that every call's path extends."""
        return urlsplit(self.base_url).path.rstrip("/")

    @classmethod
    def from_document(cls, operator: str, document: Mapping[str, Any]) -> SeamlessWalletConfig:
        """The configuration a TOML or JSON table describes; the secret inline or in a file."""
        allowed = {
            "base_url",
            "key_id",
            "secret",
            "secret_file",
            "currency",
            "connect_timeout_seconds",
            "read_timeout_seconds",
            "previous_keys",
            "flag_after_seconds",
        }
        unknown = sorted(set(document) - allowed)
        if unknown:
            raise WalletConfigError(f"{operator}: unknown settings {', '.join(unknown)}")
        secret = document.get("secret")
        secret_file = document.get("secret_file")
        if (secret is None) == (secret_file is None):
            raise WalletConfigError(f"{operator}: set exactly one of secret and secret_file")
        if secret_file is not None:
            try:
                secret = Path(str(secret_file)).read_text().strip()
            except OSError as error:
                # The error names the file, never its content.
                raise WalletConfigError(
                    f"{operator}: cannot read secret_file: {error.strerror}"
                ) from None
        if not isinstance(secret, str):
            raise WalletConfigError(f"{operator}: the secret is a string")
        previous = document.get("previous_keys", {})
        if not isinstance(previous, Mapping) or not all(
            isinstance(value, str) for value in previous.values()
        ):
            raise WalletConfigError(f"{operator}: previous_keys is a table of key id = secret")
        try:
            return cls(
                operator=operator,
                base_url=str(document["base_url"]),
                key_id=str(document["key_id"]),
                secret=Secret(secret),
                currency=str(document["currency"]),
                connect_timeout_seconds=float(document.get("connect_timeout_seconds", 1.0)),
                read_timeout_seconds=float(document.get("read_timeout_seconds", 2.0)),
                previous_keys=tuple(
                    (str(key), Secret(value)) for key, value in sorted(previous.items())
                ),
                flag_after_seconds=float(document.get("flag_after_seconds", 600.0)),
            )
        except KeyError as error:
            raise WalletConfigError(f"{operator}: {error.args[0]} is required") from None
        except (TypeError, ValueError) as error:
            if isinstance(error, WalletConfigError):
                raise
            raise WalletConfigError(f"{operator}: a timeout is a number of seconds") from None


# -- the calls ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WalletCall:
    """One call to a wallet, the same on every retry: its ids are fixed when it is built."""

    kind: str
    request_uuid: str
    player_id: str
    session_token: Secret | None
    """None only for a win or a rollback, which the wallet must take without a session."""
    currency: str
    exponent: int
    transaction_uuid: str | None = None
    table_id: str | None = None
    round_id: str | None = None
    amount: int | None = None
    reference: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in CALLS:
            raise ValueError(f"no wallet call {self.kind!r}")
        if self.session_token is None and self.kind in (BALANCE, BET):
            raise ValueError(f"a {self.kind} carries the player's session token")
        if self.amount is not None and (
            type(self.amount) is not int or self.amount < (1 if self.kind == BET else 0)
        ):
            raise ValueError(f"a {self.kind}'s amount is a whole number of minor units")

    @property
    def path(self) -> str:
        """The call's path under the wallet's base URL."""
        return f"/{self.kind}"

    def document(self) -> dict[str, Any]:
        """The call's JSON body, as docs/wallets.md shows it."""
        body: dict[str, Any] = {
            "request_uuid": self.request_uuid,
            "player_id": self.player_id,
            "currency": self.currency,
            "exponent": self.exponent,
        }
        if self.session_token is not None:
            body["session_token"] = self.session_token.value
        if self.kind != BALANCE:
            body |= {
                "transaction_uuid": self.transaction_uuid,
                "table_id": self.table_id,
                "round_id": self.round_id,
                "amount": self.amount,
            }
        if self.kind == WIN:
            body["reference_transaction_uuid"] = list(self.reference)
        elif self.kind == ROLLBACK:
            body["reference_transaction_uuid"] = self.reference[0]
        return body

    def body(self) -> bytes:
        """The bytes sent and signed: sorted keys, no spaces, so every retry is identical."""
        return json.dumps(self.document(), sort_keys=True, separators=(",", ":")).encode()


def transaction_uuid(kind: str, stream_id: str, version: int, reference: str = "") -> str:
    """The id of the money call that event `version` of `stream_id` asks for.

    A stream and version name an event forever, whereas a position is the log's order of
    commits; so a replay of the log derives the same ids, and a bet placed after a removed bet
    on the same spot (a later event) gets a new one. `reference` tells apart the several
    rollbacks one event asks for (a void after settlement cancels every win and bet).
    """
    if kind not in (BET, WIN, ROLLBACK) or version < 0:
        raise ValueError("a transaction is a bet, win or rollback asked for by an event")
    return str(uuid.uuid5(_TRANSACTION_NAMESPACE, f"{kind}|{stream_id}|{version}|{reference}"))


def request_uuid(transaction: str) -> str:
    """The request id of a transaction's call: one id, whichever process sends it, however often."""
    return str(uuid.uuid5(_REQUEST_NAMESPACE, transaction))


def balance_call(
    config: SeamlessWalletConfig, player_id: str, session_token: str, request: str
) -> WalletCall:
    """A balance check of a session; `request` is kept by the caller across retries."""
    return WalletCall(
        BALANCE, request, player_id, Secret(session_token), config.currency, config.exponent
    )


def bet_call(
    config: SeamlessWalletConfig,
    stream_id: str,
    version: int,
    player_id: str,
    session_token: str,
    table_id: str,
    round_id: str,
    amount: int,
) -> WalletCall:
    """The debit of a stake that BetPlaced at `stream_id`@`version` asks for."""
    transaction = transaction_uuid(BET, stream_id, version)
    return WalletCall(
        BET,
        request_uuid(transaction),
        player_id,
        Secret(session_token),
        config.currency,
        config.exponent,
        transaction,
        table_id,
        round_id,
        amount,
    )


def win_call(
    config: SeamlessWalletConfig,
    stream_id: str,
    version: int,
    player_id: str,
    session_token: str | None,
    table_id: str,
    round_id: str,
    amount: int,
    bets: Sequence[str],
) -> WalletCall:
    """The credit BetSettled at `stream_id`@`version` asks for, settling every debit of a spot."""
    if not bets:
        raise ValueError("a win settles at least one bet")
    transaction = transaction_uuid(WIN, stream_id, version)
    return WalletCall(
        WIN,
        request_uuid(transaction),
        player_id,
        None if session_token is None else Secret(session_token),
        config.currency,
        config.exponent,
        transaction,
        table_id,
        round_id,
        amount,
        tuple(bets),
    )


def rollback_call(
    config: SeamlessWalletConfig,
    stream_id: str,
    version: int,
    player_id: str,
    session_token: str | None,
    table_id: str,
    round_id: str,
    cancelled: str,
    amount: int,
) -> WalletCall:
    """The cancelling of transaction `cancelled` (of `amount`) that an event asks for."""
    transaction = transaction_uuid(ROLLBACK, stream_id, version, cancelled)
    return WalletCall(
        ROLLBACK,
        request_uuid(transaction),
        player_id,
        None if session_token is None else Secret(session_token),
        config.currency,
        config.exponent,
        transaction,
        table_id,
        round_id,
        amount,
        (cancelled,),
    )


# -- signatures --------------------------------------------------------------------------


def signed_message(method: str, path: str, timestamp: int, body: bytes) -> bytes:
    """The bytes a signature covers: method, path with query, timestamp, raw body."""
    return f"{method.upper()}\n{path}\n{timestamp}\n".encode() + body


def signature(
    key_id: str, secret: Secret, method: str, path: str, timestamp: int, body: bytes
) -> str:
    """The Wallet-Signature header value for one request or answer."""
    digest = hmac.new(
        secret.value.encode(), signed_message(method, path, timestamp, body), hashlib.sha256
    )
    return f"key_id={key_id},timestamp={timestamp},hmac_sha256={digest.hexdigest()}"


def signature_problem(
    config: SeamlessWalletConfig,
    header: str | None,
    method: str,
    path: str,
    body: bytes,
    now: int,
) -> str | None:
    """Why an answer's signature is not the wallet's under our key, or None if it is."""
    if header is None:
        return "the answer is not signed"
    parsed = _HEADER_VALUE.fullmatch(header.strip())
    if parsed is None:
        return "the answer's signature header is malformed"
    key_id = parsed["key_id"]
    secret = config.secret_of(key_id)
    if secret is None:
        return f"the answer is signed with key {key_id!r}, not ours"
    timestamp = int(parsed["timestamp"])
    if abs(now - timestamp) > SIGNATURE_TOLERANCE_SECONDS:
        return "the answer's signature is stale"
    expected = signature(key_id, secret, method, path, timestamp, body)
    if not hmac.compare_digest(expected, header.strip()):
        return "the answer's signature does not match"
    return None


# -- the four classes --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Exchange:
    """What came back for one attempt: an HTTP answer, or why there was none."""

    status_code: int | None
    body: bytes = b""
    signature: str | None = None
    failure: str | None = None
    """timeout, connection refused, reset...: set when no answer came (status_code None)."""


@dataclass(frozen=True, slots=True)
class WalletResult:
    """An answer's class, why, and the balance it states if it is ok."""

    outcome: Outcome
    reason: str
    """A short stable code: the wallet's status, or what went wrong (`timeout`, `http-503`)."""
    detail: str = ""
    balance: int | None = None


def classify(
    config: SeamlessWalletConfig, call: WalletCall, method: str, exchange: Exchange, now: int
) -> WalletResult:
    """Sort one exchange into exactly one of ok, refused, uncertain and fatal."""
    uncertain, fatal = Outcome.UNCERTAIN, Outcome.FATAL
    code = exchange.status_code
    if code is None:
        return WalletResult(uncertain, "no-answer", exchange.failure or "no answer")
    if code >= 500 or code in (408, 429):
        return WalletResult(uncertain, f"http-{code}", "the wallet may or may not have acted")
    if code == 401:
        return WalletResult(fatal, "BAD_SIGNATURE", "the wallet refused our signature")
    path = config.path_prefix + call.path
    problem = signature_problem(config, exchange.signature, method, path, exchange.body, now)
    if problem is not None:
        return WalletResult(fatal, "bad-answer-signature", problem)
    try:
        answer = json.loads(exchange.body)
        status = answer["status"]
        if not isinstance(status, str):
            raise TypeError(status)
    except (ValueError, KeyError, TypeError):
        return WalletResult(uncertain, "unreadable", "the answer is not a wallet answer")
    if code != 200:
        return WalletResult(fatal, f"http-{code}", f"{status}: {answer.get('message', '')}")
    if answer.get("request_uuid") != call.request_uuid:
        return WalletResult(fatal, "wrong-request", "the answer is to another request")
    return _by_status(call, answer, status)


def _by_status(call: WalletCall, answer: Mapping[str, Any], status: str) -> WalletResult:
    uncertain, fatal = Outcome.UNCERTAIN, Outcome.FATAL
    message = str(answer.get("message", ""))
    # A win or a rollback must be accepted whatever the session or a block: the stake was
    # taken. Refusing one is a breach of the protocol that an operator must look at.
    takes_refusals = call.kind in (BALANCE, BET)
    if status == OK_STATUS:
        balance = answer.get("balance")
        if type(balance) is not int:
            return WalletResult(uncertain, "unreadable", "an ok answer without an integer balance")
        if answer.get("currency") != call.currency or answer.get("exponent") != call.exponent:
            return WalletResult(
                fatal,
                "WRONG_CURRENCY",
                f"the wallet answers in {answer.get('currency')!r} exponent"
                f" {answer.get('exponent')!r}, not {call.currency} exponent {call.exponent}",
            )
        if call.transaction_uuid is not None and (
            answer.get("transaction_uuid") != call.transaction_uuid
        ):
            return WalletResult(fatal, "wrong-transaction", "the answer is to another transaction")
        return WalletResult(Outcome.OK, OK_STATUS, message, balance)
    if status in REFUSALS or (status == ROLLED_BACK_STATUS and call.kind == BET):
        if takes_refusals:
            return WalletResult(Outcome.REFUSED, status, message)
        return WalletResult(fatal, status, f"the wallet refused a {call.kind}: {message}")
    if status == UNKNOWN_TRANSACTION_STATUS:
        if call.kind == ROLLBACK:
            # Nothing to cancel, and the wallet now refuses the transaction should it come.
            return WalletResult(Outcome.OK, status, message)
        return WalletResult(fatal, status, message)
    if status in FATAL_STATUSES or status == ROLLED_BACK_STATUS:
        return WalletResult(fatal, status, message)
    # A status the protocol does not have: we cannot tell what the wallet did.
    return WalletResult(uncertain, "unreadable", f"unknown status {status!r}")
