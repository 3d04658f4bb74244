"""The reference wallet's ledger in PostgreSQL: balances, transactions, remembered rollbacks.

Every call runs in one database transaction that first locks the player's row, so two calls
for one player never interleave, and then an advisory lock on each transaction id it names,
so that a bet and a rollback of it naming different players still see each other. The unique
key on `transaction_uuid` is the last guard: whichever of two racing inserts loses is retried
once, and then reads as a replay. A lookup followed by a write without these locks is how the
open-source wallets pay twice.

Only applied transactions are recorded: a refusal moves no money and is judged afresh if it
is sent again. A rollback of a transaction the wallet has never seen is recorded too, as
done, and remembered, so that the transaction is refused if it arrives later.
"""

from __future__ import annotations

import hashlib
import secrets
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool

from operator_wallet import protocol
from operator_wallet.protocol import Call

SCHEMA_SQL: Final = """
CREATE SCHEMA IF NOT EXISTS reference_wallet;
CREATE TABLE IF NOT EXISTS reference_wallet.players (
    player_id text PRIMARY KEY,
    currency text NOT NULL,
    balance bigint NOT NULL,
    blocked boolean NOT NULL DEFAULT false,
    -- The most the player's live bets (not rolled back) may add up to; NULL is no limit.
    wager_limit bigint,
    wagered bigint NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS reference_wallet.sessions (
    -- Only a token's hash is kept: the wallet's database holds no usable token.
    token_sha256 bytea PRIMARY KEY,
    player_id text NOT NULL REFERENCES reference_wallet.players,
    expires_at timestamptz NOT NULL
);
CREATE TABLE IF NOT EXISTS reference_wallet.transactions (
    seq bigserial PRIMARY KEY,
    transaction_uuid uuid NOT NULL UNIQUE,
    kind text NOT NULL CHECK (kind IN ('deposit', 'bet', 'win', 'rollback')),
    player_id text NOT NULL,
    table_id text,
    round_id text,
    -- The call's own amount, as sent; `moved` is what it did to the balance, signed.
    amount bigint NOT NULL CHECK (amount >= 0),
    moved bigint NOT NULL,
    currency text NOT NULL,
    reference uuid[] NOT NULL DEFAULT '{}',
    fields jsonb NOT NULL,
    status text NOT NULL,
    answer jsonb NOT NULL,
    balance_after bigint NOT NULL,
    rolled_back_by uuid,
    settled_by uuid,
    created_at timestamptz NOT NULL
);
-- The reconciliation list pages by (created_at, seq) over a time range.
CREATE INDEX IF NOT EXISTS transactions_by_time
    ON reference_wallet.transactions (created_at, seq);
CREATE TABLE IF NOT EXISTS reference_wallet.remembered_rollbacks (
    transaction_uuid uuid PRIMARY KEY,
    rollback_uuid uuid NOT NULL,
    created_at timestamptz NOT NULL
);
"""


_Cursor = psycopg.Cursor[dict[str, Any]]


class LedgerError(Exception):
    """An admin request the ledger cannot carry out (an unknown player, a bad currency)."""


@dataclass(frozen=True, slots=True)
class Transaction:
    """One row of the reconciliation list."""

    seq: int
    transaction_uuid: str
    kind: str
    player_id: str
    table_id: str | None
    round_id: str | None
    amount: int
    moved: int
    currency: str
    reference: tuple[str, ...]
    status: str
    rolled_back_by: str | None
    created_at: datetime

    def document(self) -> dict[str, Any]:
        """The row as the transaction list shows it."""
        return {
            "transaction_uuid": self.transaction_uuid,
            "kind": self.kind,
            "player_id": self.player_id,
            "table_id": self.table_id,
            "round_id": self.round_id,
            "amount": self.amount,
            "moved": self.moved,
            "currency": self.currency,
            "reference_transaction_uuid": list(self.reference),
            "status": self.status,
            "rolled_back_by": self.rolled_back_by,
            "created_at": self.created_at.isoformat(),
        }


