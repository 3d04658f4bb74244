"""A malfunction's voids reach every read model: balances, round history, roads and ledger."""

from domain.outcome import Spot
from domain.round import RoundSettled
from domain.table import MalfunctionScope, TableSettings
from events.postgres import Pool, PostgresEventStore
from service.application.actor import Actor
from service.application.game.tables import GameService
from service.application.malfunctions import MalfunctionService, Scope
from service.application.read_models import projector
from service.application.read_models.queries import ProjectionService
from service.application.wallets import WalletService
from tests.integration.test_projections import SteppingClock

OPS = Actor("ops-1", "ops")
FRONTEND = Actor("frontend-1", "frontend")


def test_voided_rounds_leave_the_roads_and_the_ledger_and_balances_stay_exact(
    app_pool: Pool,
) -> None:
    clock = SteppingClock()
    store = PostgresEventStore(app_pool, clock)
    games = GameService(store, clock)
    wallets = WalletService(store, clock)
    games.create_table("T1", TableSettings(seats=2), OPS)
    for seat, player in enumerate(("alice", "bob"), start=1):
        wallets.deposit(player, 100_000, "opening float", OPS)
        games.sit("T1", player, seat, FRONTEND)
    settled: list[str] = []
    for _ in range(6):
        games.place_bet("T1", "alice", Spot.BANKER, 2_500, FRONTEND)
        games.place_bet("T1", "bob", Spot.PLAYER, 1_000, FRONTEND)
        games.place_bet("T1", "bob", Spot.TIE, 500, FRONTEND)
        games.press_deal("T1", "alice", FRONTEND)
        receipt = games.press_deal("T1", "bob", FRONTEND)
        settled += [e.round_id for e in receipt.events if isinstance(e, RoundSettled)]
    assert len(settled) == 6
    voided = settled[1:3]

    MalfunctionService(store, clock).declare(
        "T1", "card reader fault", Scope(MalfunctionScope.ROUNDS, tuple(voided)), OPS
    )
    projector.catch_up(app_pool)
    projected = ProjectionService(app_pool, clock)

    for player in ("alice", "bob"):
        assert projected.balance(player) == wallets.balance(player)
    for round_id in settled:
        record = projected.round(round_id)
        assert record is not None
        assert record.voided == (round_id in voided)
    statistics = projected.statistics("T1", "all")
    assert statistics is not None
    assert statistics.roads.counts.hands == len(settled) - len(voided)
    report = projected.invariants()
    assert report.ok, report.violations
