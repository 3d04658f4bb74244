"""Seamless players: sessions, and bets that wait for the operator's wallet to debit the stake.

A seamless operator's players keep their money in the operator's wallet (docs/wallets.md).
Opening a session checks the operator's token with the wallet's `balance` call; a bet calls
`bet` and is placed only once the wallet has debited the stake, the debit (StakeDebited, on
the player's stream `seamless:{player}`) recorded in the same append as the BetPlaced.

At most one money call is in flight per player, across every process: each runs under a
PostgreSQL advisory lock on the player, taken before the call and released once its outcome
is in the log, so two racing bets can never overdraw. The lock also makes the seamless
stream's next version a bet's own, so that the bet's transaction id (derived from that
version) is the same on every retry of its append.

Every bet records its outcome at that version: the debit, a refusal, or a rollback owed (an
uncertain answer; a debit whose bet could not be placed). A debit whose outcome never reached
the log (the process died between the answer and the append) is found by its `in_flight` row
and rolled back (`settle_orphans`).
"""

from __future__ import annotations

import hashlib
import logging
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final, Protocol

import psycopg
from psycopg import Connection
from psycopg.rows import TupleRow

from domain.outcome import Spot
from domain.round import BetPlaced
from domain.round_errors import BettingWindowClosed
from domain.seamless import (
    SeamlessEvent,
    SessionOpened,
    StakeDebited,
    WalletCallOwed,
    WalletCallParked,
    WalletCallRefused,
)
from events.postgres import Pool
from events.store import ConcurrencyConflict, EventStore, OutboxRow, StreamAppend
from service.application.actor import Actor
from service.application.appends import Receipt, replay
from service.application.errors import ServiceError
from service.application.game.plan import Plan
from service.application.game.tables import GameService
from service.application.operators import operator_of, player_ref
from service.application.seamless import (
    BALANCE,
    BET,
    ROLLBACK,
    Outcome,
    SeamlessWalletConfig,
    WalletCall,
    WalletResult,
    balance_call,
    bet_call,
    request_uuid,
    transaction_uuid,
)
from service.application.streams import seamless_stream, to_new_event

log = logging.getLogger("shoebox.seamless")

LOCK_WAIT_SECONDS: Final = 3.0
"""How long a bet waits for the player's previous money call to finish before a 503."""
ORPHAN_AFTER_SECONDS: Final = 30.0
"""How old a debit whose outcome is not in the log must be before the sweep rolls it back."""
WINDOW_MARGIN: Final = timedelta(milliseconds=200)
"""How long before its round's window closes a debit must be answered: the bet's append, after
the answer, must still land inside the window, or the debit is made for a bet refused late."""
SYSTEM: Final = Actor("seamless-wallet", "system")
_TAIL: Final = 50
"""Events of a seamless stream read at a time, newest first, looking for the last balance."""
_CALL_OF: Final = {SessionOpened.type: BALANCE, StakeDebited.type: BET}


class WalletSender(Protocol):
    """Sends one signed attempt of a call and classifies the answer (the runtime's client)."""

    def send(self, call: WalletCall, within_seconds: float | None = None) -> WalletResult:
        """One attempt at `call`, sorted into its class; no answer within `within_seconds`
        (when given, below the configured timeouts) is an uncertain one."""


# ruff: noqa: N818 -- named for what the caller is told, as in service/application/errors.py.


class WalletNotSeamless(ServiceError):
    """The player's operator keeps its money in Shoebox's internal wallet (a 409)."""


class SessionRequired(ServiceError):
    """A seamless player bet without an open session (a 409)."""


class WalletRefused(ServiceError):
    """The operator's wallet said no and moved nothing (a 409)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class WalletUnavailable(ServiceError):
    """The wallet's answer was uncertain, fatal or absent: nothing was placed (a 503)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class _Debit:
    """A debit asked of the wallet for one bet: its transaction, where, and the answer."""

    transaction: str
    key: tuple[str, str, int]
    """The bet it is for: (round id, spot, stake)."""
    result: WalletResult


