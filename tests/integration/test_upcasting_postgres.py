"""An old Deposited (schema 1, recorded before `reference` existed) in PostgreSQL still reads
through every path that interprets events, and stays exactly as recorded where the hash rules."""

from collections.abc import Sequence
from typing import ClassVar

from psycopg import Connection
from psycopg.rows import TupleRow

from domain.outcome import Spot
from domain.table import TableSettings
from events.canonical import verify_chain
from events.postgres import Pool, PostgresEventStore
from events.projections.base import Projection
from events.projections.runner import catch_up
from events.snapshots import PostgresSnapshotStore
from events.store import EventMetadata, NewEvent, RecordedEvent, StreamAppend, utc_now
from service.application.actor import Actor
from service.application.game.tables import GameService
from service.application.streams import wallet_stream
from service.application.upcasters import upcasters
from service.application.wallets import WalletCache, WalletService
from service.regulator.export import event_line
from service.regulator.replay import round_replay

OPS = Actor("ops-1", "ops")
FRONTEND = Actor("frontend-1", "frontend")
V1 = NewEvent("Deposited", {"amount": 10_000, "reason": "before v2"}, schema_version=1)


class SeenPayloads(Projection):
    """A projection that only remembers what it was handed."""

    name: ClassVar[str] = "seen_payloads_test"
    categories: ClassVar[tuple[str, ...]] = ("wallet",)
    tables: ClassVar[tuple[str, ...]] = ()
    seen: ClassVar[list[tuple[int, dict[str, object]]]] = []

    def apply(self, conn: Connection[TupleRow], events: Sequence[RecordedEvent]) -> None:
        SeenPayloads.seen.extend((e.schema_version, dict(e.payload)) for e in events)


def test_an_old_deposit_reads_everywhere_and_is_kept_as_recorded(app_pool: Pool) -> None:
    store = PostgresEventStore(app_pool, utc_now, upcasters())
    store.append([StreamAppend(wallet_stream("alice"), 0, [V1])], EventMetadata("ops", "ops"))
    snapshots = PostgresSnapshotStore(app_pool)
    wallets = WalletCache(snapshots=snapshots, snapshot_every=2)
    money = WalletService(store, utc_now, wallets=wallets)
    money.deposit("alice", 500, "after v2", OPS, reference="psp-1")
    games = GameService(store, utc_now, wallets=wallets)
    games.create_table("T1", TableSettings(), OPS)
    games.sit("T1", "alice", 1, FRONTEND)
    games.place_bet("T1", "alice", Spot.BANKER, 1_000, FRONTEND)
    games.press_deal("T1", "alice", FRONTEND)

    # Loading the aggregate, from a snapshot of the upcast state and from a full replay.
    assert WalletCache(snapshots=snapshots).wallet(store, "alice") == WalletCache().wallet(
        store, "alice"
    )
    assert snapshots.latest(wallet_stream("alice"), wallets.codec.schema) is not None  # type: ignore[union-attr]
    # The statement, a replay's wallet balances.
    assert [e.amount for e in money.statement("alice")][-2:] == [500, 10_000]
    replay = round_replay(store, "T1-1")
    assert replay["wallets"][0]["before"]["available"] == 10_500
    # Projections are handed the newest shape.
    SeenPayloads.seen.clear()
    catch_up(app_pool, [SeenPayloads], upcasters=upcasters())
    assert SeenPayloads.seen[0] == (2, {"amount": 10_000, "reason": "before v2", "reference": None})
    # The export and the chain keep the payload as recorded.
    recorded = store.read_all(upcast=False)
    assert event_line(recorded[0])["schema_version"] == 1
    assert event_line(recorded[0])["payload"] == {"amount": 10_000, "reason": "before v2"}
    assert verify_chain(recorded) is None


def test_a_replay_upcasts_by_itself_and_shows_the_events_as_recorded(app_pool: Pool) -> None:
    store = PostgresEventStore(app_pool, utc_now, upcasters())
    store.append([StreamAppend(wallet_stream("bob"), 0, [V1])], EventMetadata("ops", "ops"))
    games = GameService(store, utc_now)
    games.create_table("T2", TableSettings(), OPS)
    games.sit("T2", "bob", 1, FRONTEND)
    games.place_bet("T2", "bob", Spot.PLAYER, 2_000, FRONTEND)
    games.press_deal("T2", "bob", FRONTEND)

    # A store that upcasts nothing, as the regulator's tools might be handed.
    bare = round_replay(PostgresEventStore(app_pool), "T2-1")

    assert bare == round_replay(store, "T2-1")
    assert bare["wallets"][0]["before"]["available"] == 10_000
    assert bare["status"] == "complete"
    as_recorded = {e.position: event_line(e) for e in store.read_all(upcast=False)}
    assert all(line == as_recorded[line["position"]] for line in bare["events"])
