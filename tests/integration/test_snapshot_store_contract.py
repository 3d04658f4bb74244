"""The PostgreSQL snapshot store passes the same contract as the in-memory one."""

import pytest

from events.postgres import Pool, PostgresEventStore
from events.snapshots import PostgresSnapshotStore, SnapshotStore
from events.store import EventStore
from service.application.upcasters import upcasters
from tests.contract.snapshot_store import SnapshotStoreContract, StoresFactory
from tests.histories import HandClock


class TestPostgresSnapshotStore(SnapshotStoreContract):
    @pytest.fixture
    def make_stores(self, app_pool: Pool) -> StoresFactory:
        def make(clock: HandClock | None = None) -> tuple[EventStore, SnapshotStore]:
            clock = clock or HandClock()
            store = PostgresEventStore(app_pool, clock, upcasters())
            return store, PostgresSnapshotStore(app_pool, clock)

        return make


def test_the_app_role_may_keep_snapshots_but_still_only_read_the_log(app_pool: Pool) -> None:
    with app_pool.connection() as conn:
        privileges = {
            (table, privilege): conn.execute(
                "SELECT has_table_privilege(current_user, %s, %s)", [table, privilege]
            ).fetchone()
            for table in ("events", "snapshots", "open_rounds")
            for privilege in ("SELECT", "INSERT", "UPDATE", "DELETE", "TRUNCATE")
        }
    allowed = {key for key, row in privileges.items() if row == (True,)}
    assert allowed == {
        ("events", "SELECT"),
        ("snapshots", "SELECT"),
        ("snapshots", "INSERT"),
        ("snapshots", "DELETE"),
        ("open_rounds", "SELECT"),
        ("open_rounds", "INSERT"),
        ("open_rounds", "UPDATE"),
        ("open_rounds", "DELETE"),
    }
