"""The PostgreSQL tree passes the Merkle tree contract, and keeps its nodes immutable."""

import psycopg
import pytest

from events.merkle_store import PostgresTree, TreeStore, integrate
from events.postgres import Pool, PostgresEventStore
from events.store import EventStore
from tests.contract.event_store import StepClock
from tests.contract.merkle_tree import MerkleTreeContract, grow


class TestPostgresTree(MerkleTreeContract):
    @pytest.fixture
    def log(self, app_pool: Pool) -> EventStore:
        return PostgresEventStore(app_pool, StepClock())

    @pytest.fixture
    def tree(self, app_pool: Pool) -> TreeStore:
        return PostgresTree(app_pool)


def test_the_application_role_can_neither_change_nor_insert_nodes_directly(app_pool: Pool) -> None:
    log, tree = PostgresEventStore(app_pool, StepClock()), PostgresTree(app_pool)
    grow(log, 3)
    integrate(log, tree, up_to=log.head())
    for statement in (
        "UPDATE merkle_nodes SET hash = hash",
        "DELETE FROM merkle_nodes",
        "INSERT INTO merkle_nodes VALUES (0, 99, decode(repeat('00', 32), 'hex'))",
    ):
        with app_pool.connection() as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute(statement)


def test_even_the_owner_cannot_update_or_delete_a_node(fresh_database: str, app_pool: Pool) -> None:
    log, tree = PostgresEventStore(app_pool, StepClock()), PostgresTree(app_pool)
    grow(log, 3)
    integrate(log, tree, up_to=log.head())
    for statement in ("UPDATE merkle_nodes SET hash = hash", "DELETE FROM merkle_nodes"):
        with psycopg.connect(fresh_database) as conn, pytest.raises(psycopg.errors.RaiseException):
            conn.execute(statement)


def test_a_batch_that_does_not_hold_exactly_its_leaves_is_refused(app_pool: Pool) -> None:
    tree = PostgresTree(app_pool)
    with app_pool.connection() as conn, pytest.raises(psycopg.DatabaseError, match="exactly"):
        conn.execute(
            "SELECT merkle_add_nodes(0, 2, ARRAY[0]::smallint[], ARRAY[0]::bigint[],"
            " ARRAY[decode(repeat('00', 32), 'hex')])"
        )
    assert tree.size() == 0


def test_shoebox_audit_tree_backfills_the_tree_of_an_existing_log(
    fresh_database: str, app_pool: Pool
) -> None:
    import base64

    from click.testing import CliRunner

    from events.merkle import root
    from service.cli import main

    log = PostgresEventStore(app_pool, StepClock())
    grow(log, 12)
    head = log.head()
    first = CliRunner().invoke(main, ["audit", "tree"], env={"DATABASE_URL": fresh_database})
    assert first.exit_code == 0, first.output
    tree = PostgresTree(app_pool)
    assert tree.size() == head
    assert f"tree: {head} leaves ({head} added" in first.output
    assert base64.b64encode(root(head, tree)).decode() in first.output
    again = CliRunner().invoke(main, ["audit", "tree"], env={"DATABASE_URL": fresh_database})
    assert f"tree: {head} leaves (0 added" in again.output