def _token_hash(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


class _ReplayError(Exception):
    """A racing insert took the transaction id first: answer again, as a replay."""


class Ledger:
    """The wallet's money, over a connection pool to its own database."""

    def __init__(self, pool: ConnectionPool, clock: Callable[[], datetime]) -> None:
        self._pool = pool
        self._clock = clock

    def create_schema(self) -> None:
        """Create the wallet's tables if they are missing."""
        with self._pool.connection() as conn, conn.transaction():
            # Two wallets starting at once on one database must not both create the schema.
            conn.execute("SELECT pg_advisory_xact_lock(hashtext('reference_wallet.schema'))")
            conn.execute(SCHEMA_SQL)

    # -- admin: the casino's own side, which Shoebox never calls ------------------------

    def open_account(
        self,
        player_id: str,
        currency: str,
        deposit: int = 0,
        *,
        blocked: bool = False,
        wager_limit: int | None = None,
    ) -> int:
        """Create or update a player's account, deposit into it, and return its balance."""
        if currency not in protocol.MINOR_UNIT_EXPONENTS:
            raise LedgerError(f"no currency {currency!r}")
        if deposit < 0:
            raise LedgerError("a deposit is not negative")
        with self._pool.connection() as conn, conn.transaction():
            row = conn.execute(
                "INSERT INTO reference_wallet.players"
                " (player_id, currency, balance, blocked, wager_limit)"
                " VALUES (%s, %s, 0, %s, %s)"
                " ON CONFLICT (player_id) DO UPDATE SET blocked = EXCLUDED.blocked,"
                " wager_limit = EXCLUDED.wager_limit"
                " RETURNING currency, balance",
                (player_id, currency, blocked, wager_limit),
            ).fetchone()
            assert row is not None
            if row[0] != currency:
                raise LedgerError(f"{player_id!r} plays in {row[0]}, not {currency}")
            balance: int = row[1]
            if deposit:
                balance += deposit
                conn.execute(
                    "UPDATE reference_wallet.players SET balance = %s WHERE player_id = %s",
                    (balance, player_id),
                )
                fields = {"kind": "deposit", "amount": deposit, "currency": currency}
                conn.execute(
                    "INSERT INTO reference_wallet.transactions (transaction_uuid, kind,"
                    " player_id, amount, moved, currency, fields, status, answer,"
                    " balance_after, created_at)"
                    " VALUES (%s, 'deposit', %s, %s, %s, %s, %s, 'OK', '{}', %s, %s)",
                    (
                        uuid.uuid4(),
                        player_id,
                        deposit,
                        deposit,
                        currency,
                        Jsonb(fields),
                        balance,
                        self._clock(),
                    ),
                )
            return balance

    def open_session(self, player_id: str, ttl: timedelta) -> tuple[str, datetime]:
        """A new session token for the player, and when it expires."""
        token = secrets.token_urlsafe(24)
        expires_at = self._clock() + ttl
        with self._pool.connection() as conn:
            try:
                conn.execute(
                    "INSERT INTO reference_wallet.sessions VALUES (%s, %s, %s)",
                    (_token_hash(token), player_id, expires_at),
                )
            except psycopg.errors.ForeignKeyViolation:
                raise LedgerError(f"no player {player_id!r}") from None
        return token, expires_at

    def expire_session(self, token: str) -> None:
        """End a session now, as a casino does when its player logs out."""
        with self._pool.connection() as conn:
            conn.execute(
                "UPDATE reference_wallet.sessions SET expires_at = %s WHERE token_sha256 = %s",
                (self._clock(), _token_hash(token)),
            )

    def balance_of(self, player_id: str) -> int | None:
        """The player's balance, or None for an unknown player."""
        with self._pool.connection() as conn:
            row = conn.execute(
                "SELECT balance FROM reference_wallet.players WHERE player_id = %s", (player_id,)
            ).fetchone()
        return None if row is None else int(row[0])

    # -- the protocol's calls ---------------------------------------------------------

    def answer(self, call: Call) -> dict[str, Any]:
        """Carry out `call` once, or answer it again as it was first answered."""
        for attempt in range(3):
            try:
                return self._answer_once(call)
            except (_ReplayError, psycopg.errors.UniqueViolation):
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def _answer_once(self, call: Call) -> dict[str, Any]:
        with self._pool.connection() as connection, connection.transaction():
            conn = connection.cursor(row_factory=dict_row)
            player = conn.execute(
                "SELECT * FROM reference_wallet.players WHERE player_id = %s FOR UPDATE",
                (call.player_id,),
            ).fetchone()
            if call.kind == "balance":
                return self._balance(conn, call, player)
            ids = sorted({call.transaction_uuid or "", *call.reference})
            for transaction_id in ids:
                conn.execute(
                    "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (transaction_id,)
                )
            existing = conn.execute(
                "SELECT fields, answer FROM reference_wallet.transactions"
                " WHERE transaction_uuid = %s",
                (call.transaction_uuid,),
            ).fetchone()
            if existing is not None:
                if existing["fields"] != call.fields():
                    return _refusal(
                        call,
                        protocol.TRANSACTION_CONFLICT,
                        "this transaction id was used by a call with other fields",
                    )
                return {**existing["answer"], "request_uuid": call.request_uuid}
            if call.kind == "rollback":
                return self._rollback(conn, call, player)
            remembered = conn.execute(
                "SELECT 1 FROM reference_wallet.remembered_rollbacks WHERE transaction_uuid = %s",
                (call.transaction_uuid,),
            ).fetchone()
            if remembered is not None:
                return _refusal(
                    call,
                    protocol.TRANSACTION_ROLLED_BACK,
                    "a rollback of this transaction arrived first; it is never applied",
                )
            if player is None:
                return _refusal(call, protocol.SESSION_EXPIRED, "no such player")
            wrong = _currency_refusal(call, player)
            if wrong is not None:
                return wrong
            if call.kind == "bet":
                return self._bet(conn, call, player)
            return self._win(conn, call, player)

    def _session_valid(self, conn: _Cursor, call: Call) -> bool:
        row = conn.execute(
            "SELECT 1 FROM reference_wallet.sessions WHERE token_sha256 = %s"
            " AND player_id = %s AND expires_at > %s",
            (_token_hash(call.session_token), call.player_id, self._clock()),
        ).fetchone()
        return row is not None

    def _balance(self, conn: _Cursor, call: Call, player: dict[str, Any] | None) -> dict[str, Any]:
        if player is None or not self._session_valid(conn, call):
            return _refusal(call, protocol.SESSION_EXPIRED, "the session is unknown or over")
        wrong = _currency_refusal(call, player)
        if wrong is not None:
            return wrong
        if player["blocked"]:
            return _refusal(call, protocol.PLAYER_BLOCKED, "the player is blocked")
        return _ok(call, player["balance"])

    def _bet(self, conn: _Cursor, call: Call, player: dict[str, Any]) -> dict[str, Any]:
        assert call.amount is not None
        if not self._session_valid(conn, call):
            return _refusal(call, protocol.SESSION_EXPIRED, "the session is unknown or over")
        if player["blocked"]:
            return _refusal(call, protocol.PLAYER_BLOCKED, "the player is blocked")
        limit = player["wager_limit"]
        if limit is not None and player["wagered"] + call.amount > limit:
            return _refusal(call, protocol.LIMIT_REACHED, "the player's wager limit is reached")
        if player["balance"] < call.amount:
            return {
                **_refusal(call, protocol.INSUFFICIENT_FUNDS, "the balance is below the stake"),
                "balance": player["balance"],
            }
        conn.execute(
            "UPDATE reference_wallet.players SET wagered = wagered + %s WHERE player_id = %s",
            (call.amount, call.player_id),
        )
        return self._apply(conn, call, player, -call.amount)

    def _win(self, conn: _Cursor, call: Call, player: dict[str, Any]) -> dict[str, Any]:
        # A win is paid whatever the session or a block: the bet it settles was taken.
        assert call.amount is not None
        bets = conn.execute(
            "SELECT transaction_uuid::text AS id, kind, player_id, rolled_back_by, settled_by"
            " FROM reference_wallet.transactions WHERE transaction_uuid = ANY(%s::uuid[])",
            (list(call.reference),),
        ).fetchall()
        found = {bet["id"]: bet for bet in bets}
        for reference in call.reference:
            bet = found.get(reference)
            if bet is None or bet["kind"] != "bet" or bet["player_id"] != call.player_id:
                return _refusal(
                    call, protocol.UNKNOWN_TRANSACTION, f"no bet {reference} of this player"
                )
            if bet["rolled_back_by"] is not None:
                return _refusal(
                    call, protocol.TRANSACTION_ROLLED_BACK, f"the bet {reference} was rolled back"
                )
            if bet["settled_by"] is not None:
                return _refusal(
                    call,
                    protocol.TRANSACTION_CONFLICT,
                    f"the bet {reference} is already settled by {bet['settled_by']}",
                )
        conn.execute(
            "UPDATE reference_wallet.transactions SET settled_by = %s"
            " WHERE transaction_uuid = ANY(%s::uuid[])",
            (call.transaction_uuid, list(call.reference)),
        )
        return self._apply(conn, call, player, call.amount)

    def _rollback(self, conn: _Cursor, call: Call, player: dict[str, Any] | None) -> dict[str, Any]:
        assert call.amount is not None
        (reference,) = call.reference
        target = conn.execute(
            "SELECT kind, player_id, amount, rolled_back_by"
            " FROM reference_wallet.transactions WHERE transaction_uuid = %s",
            (reference,),
        ).fetchone()
        if target is None:
            # Done, and remembered: the transaction is refused should it arrive later.
            conn.execute(
                "INSERT INTO reference_wallet.remembered_rollbacks VALUES (%s, %s, %s)"
                " ON CONFLICT DO NOTHING",
                (reference, call.transaction_uuid, self._clock()),
            )
            balance = player["balance"] if player is not None else 0
            answer = {
                **_refusal(
                    call,
                    protocol.UNKNOWN_TRANSACTION,
                    "no such transaction: the rollback is done, and the id is remembered",
                ),
                "transaction_uuid": call.transaction_uuid,
            }
            self._record(conn, call, 0, balance, protocol.UNKNOWN_TRANSACTION, answer)
            return answer
        if target["player_id"] != call.player_id or player is None:
            return _refusal(
                call, protocol.TRANSACTION_CONFLICT, "the transaction is another player's"
            )
        if target["kind"] not in ("bet", "win") or target["amount"] != call.amount:
            return _refusal(
                call,
                protocol.TRANSACTION_CONFLICT,
                f"the rollback names {target['kind']} of {target['amount']}, not {call.amount}",
            )
        wrong = _currency_refusal(call, player)
        if wrong is not None:
            return wrong
        if target["rolled_back_by"] is not None:
            # Already cancelled by another rollback: done, with nothing left to move.
            return self._apply(conn, call, player, 0)
        conn.execute(
            "UPDATE reference_wallet.transactions SET rolled_back_by = %s"
            " WHERE transaction_uuid = %s",
            (call.transaction_uuid, reference),
        )
        if target["kind"] == "bet":
            conn.execute(
                "UPDATE reference_wallet.players SET wagered = wagered - %s WHERE player_id = %s",
                (call.amount, call.player_id),
            )
            return self._apply(conn, call, player, call.amount)
        # Cancelling a win takes it back even below zero: a void after settlement
        # ("all pays and play void") must be applied in full (docs/wallets.md).
        return self._apply(conn, call, player, -call.amount)

    def _apply(
        self, conn: _Cursor, call: Call, player: dict[str, Any], moved: int
    ) -> dict[str, Any]:
        balance = int(player["balance"]) + moved
        conn.execute(
            "UPDATE reference_wallet.players SET balance = %s WHERE player_id = %s",
            (balance, call.player_id),
        )
        answer = _ok(call, balance)
        self._record(conn, call, moved, balance, protocol.OK, answer)
        return answer

    def _record(
        self,
        conn: _Cursor,
        call: Call,
        moved: int,
        balance: int,
        status: str,
        answer: dict[str, Any],
    ) -> None:
        stored = {name: value for name, value in answer.items() if name != "request_uuid"}
        result = conn.execute(
            "INSERT INTO reference_wallet.transactions (transaction_uuid, kind, player_id,"
            " table_id, round_id, amount, moved, currency, reference, fields, status, answer,"
            " balance_after, created_at)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s::uuid[], %s, %s, %s, %s, %s)"
            " ON CONFLICT (transaction_uuid) DO NOTHING",
            (
                call.transaction_uuid,
                call.kind,
                call.player_id,
                call.table_id,
                call.round_id,
                call.amount,
                moved,
                call.currency,
                list(call.reference),
                Jsonb(call.fields()),
                status,
                Jsonb(stored),
                balance,
                self._clock(),
            ),
        )
        if result.rowcount != 1:
            # Another player's call took this id between our check and our insert; this
            # transaction rolls back and the call is answered again, now as a conflict.
            raise _ReplayError

    # -- reconciliation ---------------------------------------------------------------

    def transactions(
        self, since: datetime, until: datetime, after: tuple[datetime, int] | None, limit: int
    ) -> list[Transaction]:
        """Transactions created in [since, until), in order, after a page's last one."""
        query = (
            "SELECT seq, transaction_uuid::text, kind, player_id, table_id, round_id, amount,"
            " moved, currency, reference::text[], status, rolled_back_by::text, created_at"
            " FROM reference_wallet.transactions"
            " WHERE created_at >= %s AND created_at < %s"
        )
        params: list[Any] = [since, until]
        if after is not None:
            query += " AND (created_at, seq) > (%s, %s)"
            params += [after[0], after[1]]
        # Keyset paging over the index transactions_by_time.
        query += " ORDER BY created_at, seq LIMIT %s"
        params.append(limit)
        with self._pool.connection() as conn:
            rows = conn.execute(query, params).fetchall()
        return [
            Transaction(
                seq=row[0],
                transaction_uuid=row[1],
                kind=row[2],
                player_id=row[3],
                table_id=row[4],
                round_id=row[5],
                amount=row[6],
                moved=row[7],
                currency=row[8],
                reference=tuple(row[9]),
                status=row[10],
                rolled_back_by=row[11],
                created_at=row[12],
            )
            for row in rows
        ]

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A connection to the wallet's database, for tests that read the ledger directly."""
        with self._pool.connection() as conn:
            yield conn


def _ok(call: Call, balance: int) -> dict[str, Any]:
    answer: dict[str, Any] = {"status": protocol.OK, "request_uuid": call.request_uuid}
    if call.transaction_uuid is not None:
        answer["transaction_uuid"] = call.transaction_uuid
    answer |= {
        "player_id": call.player_id,
        "balance": balance,
        "currency": call.currency,
        "exponent": call.exponent,
    }
    return answer


def _refusal(call: Call, status: str, message: str) -> dict[str, Any]:
    return {"status": status, "request_uuid": call.request_uuid, "message": message}


def _currency_refusal(call: Call, player: dict[str, Any]) -> dict[str, Any] | None:
    currency = player["currency"]
    if call.currency != currency or call.exponent != protocol.MINOR_UNIT_EXPONENTS[currency]:
        return _refusal(
            call,
            protocol.WRONG_CURRENCY,
            f"the player plays in {currency} with exponent"
            f" {protocol.MINOR_UNIT_EXPONENTS[currency]}",
        )
    return None
