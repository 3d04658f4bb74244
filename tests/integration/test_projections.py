"""The read models against the table service: balances to the penny, rebuilds byte for byte."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest
from psycopg import Connection
from psycopg.rows import TupleRow

from domain.outcome import Spot
from domain.round import RoundEvent, RoundSettled, replay_round, void_round
from domain.round import SettlementReversed as RoundReversed
from domain.round import StakeReturned as RoundReturned
from domain.table import TABLE_EVENT_TYPES, TableSettings, is_round_event
from domain.wallet import SettlementReversed as WalletReversed
from domain.wallet import StakeReturned as WalletReturned
from domain.wallet import WalletEvent
from events.postgres import Pool, PostgresEventStore
from events.projections import runner
from events.projections.base import Projection
from events.store import EventMetadata, RecordedEvent, StreamAppend
from service.application.actor import Actor
from service.application.chat import ChatService
from service.application.game.tables import GameService
from service.application.read_models import projector as read_models
from service.application.read_models.queries import ProjectionService
from service.application.read_models.wallets import WalletsProjection
from service.application.streams import (
    from_recorded_as,
    table_stream,
    to_new_event,
    wallet_stream,
)
from service.application.wallets import WalletService

OPS = Actor("ops-1", "ops")
FRONTEND = Actor("frontend-1", "frontend")
STAKES = (100, 200, 500, 1_000, 2_500)


@dataclass
class SteppingClock:
    """A clock that moves on 50 ms every time it is read, starting just before midnight.

    Slow enough that no betting window lapses in a session, fast enough that the ledger sees
    a session cross into a second day.
    """

    now: datetime = field(default_factory=lambda: datetime(2026, 3, 1, 23, 59, 30, tzinfo=UTC))
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self) -> datetime:
        with self.lock:
            self.now += timedelta(milliseconds=50)
            return self.now


def void_settled_round(store: PostgresEventStore, table_id: str, round_id: str) -> None:
    """Void a settled round through domain.round.void_round, as issue 6's service will."""
    stream = table_stream(table_id)
    recorded = store.read_stream(stream)
    events = [from_recorded_as(r, TABLE_EVENT_TYPES) for r in recorded]
    mine: list[RoundEvent] = [e for e in events if is_round_event(e) and e.round_id == round_id]
    voiding = void_round(replay_round(mine), "dealer misdeal found on review")
    wallets: dict[str, list[WalletEvent]] = {}
    for event in voiding:
        if isinstance(event, RoundReversed):
            wallets.setdefault(event.player_id, []).append(
                WalletReversed(
                    table_id, round_id, event.spot, event.stake, event.payout, event.commission
                )
            )
        elif isinstance(event, RoundReturned):
            wallets.setdefault(event.player_id, []).append(
                WalletReturned(table_id, round_id, event.spot, event.stake, event.reason)
            )
    appends = [StreamAppend(stream, recorded[-1].version, [to_new_event(e) for e in voiding])]
    for player_id, moves in sorted(wallets.items()):
        wallet = wallet_stream(player_id)
        version = len(store.read_stream(wallet))
        appends.append(StreamAppend(wallet, version, [to_new_event(e) for e in moves]))
    store.append(appends, EventMetadata("ops-1", "ops"))