@dataclass(frozen=True, slots=True)
class LastAnswer:
    """The balance the operator's wallet last stated for a player, and when."""

    balance: int
    call: str
    answered_at: datetime
    # The player's seamless stream's version when it was read: what an answer's `version` is.
    version: int = 0


@dataclass(frozen=True, slots=True)
class Session:
    """A player's open session: what the wallet said, never the token."""

    player_id: str
    operator: str
    balance: int
    opened_at: datetime


_LOCK_KEY: Final = "seamless-money:"
LOST_BY_RESTORE: Final = "lost-by-restore"
"""The reason of a rollback owed for a debit that a restore of the log lost."""
LOST_SPOT: Final = "unknown"

_TRY_LOCK = "SELECT pg_try_advisory_lock(hashtextextended(%s, 24))"
_UNLOCK = "SELECT pg_advisory_unlock(hashtextextended(%s, 24))"
_UPSERT_SESSION = """
INSERT INTO seamless_sessions (player_id, operator, token, token_sha256, opened_at)
VALUES (%s, %s, %s, %s, %s)
ON CONFLICT (player_id) DO UPDATE SET operator = excluded.operator, token = excluded.token,
    token_sha256 = excluded.token_sha256, opened_at = excluded.opened_at
"""
_SESSION_TOKEN = "SELECT token FROM seamless_sessions WHERE player_id = %s"  # noqa: S105
_INSERT_IN_FLIGHT = """
INSERT INTO seamless_calls (transaction_uuid, request_uuid, kind, operator, player_id, table_id,
    round_id, spot, amount, state, stream_version, created_at)
VALUES (%s, %s, 'bet', %s, %s, %s, %s, %s, %s, 'in_flight', %s, %s)
ON CONFLICT (transaction_uuid) DO NOTHING
RETURNING 1
"""
_IN_FLIGHT_OF = """
SELECT transaction_uuid, table_id, round_id, spot, amount, stream_version FROM seamless_calls
WHERE player_id = %s AND state = 'in_flight' AND stream_version > %s ORDER BY stream_version
"""


