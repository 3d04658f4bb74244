"""Interrupted rounds: due but not dealt when the process died; completed, or voided if lost."""

from __future__ import annotations

from events.memory import InMemoryEventStore
from service.application.game.recovery import RECOVERY, RecoveryAction, is_interrupted, recover
from service.application.game.tables import GameService
from service.application.keys import Role
from service.runtime.container import Container
from service.web.api import EXTENSION
from tests.api_harness import FLOAT, Api


class LosingStore(InMemoryEventStore):
    """An in-memory store whose shoe secrets can be lost, as a wiped secrets table would be."""

    lost = False

    def load_shoe_secret(self, shoe_id: str) -> str | None:
        return None if self.lost else super().load_shoe_secret(shoe_id)


def _round_left_due() -> Api:
    """Alice pressed Deal, Bob never acted, and the window lapsed with nobody asking."""
    api = Api(store=LosingStore())
    api.create_table("T1")
    for seat, player in enumerate(("alice", "bob"), start=1):
        api.fund(player)
        api.sit("T1", player, seat)
    api.bet("T1", "alice", "banker", 1_000)
    api.bet("T1", "bob", "player", 500)
    api.act("T1", "deal", "alice")
    api.clock.advance(20)
    return api


def _games(api: Api) -> GameService:
    wiring = api.app.extensions[EXTENSION]
    assert isinstance(wiring, Container)
    return wiring.games


def test_a_round_due_but_not_dealt_is_completed_from_the_committed_shoe() -> None:
    api = _round_left_due()

    recovered = recover(api.store, _games(api), api.clock)

    assert [(r.round_id, r.action) for r in recovered] == [("T1-1", RecoveryAction.COMPLETED)]
    replay = api.ok("GET", "/v1/rounds/T1-1/replay", role=Role.REGULATOR)
    assert replay["status"] == "complete"
    dealt = [e for e in replay["events"] if e["type"] == "CoupCompleted"]
    assert dealt[0]["metadata"]["actor"] == RECOVERY.actor_id
    assert api.available("bob") == FLOAT  # excluded when the window lapsed: stake back
    assert api.ok("GET", "/v1/wallets/alice", role=Role.OPS)["reserved_pence"] == 0


def test_a_completed_recovery_is_listed_as_a_significant_event() -> None:
    api = _round_left_due()

    recover(api.store, _games(api), api.clock)

    page = api.ok("GET", "/v1/audit/significant-events?limit=500", role=Role.REGULATOR)
    recovered = [e for e in page["events"] if e["kind"] == "recovery"]
    assert {e["type"] for e in recovered} >= {"CardDrawn", "CoupCompleted", "PayoutCredited"}
    assert {e["who"] for e in recovered} == {RECOVERY.actor_id}


def test_a_table_with_nothing_due_is_left_alone() -> None:
    api = _round_left_due()
    recover(api.store, _games(api), api.clock)
    head = api.store.head()

    assert recover(api.store, _games(api), api.clock) == []
    assert api.store.head() == head


def test_a_round_whose_shoe_secret_is_lost_is_voided_and_the_table_suspended() -> None:
    api = _round_left_due()
    store = api.store
    assert isinstance(store, LosingStore)
    store.lost = True

    recovered = recover(store, _games(api), api.clock)

    assert [(r.round_id, r.action) for r in recovered] == [("T1-1", RecoveryAction.VOIDED)]
    assert "lost" in recovered[0].detail
    assert api.available("alice") == FLOAT
    assert api.available("bob") == FLOAT
    replay = api.ok("GET", "/v1/rounds/T1-1/replay", role=Role.REGULATOR)
    assert replay["status"] == "voided"
    significant = api.ok(
        "GET", "/v1/audit/significant-events?type=MalfunctionDeclared", role=Role.REGULATOR
    )
    assert significant["events"][0]["who"] == RECOVERY.actor_id


def test_a_betting_round_inside_its_window_is_not_interrupted() -> None:
    api = _round_left_due()
    api.clock.advance(-20)
    table = _games(api).table("T1")

    assert not is_interrupted(table.round, api.clock())
