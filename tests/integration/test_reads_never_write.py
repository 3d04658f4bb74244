"""A GET never writes, whatever the clock says; a lapsed window closes with Redis down and
nobody sending anything, through the projector's sweeper alone; recovery looks only where the
index of open rounds points.

The GETs are read from the app's own OpenAPI document, so a new endpoint cannot be forgotten:
one whose path names an id this test does not know fails it until the id is added below.
"""

import re
import threading
import time
from dataclasses import replace
from datetime import timedelta

import pytest

from domain.outcome import Outcome
from domain.table import ShoeOpened, TableSettings
from events.merkle_store import PostgresTree
from events.postgres import Pool, PostgresEventStore
from events.projections.runner import Projector
from events.projections.runner import subscriptions as runner_subscriptions
from events.store import EventStore, RecordedEvent, utc_now
from service.application.actor import Actor
from service.application.checkpoints import CheckpointService, SigningKey, TreeSigning
from service.application.game.open_rounds import OpenRoundsProjection, PostgresOpenRounds
from service.application.game.recovery import recover
from service.application.game.tables import GameService
from service.application.keys import Role
from service.application.read_models import projector
from service.application.read_models.queries import ProjectionService
from service.application.upcasters import upcasters
from service.application.wallets import WalletService
from service.cli.projections import window_sweeper
from service.runtime.container import Container
from service.web.api import EXTENSION
from tests.api_harness import Api, seed_dealing

OPS = Actor("ops-1", "ops")
FRONTEND = Actor("frontend-1", "frontend")
_PARAMETER = re.compile(r"\{(\w+)\}")


def _played(app_pool: Pool) -> tuple[Api, dict[str, str]]:
    """A table with a settled coup, a chat message, and a round whose window has lapsed."""
    api = Api(store=PostgresEventStore(app_pool), seeds=(seed_dealing((Outcome.BANKER,)),))
    wiring = api.app.extensions[EXTENSION]
    assert isinstance(wiring, Container)
    api.app.extensions[EXTENSION] = replace(
        wiring, projections=ProjectionService(app_pool, wiring.clock)
    )
    api.create_table("T1")
    for player, seat in (("alice", 1), ("bob", 2)):
        api.fund(player)
        api.sit("T1", player, seat)
    api.bet("T1", "alice", "banker", 1_000)
    api.act("T1", "deal", "alice")
    api.act("T1", "pass", "bob")
    api.ok("POST", "/v1/tables/T1/chat", {"player_id": "bob", "text": "nice"}, status=201)
    # Round 2 is open with a bet on it; then its window lapses with nobody acting.
    api.bet("T1", "alice", "player", 500)
    # A signed tree checkpoint, so that the log's proofs have a size to be read at.
    tree = PostgresTree(app_pool)
    api.app.extensions[EXTENSION] = replace(api.app.extensions[EXTENSION], tree=tree)
    signer = CheckpointService(
        api.store,
        api.clock,
        SigningKey.from_seed(bytes(32)),
        tree=TreeSigning(tree, "t.example/log"),
    )
    signer.sign_head(Actor("checkpointer", "system"))
    api.clock.advance(60)
    projector.catch_up(app_pool)
    [shoe] = api.store.read_all(types=[ShoeOpened.type])
    noted = signer.latest_tree()
    assert noted is not None
    ids = {
        "table_id": "T1",
        "player_id": "alice",
        "round_id": "T1-1",
        "shoe_id": str(shoe.payload["shoe_id"]),
        "size": str(noted.size),
    }
    return api, ids


# The GETs whose query parameters are required, with the query this test reads them with.
_QUERIES = {
    "/v1/log/proof/inclusion": "?index=0&size={size}",
    "/v1/log/proof/consistency": "?from=1&to={size}",
    "/v1/rounds/{round_id}/proof": "?size={size}",
}


def _gets(api: Api) -> list[tuple[str, Role]]:
    document = api.ok("GET", "/v1/openapi.json")
    found: list[tuple[str, Role]] = []
    for path, operations in document["paths"].items():
        get = operations.get("get")
        # The feeds only read the log, but never end: tests/e2e/test_feed.py reads them live.
        if get is not None and not path.endswith("/feed"):
            roles = [Role(role) for role in get.get("x-roles", [Role.REGULATOR.value])]
            found.append((path, Role.REGULATOR if Role.REGULATOR in roles else roles[0]))
    return found