def play_session(pool: Pool, rounds: int, seed: int, voids: int = 3) -> list[str]:
    """A random session on two tables: deposits, bets, passes, withdrawals, corrections, voids.

    Returns the players. Every round of each table is played to settlement.
    """
    rng = random.Random(seed)
    clock = SteppingClock()
    store = PostgresEventStore(pool, clock)
    games = GameService(store, clock)
    wallets = WalletService(store, clock)
    chat = ChatService(store, clock, games)
    tables = ("T1", "T2")
    players = [f"p{n}" for n in range(1, 7)]
    for table_id in tables:
        games.create_table(table_id, TableSettings(decks=rng.choice((6, 8))), OPS)
    for n, player in enumerate(players):
        wallets.deposit(player, 50_000, "opening float", OPS)
        games.sit(tables[n % 2], player, n // 2 + 1, FRONTEND)
    settled: list[tuple[str, str]] = []
    for number in range(rounds):
        table_id = tables[number % 2]
        seated = [p for n, p in enumerate(players) if tables[n % 2] == table_id]
        bettors = [p for p in seated if rng.random() < 0.8] or [seated[0]]
        for player in bettors:
            for spot in rng.sample(list(Spot), rng.choice((1, 1, 2))):
                games.place_bet(table_id, player, spot, rng.choice(STAKES), FRONTEND)
        if len(bettors) > 1 and rng.random() < 0.15:
            # Taken back before the deal: the stake returns and the player passes instead.
            games.remove_bets(table_id, bettors.pop(), FRONTEND)
        # Passes first: a participant's Deal after everyone else has acted brings the coup,
        # and the next round opens at once, so a later Pass would belong to that round.
        for player in sorted(seated, key=lambda p: p in bettors):
            if player in bettors:
                receipt = games.press_deal(table_id, player, FRONTEND)
            else:
                receipt = games.pass_turn(table_id, player, FRONTEND)
        dealt = [e for e in receipt.events if isinstance(e, RoundSettled)]
        assert dealt, [e.type for e in receipt.events]
        settled.append((table_id, dealt[0].round_id))
        if rng.random() < 0.3:
            chat.post(table_id, rng.choice(seated), f"good luck, round {number}", FRONTEND)
        if rng.random() < 0.1:
            player = rng.choice(players)
            wallets.correct(player, rng.choice((-300, 700)), "goodwill adjustment", OPS)
        if rng.random() < 0.05:
            wallets.withdraw(rng.choice(players), 1_000, "cash out", OPS)
    for table_id, round_id in rng.sample(settled, voids):
        void_settled_round(store, table_id, round_id)
    return players


def _dumps(pool: Pool, projection: type[Projection]) -> dict[str, list[tuple[object, ...]]]:
    with pool.connection() as conn:
        return {table: read_models.table_dump(conn, table) for table in projection.tables}


@pytest.mark.slow
def test_balances_agree_to_the_penny_with_the_table_service(app_pool: Pool) -> None:
    players = play_session(app_pool, rounds=60, seed=5)
    read_models.catch_up(app_pool)
    projected = ProjectionService(app_pool, SteppingClock())
    wallets = WalletService(PostgresEventStore(app_pool), SteppingClock())
    for player in players:
        assert projected.balance(player) == wallets.balance(player)
        assert projected.statement(player, limit=1000) == wallets.statement(player, limit=1000)


@pytest.mark.slow
def test_rebuilt_tables_equal_the_incrementally_built_ones(app_pool: Pool) -> None:
    play_session(app_pool, rounds=40, seed=11, voids=4)
    # Small batches: the live models are built in many steps, each across batch boundaries.
    for subscription in read_models.subscriptions(app_pool, listen=False, batch_size=7):
        subscription.run_until_caught_up()
    live = {p.name: _dumps(app_pool, p) for p in read_models.PROJECTIONS}
    result = read_models.rebuild(app_pool, batch_size=50)
    assert set(result.names) == set(read_models.NAMES)
    rebuilt = {p.name: _dumps(app_pool, p) for p in read_models.PROJECTIONS}
    assert rebuilt == live
    # Every table holds rows, but the broken rules': a session played by the service breaks none.
    assert all(
        rows
        for tables in live.values()
        for name, rows in tables.items()
        if name != "proj_round_violations"
    )
    assert live["rounds"]["proj_round_violations"] == []


@pytest.mark.slow
def test_twin_projectors_never_apply_a_batch_twice(app_pool: Pool) -> None:
    play_session(app_pool, rounds=30, seed=21, voids=2)
    twins = [
        read_models.subscriptions(app_pool, listen=False, batch_size=5, poll_interval=0.05)
        for _ in range(3)
    ]
    threads = [
        threading.Thread(target=lambda subs=subs: [s.run_until_caught_up() for s in subs])
        for subs in twins
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    racing = {p.name: _dumps(app_pool, p) for p in read_models.PROJECTIONS}
    read_models.rebuild(app_pool)
    assert {p.name: _dumps(app_pool, p) for p in read_models.PROJECTIONS} == racing


@pytest.mark.slow
@pytest.mark.parametrize("following", ["subscriptions", "follower"])
def test_a_rebuild_beside_a_live_projector_swaps_in_with_the_events_that_came_meanwhile(
    app_pool: Pool, following: str
) -> None:
    play_session(app_pool, rounds=20, seed=8, voids=1)
    # A subscription per model, or the one follower that `shoebox projector` runs.
    followers = (
        read_models.subscriptions(app_pool, poll_interval=0.05)
        if following == "subscriptions"
        else [read_models.follower(app_pool, poll_interval=0.05)]
    )
    projector = read_models.Projector(followers)
    projector.start()
    try:
        rebuilds = [
            threading.Thread(target=read_models.rebuild, args=(app_pool,)) for _ in range(2)
        ]
        for rebuild in rebuilds:
            rebuild.start()
        WalletService(PostgresEventStore(app_pool), SteppingClock()).deposit(
            "late", 1_234, "during the rebuild", OPS
        )
        for rebuild in rebuilds:
            rebuild.join()
        reads = ProjectionService(app_pool, SteppingClock())
        deadline = time.monotonic() + 10
        while any(s.lag_events for s in reads.status()):
            assert time.monotonic() < deadline, reads.status()
            time.sleep(0.05)
        assert reads.balance("late").available == 1_234
    finally:
        projector.stop()
    live = {p.name: _dumps(app_pool, p) for p in read_models.PROJECTIONS}
    read_models.rebuild(app_pool)
    assert {p.name: _dumps(app_pool, p) for p in read_models.PROJECTIONS} == live


def test_the_index_of_open_rounds_is_reported_and_rebuilt_like_every_read_model(
    app_pool: Pool,
) -> None:
    play_session(app_pool, rounds=6, seed=3, voids=0)
    head = PostgresEventStore(app_pool).head()

    behind = {s.name: s for s in read_models.status(app_pool, datetime.now(UTC))}
    assert behind["open_rounds"].lag_events == head  # nothing has followed the log yet

    read_models.catch_up(app_pool)
    live = _dumps(app_pool, read_models.projection_class("open_rounds"))
    assert live["open_rounds"], "the session leaves its table's next round open"
    caught = {s.name: s for s in read_models.status(app_pool, datetime.now(UTC))}
    assert caught["open_rounds"].lag_events == 0

    result = read_models.rebuild(app_pool, ["open_rounds"])
    assert result.names == ("open_rounds",)
    assert _dumps(app_pool, read_models.projection_class("open_rounds")) == live


class _Broken(Projection):
    """A read model whose fold always raises: a bug, as the follower meets one."""

    name = "broken"
    categories = ("wallet",)
    tables = ()

    def apply(self, conn: Connection[TupleRow], events: Sequence[RecordedEvent]) -> None:
        raise RuntimeError("a bug in a fold")


@pytest.mark.slow
def test_the_follower_builds_byte_for_byte_what_a_rebuild_builds(app_pool: Pool) -> None:
    play_session(app_pool, rounds=40, seed=13, voids=4)
    # Small batches across the boundaries of appends; each projection's checkpoint moves with
    # the others' in one transaction a pass.
    follower = read_models.follower(app_pool, listen=False, batch_size=7, gather=0.0)
    assert follower.run_until_caught_up() > 0
    assert follower.run_until_caught_up() == 0
    reads = ProjectionService(app_pool, SteppingClock())
    assert [s.lag_events for s in reads.status()] == [0] * len(read_models.NAMES)
    live = {p.name: _dumps(app_pool, p) for p in read_models.PROJECTIONS}
    read_models.rebuild(app_pool, batch_size=50)
    assert {p.name: _dumps(app_pool, p) for p in read_models.PROJECTIONS} == live
    assert all(live[name] for name in read_models.NAMES)


@pytest.mark.slow
def test_twin_followers_never_apply_a_batch_twice(app_pool: Pool) -> None:
    play_session(app_pool, rounds=30, seed=23, voids=2)
    twins = [read_models.follower(app_pool, listen=False, batch_size=5) for _ in range(3)]
    # A subscription of the old kind on one model as well: the same checkpoint rows.
    (wallets,) = read_models.subscriptions(app_pool, ["wallets"], listen=False, batch_size=3)
    runs = [t.run_until_caught_up for t in twins] + [wallets.run_until_caught_up]
    threads = [threading.Thread(target=run) for run in runs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # A pass may have skipped a checkpoint a twin held; one more pass takes what is left.
    twins[0].run_until_caught_up()
    racing = {p.name: _dumps(app_pool, p) for p in read_models.PROJECTIONS}
    read_models.rebuild(app_pool)
    assert {p.name: _dumps(app_pool, p) for p in read_models.PROJECTIONS} == racing


def test_a_failing_model_does_not_hold_the_others_back(app_pool: Pool) -> None:
    wallets = WalletService(PostgresEventStore(app_pool), SteppingClock())
    wallets.deposit("alice", 500, "float", OPS)
    follower = runner.follower(
        app_pool, [WalletsProjection, _Broken], listen=False, gather=0.0, upcasters=None
    )
    follower.run_until_caught_up()
    found = {s.name: s for s in runner.status(app_pool, SteppingClock()(), ["wallets", "broken"])}
    assert found["wallets"].lag_events == 0
    assert found["broken"].checkpoint == 0
    assert found["broken"].lag_events > 0
    reads = ProjectionService(app_pool, SteppingClock())
    assert reads.balance("alice").available == 500
    # The broken one sits out its pause; the healthy one follows the next appends meanwhile.
    wallets.deposit("alice", 250, "more", OPS)
    follower.run_until_caught_up()
    assert reads.balance("alice").available == 750
    found = {s.name: s for s in runner.status(app_pool, SteppingClock()(), ["wallets", "broken"])}
    assert found["wallets"].lag_events == 0
    assert found["broken"].checkpoint == 0
