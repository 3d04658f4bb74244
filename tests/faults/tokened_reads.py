"""Read-your-writes through a fault: a deposit, then its wallet's statement with its token.

One ops client, over and over: `POST /v1/tables` then `GET /v1/tables/{t}` (an exact read,
from the table's stream), and `POST /v1/wallets/{p}/deposits` then `GET
/v1/wallets/{p}/statement` (the `wallets` read model), each read sending back its write's
`Shoebox-Consistency` token. A server reading a replica (DATABASE_READ_URL) answers from a
node that has replayed the write, or from the primary, which holds it: a 404 for the table is
a stale read, the one thing the token exists to prevent. The statement may still be stale
when its wait for the projector ran out (2 s) and the primary's read model was behind too, as
docs/api.md says; the drill counts those. Every read is recorded, with the pool that served it.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
from dataclasses import dataclass
from typing import Any

from tests.faults.load import PLAY_LIMIT_SECONDS, REQUEST_TIMEOUT_SECONDS

HEADER = "Shoebox-Consistency"
POOL = "Shoebox-Read-Pool"


@dataclass(frozen=True, slots=True)
class Read:
    """One tokened read, as the client saw it."""

    kind: str  # "table": an exact read; "statement": a read model's
    started: float  # time.monotonic()
    status: int | str  # the status, or the name of the error
    stale: bool
    pool: str | None


class TokenedReads:
    """A thread of deposits each read back with its token, against whichever server `base` is."""

    def __init__(self, base: str, ops: str, player: str, kind: str) -> None:
        self.kind = kind  # "table" or "statement": one kind a thread, at its own pace
        self.base = base
        self.ops = ops
        self.player = player
        self.writes: list[int | str] = []
        self.reads: list[Read] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run)

    def _call(
        self, method: str, path: str, body: object = None, headers: dict[str, str] | None = None
    ) -> tuple[int | str, dict[str, str], Any]:
        host, _, port = self.base.removeprefix("http://").partition(":")
        connection = http.client.HTTPConnection(host, int(port), timeout=REQUEST_TIMEOUT_SECONDS)
        sent = {"Authorization": f"Bearer {self.ops}", "Content-Type": "application/json"}
        try:
            payload = None if body is None else json.dumps(body).encode()
            connection.request(method, path, payload, {**sent, **(headers or {})})
            response = connection.getresponse()
            text = response.read()
            try:
                document = json.loads(text) if text.strip() else None
            except ValueError:
                document = None
            return response.status, dict(response.getheaders()), document
        except (OSError, http.client.HTTPException) as error:
            return type(error).__name__, {}, None
        finally:
            connection.close()

    def _run(self) -> None:
        deadline = time.monotonic() + PLAY_LIMIT_SECONDS  # bounded, whatever the server does
        deposit = {"amount_pence": 1, "reason": "read-your-writes drill"}
        n = 0
        while not self.stop.is_set() and time.monotonic() < deadline:
            n += 1
            if self.kind == "table":
                self._table(n)
            else:
                self._statement(deposit)

    def _table(self, n: int) -> None:
        # An exact read: the new table, from its stream; a 404 would be a stale read.
        table = {"table_id": f"{self.player}-{n}", "seats": 7, "decks": 8}
        status, headers, _ = self._call("POST", "/v1/tables", {**table, "minimum_pence": 100})
        self.writes.append(status)
        if status == 201 and HEADER in headers:
            started = time.monotonic()
            status, answer, _ = self._call(
                "GET", f"/v1/tables/{table['table_id']}", headers={HEADER: headers[HEADER]}
            )
            self.reads.append(Read("table", started, status, status == 404, answer.get(POOL)))
        else:
            self.stop.wait(0.05)  # a client backs off a little after a refusal

    def _statement(self, deposit: dict[str, Any]) -> None:
        # A read model's: the statement, which a token makes wait for the projector, 2 s
        # at most, and then reads the primary as it is (docs/api.md): stale is possible.
        status, headers, document = self._call(
            "POST", f"/v1/wallets/{self.player}/deposits", deposit
        )
        self.writes.append(status)
        if status != 201 or HEADER not in headers:
            self.stop.wait(0.05)
            return
        started = time.monotonic()
        status, answer, statement = self._call(
            "GET", f"/v1/wallets/{self.player}/statement", headers={HEADER: headers[HEADER]}
        )
        stale = status == 200 and (
            not statement["entries"] or statement["entries"][0]["version"] < document["version"]
        )
        self.reads.append(Read("statement", started, status, stale, answer.get(POOL)))

    def start(self) -> None:
        self.thread.start()

    def finish(self) -> None:
        self.stop.set()
        self.thread.join(timeout=3 * REQUEST_TIMEOUT_SECONDS)
        assert not self.thread.is_alive(), "the tokened reader hung"

    @property
    def statuses(self) -> dict[int | str, int]:
        counted: dict[int | str, int] = {}
        for read in self.reads:
            counted[read.status] = counted.get(read.status, 0) + 1
        return counted