def test_no_get_endpoint_appends_even_past_a_window_deadline(app_pool: Pool) -> None:
    api, ids = _played(app_pool)
    assert api.state()["phase"] == "closing"
    head = api.store.head()
    gets = _gets(api)
    assert len(gets) >= 15
    for template, role in gets:
        names = _PARAMETER.findall(template)
        unknown = [name for name in names if name not in ids]
        assert not unknown, f"{template}: give this test a real {unknown} to read"
        path = _PARAMETER.sub(
            lambda match: ids[match.group(1)], template + _QUERIES.get(template, "")
        )
        response = api.call("GET", path, role=role)
        assert response.status_code < 500, (path, response.get_data(as_text=True))
        assert response.status_code == 200, (path, response.get_json())
        assert api.store.head() == head, f"GET {path} appended to the log"
    # The window is still lapsed and undealt: only a write, the job or the sweeper closes it.
    assert api.state()["phase"] == "closing"


def _open_round_with_a_bet(store: EventStore, games: GameService, table_id: str) -> str:
    WalletService(store, utc_now).deposit("alice", 10_000, "float", OPS)
    games.create_table(table_id, TableSettings(betting_window=timedelta(seconds=1)), OPS)
    games.sit(table_id, "alice", 1, FRONTEND)
    games.sit(table_id, "bob", 2, FRONTEND)
    games.place_bet(table_id, "alice", "banker", 1_000, FRONTEND)  # type: ignore[arg-type]
    current = games.table(table_id).round
    assert current is not None
    return current.round_id


def test_a_lapsed_window_closes_with_redis_down_and_no_further_request(app_pool: Pool) -> None:
    store = PostgresEventStore(app_pool, utc_now, upcasters())
    # The API that took the bet has no Redis: no job was ever scheduled.
    games = GameService(store, utc_now, scheduler=None)
    round_id = _open_round_with_a_bet(store, games, "T1")
    # What `shoebox projector` runs: the open-rounds index and the sweeper, PostgreSQL only.
    following = Projector(
        runner_subscriptions(
            app_pool, [OpenRoundsProjection], poll_interval=0.1, upcasters=upcasters()
        )
    )
    sweeper = window_sweeper(app_pool, interval=0.05)
    following.start()
    sweeper.start()
    try:
        deadline = time.monotonic() + 10
        dealt: list[RecordedEvent] = []
        while not dealt and time.monotonic() < deadline:
            time.sleep(0.05)
            dealt = store.read_all(types=["RoundEndedWithoutPlay", "RoundSettled"])
    finally:
        sweeper.stop()
        following.stop()
    assert [event.payload["round_id"] for event in dealt] == [round_id]
    # Bob never acted and was excluded; Alice never pressed Deal: her stake came back.
    assert WalletService(store, utc_now).balance("alice").available == 10_000


class CountingStore(PostgresEventStore):
    """Counts the streams read, to show which tables a sweep looked at."""

    def __init__(self, pool: Pool) -> None:
        super().__init__(pool, utc_now, upcasters())
        self.streams_read: list[str] = []
        self._guard = threading.Lock()

    def read_stream(
        self, stream_id: str, from_version: int = 1, *, upcast: bool = True
    ) -> list[RecordedEvent]:
        with self._guard:
            self.streams_read.append(stream_id)
        return super().read_stream(stream_id, from_version, upcast=upcast)


@pytest.mark.parametrize("idle_tables", [1, 40])
def test_recovery_reads_only_the_tables_the_open_rounds_index_names(
    app_pool: Pool, idle_tables: int
) -> None:
    setup = GameService(PostgresEventStore(app_pool, utc_now, upcasters()), utc_now)
    for number in range(idle_tables):
        setup.create_table(f"idle-{number}", TableSettings(), OPS)
    store = PostgresEventStore(app_pool, utc_now, upcasters())
    lapsed = _open_round_with_a_bet(store, setup, "busy")
    time.sleep(1.1)
    counting = CountingStore(app_pool)
    recovered = recover(
        counting, GameService(counting, utc_now), utc_now, PostgresOpenRounds(app_pool)
    )
    assert [(r.table_id, r.round_id) for r in recovered] == [("busy", lapsed)]
    assert {stream for stream in counting.streams_read if stream.startswith("table:")} == {
        "table:busy"
    }
    # Nothing is due any more: a second sweep reads no stream at all.
    counting.streams_read.clear()
    assert (
        recover(counting, GameService(counting, utc_now), utc_now, PostgresOpenRounds(app_pool))
        == []
    )
    assert counting.streams_read == []
