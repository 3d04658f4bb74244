"""The HTTP side of a seamless operator's wallet: send one signed call, classify its answer.

One `send` is one attempt; retrying (with the same call, so the same ids) is the owed-calls
queue's job (service/application/seamless_calls.py). A timeout, a refused
connection or a reset all read as an exchange without an answer, which the protocol sorts as
uncertain. A log line per call names the operator, the call, its transaction and its class;
never the session token, the secret or the body.
"""

from __future__ import annotations

import http.client
import json
import logging
import time
import tomllib
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlencode, urlsplit

from service.application.seamless import (
    SIGNATURE_HEADER,
    Exchange,
    Outcome,
    SeamlessWalletConfig,
    WalletCall,
    WalletConfigError,
    WalletResult,
    classify,
    signature,
    signature_problem,
)

log = logging.getLogger("shoebox.seamless_wallet")

MAX_ANSWER_BYTES: Final = 1024 * 1024


def load_wallets(path: Path) -> dict[str, SeamlessWalletConfig]:
    """Every seamless operator's wallet a TOML file configures, under `[operators.NAME]`.

    Each is checked now (a currency other than the tables' is refused here, not at the first
    bet). An error names the operator and the setting, never a secret's value. Read at startup
    from SHOEBOX_SEAMLESS_WALLETS_FILE (service/runtime/settings.py).
    """
    try:
        document = tomllib.loads(path.read_text())
    except OSError as error:
        raise WalletConfigError(f"cannot read {path}: {error.strerror}") from None
    except tomllib.TOMLDecodeError as error:
        # The decoder's message quotes no value, only where the syntax broke.
        raise WalletConfigError(f"{path} is not TOML: {error}") from None
    operators = document.get("operators", {})
    unknown = sorted(set(document) - {"operators"})
    if unknown or not isinstance(operators, dict):
        raise WalletConfigError(f"{path} holds only [operators.NAME] tables")
    wallets: dict[str, SeamlessWalletConfig] = {}
    for operator, table in operators.items():
        if not isinstance(table, dict):
            raise WalletConfigError(f"{path}: operators.{operator} must be a table")
        wallets[operator] = SeamlessWalletConfig.from_document(operator, table)
    return wallets


class WalletUnavailableError(Exception):
    """The wallet's transaction list could not be read (for reconciliation)."""


class SeamlessWalletClient:
    """Talks to one operator's wallet; one connection per call, so a retry starts clean."""

    def __init__(self, config: SeamlessWalletConfig, clock: Callable[[], datetime]) -> None:
        self._config = config
        self._clock = clock
        url = urlsplit(config.base_url)
        self._https = url.scheme == "https"
        self._host = url.hostname or ""
        self._port = url.port

    def __repr__(self) -> str:
        return f"SeamlessWalletClient(operator={self._config.operator!r})"

    def send(self, call: WalletCall, within_seconds: float | None = None) -> WalletResult:
        """One attempt at `call`, classified.

        `within_seconds` bounds the whole exchange below the configured timeouts: a bet's debit
        must be answered before its round's betting window closes. Past it, the exchange has
        no answer (uncertain), as past the configured read timeout.
        """
        started = time.perf_counter()
        path = self._config.path_prefix + call.path
        exchange = self._exchange("POST", path, call.body(), within_seconds)
        result = classify(self._config, call, "POST", exchange, self._now())
        log.log(
            logging.INFO if result.outcome is Outcome.OK else logging.WARNING,
            "wallet %s %s: %s",
            call.kind,
            result.outcome,
            result.reason,
            extra={
                "operator": self._config.operator,
                "call": call.kind,
                "transaction_uuid": call.transaction_uuid,
                "request_uuid": call.request_uuid,
                "outcome": str(result.outcome),
                "reason": result.reason,
                "duration_ms": round((time.perf_counter() - started) * 1000, 1),
            },
        )
        return result

    def transactions(self, since: datetime, until: datetime) -> Iterator[dict[str, Any]]:
        """Every transaction the wallet lists in [since, until), page by page."""
        after: str | None = None
        while True:
            query = {"from": since.isoformat(), "to": until.isoformat(), "limit": "500"}
            if after is not None:
                query["after"] = after
            path = f"{self._config.path_prefix}/transactions?{urlencode(query)}"
            exchange = self._exchange("GET", path, b"")
            if exchange.status_code != 200:
                raise WalletUnavailableError(
                    f"{self._config.operator}: the transaction list answered"
                    f" {exchange.status_code or exchange.failure}"
                )
            problem = signature_problem(
                self._config, exchange.signature, "GET", path, exchange.body, self._now()
            )
            if problem is not None:
                raise WalletUnavailableError(f"{self._config.operator}: {problem}")
            try:
                page = json.loads(exchange.body)
                rows: list[dict[str, Any]] = page["transactions"]
                after = page["next_after"]
            except (ValueError, KeyError, TypeError):
                raise WalletUnavailableError(
                    f"{self._config.operator}: the transaction list is unreadable"
                ) from None
            yield from rows
            if after is None:
                return

    def _now(self) -> int:
        return int(self._clock().timestamp())

    def _exchange(
        self, method: str, path: str, body: bytes, within_seconds: float | None = None
    ) -> Exchange:
        config = self._config
        connect_timeout = config.connect_timeout_seconds
        if within_seconds is not None:
            connect_timeout = min(connect_timeout, within_seconds)
        began = self._clock()
        header = signature(config.key_id, config.secret, method, path, self._now(), body)
        connection_class = (
            http.client.HTTPSConnection if self._https else http.client.HTTPConnection
        )
        connection = connection_class(self._host, self._port, timeout=connect_timeout)
        try:
            connection.connect()
            assert connection.sock is not None
            # http.client has one timeout; the read may wait longer than the connect.
            read_timeout = config.read_timeout_seconds
            if within_seconds is not None:
                spent = (self._clock() - began).total_seconds()
                read_timeout = min(read_timeout, within_seconds - spent)
                if read_timeout <= 0:
                    # The bound passed while connecting: nothing was sent, so nothing applied.
                    return Exchange(None, failure="timeout")
            connection.sock.settimeout(read_timeout)
            headers = {
                "Content-Type": "application/json",
                "Content-Length": str(len(body)),
                SIGNATURE_HEADER: header,
            }
            connection.request(method, path, body=body, headers=headers)
            response = connection.getresponse()
            answer = response.read(MAX_ANSWER_BYTES + 1)
            if len(answer) > MAX_ANSWER_BYTES:
                return Exchange(None, failure="the answer is too large")
            return Exchange(response.status, answer, response.getheader(SIGNATURE_HEADER))
        except TimeoutError:
            return Exchange(None, failure="timeout")
        except (OSError, http.client.HTTPException) as error:
            # Refused, reset, closed before answering, a truncated answer: no answer.
            return Exchange(None, failure=type(error).__name__)
        finally:
            connection.close()
