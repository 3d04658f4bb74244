"""Shoe seeds on real PostgreSQL: an opening that loses its race leaves no seed behind."""

import threading

from domain.outcome import Spot
from domain.table import TableSettings
from events.postgres import Pool, PostgresEventStore
from service.application.game.tables import GameService
from service.application.wallets import WalletService
from tests.integration.test_game_concurrency import (
    FRONTEND,
    OPS,
    clock,
    race,
    until_not_conflicted,
)

# Through the primary key of shoe_secrets and events' (type, position) index: a test database.
_UNREFERENCED = """
SELECT s.shoe_id FROM shoe_secrets AS s
WHERE NOT EXISTS (
    SELECT 1 FROM events AS e WHERE e.type = 'ShoeOpened' AND e.payload->>'shoe_id' = s.shoe_id
)
"""


class SeedsStoredTogether(PostgresEventStore):
    """A store whose first seed writes wait for each other, so both openings store before
    either appends: the race that used to leave the loser's seed orphaned, every time (when
    a seed was stored under its shoe id alone, this class also paused that store)."""

    def __init__(self, pool: Pool, barrier: threading.Barrier) -> None:
        super().__init__(pool, clock)
        self._barrier = barrier
        self._waited = False

    def _wait_once(self) -> None:
        if not self._waited:
            self._waited = True
            self._barrier.wait(timeout=30)

    def claim_shoe_secret(
        self, table_id: str, nonce: int, shoe_id: str, server_seed: str
    ) -> tuple[str, str]:
        claimed = super().claim_shoe_secret(table_id, nonce, shoe_id, server_seed)
        self._wait_once()
        return claimed


def test_two_shoe_openings_racing_at_one_table_leave_no_seed_orphaned(app_pool: Pool) -> None:
    store = PostgresEventStore(app_pool, clock)
    setup = GameService(store, clock)
    setup.create_table("T1", TableSettings(), OPS)
    for seat, player in enumerate(("alice", "bob"), start=1):
        WalletService(store, clock).deposit(player, 10_000, "float", OPS)
        setup.sit("T1", player, seat, FRONTEND)
    barrier = threading.Barrier(2)

    def first_bet(player: str) -> object:
        # Each bet at the idle table opens the table's first shoe and its first round.
        game = GameService(SeedsStoredTogether(app_pool, barrier), clock)
        return until_not_conflicted(
            lambda: game.place_bet("T1", player, Spot.BANKER, 1_000, FRONTEND)
        )

    results = race([lambda: first_bet("alice"), lambda: first_bet("bob")])

    assert not [r for r in results if isinstance(r, Exception)], results
    assert len(store.read_all(types=["ShoeOpened"])) == 1
    assert len(store.read_all(types=["BetPlaced"])) == 2
    with app_pool.connection() as conn:
        assert conn.execute(_UNREFERENCED).fetchall() == []
        assert conn.execute("SELECT count(*) FROM shoe_secrets").fetchone() == (1,)


def test_the_seed_claimed_for_a_shoe_is_the_one_it_opens_and_reveals_with(
    app_pool: Pool,
) -> None:
    store = PostgresEventStore(app_pool, clock)
    game = GameService(store, clock)
    game.create_table("T1", TableSettings(), OPS)
    WalletService(store, clock).deposit("alice", 10_000, "float", OPS)
    game.sit("T1", "alice", 1, FRONTEND)
    # An earlier attempt at the first shoe claimed a seed, then lost its append.
    kept_id, kept_seed = store.claim_shoe_secret("T1", 1, "lost-attempt", "ab" * 32)

    game.place_bet("T1", "alice", Spot.PLAYER, 500, FRONTEND)

    [opened] = store.read_all(types=["ShoeOpened"])
    assert opened.payload["shoe_id"] == kept_id == "lost-attempt"
    assert store.load_shoe_secret(kept_id) == kept_seed
    with app_pool.connection() as conn:
        assert conn.execute(_UNREFERENCED).fetchall() == []
