"""The reference wallet's HTTP service: the protocol's calls, the transaction list, and admin.

`/wallet/...` is what Shoebox calls, signed both ways. `/admin/...` is the casino's own side
(open an account, open a session, set faults) behind a bearer token; Shoebox never calls it.
Every answer of the protocol is HTTP 200 with a `status`, except a bad signature (401), a
malformed call (400) and the faults' 5xx, so that a client can tell the wallet's word from a
proxy's.
"""

from __future__ import annotations

import hmac
import json
import logging
import threading
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Final
from urllib.parse import parse_qs, urlsplit

from operator_wallet import protocol, signing
from operator_wallet.faults import FaultError, FaultRule, Faults
from operator_wallet.ledger import Ledger, LedgerError
from operator_wallet.signing import SignatureError, SigningKey

log = logging.getLogger("operator_wallet")

MAX_BODY: Final = 64 * 1024
REPLAYED_HEADER: Final = "Wallet-Replayed"
DEFAULT_PAGE: Final = 100
MAX_PAGE: Final = 1000


def _json(document: Any) -> bytes:
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()


class WalletServer(ThreadingHTTPServer):
    """One reference wallet listening on `host`:`port` (0 picks a free port)."""

    daemon_threads = True

    def __init__(
        self,
        ledger: Ledger,
        keys: Mapping[str, SigningKey],
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        admin_token: str | None = None,
        clock: Callable[[], datetime],
        faults: Faults | None = None,
    ) -> None:
        if not keys:
            raise ValueError("a wallet needs at least one signing key")
        super().__init__((host, port), _Handler)
        self.ledger = ledger
        self.keys = dict(keys)
        self.admin_token = admin_token
        self.clock = clock
        self.faults = faults or Faults()
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The base URL of the protocol's calls, as a client is configured with it."""
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}/wallet"

    def start(self) -> None:
        """Serve from a background thread (tests, and `make run` beside the API)."""
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop serving, cut short any fault's wait, and close the socket."""
        self.faults.stopping.set()
        self.shutdown()
        self.server_close()
        if self._thread is not None:
            self._thread.join()