class SeamlessService:
    """Sessions and bets of seamless players, and the per-player lock every money call takes."""

    def __init__(
        self,
        store: EventStore,
        clock: Callable[[], datetime],
        pool: Pool,
        games: GameService,
        wallets: Mapping[str, tuple[SeamlessWalletConfig, WalletSender]],
        *,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        owed: Callable[[Sequence[StreamAppend]], Sequence[OutboxRow]] | None = None,
    ) -> None:
        self._store = store
        # The rollback an uncertain or orphan debit owes, written in the append recording it.
        self._owed = owed
        self._clock = clock
        self._pool = pool
        self._games = games
        self._wallets = dict(wallets)
        self._monotonic = monotonic
        self._sleep = sleep

    def is_seamless(self, player_id: str) -> bool:
        """Whether the player's operator keeps its players' money in its own wallet."""
        return operator_of(player_id) in self._wallets

    def wallet(self, operator: str) -> tuple[SeamlessWalletConfig, WalletSender] | None:
        """A seamless operator's configuration and sender; None for the internal wallet."""
        return self._wallets.get(operator)

    def last_answer(self, player_id: str) -> LastAnswer | None:
        """The wallet's last stated balance for a seamless player, read from their stream.

        Its `balance` at the session's opening, its `bet` (a debit) or a confirmed `win` or
        `rollback`; None before any. Reads the stream's tail only, newest first.
        """
        stream = seamless_stream(player_id)
        last = self._store.last_of_stream(stream)
        newest = newest_read = 0 if last is None else last.version
        while newest > 0:
            start = max(1, newest - _TAIL + 1)
            for event in reversed(self._store.read_stream(stream, start)[: newest - start + 1]):
                payload: Any = event.payload
                balance = payload.get("balance")
                if type(balance) is int:
                    call = _CALL_OF.get(event.type) or str(payload.get("kind"))
                    return LastAnswer(balance, call, event.recorded_at, newest_read)
            newest = start - 1
        return None

    # Sessions.

    def open_session(self, player_id: str, token: str, actor: Actor) -> Session:
        """Check the operator's token with the wallet's `balance`; record the session."""
        operator = operator_of(player_id)
        wallet = self._wallets.get(operator)
        if wallet is None:
            raise WalletNotSeamless(
                f"operator {operator!r} keeps its players' money in Shoebox's own wallet:"
                " its players need no session"
            )
        config, sender = wallet
        with self.player_lock(player_id) as conn:
            call = balance_call(config, player_ref(player_id).player_id, token, str(uuid.uuid4()))
            result = sender.send(call)
            _raise_unless_ok(result)
            assert result.balance is not None  # an ok balance answer carries one
            now = self._clock()
            digest = hashlib.sha256(token.encode()).hexdigest()
            conn.execute(_UPSERT_SESSION, [player_id, operator, token, digest, now])
            conn.commit()
            self.append_outcome(
                player_id, SessionOpened(operator, digest, result.balance, now.isoformat()), actor
            )
        return Session(player_id, operator, result.balance, now)

    # Bets.

    def place_bet(
        self,
        table_id: str,
        player_id: str,
        spot: Spot,
        stake: int,
        actor: Actor,
        round_id: str | None = None,
    ) -> Receipt:
        """Debit the stake from the operator's wallet, then place the bet with its debit.

        A bet that names its round and is refused for it is refused before any wallet call.
        """
        return self._debited(
            table_id,
            player_id,
            actor,
            lambda: self._games.preview_bet(table_id, player_id, spot, stake, round_id),
            lambda take: self._games.place_bet(
                table_id,
                player_id,
                spot,
                stake,
                actor,
                lambda plan, bet: take(plan, [bet]),
                round_id,
            ),
        )

    def rebet(
        self, table_id: str, player_id: str, actor: Actor, round_id: str | None = None
    ) -> Receipt:
        """Repeat the last round's bets, each debited from the operator's wallet on its own.

        All or nothing, as the internal wallet's rebet: one `bet` call per BetPlaced, in the
        rebet's order; the first the wallet does not confirm stops the calls, every debit
        already taken is rolled back, and the rebet is refused with that answer's problem.
        """
        return self._debited(
            table_id,
            player_id,
            actor,
            lambda: self._games.preview_rebet(table_id, player_id, round_id),
            lambda take: self._games.rebet(table_id, player_id, actor, take, round_id),
        )

    def _debited(
        self,
        table_id: str,
        player_id: str,
        actor: Actor,
        preview: Callable[[], BetPlaced | list[BetPlaced] | None],
        command: Callable[[Callable[[Plan, list[BetPlaced]], None]], Receipt],
    ) -> Receipt:
        """Run a command that places bets, each debited from the wallet before it is placed.

        `preview` says which bets the command would place into the round open now (None if
        none is open: the command itself opens it, and the debits are made inside its turn);
        `command` runs it with `take`, which the game calls with the bets it places.
        """
        wallet = self._wallets.get(operator_of(player_id))
        if wallet is None:
            raise WalletNotSeamless(f"{player_id!r} is not a seamless player")
        config, sender = wallet
        if actor.idempotency is not None:
            # A keyed retry of a bet already placed is answered from the log, before anything
            # reaches the wallet: planning it again would debit a new transaction.
            earlier = replay(self._store, actor.idempotency)
            if earlier is not None:
                return earlier
        stream = seamless_stream(player_id)
        with self.player_lock(player_id) as conn:
            row = conn.execute(_SESSION_TOKEN, [player_id]).fetchone()
            conn.commit()
            if row is None:
                raise SessionRequired(
                    "open a session first: POST /v1/sessions with the operator's token"
                )
            token = str(row[0])
            version = self.settle_orphans(player_id, conn, actor)
            # Each debit made, in order: the i-th is recorded at version + 1 + i.
            debits: list[_Debit] = []

            def send(round_id: str, stakes: list[tuple[str, int]], closes: datetime) -> None:
                for spot_name, amount in stakes:
                    at = version + 1 + len(debits)
                    transaction = transaction_uuid(BET, stream, at)
                    # The debit must be answered inside the round's window: with no time left
                    # the bet is late, refused before the wallet hears of it, as the game
                    # refuses it.
                    left = (closes - WINDOW_MARGIN - self._clock()).total_seconds()
                    if left <= 0:
                        raise BettingWindowClosed(
                            f"the betting window of round {round_id} closes at"
                            f" {closes.isoformat()}: too soon for the operator's wallet to debit"
                            f" the stake (rule {BettingWindowClosed.rule})"
                        )
                    # Written, and committed, before the call: a debit whose bet never
                    # reaches the log is then found and rolled back even if this process dies.
                    fresh = conn.execute(
                        _INSERT_IN_FLIGHT,
                        [
                            transaction,
                            request_uuid(transaction),
                            config.operator,
                            player_id,
                            table_id,
                            round_id,
                            spot_name,
                            amount,
                            at,
                            self._clock(),
                        ],
                    ).fetchone()
                    conn.commit()
                    if fresh is None:
                        # The id is taken: the stream's version was read behind the log (a
                        # lagging read). Sending it would name another bet's transaction.
                        raise WalletUnavailable(
                            "log-behind", "the player's wallet stream was read behind the log"
                        )
                    call = bet_call(
                        config,
                        stream,
                        at,
                        player_ref(player_id).player_id,
                        token,
                        table_id,
                        round_id,
                        amount,
                    )
                    # Past the bound the exchange has no answer: the uncertain path, a
                    # rollback owed (the wallet may yet apply the debit it answers too late).
                    result = sender.send(call, left)
                    debits.append(_Debit(transaction, (round_id, spot_name, amount), result))
                    if result.outcome is not Outcome.OK:
                        return  # all or nothing: no further stake is asked for

            def take(plan: Plan, placed: list[BetPlaced]) -> None:
                if not placed:
                    return
                keys = [(bet.round_id, str(bet.spot), bet.stake) for bet in placed]
                if not debits:
                    # The bets open their round: only now are its id and window known.
                    assert plan.table.round is not None  # the bets are in it
                    send(keys[0][0], [key[1:] for key in keys], plan.table.round.deadline)
                elif [debit.key for debit in debits] != keys:
                    # The round moved on (its window closed) while the wallet debited the
                    # stakes for it: the debits made are not these bets'.
                    raise WalletUnavailable(
                        "round-moved", "the round moved on while the wallet debited the stake"
                    )
                for debit in debits:
                    _raise_unless_ok(debit.result)
                for debit, bet in zip(debits, placed, strict=True):
                    assert debit.result.balance is not None  # an ok debit states one
                    plan.record(
                        stream,
                        version,
                        StakeDebited(
                            debit.transaction,
                            table_id,
                            bet.round_id,
                            str(bet.spot),
                            bet.stake,
                            debit.result.balance,
                        ),
                    )

            # Into a round already open, the debits are made before the table's turn is taken
            # (the domain's refusals first, so a bet the rules refuse never reaches the
            # wallet): a slow wallet holds up this player alone, not the table.
            previewed = preview()
            bets = [previewed] if isinstance(previewed, BetPlaced) else previewed
            if bets:
                current = self._games.table(table_id).round
                if current is None or current.round_id != bets[0].round_id:
                    raise WalletUnavailable(
                        "round-moved", "the round moved on before the wallet was asked"
                    )
                try:
                    send(
                        current.round_id,
                        [(str(bet.spot), bet.stake) for bet in bets],
                        current.deadline,
                    )
                except BaseException:
                    self._record_failed_debits(player_id, version, table_id, debits)
                    raise
                if debits[-1].result.outcome is not Outcome.OK:
                    self._record_failed_debits(player_id, version, table_id, debits)
                    _raise_unless_ok(debits[-1].result)
            try:
                return command(take)
            except BaseException:
                self._record_failed_debits(player_id, version, table_id, debits)
                raise

    def _record_failed_debits(
        self, player_id: str, version: int, table_id: str, debits: list[_Debit]
    ) -> None:
        """Record, from `version + 1` on, why each debit did not become a bet, and what it
        leaves owed; nothing when no debit was made."""
        if not debits:
            return
        stream = seamless_stream(player_id)
        events: list[SeamlessEvent] = []
        parked: list[SeamlessEvent] = []
        for offset, debit in enumerate(debits):
            at = version + 1 + offset
            round_id, spot, amount = debit.key
            transaction, result = debit.transaction, debit.result
            if result.outcome is Outcome.REFUSED:
                events.append(
                    WalletCallRefused(
                        BET, transaction, table_id, round_id, spot, amount, result.reason
                    )
                )
                continue
            # Uncertain, fatal, or ok but the bet could not be placed: a rollback of the
            # debit is owed. A fatal answer parks it: an operator must look first.
            reason = "orphan-debit" if result.outcome is Outcome.OK else result.reason
            rollback = transaction_uuid(ROLLBACK, stream, at, transaction)
            events.append(
                WalletCallOwed(
                    ROLLBACK, rollback, transaction, table_id, round_id, spot, amount, reason
                )
            )
            if result.outcome is Outcome.FATAL:
                log.error(
                    "ALERT: the wallet answered a bet fatally (%s); its rollback is parked",
                    result.reason,
                    extra={"transaction_uuid": transaction, "reason": result.reason},
                )
                parked.append(WalletCallParked(ROLLBACK, rollback, result.reason, result.detail))
        # After every outcome: each debit's outcome stays at its own version (only the last
        # debit can be fatal: no stake is asked for after a debit that is not ok).
        events.extend(parked)
        try:
            self._append([StreamAppend(stream, version, [to_new_event(e) for e in events])], SYSTEM)
        except Exception:
            # The in_flight rows stay: settle_orphans rolls the debits back later.
            log.exception(
                "could not record the outcome of debits %s", [d.transaction for d in debits]
            )

    def settle_orphans(self, player_id: str, conn: Connection[TupleRow], actor: Actor) -> int:
        """Under the player's lock: owe a rollback of each debit whose outcome is not in the
        log; the seamless stream's version after."""
        stream = seamless_stream(player_id)
        last = self._store.last_of_stream(stream)
        version = 0 if last is None else last.version
        rows = conn.execute(_IN_FLIGHT_OF, [player_id, version]).fetchall()
        conn.commit()
        for transaction, table_id, round_id, spot, amount, at in rows:
            if at != version + 1:
                continue  # an outcome recorded since at another version: not this debit's
            rollback = transaction_uuid(ROLLBACK, stream, at, transaction)
            event = WalletCallOwed(
                ROLLBACK, rollback, transaction, table_id, round_id, spot, amount, "orphan-debit"
            )
            log.warning(
                "debit %s of %s has no outcome in the log: its rollback is owed",
                transaction,
                player_id,
            )
            self._append([StreamAppend(stream, version, [to_new_event(event)])], actor)
            version += 1
        return version

    def owe_rollback_of_lost_debit(
        self,
        player_id: str,
        debit: str,
        table_id: str,
        round_id: str,
        amount: int,
        actor: Actor,
    ) -> str:
        """Owe the rollback of a debit the wallet holds but the log lost (a restore cut it);
        the rollback's transaction id. The compensating call is written as any orphan debit's
        is (a WalletCallOwed with its row in the same append), never an edit of the log."""
        stream = seamless_stream(player_id)
        with self.player_lock(player_id):
            last = self._store.last_of_stream(stream)
            version = 0 if last is None else last.version
            rollback = transaction_uuid(ROLLBACK, stream, version + 1, debit)
            # The wallet lists no spot; the bet's spot was in the events the restore lost.
            event = WalletCallOwed(
                ROLLBACK, rollback, debit, table_id, round_id, LOST_SPOT, amount, LOST_BY_RESTORE
            )
            self._append([StreamAppend(stream, version, [to_new_event(event)])], actor)
        log.warning("debit %s of %s was lost by a restore: its rollback is owed", debit, player_id)
        return rollback

    def _append(self, appends: list[StreamAppend], actor: Actor) -> None:
        """Append, with the calls the append owes in its transaction."""
        outbox = self._owed(appends) if self._owed is not None else ()
        self._store.append(appends, actor.metadata(), outbox=outbox)

    def append_outcome(self, player_id: str, event: SeamlessEvent, actor: Actor) -> None:
        """Append one event to the player's seamless stream, at whatever version it is."""
        stream = seamless_stream(player_id)
        last = self._store.last_of_stream(stream)
        version = 0 if last is None else last.version
        for _ in range(5):
            try:
                self._store.append(
                    [StreamAppend(stream, version, [to_new_event(event)])], actor.metadata()
                )
                return
            except ConcurrencyConflict as conflict:
                version = conflict.actual
        raise ServiceError(f"could not append to {stream}: it kept changing")

    @contextmanager
    def player_lock(
        self, player_id: str, wait_seconds: float = LOCK_WAIT_SECONDS
    ) -> Iterator[Connection[TupleRow]]:
        """Hold the player's money lock (a session-level advisory lock) on a pooled connection.

        Raises WalletUnavailable if another call of the player's does not finish in time.
        """
        key = _LOCK_KEY + player_id
        with self._lock_connection() as conn:
            deadline = self._monotonic() + wait_seconds
            while True:
                row = conn.execute(_TRY_LOCK, [key]).fetchone()
                conn.commit()
                if row is not None and row[0]:
                    break
                if self._monotonic() >= deadline:
                    raise WalletUnavailable(
                        "player-busy", "another money call of this player is still in flight"
                    )
                self._sleep(0.005)
            try:
                yield conn
            finally:
                _unlock(conn, key)

    @contextmanager
    def _lock_connection(self) -> Iterator[Connection[TupleRow]]:
        """A pooled connection in autocommit while it holds a money lock: each statement under
        the lock is its own transaction (the in-flight row durable at once), with no extra
        round trip to commit, and none is left open during the wallet's call."""
        with self._pool.connection() as conn:
            conn.autocommit = True
            try:
                yield conn
            finally:
                try:
                    conn.autocommit = False
                except psycopg.Error:
                    log.warning("a money lock's connection was lost; the pool discards it")

    @contextmanager
    def try_player_lock(self, player_id: str) -> Iterator[Connection[TupleRow] | None]:
        """The player's lock if it is free now, else None (the delivery job skips the player)."""
        key = _LOCK_KEY + player_id
        with self._lock_connection() as conn:
            row = conn.execute(_TRY_LOCK, [key]).fetchone()
            conn.commit()
            if row is None or not row[0]:
                yield None
                return
            try:
                yield conn
            finally:
                _unlock(conn, key)


def _unlock(conn: Connection[TupleRow], key: str) -> None:
    try:
        conn.rollback()
        conn.execute(_UNLOCK, [key])
        conn.commit()
    except psycopg.Error:
        # A lost connection has lost its session, and the lock with it; the pool discards it.
        log.warning("could not release the money lock %s: its connection is gone", key)


def _raise_unless_ok(result: WalletResult) -> None:
    if result.outcome is Outcome.OK:
        return
    if result.outcome is Outcome.REFUSED:
        raise WalletRefused(result.reason, f"the operator's wallet refused: {result.reason}")
    raise WalletUnavailable(
        result.reason,
        f"the operator's wallet did not confirm ({result.outcome}: {result.reason});"
        " nothing was placed",
    )
