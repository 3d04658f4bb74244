"""The tables' overview read model and GET /v1/ops/tables over PostgreSQL: what the dashboard
draws, in one statement a page however many tables there are (issue 21)."""

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from domain.outcome import Outcome
from events.postgres import Pool, PostgresEventStore
from service.application.keys import Role
from service.application.read_models import projector
from service.application.read_models.queries import ProjectionService
from service.web.api import EXTENSION
from tests.api_harness import Api, Clock, seed_dealing


def overview_api(app_pool: Pool, seeds: tuple[str, ...] = ()) -> Api:
    """The API over PostgreSQL and its read models, the log and the app on one hand-moved clock."""
    clocks: list[Clock] = []

    def read_side(clock: Clock) -> ProjectionService:
        clocks.append(clock)
        return ProjectionService(app_pool, clock)

    # The Api makes its clock, then the read side with it, before the store's first append.
    store = PostgresEventStore(app_pool, lambda: clocks[0]())
    return Api(store=store, seeds=seeds, projections=read_side)


@contextmanager
def counted_statements() -> Iterator[list[str]]:
    """Every statement psycopg sends while the block runs, as the client sent it."""
    sent: list[str] = []
    original: Callable[..., Any] = psycopg.Cursor.execute

    def counting(cursor: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        sent.append(str(query))
        return original(cursor, query, *args, **kwargs)

    setattr(psycopg.Cursor, "execute", counting)  # noqa: B010 - a method swapped for the block
    try:
        yield sent
    finally:
        setattr(psycopg.Cursor, "execute", original)  # noqa: B010


def overview(api: Api, **query: str) -> dict[str, Any]:
    path = "/v1/ops/tables" + (
        "?" + "&".join(f"{k}={v}" for k, v in query.items()) if query else ""
    )
    return api.ok("GET", path, role=Role.OPS)  # type: ignore[no-any-return]


def test_the_overview_agrees_with_the_tables_state_statistics_and_ledger(app_pool: Pool) -> None:
    api = overview_api(app_pool, (seed_dealing((Outcome.BANKER, Outcome.PLAYER)),))
    api.create_table("T1", betting_window_ms=60_000)
    api.create_table("T2", seats=3)
    api.fund("alice")
    api.fund("bob")
    api.sit("T1", "alice", 2)
    api.sit("T1", "bob", 5)
    api.bet("T1", "alice", "banker", 1_000)
    api.bet("T1", "bob", "tie", 500)
    api.act("T1", "deal", "alice")
    api.act("T1", "deal", "bob")
    api.bet("T1", "alice", "player", 200)  # the next round, under way
    projector.catch_up(app_pool)

    page = overview(api)
    assert page["next_after"] is None
    first, second = page["tables"]
    assert (first["table_id"], second["table_id"]) == ("T1", "T2")
    state = api.state("T1")
    assert (first["phase"], first["round_id"], first["round_number"]) == (
        state["phase"],
        state["round_id"],
        state["round_number"],
    )
    assert first["window_closes_at"] == state["window_closes_at"]
    assert first["seats"] == [
        {"seat": s["seat"], "player_id": s["player_id"]} for s in state["seats"]
    ]
    assert first["shoe"] == {
        k: state["shoe"][k] for k in ("shoe_id", "server_seed_hash", "hands_left")
    }
    assert first["settings"] == api.ok("GET", "/v1/tables/T1")
    assert first["roads"] == api.ok("GET", "/v1/tables/T1/statistics")["roads"]
    assert first["latest_coup"] == {
        "round_id": "T1-1",
        "outcome": "banker",
        "player_total": first["latest_coup"]["player_total"],
        "banker_total": first["latest_coup"]["banker_total"],
    }
    assert first["rounds_last_minute"] == 1
    ledger = api.ok("GET", "/v1/tables/T1/ledger", role=Role.OPS)["lines"]
    assert [
        (line["spot"], line["bets"], line["wagered_pence"], line["paid_out_pence"])
        for line in first["ledger"]
    ] == [
        (line["spot"], line["bets"], line["wagered_pence"], line["paid_out_pence"])
        for line in ledger
    ]
    assert first["ledger"][0]["observed_rtp"] == 1.95  # banker: £10 back £19.50
    assert not first["suspended"]
    assert (second["phase"], second["shoe"], second["latest_coup"]) == ("idle", None, None)
    assert second["seats"] == [{"seat": n, "player_id": None} for n in (1, 2, 3)]

    # A minute on, the round counts no more, and the lapsed window shows as closing.
    api.clock.advance(61)
    (first, _) = overview(api)["tables"]
    assert (first["rounds_last_minute"], first["phase"]) == (0, "closing")


def test_a_malfunction_suspends_the_table_and_a_reopening_lifts_it_in_the_overview(
    app_pool: Pool,
) -> None:
    api = overview_api(app_pool)
    api.create_table("T1", betting_window_ms=60_000)
    api.fund("alice")
    api.sit("T1", "alice", 1)
    api.bet("T1", "alice", "banker", 1_000)
    api.ok(
        "POST",
        "/v1/tables/T1/malfunctions",
        {"reason": "reader fault", "scope": "current_round"},
        role=Role.OPS,
        status=201,
    )
    projector.catch_up(app_pool)
    (table,) = overview(api)["tables"]
    assert (table["suspended"], table["phase"], table["window_closes_at"]) == (True, "idle", None)
    api.ok("POST", "/v1/tables/T1/reopenings", {"reason": "fixed"}, role=Role.OPS, status=201)
    projector.catch_up(app_pool)
    assert overview(api)["tables"][0]["suspended"] is False


def test_the_overview_pages_by_its_keyset_in_creation_order(app_pool: Pool) -> None:
    api = overview_api(app_pool)
    names = [f"T{n}" for n in (5, 1, 7, 3, 2, 6, 4)]
    for name in names:
        api.create_table(name)
    projector.catch_up(app_pool)
    seen: list[str] = []
    after = 0
    while True:
        page = overview(api, after=str(after), limit="3")
        seen.extend(t["table_id"] for t in page["tables"])
        if page["next_after"] is None:
            break
        after = page["next_after"]
    assert seen == names
    refused = api.call("GET", "/v1/ops/tables?limit=0", role=Role.OPS)
    assert (refused.status_code, refused.mimetype) == (422, "application/problem+json")
    assert api.call("GET", "/v1/ops/tables").status_code == 403  # a front end's key


def test_a_rebuild_of_the_overview_makes_the_same_rows(app_pool: Pool) -> None:
    api = overview_api(app_pool, (seed_dealing((Outcome.TIE,)),))
    api.create_table("T1")
    api.fund("alice")
    api.sit("T1", "alice", 1)
    api.bet("T1", "alice", "tie", 100)
    api.act("T1", "deal", "alice")
    api.ok(
        "POST",
        "/v1/tables/T1/mutes",
        {"player_id": "alice", "reason": "x"},
        role=Role.OPS,
        status=201,
    )
    api.ok("DELETE", "/v1/tables/T1/mutes/alice", role=Role.OPS)
    api.ok("PUT", "/v1/tables/T1/seats/alice", {"seat": 4})  # between hands: one step
    projector.catch_up(app_pool)
    before = overview(api)
    seated = [s["player_id"] for s in before["tables"][0]["seats"]]
    assert seated == [None, None, None, "alice", None, None, None]
    projector.rebuild(app_pool, ["overview"])
    assert overview(api) == before


@pytest.mark.parametrize("path", ["/v1/ops/tables", "/dashboard/api/overview"])
def test_reading_every_table_costs_the_same_statements_for_10_tables_as_for_200(
    app_pool: Pool, path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    api = overview_api(app_pool)
    dashboard = signed_in_dashboard(api) if path.startswith("/dashboard") else None
    # The key ring re-reads the keys once a second: a statement now and then, however many
    # tables. Held still here, so that the count is the overview's own.
    wiring = api.app.extensions[EXTENSION]
    monkeypatch.setattr(wiring.keys, "_refresh_seconds", 3600.0)

    def statements_to_read_all() -> tuple[int, int]:
        projector.catch_up(app_pool)
        with counted_statements() as sent:
            if dashboard is None:
                body = overview(api)
            else:
                answer = dashboard.get(path)
                assert answer.status_code == 200, answer.get_data(as_text=True)
                body = answer.get_json()
        return len(body["tables"]), len(sent)

    for n in range(10):
        api.create_table(f"T{n}")
    tables_10, statements_10 = statements_to_read_all()
    for n in range(10, 200):
        api.create_table(f"T{n}")
    tables_200, statements_200 = statements_to_read_all()
    assert (tables_10, tables_200) == (10, 200)
    assert statements_200 == statements_10


def signed_in_dashboard(api: Api) -> Any:
    """A browser-less client signed in at /dashboard with the ops key."""
    client = api.app.test_client()
    page = client.get("/dashboard").get_data(as_text=True)
    token = page.split('name="form_token" value="')[1].split('"')[0]
    signed = client.post(
        "/dashboard/sign-in", data={"form_token": token, "key": api.keys[Role.OPS]}
    )
    assert signed.headers["Location"].endswith("/dashboard")
    html = client.get("/dashboard").get_data(as_text=True)
    csrf = html.split('name="csrf-token" content="')[1].split('"')[0]
    client.environ_base["HTTP_X_CSRF_TOKEN"] = csrf
    return client


def test_the_dashboard_unmutes_and_voids_a_time_range(app_pool: Pool) -> None:
    api = overview_api(app_pool, (seed_dealing((Outcome.PLAYER,)),))
    dashboard = signed_in_dashboard(api)
    api.create_table("T1")
    api.fund("alice")
    api.sit("T1", "alice", 1)
    opened = api.clock()
    api.bet("T1", "alice", "player", 1_000)
    api.act("T1", "deal", "alice")
    api.ok(
        "POST",
        "/v1/tables/T1/mutes",
        {"player_id": "alice", "reason": "spam"},
        role=Role.OPS,
        status=201,
    )
    unmuted = dashboard.post("/dashboard/api/tables/T1/unmutes", json={"player_id": "alice"})
    assert unmuted.status_code == 200, unmuted.get_data(as_text=True)
    assert unmuted.get_json()["actions"] == ["PlayerUnmuted"]
    bad = dashboard.post("/dashboard/api/tables/T1/unmutes", json={"player_id": "no one!"})
    assert (bad.status_code, bad.mimetype) == (422, "application/problem+json")

    api.clock.advance(5)
    voided = dashboard.post(
        "/dashboard/api/tables/T1/malfunctions",
        json={
            "reason": "shuffler fault",
            "from": (opened - timedelta(seconds=1)).isoformat(),
            "to": api.clock().isoformat(),
        },
    )
    assert voided.status_code == 201, voided.get_data(as_text=True)
    assert "T1-1" in voided.get_json()["voided_rounds"]
    half = dashboard.post(
        "/dashboard/api/tables/T1/malfunctions",
        json={"reason": "half a range", "from": opened.isoformat()},
    )
    assert (half.status_code, half.mimetype) == (422, "application/problem+json")
