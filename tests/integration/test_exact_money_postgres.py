"""Over real PostgreSQL, with the read models wired but the projector not running: a wallet
read right after a bet or a deal is the new balance, every answer that moves money carries it,
a wallet read writes nothing, and the roads say how far the read model has read."""

from dataclasses import replace
from typing import Any

from domain.outcome import Outcome
from events.postgres import Pool, PostgresEventStore
from events.snapshots import PostgresSnapshotStore
from events.store import utc_now
from service.application.actor import Actor
from service.application.keys import Role, create_key
from service.application.read_models import projector
from service.application.read_models.queries import ProjectionService
from service.application.streams import SNAPSHOT_EVERY, wallet_stream
from service.application.wallets import WalletCache, WalletService
from service.runtime.container import Container
from service.runtime.settings import Settings
from service.web.api import EXTENSION
from service.web.app import create_app
from service.web.idempotency import REPLAYED_HEADER
from tests.api_harness import FLOAT, OPERATOR, Api, seed_dealing

OPS = Actor("ops-1", "ops")


def _api_without_projector(app_pool: Pool, *outcomes: Outcome) -> Api:
    """The API over PostgreSQL with its read models wired, and nothing projecting into them."""
    api = Api(store=PostgresEventStore(app_pool), seeds=(seed_dealing(outcomes),))
    wiring = api.app.extensions[EXTENSION]
    assert isinstance(wiring, Container)
    api.app.extensions[EXTENSION] = replace(
        wiring, projections=ProjectionService(app_pool, wiring.clock)
    )
    return api


def _wallet(api: Api, player_id: str) -> dict[str, Any]:
    found: dict[str, Any] = api.ok("GET", f"/v1/wallets/{player_id}")
    return {key: found[key] for key in ("available_pence", "reserved_pence", "version")}


def test_a_wallet_read_right_after_a_bet_and_a_deal_is_the_new_balance(app_pool: Pool) -> None:
    api = _api_without_projector(app_pool, Outcome.BANKER)
    api.create_table("T1")
    api.fund("alice")
    api.sit("T1", "alice", 1)
    placed = api.call(
        "POST",
        "/v1/tables/T1/bets",
        {"player_id": "alice", "spot": "banker", "stake_pence": 1_000},
        headers={"Idempotency-Key": "alice-bet-1"},
    )
    assert placed.status_code == 201
    after_bet = {"available_pence": FLOAT - 1_000, "reserved_pence": 1_000, "version": 2}
    assert placed.get_json()["balance_after"] == after_bet
    assert _wallet(api, "alice") == after_bet

    dealt = api.act("T1", "deal", "alice")
    after_deal = {"available_pence": FLOAT + 950, "reserved_pence": 0, "version": 3}
    assert dealt["balance_after"] == after_deal
    assert _wallet(api, "alice") == after_deal
    # The read model has applied nothing yet: the exact figures did not come from it.
    assert ProjectionService(app_pool, utc_now).balance("alice").version == 0

    again = api.call(
        "POST",
        "/v1/tables/T1/bets",
        {"player_id": "alice", "spot": "banker", "stake_pence": 1_000},
        headers={"Idempotency-Key": "alice-bet-1"},
    )
    assert again.headers[REPLAYED_HEADER] == "true"
    assert again.get_json()["balance_after"] == after_bet


def test_the_roads_say_which_log_position_the_read_model_has_reached(app_pool: Pool) -> None:
    api = _api_without_projector(app_pool, Outcome.PLAYER)
    api.create_table("T1")
    api.fund("alice")
    api.sit("T1", "alice", 1)
    api.bet("T1", "alice", "player", 1_000)
    api.act("T1", "deal", "alice")
    settled = [e for e in api.store.read_stream("table:T1") if e.type == "RoundSettled"]
    position = settled[-1].position
    projector.catch_up(app_pool, ["statistics"])
    caught_up = api.ok("GET", "/v1/tables/T1/statistics")
    assert caught_up["checkpoint"] >= position
    assert caught_up["roads"]["counts"]["hands"] == 1


def _snapshots(pool: Pool) -> tuple[int, int]:
    with pool.connection() as conn:
        row = conn.execute("SELECT count(*), coalesce(max(version), 0) FROM snapshots").fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def _cold_wallet_read(database: str, player_id: str) -> tuple[dict[str, Any], int]:
    """A new app (nothing cached) reads the wallet: its answer and the events it folded."""
    app = create_app(Settings(database_url=database))
    wiring = app.extensions[EXTENSION]
    assert isinstance(wiring, Container)
    try:
        secret = create_key(wiring.store, "fe", Role.FRONTEND, OPERATOR).secret
        folded: list[int] = []
        read_stream = wiring.store.read_stream

        def counted(stream_id: str, from_version: int = 1, *, upcast: bool = True) -> Any:
            found = read_stream(stream_id, from_version, upcast=upcast)
            if stream_id == wallet_stream(player_id):
                folded.append(len(found))
            return found

        wiring.store.read_stream = counted  # type: ignore[method-assign]
        response = app.test_client().get(
            f"/v1/wallets/{player_id}", headers={"Authorization": f"Bearer {secret}"}
        )
        assert response.status_code == 200, response.get_json()
        return response.get_json(), sum(folded)
    finally:
        wiring.close()


def test_a_wallet_read_writes_no_snapshot_and_folds_as_few_events_at_any_age(
    fresh_database: str, app_pool: Pool
) -> None:
    store = PostgresEventStore(app_pool)
    wallets = WalletService(
        store, utc_now, wallets=WalletCache(snapshots=PostgresSnapshotStore(app_pool))
    )
    folded: list[int] = []
    for age in (2 * SNAPSHOT_EVERY, 10 * SNAPSHOT_EVERY):
        while wallets.balance("erin").version < age + 7:
            wallets.deposit("erin", 100, "top-up", OPS)
        before = _snapshots(app_pool)
        assert before[1] == age  # the newest snapshot, taken by the deposits' appends
        balance, events = _cold_wallet_read(fresh_database, "erin")
        assert (balance["available_pence"], balance["version"]) == ((age + 7) * 100, age + 7)
        assert _snapshots(app_pool) == before, "a GET wrote a snapshot"
        folded.append(events)
    # Five times the wallet's events, the same read: its snapshot and the 7 events after it.
    assert folded == [8, 8]
