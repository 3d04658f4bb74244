"""The game application service: tables, seats, bets, the deal and the betting window.

Each command loads the table (and the wallets and limits it touches), runs the pure domain of
domain/table.py and domain/wallet.py, and appends every resulting event in one multi-stream
append that names the version of every stream it read. The deal is never a command of its own:
the append that records the last Deal or Pass, or the window closing, also records the cards,
the outcome, every settlement, every wallet's payout or returned stake, the shoe's retirement
and reveal when due, and the next round's opening, so the log never holds half a round.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import replace
from datetime import datetime
from typing import Protocol

from domain.cards import Card
from domain.errors import DomainError
from domain.outcome import Spot
from domain.round import (
    BetPlaced,
    CardDrawn,
    Phase,
    RoundOpened,
)
from domain.shoe import ServerSeed, random_client_seed
from domain.table import (
    ChangeSeat,
    CloseWindow,
    CreateTable,
    DealCoup,
    LeaveTable,
    MutePlayer,
    OpenRound,
    OpenShoe,
    Pass,
    PlaceBet,
    PressDeal,
    Rebet,
    RemoveBets,
    RemovePlayer,
    RetireShoe,
    RevealShoe,
    Shoe,
    SitDown,
    Table,
    TableCreated,
    TableSettings,
    UnmutePlayer,
    decide,
    evolve,
    expect_betting_round,
)
from domain.wallet import (
    Wallet,
)
from events.snapshots import SnapshotStore
from events.store import AppendResult, EventStore, JsonValue, OutboxRow, StreamAppend
from events.stream_locks import StreamBusy, StreamLocks, TurnStore
from service.application.actor import Actor, Outcome
from service.application.appends import DEFAULT_PATIENCE, Patience, Prepared, Receipt, run_command
from service.application.errors import Conflict, RoundNotFound, ServiceError, TableNotFound
from service.application.game.plan import NewShoe, NothingDue, Plan, ShoeCards, whose_money_moved
from service.application.game.turns import TableHeat, TableTurns, TurnNotReached
from service.application.game.views import LiveState, live_state
from service.application.players import LimitCache
from service.application.streams import (
    TABLE,
    DomainEvent,
    TableCache,
    player_stream,
    table_stream,
    to_new_event,
    wallet_stream,
)
from service.application.wallets import Balance, MoneyOutcome, WalletCache

log = logging.getLogger(__name__)

SYSTEM = Actor("shoebox", "system")
"""The actor of what the table does by itself: a window closing, a lapsed round dealt."""


class WindowScheduler(Protocol):
    """Something that calls `GameService.close_window` for a round once its deadline passes."""

    def schedule_window_close(self, table_id: str, round_id: str, at: datetime) -> None:
        """Arrange for the round's window to be closed at `at`."""


class NoScheduler:
    """No scheduled closing: windows close lazily, on the next request to their table."""

    def schedule_window_close(self, table_id: str, round_id: str, at: datetime) -> None:
        """Do nothing."""


