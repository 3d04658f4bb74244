"""The pages' backend through the app, without a browser: demo mode, sessions and CSRF."""

import json
from pathlib import Path

from flask.testing import FlaskClient

from events.memory import InMemoryEventStore
from service.application.keys import Role, create_key
from service.runtime.demo import DEMO_KEYS_FILE
from service.runtime.settings import Settings
from service.web.app import create_app
from tests.api_harness import OPERATOR


def demo_client(tmp_path: Path) -> tuple[FlaskClient, dict[str, str]]:
    store = InMemoryEventStore()
    keys = {role.value: create_key(store, f"demo-{role.value}", role, OPERATOR) for role in Role}
    (tmp_path / DEMO_KEYS_FILE).write_text(
        json.dumps(
            [{"key_id": k.key.key_id, "role": role, "secret": k.secret} for role, k in keys.items()]
        )
    )
    app = create_app(Settings(demo=True, data_dir=tmp_path), store=store)
    return app.test_client(), {role: k.secret for role, k in keys.items()}


def start_playing(client: FlaskClient) -> str:
    page = client.get("/play")
    token = page.get_data(as_text=True).split('name="form_token" value="')[1].split('"')[0]
    started = client.post("/play/start", data={"form_token": token, "table": "demo"})
    assert started.status_code == 303
    cookie = started.headers["Set-Cookie"]
    assert "HttpOnly" in cookie
    assert "SameSite=Strict" in cookie
    assert "Path=/play" in cookie
    html = client.get("/play").get_data(as_text=True)
    return html.split('name="csrf-token" content="')[1].split('"')[0]


def test_play_is_not_served_unless_demo_mode_is_on() -> None:
    client = create_app(Settings(), store=InMemoryEventStore()).test_client()
    refused = client.get("/play")
    assert refused.status_code == 404
    assert refused.mimetype == "application/problem+json"
    assert client.get("/dashboard").status_code == 200  # its sign-in form: it needs a key


def test_a_start_without_the_forms_token_is_refused(tmp_path: Path) -> None:
    client, _ = demo_client(tmp_path)
    refused = client.post("/play/start", data={"table": "demo"})
    assert refused.status_code == 403
    assert "shoebox_play" not in refused.headers.get("Set-Cookie", "")


def test_a_change_without_the_csrf_token_is_refused_and_nothing_is_forwarded(
    tmp_path: Path,
) -> None:
    client, keys = demo_client(tmp_path)
    csrf = start_playing(client)
    assert (
        client.post(
            "/play/api/tables/demo/seats", json={"seat": 1}, headers={"X-CSRF-Token": csrf}
        ).status_code
        == 201
    )
    body = {"spot": "player", "stake_pence": 100}
    for headers in ({}, {"X-CSRF-Token": "forged"}):
        refused = client.post("/play/api/tables/demo/bets", json=body, headers=headers)
        assert refused.status_code == 403
        assert refused.mimetype == "application/problem+json"
    state = client.get("/play/api/tables/demo/state").get_json()
    assert all(seat["bets"] == [] for seat in state["seats"])
    placed = client.post("/play/api/tables/demo/bets", json=body, headers={"X-CSRF-Token": csrf})
    assert placed.status_code == 201, placed.get_json()
    assert all(secret not in placed.get_data(as_text=True) for secret in keys.values())


def test_the_dashboard_refuses_a_frontend_key_and_never_echoes_the_key(tmp_path: Path) -> None:
    client, keys = demo_client(tmp_path)
    page = client.get("/dashboard")
    token = page.get_data(as_text=True).split('name="form_token" value="')[1].split('"')[0]
    refused = client.post("/dashboard/sign-in", data={"form_token": token, "key": keys["frontend"]})
    assert refused.headers["Location"].endswith("/dashboard?error=key")
    signed = client.post("/dashboard/sign-in", data={"form_token": token, "key": keys["ops"]})
    assert signed.headers["Location"].endswith("/dashboard")
    html = client.get("/dashboard").get_data(as_text=True)
    assert keys["ops"] not in html
    # Signed in, the backend answers; this in-memory app has no read models to draw from.
    overview = client.get("/dashboard/api/overview")
    assert overview.status_code == 503
    assert "read models" in overview.get_json()["detail"]
    assert (
        client.post("/dashboard/api/tables/demo/reopenings", json={"reason": "x"}).status_code
        == 403
    )


def test_the_play_page_moves_a_seated_player_in_one_step(tmp_path: Path) -> None:
    client, _ = demo_client(tmp_path)
    csrf = start_playing(client)
    headers = {"X-CSRF-Token": csrf}
    sat = client.post("/play/api/tables/demo/seats", json={"seat": 1}, headers=headers)
    assert sat.status_code == 201, sat.get_json()
    moved = client.post("/play/api/tables/demo/seats", json={"seat": 3}, headers=headers)
    assert moved.status_code == 200, moved.get_json()
    assert (moved.get_json()["seat"], moved.get_json()["actions"]) == (3, ["PlayerChangedSeat"])
    state = client.get("/play/api/tables/demo/state").get_json()
    mine = [
        seat["seat"] for seat in state["seats"] if seat["player_id"] == sat.get_json()["player_id"]
    ]
    assert mine == [3]


def test_the_play_pages_backend_forwards_the_round_its_page_named(tmp_path: Path) -> None:
    client, _ = demo_client(tmp_path)
    csrf = start_playing(client)
    headers = {"X-CSRF-Token": csrf}
    sat = client.post("/play/api/tables/demo/seats", json={"seat": 1}, headers=headers)
    assert sat.status_code == 201, sat.get_json()
    body = {"spot": "player", "stake_pence": 100}
    opened = client.post("/play/api/tables/demo/bets", json=body, headers=headers).get_json()
    named = {**body, "round_id": opened["round_id"]}
    assert client.post("/play/api/tables/demo/bets", json=named, headers=headers).status_code == 201
    # A round the table has not reached is no round of it: the API's refusal comes back whole.
    for path, sent in (
        ("bets", {**body, "round_id": "demo-9"}),
        ("deal", {"round_id": "demo-9"}),
        ("pass", {"round_id": "demo-9"}),
        ("rebet", {"round_id": "demo-9"}),
    ):
        refused = client.post(f"/play/api/tables/demo/{path}", json=sent, headers=headers)
        assert refused.status_code == 409, (path, refused.get_json())
        assert refused.get_json()["rule"] == "round.not_found"
    dealt = client.post("/play/api/tables/demo/deal", json={}, headers=headers)
    assert dealt.status_code == 200, dealt.get_json()