class _Handler(BaseHTTPRequestHandler):
    server: WalletServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        # http.server would print the request line to stderr; the wallet logs its own line
        # per call, which names no token.
        return

    # -- plumbing --------------------------------------------------------------------

    def _body(self) -> bytes | None:
        length = self.headers.get("Content-Length", "0")
        if not length.isdecimal() or int(length) > MAX_BODY:
            self._send(413, {"status": protocol.BAD_REQUEST, "message": "body too large"})
            return None
        return self.rfile.read(int(length))

    def _send(
        self,
        code: int,
        document: Any,
        key: SigningKey | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        body = _json(document)
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        if key is not None:
            now = int(self.server.clock().timestamp())
            self.send_header(signing.HEADER, signing.sign(key, self.command, self.path, now, body))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def _hang_up(self) -> None:
        self.close_connection = True

    def do_GET(self) -> None:
        """Route a GET."""
        path = urlsplit(self.path).path
        if path == "/wallet/transactions":
            self._wallet("transactions", b"")
        elif path == "/admin/faults" and self._admin():
            self._send(200, {"pending": self.server.faults.pending()})
        elif path.startswith("/admin/players/") and self._admin():
            balance = self.server.ledger.balance_of(path.removeprefix("/admin/players/"))
            if balance is None:
                self._send(404, {"message": "no such player"})
            else:
                self._send(200, {"balance": balance})
        elif not path.startswith("/admin/"):
            self._send(404, {"message": "not found"})

    def do_POST(self) -> None:
        """Route a POST."""
        body = self._body()
        if body is None:
            return
        path = urlsplit(self.path).path
        kind = path.removeprefix("/wallet/")
        if path.startswith("/wallet/") and kind in protocol.CALLS:
            self._wallet(kind, body)
        elif path.startswith("/admin/") and self._admin():
            self._admin_post(path, body)
        elif not path.startswith("/admin/"):
            self._send(404, {"message": "not found"})

    def do_DELETE(self) -> None:
        """Route a DELETE: only the admin's clearing of faults."""
        if urlsplit(self.path).path == "/admin/faults" and self._admin():
            self.server.faults.clear()
            self._send(200, {"pending": []})
        elif not self.path.startswith("/admin/"):
            self._send(404, {"message": "not found"})

    # -- the protocol ----------------------------------------------------------------

    def _wallet(self, kind: str, body: bytes) -> None:
        server = self.server
        now = int(server.clock().timestamp())
        try:
            key = signing.verify(
                self.headers.get(signing.HEADER), server.keys, self.command, self.path, body, now
            )
        except SignatureError as error:
            log.warning("refused a %s call: %s", kind, error)
            self._send(401, {"status": protocol.BAD_SIGNATURE, "message": str(error)})
            return
        fault = server.faults.take(kind)
        action = fault.action if fault is not None else None
        if fault is not None and action in ("delay", "timeout"):
            server.faults.wait(fault.delay_ms)
        if action == "timeout":
            self._hang_up()
            return
        if fault is not None and action == "error_5xx":
            self._send(fault.status, {"status": "ERROR", "message": "injected fault"})
            return
        try:
            if kind == "transactions":
                self._send(200, self._transactions(), key)
                return
            call = protocol.parse(kind, json.loads(body))
        except (ValueError, protocol.BadRequestError) as error:
            self._send(400, {"status": protocol.BAD_REQUEST, "message": str(error)}, key)
            return
        try:
            answer = server.ledger.answer(call)
            if action == "duplicate":
                answer = server.ledger.answer(call)
        except Exception:
            log.exception("the ledger failed a %s call", kind)
            self._send(500, {"status": "ERROR", "message": "the wallet failed"})
            return
        log.info(
            "%s %s: %s",
            kind,
            call.transaction_uuid or call.request_uuid,
            answer["status"],
            extra={"player_id": call.player_id},
        )
        if action == "lose_answer":
            self._hang_up()
            return
        replayed = {REPLAYED_HEADER: "true"} if action == "duplicate" else None
        self._send(200, answer, key, replayed)

    def _transactions(self) -> dict[str, Any]:
        query = parse_qs(urlsplit(self.path).query, strict_parsing=False)

        def one(name: str) -> str | None:
            values = query.get(name)
            return values[-1] if values else None

        since, until = _instant(one("from"), "from"), _instant(one("to"), "to")
        limit_text = one("limit") or str(DEFAULT_PAGE)
        if not limit_text.isdecimal() or not 1 <= int(limit_text) <= MAX_PAGE:
            raise ValueError(f"limit must be from 1 to {MAX_PAGE}")
        cursor = one("after")
        after = None
        if cursor is not None:
            when, _, seq = cursor.rpartition("|")
            if not seq.isdecimal():
                raise ValueError("after must be a page's next_after")
            after = (_instant(when, "after"), int(seq))
        page = self.server.ledger.transactions(since, until, after, int(limit_text))
        next_after = None
        if len(page) == int(limit_text):
            last = page[-1]
            next_after = f"{last.created_at.isoformat()}|{last.seq}"
        return {
            "transactions": [row.document() for row in page],
            "next_after": next_after,
        }

    # -- admin: the casino's side ------------------------------------------------------

    def _admin(self) -> bool:
        token = self.server.admin_token
        given = self.headers.get("Authorization", "")
        if token is None or not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
            self._send(404, {"message": "not found"})
            return False
        return True

    def _admin_post(self, path: str, body: bytes) -> None:
        ledger = self.server.ledger
        try:
            document = json.loads(body or b"{}")
            if not isinstance(document, dict):
                raise ValueError("the body must be a JSON object")
            if path == "/admin/players":
                wager_limit = document.get("wager_limit")
                if wager_limit is not None and type(wager_limit) is not int:
                    raise ValueError("wager_limit must be an integer or null")
                balance = ledger.open_account(
                    _text(document, "player_id"),
                    _text(document, "currency"),
                    int(document.get("deposit", 0)),
                    blocked=bool(document.get("blocked", False)),
                    wager_limit=wager_limit,
                )
                self._send(200, {"balance": balance})
            elif path == "/admin/sessions":
                ttl = timedelta(seconds=float(document.get("ttl_seconds", 3600)))
                token, expires_at = ledger.open_session(_text(document, "player_id"), ttl)
                self._send(200, {"session_token": token, "expires_at": expires_at.isoformat()})
            elif path == "/admin/sessions/expire":
                ledger.expire_session(_text(document, "session_token"))
                self._send(200, {})
            elif path == "/admin/faults":
                self.server.faults.add(FaultRule.from_document(document))
                self._send(200, {"pending": self.server.faults.pending()})
            else:
                self._send(404, {"message": "not found"})
        except (ValueError, TypeError, LedgerError, FaultError) as error:
            self._send(400, {"message": str(error)})


def _text(document: Mapping[str, Any], name: str) -> str:
    value = document.get(name)
    if not isinstance(value, str) or not value:
        raise ValueError(f"{name} must be a non-empty string")
    return value


def _instant(text: str | None, name: str) -> datetime:
    if text is None:
        raise ValueError(f"{name} is required (ISO 8601 with a UTC offset)")
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is None:
        raise ValueError(f"{name} must carry a UTC offset")
    return moment