class GameService:
    """Tables and play: every command an atomic append with the versions of what it read."""

    def __init__(
        self,
        store: EventStore,
        clock: Callable[[], datetime],
        scheduler: WindowScheduler | None = None,
        *,
        tables: TableCache | None = None,
        wallets: WalletCache | None = None,
        limits: LimitCache | None = None,
        shoes: ShoeCards | None = None,
        patience: Patience = DEFAULT_PATIENCE,
        seeds: Callable[[], ServerSeed] = ServerSeed.generate,
        client_seeds: Callable[[], str] = random_client_seed,
        before_deal_append: Callable[[], None] | None = None,
        snapshots: SnapshotStore | None = None,
        stream_locks: StreamLocks | None = None,
        seamless: Callable[[str], bool] | None = None,
        owed: Callable[[Sequence[StreamAppend]], Sequence[OutboxRow]] | None = None,
    ) -> None:
        self._store = store
        # The calls to seamless wallets an append owes, written in its own transaction
        # (service/application/seamless_owed.py); none without a seamless operator.
        self.owed = owed
        # Which players' money is in their operator's own wallet (service/application/
        # seamless_bets.py): the plan moves no Shoebox wallet of theirs.
        self._seamless: Callable[[str], bool] = (
            seamless if seamless is not None else lambda player_id: False
        )
        # A test-only hook (service/runtime/failpoints.py): lets an e2e test kill a server mid-deal.
        self._before_deal_append = before_deal_append
        self._clock = clock
        self._scheduler: WindowScheduler = scheduler if scheduler is not None else NoScheduler()
        # Caches of their own, over `snapshots` if given, unless shared ones are handed in.
        self._tables = tables if tables is not None else TableCache(snapshots=snapshots)
        self._wallets = wallets if wallets is not None else WalletCache(snapshots=snapshots)
        self._tables.on_read(self._doubt_wallets_moved_elsewhere)
        self._limits = limits if limits is not None else LimitCache()
        self._shoes = shoes if shoes is not None else ShoeCards()
        self._patience = patience
        # One command at a time per table in this process (turns.py); across processes the
        # appends race, and run_command retries the losers within the patience's budget.
        self._turns = TableTurns()
        # Across processes, a table that more than one writes at once is written in turns
        # under its stream lock (events/stream_locks.py), if there is one; `_heat` says which.
        self._stream_locks = stream_locks
        self._heat = TableHeat(patience.monotonic)
        self._one_try = replace(patience, attempts=1)
        # Injectable so that tests can deal a known shoe; production uses the OS's CSPRNG.
        self._seeds = seeds
        self._client_seeds = client_seeds

    def is_seamless(self, player_id: str) -> bool:
        """Whether the player's money is in their operator's own wallet."""
        return self._seamless(player_id)

    # Tables.

    def create_table(self, table_id: str, settings: TableSettings, actor: Actor) -> Receipt:
        """Set up a new table."""

        def prepare() -> Prepared:
            version, table = self._tables.table(self._store, table_id)
            events = decide(table, CreateTable(table_id, settings), self._clock())
            created = evolve(None, events[0])
            stream = table_stream(table_id)

            def recorded(result: AppendResult) -> None:
                self._tables.put(stream, result.versions[stream], created)

            return Prepared(
                [StreamAppend(stream, version, [to_new_event(e) for e in events])],
                tuple(events),
                recorded,
            )

        return run_command(self._store, actor, prepare, self._patience)

    def list_tables(self) -> list[Table]:
        """Every table, in the order they were created."""
        table_ids: list[str] = []
        position = 0
        while True:
            page = self._store.read_all(
                position, limit=1000, categories=[TABLE], types=[TableCreated.type]
            )
            if not page:
                break
            table_ids.extend(str(event.payload["table_id"]) for event in page)
            position = page[-1].position
        return [self.table(table_id) for table_id in table_ids]

    def table(self, table_id: str) -> Table:
        """A table's state as the log has it; reading never appends (see `live_state`)."""
        return self._load(table_id)[1]

    def live_state(self, table_id: str) -> LiveState:
        """What a front end shows of a table now; a lapsed window shows as closing.

        A read never writes: it is safe to retry and to crawl, and takes no append lock. The
        lapsed window is closed by whichever comes first of the scheduled job, the table's
        next command and the projector's sweeper (service/application/game/sweeper.py).
        """
        version, table = self._load(table_id)
        return live_state(version, table, closing=self._overdue(table, self._clock()))

    def catch_up(self, table_id: str, actor: Actor = SYSTEM) -> tuple[int, Table]:
        """Enforce a lapsed betting window (exclude, then deal); the table as it then stands.

        Every request to a table calls this, so a dead worker cannot stall a table. `actor` is
        recorded on the catch-up's append: the table itself, unless recovery drives it.
        """
        version, table = self._load(table_id)
        if self._overdue(table, self._clock()):
            with self._turn(table_id) as deadline:
                self._catch_up(table_id, actor, deadline)
            version, table = self._load(table_id)
        return version, table

    # Seats.

    def sit(self, table_id: str, player_id: str, seat: int, actor: Actor) -> Receipt:
        """Take a free seat; during a round the player plays from the next one."""
        return self._command(
            table_id, actor, lambda plan, now: plan.run(SitDown(player_id, seat), now)
        )

    def change_seat(self, table_id: str, player_id: str, seat: int, actor: Actor) -> Receipt:
        """Move to another free seat between hands, in one step; refused while one has bets."""
        return self._command(
            table_id, actor, lambda plan, now: plan.run(ChangeSeat(player_id, seat), now)
        )

    def leave(self, table_id: str, player_id: str, actor: Actor) -> Receipt:
        """Give up one's seat; unconfirmed bets come back, confirmed ones stay in play."""
        return self._command(
            table_id, actor, lambda plan, now: plan.run(LeaveTable(player_id), now)
        )

    # Betting.

    def place_bet(
        self,
        table_id: str,
        player_id: str,
        spot: Spot,
        stake: int,
        actor: Actor,
        debit: Callable[[Plan, BetPlaced], None] | None = None,
        round_id: str | None = None,
    ) -> Receipt:
        """Put a stake on a spot, reserving it from the wallet in the same append.

        A seamless player's stake is taken by `debit` instead: called with each bet the plan
        places, it debits the operator's wallet (or raises) and records the debit in the plan.
        With `round_id` the bet goes into that round or is refused (expect_betting_round).
        """

        def act(plan: Plan, now: datetime) -> None:
            limit = self._player_limit(plan, player_id)
            self._open_shoe_for_new_round(plan, player_id, now)
            placed = plan.run(PlaceBet(player_id, Spot(spot), stake, limit), now)
            if debit is not None:
                for event in placed:
                    if isinstance(event, BetPlaced):
                        debit(plan, event)

        return self._command(table_id, actor, act, round_id)

    def preview_bet(
        self, table_id: str, player_id: str, spot: Spot, stake: int, round_id: str | None = None
    ) -> BetPlaced | None:
        """The bet `place_bet` would record now into the round open for betting, decided on
        the table as the log has it, writing nothing; the domain's refusal is raised.

        None when no round is open for betting (the bet would open one, or the table owes an
        append first): then only the command itself knows the bet's round. A seamless bet
        debits the operator's wallet with this round's id before taking the table's turn, so
        a slow wallet never holds up the other players at the table.
        """
        now = self._clock()
        _, table = self._load(table_id)
        current = table.round
        if current is None or current.phase is not Phase.BETTING or self._overdue(table, now):
            return None
        if round_id is not None:
            expect_betting_round(table, round_id)
        _, limit = self._limits.limit(self._store, player_id)
        for event in decide(table, PlaceBet(player_id, Spot(spot), stake, limit.limit), now):
            if isinstance(event, BetPlaced):
                return event
        return None

    def remove_bets(self, table_id: str, player_id: str, actor: Actor) -> Receipt:
        """Take all of one's bets back before pressing Deal or Pass."""
        return self._command(
            table_id, actor, lambda plan, now: plan.run(RemoveBets(player_id), now)
        )

    def rebet(
        self,
        table_id: str,
        player_id: str,
        actor: Actor,
        debit: Callable[[Plan, list[BetPlaced]], None] | None = None,
        round_id: str | None = None,
    ) -> Receipt:
        """Repeat one's bets of the last round played at this seat.

        A seamless player's stakes are taken by `debit` instead: called once with every bet
        the rebet places, it debits each from the operator's wallet (or raises, and nothing is
        placed) and records the debits in the plan.
        """

        def act(plan: Plan, now: datetime) -> None:
            limit = self._player_limit(plan, player_id)
            self._open_shoe_for_new_round(plan, player_id, now)
            placed = plan.run(Rebet(player_id, limit), now)
            if debit is not None:
                debit(plan, [event for event in placed if isinstance(event, BetPlaced)])

        return self._command(table_id, actor, act, round_id)

    def preview_rebet(
        self, table_id: str, player_id: str, round_id: str | None = None
    ) -> list[BetPlaced] | None:
        """The bets `rebet` would place now into the round open for betting, as `preview_bet`
        decides a bet: on the table as the log has it, writing nothing; None when no round is
        open for betting."""
        now = self._clock()
        _, table = self._load(table_id)
        current = table.round
        if current is None or current.phase is not Phase.BETTING or self._overdue(table, now):
            return None
        if round_id is not None:
            expect_betting_round(table, round_id)
        _, limit = self._limits.limit(self._store, player_id)
        events = decide(table, Rebet(player_id, limit.limit), now)
        return [event for event in events if isinstance(event, BetPlaced)]

    def press_deal(
        self, table_id: str, player_id: str, actor: Actor, round_id: str | None = None
    ) -> Receipt:
        """Confirm one's bets; the last participant to act brings the deal."""
        return self._command(
            table_id, actor, lambda plan, now: plan.run(PressDeal(player_id), now), round_id
        )

    def pass_turn(
        self, table_id: str, player_id: str, actor: Actor, round_id: str | None = None
    ) -> Receipt:
        """Sit this coup out; one's bets come back."""
        return self._command(
            table_id, actor, lambda plan, now: plan.run(Pass(player_id), now), round_id
        )

    def close_window(self, table_id: str, round_id: str) -> Receipt | None:
        """The scheduled job: close this round's window and deal; None if already past it."""
        with self._turn(table_id) as deadline:
            # Read in the turn, so the close below decides on this read (one read a close).
            _, table = self._load(table_id)
            current = table.round
            if current is None:
                raise RoundNotFound(table_id, round_id)
            if current.round_id != round_id or current.phase is not Phase.BETTING:
                return None
            now = self._clock()
            if not current.window_closed(now):
                # Fired early (clock skew between worker and web): try again at the deadline.
                self._schedule(table_id, round_id, current.deadline)
                return None
            return self._catch_up(table_id, deadline=deadline, just_read=True)

    # Moderation, by ops.

    def mute(self, table_id: str, player_id: str, actor: Actor, reason: str = "") -> Receipt:
        """Mute a player in the table's chat."""
        return self._command(
            table_id, actor, lambda plan, now: plan.run(MutePlayer(player_id, reason), now)
        )

    def unmute(self, table_id: str, player_id: str, actor: Actor) -> Receipt:
        """Lift a player's mute at the table."""
        return self._command(
            table_id, actor, lambda plan, now: plan.run(UnmutePlayer(player_id), now)
        )

    def remove_player(self, table_id: str, player_id: str, reason: str, actor: Actor) -> Receipt:
        """Remove a player from the table for good: unseated, bets returned, barred."""
        return self._command(
            table_id, actor, lambda plan, now: plan.run(RemovePlayer(player_id, reason), now)
        )

    # The machinery.

    def _load(
        self, table_id: str, *, trust_cache: bool = False, store: EventStore | None = None
    ) -> tuple[int, Table]:
        if trust_cache:
            cached = self._tables.cached(table_stream(table_id))
            if cached is not None and cached[1] is not None:
                return cached[0], cached[1]
        version, table = self._tables.table(self._store if store is None else store, table_id)
        if table is None:
            raise TableNotFound(table_id)
        return version, table

    def _played_elsewhere(self, table_id: str, version: int) -> bool:
        """Whether the table has an event after `version` in a role other than the system's."""
        later = self._store.read_stream(table_stream(table_id), from_version=version + 1)
        return any(event.metadata.role != SYSTEM.role for event in later)

    def _load_noting(self, table_id: str, store: EventStore) -> tuple[int, Table, bool]:
        """The table read now, and whether anyone but the table's clock (SYSTEM) wrote it
        since this process's cached version."""
        version, table, players = self._tables.table_noting(store, table_id, SYSTEM.role)
        if table is None:
            raise TableNotFound(table_id)
        return version, table, players

    @contextmanager
    def _turn(self, table_id: str) -> Iterator[float]:
        """This process's turn at the table; yields the deadline of the command that takes it.

        The deadline (on the patience's monotonic clock) starts before the wait, so that the
        wait for the turn and the retries share one budget.
        """
        deadline = self._patience.deadline()
        try:
            with self._turns.turn(table_id, deadline - self._patience.monotonic()):
                yield deadline
        except TurnNotReached as error:
            log.warning("%s; answered as a conflict", error)
            raise Conflict([table_stream(table_id)], 0) from None

    def _window_left(self, table_id: str) -> float | None:
        """Seconds until the betting window of the table's round closes, as last read here."""
        cached = self._tables.cached(table_stream(table_id))
        table = cached[1] if cached is not None else None
        current = table.round if table is not None else None
        if current is None or current.phase is not Phase.BETTING:
            return None
        return (current.deadline - self._clock()).total_seconds()

    def _command(
        self,
        table_id: str,
        actor: Actor,
        act: Callable[[Plan, datetime], object],
        round_id: str | None = None,
    ) -> Receipt:
        """Run `act` at the table in this process's turn; a command that names `round_id` is
        decided in that round or refused (expect_betting_round), after any overdue window has
        closed."""
        with self._turn(table_id) as deadline:
            return self._command_in_turn(table_id, actor, act, deadline, round_id)

    def _command_in_turn(
        self,
        table_id: str,
        actor: Actor,
        act: Callable[[Plan, datetime], object],
        deadline: float,
        round_id: str | None = None,
    ) -> Receipt:
        new_shoe: list[NewShoe | None] = [None]
        # What the next attempt may decide on without reading it: the table, and the rest
        # (wallets and limits). Each is in the append at the version used, so a stale one
        # makes the append conflict, and the retry reads it.
        trusted = {"table": True, "rest": True}
        planned: list[Plan] = []
        stream = table_stream(table_id)
        # The store this command reads the table from and appends through: the turn's, while
        # it holds the table's turn (events/stream_locks.py), else the service's.
        stores: list[EventStore] = [self._store]

        def plan_command(trust_table: bool, trust_rest: bool) -> Plan:
            now = self._clock()
            if trust_table:
                version, table = self._load(table_id, trust_cache=True, store=stores[0])
            else:
                version, table, players = self._load_noting(table_id, stores[0])
                if players:
                    # Another process played the table meanwhile. Not the table's own clock
                    # (a window closed by the worker, the sweeper or a late request, in the
                    # system's role): that writes once a round, and taking turns for it would
                    # put every bet at every table into a turn for good.
                    self._heat.note_contended(table_id)
            if self._overdue(table, now):
                # The deadline is enforced here too, so a dead worker cannot stall a table; it
                # is the table's own append, not the caller's, and carries no idempotency key.
                self._catch_up(table_id, deadline=deadline)
                # As of the catch-up: its own append is cached, or its NothingDue was decided
                # on the log read in it (a write since is a conflict, and the retry reads).
                version, table = self._load(table_id, trust_cache=True)
            wallet = self._cached_wallet if trust_rest else self._wallet
            plan = Plan(table_id, version, table, wallet, self._seamless)
            plan.trust_cached_limits = trust_rest
            plan.new_shoe = new_shoe[0]
            try:
                if round_id is not None:
                    expect_betting_round(plan.table, round_id)
                act(plan, now)
            except (DomainError, ServiceError):
                if not (trust_table or trust_rest):
                    raise
                # The cached table, wallet or limit may be one another process has since moved
                # on (a round opened, a deposit, a limit raised): a refusal is only ever
                # decided on state read from the log.
                return plan_command(trust_table=False, trust_rest=False)
            self._advance(plan, now)
            new_shoe[0] = plan.new_shoe
            return plan

        def prepare() -> Prepared:
            # The first attempt decides on this process's cached table, wallets and limits
            # without reading them; a fresh cache (the table's last command ran in this
            # process) makes the command one call to the store, the append.
            trust_table, trust_rest = trusted["table"], trusted["rest"]
            # Set first: a conflict raised while planning (a stale read) must not leave the
            # retry trusting the same stale cache.
            trusted["table"] = trusted["rest"] = False
            plan = plan_command(trust_table, trust_rest)
            planned[:] = [plan]
            return self._prepared(plan)

        respond = actor.respond
        if respond is not None:

            def respond_with_balances(outcome: Outcome) -> JsonValue:
                # run_command answers the outcome of the plan it has just prepared.
                (plan,) = planned
                balances = _balances_after(plan)
                return respond(MoneyOutcome(outcome.events, outcome.versions, balances))

            actor = replace(actor, respond=respond_with_balances)

        def run(patience: Patience) -> Receipt:
            return run_command(
                stores[0],
                actor,
                prepare,
                patience,
                deadline=deadline,
                window_left=lambda: self._window_left(table_id),
            )

        locks = self._stream_locks
        if locks is None:
            return run(self._patience)
        # The one-call path is for a table that is not hot here (turns.py, TableHeat). A table
        # not in the cache has to be read anyway, and is read under its lock, and is hot for a
        # while: whether others write it cannot be told from a first read, and a process
        # whose one-call appends keep winning never learns that it races a lock's holders.
        heat = self._heat
        if self._tables.cached(stream) is None:
            heat.note_contended(table_id)
        elif not heat.hot(table_id):
            try:
                return run(self._one_try)
            except Conflict as lost:
                # Lost a race. Hot if another process played the table since the version the
                # bet was decided on; not for the table's clock (a window closed elsewhere,
                # once a round) nor for a wallet moved elsewhere. Asked of the log, not of the
                # cache, which a read in this process may have brought up to date meanwhile.
                if planned and self._played_elsewhere(table_id, planned[0].version):
                    heat.note_contended(table_id)
                elif stream not in lost.streams and deadline > self._patience.monotonic():
                    # Only another stream moved (a wallet paid elsewhere): nobody else writes
                    # the table, so one more call, decided on fresh reads, and into the group
                    # commit; the turn is for a race lost again.
                    with suppress(Conflict):
                        return run(self._one_try)
        # Take turns with the table's other writers, deciding on the table read in the turn
        # (the events after the cached version, in the turn's first round trip); the wallets
        # and limits, which others rarely write, come from the cache unless doubted (a wallet
        # the table's new events moved is read first). The append is made in
        # the turn's transaction, whose commit ends the turn. Retries remain for writers that
        # take no turn.
        trusted["table"], trusted["rest"] = False, True
        try:
            while True:
                cached = self._tables.cached(stream)
                read_from = None if cached is None else cached[0] + 1
                try:
                    with locks.hold(
                        stream, deadline - self._patience.monotonic(), read_from=read_from
                    ) as turn:
                        stores[0] = TurnStore(self._store, stream, turn)
                        # One try in the turn: its append's commit ends the turn, so a retry
                        # outside it would race the table's other holders and lose to them.
                        return run(self._one_try)
                except Conflict:
                    # A stream moved by a writer that took no turn, or the player's wallet
                    # moved by another worker (the cached one was stale): decide again on
                    # fresh reads, in a turn taken afresh, while the budget lasts.
                    if deadline - self._patience.monotonic() <= 0:
                        raise
                finally:
                    stores[0] = self._store
        except StreamBusy as error:
            log.warning("%s; answered as a conflict", error)
            raise Conflict([stream], 0) from None

    def _catch_up(
        self,
        table_id: str,
        actor: Actor = SYSTEM,
        deadline: float | None = None,
        *,
        just_read: bool = False,
    ) -> Receipt | None:
        """Close a lapsed window and deal, as the table's own append; None if nothing was due.

        Only within the table's turn (`_turn`), whose `deadline` bounds its retries. With
        `just_read`, the caller read the table from the log in this turn a moment ago: the
        first attempt decides on that (its append names the version, so a write since is a
        conflict, and the retry reads again).
        """
        new_shoe: list[NewShoe | None] = [None]
        trust = [just_read]

        def prepare() -> Prepared:
            now = self._clock()
            version, table = self._load(table_id, trust_cache=trust[0])
            trust[0] = False
            plan = Plan(table_id, version, table, self._wallet, self._seamless)
            plan.new_shoe = new_shoe[0]
            current = table.round
            if (
                current is not None
                and current.phase is Phase.BETTING
                and current.pending
                and current.window_closed(now)
            ):
                plan.run(CloseWindow(), now)
            self._advance(plan, now)
            if not plan.table_events:
                raise NothingDue
            new_shoe[0] = plan.new_shoe
            return self._prepared(plan)

        try:
            return run_command(self._store, actor, prepare, self._patience, deadline=deadline)
        except NothingDue:
            return None  # another request caught the table up first

    def _overdue(self, table: Table, now: datetime) -> bool:
        """Whether the table owes an append of its own before taking any command."""
        current = table.round
        if current is None:
            return False
        if current.phase is Phase.BETTING:
            return not current.pending or current.window_closed(now)
        return current.deal_interrupted

    def _advance(self, plan: Plan, now: datetime) -> None:
        """Deal a round everyone has acted in, retire a spent shoe, open the next round."""
        current = plan.table.round
        if current is None or not (current.ready_to_deal or current.deal_interrupted):
            return
        self._deal(plan, now)
        # Only the append that settles a round opens the next: a settled table that everyone
        # left stays idle until a bet, even if someone sits down later.
        if plan.table.next_round_due:
            self._ensure_shoe(plan, now)
            plan.run(OpenRound(plan.table.next_round_id), now)

    def _deal(self, plan: Plan, now: datetime) -> None:
        current = plan.table.round
        assert current is not None
        shoe = plan.table.shoe
        if current.deal_interrupted:
            if shoe is None or shoe.shoe_id != current.shoe_id:
                raise RuntimeError(f"round {current.round_id} cannot resume: its shoe is gone")
            assert current.first_position is not None
            plan.run(DealCoup(shoe.shoe_id, self._cards(shoe), current.first_position), now)
        elif current.has_bets_in_play:
            self._ensure_shoe(plan, now)
            shoe = plan.table.live_shoe
            assert shoe is not None
            plan.run(DealCoup(shoe.shoe_id, self._cards(shoe), shoe.next_position), now)
        else:
            # Nobody plays: no card leaves the shoe, so any shoe id will do.
            plan.run(DealCoup(shoe.shoe_id if shoe else "", (), 0), now)
        shoe = plan.table.shoe
        if shoe is not None and not shoe.retired and not shoe.can_deal:
            plan.run(RetireShoe(), now)
            plan.run(RevealShoe(shoe.shoe_id, self._secret(shoe.shoe_id)), now)
            self._shoes.forget(_cards_key(shoe.shoe_id, shoe.client_seed))

    def _open_shoe_for_new_round(self, plan: Plan, player_id: str, now: datetime) -> None:
        """Before a bet that opens a round, open a shoe so its commitment precedes the bets."""
        if not plan.table.round_under_way and plan.table.seat_of(player_id) is not None:
            self._ensure_shoe(plan, now)

    def _ensure_shoe(self, plan: Plan, now: datetime) -> None:
        """Open a shoe unless a live one is open; its seed is claimed before it is published."""
        table = plan.table
        if table.live_shoe is not None:
            return
        if table.shoe is not None:
            # Retired but not revealed: cannot happen through this service, which reveals in
            # the retiring append, but a reveal must come before the next shoe.
            plan.run(RevealShoe(table.shoe.shoe_id, self._secret(table.shoe.shoe_id)), now)
            table = plan.table
        nonce = table.shoes_opened + 1
        new = plan.new_shoe
        if new is None or new.nonce != nonce:
            new = self._claim_shoe(plan.table_id, nonce)
        plan.new_shoe = new
        # A client seed ops rotated in (ClientSeedRotated) is the one this shoe must open with.
        client_seed = table.next_client_seed or self._client_seeds()
        shuffled = new.seed.shuffle(client_seed, nonce, table.settings.decks)
        self._shoes.put(_cards_key(new.shoe_id, client_seed), shuffled.cards)
        plan.run(
            OpenShoe(
                shoe_id=new.shoe_id,
                server_seed_hash=new.seed.commitment,
                client_seed=client_seed,
                nonce=nonce,
                decks=table.settings.decks,
                hands=shuffled.hands,
            ),
            now,
        )

    def _claim_shoe(self, table_id: str, nonce: int) -> NewShoe:
        """The shoe that opens as the table's `nonce`-th: its seed stored before it is published.

        The seed kept for this table and nonce, if an earlier attempt stored one, else a new
        one. Safe to reuse: a table publishes a nonce's commitment once, in that nonce's own
        ShoeOpened, and the table is not past this nonce (or the append below is refused as
        stale), so the kept seed was never published (docs/verification.md).
        """
        shoe_id, seed = self._store.claim_shoe_secret(
            table_id, nonce, uuid.uuid4().hex, self._seeds().reveal()
        )
        return NewShoe(shoe_id, ServerSeed(seed), nonce)

    def _cards(self, shoe: Shoe) -> tuple[Card, ...]:
        key = _cards_key(shoe.shoe_id, shoe.client_seed)
        cards = self._shoes.get(key)
        if cards is None:
            shuffled = ServerSeed(self._secret(shoe.shoe_id)).shuffle(
                shoe.client_seed, shoe.nonce, shoe.decks
            )
            if shuffled.hands != shoe.hands:
                raise RuntimeError(f"shoe {shoe.shoe_id}'s stored seed does not match its log")
            cards = shuffled.cards
            self._shoes.put(key, cards)
        return cards

    def _secret(self, shoe_id: str) -> str:
        secret = self._store.load_shoe_secret(shoe_id)
        if secret is None:
            raise RuntimeError(f"shoe {shoe_id} has no stored server seed")
        return secret

    def _wallet(self, player_id: str) -> tuple[int, Wallet]:
        return self._wallets.wallet(self._store, player_id)

    def _doubt_wallets_moved_elsewhere(self, stream_id: str, events: Sequence[DomainEvent]) -> None:
        # Table events written elsewhere moved those players' wallets there, in the same
        # append: a round settled, or a window closed, by the worker; a bet from another web
        # process. A bet that trusted their cached wallets would lose its race to it, and be
        # decided and appended again (at every seat, once a round); doubted, each wallet is
        # read first, in one short read.
        moved = {whose_money_moved(event) for event in events}
        for player_id in moved:
            if player_id is not None:
                self._wallets.doubt(wallet_stream(player_id))

    def _cached_wallet(self, player_id: str) -> tuple[int, Wallet]:
        # Only for a plan whose append names the version: a stale wallet is refused there.
        cached = self._wallets.cached(wallet_stream(player_id))
        return cached if cached is not None else self._wallet(player_id)

    def _player_limit(self, plan: Plan, player_id: str) -> int | None:
        stream = player_stream(player_id)
        # A limit changes at most once a week, so the cached one is nearly always current and
        # saves a read on every bet. Trusting it is safe: the guard below names its version,
        # so the append is refused if the limit has changed since, and the retry reads it.
        cached = self._limits.cached(stream) if plan.trust_cached_limits else None
        if cached is not None:
            version, limit = cached
        else:
            version, limit = self._limits.limit(self._store, player_id)
        plan.guard(stream, version)
        return limit.limit

    def _prepared(self, plan: Plan) -> Prepared:
        hook = self._before_deal_append
        if hook is not None and any(isinstance(e, CardDrawn) for e in plan.table_events):
            hook()
        table_id = plan.table_id
        stream = table_stream(table_id)
        opened = [e for e in plan.table_events if isinstance(e, RoundOpened)]

        def recorded(result: AppendResult) -> None:
            self._tables.put(stream, result.versions[stream], plan.table)
            for player_id, (_, wallet, _) in plan.wallets.items():
                wallet_id = wallet_stream(player_id)
                self._wallets.put(wallet_id, result.versions[wallet_id], wallet)
            for event in opened:
                self._schedule(table_id, event.round_id, datetime.fromisoformat(event.deadline))

        appends = plan.appends()
        outbox = self.owed(appends) if self.owed is not None else ()
        return Prepared(appends, plan.events(), recorded, outbox)

    def _schedule(self, table_id: str, round_id: str, at: datetime) -> None:
        try:
            self._scheduler.schedule_window_close(table_id, round_id, at)
        except Exception:
            # The window is also closed lazily by the next request, so a scheduler outage
            # delays a table rather than failing a bet that is already recorded.
            log.exception("could not schedule the window of round %s", round_id)


def _balances_after(plan: Plan) -> dict[str, Balance]:
    """Each wallet the plan moves, as it will stand once its append is recorded."""
    return {
        player_id: Balance(player_id, wallet.available, wallet.reserved, version + len(events))
        for player_id, (version, wallet, events) in plan.wallets.items()
    }


def _cards_key(shoe_id: str, client_seed: str) -> str:
    """Where a shoe's shuffled cards are cached: its id and the client seed they were cut with.

    Not the shoe id alone: two attempts at opening one shoe share its claimed seed and id but
    may each draw their own client seed, and the losing attempt's cards must never be dealt.
    """
    return f"{shoe_id}:{client_seed}"
