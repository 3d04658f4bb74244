"""The live feed through a real `shoebox serve` (gevent workers), on a database of its own."""

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.e2e.servers import (
    Feed,
    Server,
    create_key,
    private_database,
    serve,
    wait_until_sequenced,
)

TABLE = "T1"
HEARTBEAT = {"SHOEBOX_FEED_HEARTBEAT_SECONDS": "1"}

pytestmark = pytest.mark.slow


@pytest.fixture
def database(postgres_server_url: str) -> Iterator[str]:
    with private_database(postgres_server_url) as url:
        yield url


@pytest.fixture
def server(database: str, tmp_path: Path) -> Iterator[Server]:
    with serve(database, tmp_path / "serve.log", HEARTBEAT) as running:
        yield running


def table_positions(database: str, table_id: str = TABLE) -> list[int]:
    """Every position of the table's own stream and its chat, from the log itself.

    Once the server's sequencer has placed what the test wrote: its answers came before.
    """
    wait_until_sequenced(database)
    with psycopg.connect(database) as conn:
        rows = conn.execute(
            "SELECT position FROM events WHERE stream_id = ANY(%s) ORDER BY position",
            [[f"table:{table_id}", f"chat:{table_id}"]],
        ).fetchall()
    return [int(row[0]) for row in rows]


def set_up_table(server: Server, ops: str, frontend: str, players: list[str]) -> None:
    server.ok("POST", "/v1/tables", ops, {"table_id": TABLE, "seats": 5, "decks": 1})
    for seat, player in enumerate(players, start=1):
        server.ok(
            "POST",
            f"/v1/wallets/{player}/deposits",
            ops,
            {"amount_pence": 100_000, "reason": "float"},
        )
        server.ok(
            "POST", f"/v1/tables/{TABLE}/seats", frontend, {"player_id": player, "seat": seat}
        )


def play_round(server: Server, frontend: str, players: list[str]) -> None:
    for player in players:
        bet = {"player_id": player, "spot": "banker", "stake_pence": 500}
        server.ok("POST", f"/v1/tables/{TABLE}/bets", frontend, bet)
    for player in players:
        server.ok("POST", f"/v1/tables/{TABLE}/deal", frontend, {"player_id": player})


def test_a_feed_resumes_after_its_last_event_id_across_a_restart_missing_and_repeating_nothing(
    database: str, tmp_path: Path
) -> None:
    ops, frontend = create_key(database, "ops"), create_key(database, "frontend")
    players = ["alice", "bob"]
    received: list[int] = []
    with serve(database, tmp_path / "first.log", HEARTBEAT) as first:
        set_up_table(first, ops, frontend, players)
        play_round(first, frontend, players)
        feed = Feed(first, f"/v1/tables/{TABLE}/feed?after=0", frontend)
        assert feed.status == 200
        assert feed.response.getheader("Content-Type", "").startswith("text/event-stream")
        count = len(table_positions(database))
        received += [int(m.id or 0) for m in feed.events(count)]
        # SIGTERM: the server closes the feed with a retry hint, and exits cleanly.
        first.process.send_signal(15)
        closing = None
        while (message := feed.read(15)) is not None:
            closing = message if message.retry is not None else closing
        feed.close()
        assert closing is not None
        assert closing.retry == "1000"
        assert first.stop() == 0
    with serve(database, tmp_path / "second.log", HEARTBEAT) as second:
        play_round(second, frontend, players)
        second.ok(
            "POST", f"/v1/tables/{TABLE}/chat", frontend, {"player_id": "alice", "text": "hi"}
        )
        resumed = Feed(
            second,
            f"/v1/tables/{TABLE}/feed?after=1",  # the header wins over the query
            frontend,
            {"Last-Event-ID": str(received[-1])},
        )
        everything = table_positions(database)
        received += [int(m.id or 0) for m in resumed.events(len(everything) - len(received))]
        resumed.close()
    assert received == everything  # in log order, none missing, none twice


def test_the_feed_never_shows_a_wallet_event_a_live_seed_or_an_undealt_card(
    server: Server, database: str
) -> None:
    ops, frontend = create_key(database, "ops"), create_key(database, "frontend")
    players = ["alice", "bob"]
    set_up_table(server, ops, frontend, players)
    feed = Feed(server, f"/v1/tables/{TABLE}/feed?after=0", frontend)
    for _ in range(3):
        play_round(server, frontend, players)
    messages = feed.events(len(table_positions(database)))
    feed.close()
    text = "\n".join(m.data for m in messages)
    with psycopg.connect(database) as conn:
        (seed,) = conn.execute("SELECT server_seed FROM shoe_secrets").fetchone() or ("",)
        wallet = conn.execute("SELECT count(*) FROM events WHERE category = 'wallet'").fetchone()
        dealt = conn.execute(
            "SELECT payload->>'card' FROM events WHERE type = 'CardDrawn' ORDER BY position"
        ).fetchall()
    assert wallet is not None
    assert wallet[0] > 0, "the round moved money, so wallets changed"
    assert seed
    assert seed not in text
    assert {m.document["table_id"] for m in messages} == {TABLE}
    assert not any(m.event and "Wallet" in m.event for m in messages)
    assert "Funds" not in {m.event for m in messages}
    cards = [m.document["payload"]["card"] for m in messages if m.event == "CardDrawn"]
    assert cards == [row[0] for row in dealt]  # only the cards dealt, as they were dealt
    opened = [m.document for m in messages if m.event == "RoundOpened"]
    assert opened
    assert all(o["window_closes_at"] == o["payload"]["deadline"] for o in opened)
    assert all(
        m.event != "ShoeOpened" or "server_seed" not in m.document["payload"] for m in messages
    )


def test_a_front_end_sees_another_operators_player_only_by_alias(
    server: Server, database: str
) -> None:
    ops = create_key(database, "ops")
    casino_a = create_key(database, "frontend", "casino-a")
    casino_b = create_key(database, "frontend", "casino-b")
    server.ok("POST", "/v1/tables", ops, {"table_id": TABLE, "seats": 5})
    for operator, key, seat in (("casino-a", casino_a, 1), ("casino-b", casino_b, 2)):
        deposit = {"amount_pence": 10_000, "reason": "float"}
        server.ok("POST", f"/v1/wallets/bob-{operator}/deposits?operator={operator}", ops, deposit)
        sit = {"player_id": f"bob-{operator}", "seat": seat}
        server.ok("POST", f"/v1/tables/{TABLE}/seats", key, sit)
    bet = {"player_id": "bob-casino-b", "spot": "player", "stake_pence": 500}
    server.ok("POST", f"/v1/tables/{TABLE}/bets", casino_b, bet)
    feed = Feed(server, f"/v1/tables/{TABLE}/feed?after=0", casino_a)
    messages = feed.events(len(table_positions(database)))
    feed.close()
    text = "\n".join(m.data for m in messages)
    assert "bob-casino-b" not in text
    assert "casino-b/" not in text
    assert "guest-" in text
    assert '"player_id":"bob-casino-a"' in text  # its own player, by its own id
    # The same alias as REST gives that player at this table.
    state = server.ok("GET", f"/v1/tables/{TABLE}/state", casino_a)
    alias = next(s["player_id"] for s in state["seats"] if s["seat"] == 2)
    assert alias.startswith("guest-")
    assert f'"player_id":"{alias}"' in text
    opened = next(m.document for m in messages if m.event == "RoundOpened")
    assert {p["player_id"] for p in opened["payload"]["participants"]} == {"bob-casino-a", alias}


def test_an_idle_feed_sends_a_heartbeat(server: Server, database: str) -> None:
    ops = create_key(database, "ops")
    server.ok("POST", "/v1/tables", ops, {"table_id": TABLE})
    feed = Feed(server, f"/v1/tables/{TABLE}/feed", ops)
    try:
        first = feed.read(5)
        assert first is not None
        assert first.retry == "1000"
        # The table's own events may come first: the sequencer places them a moment after the
        # answer (issue 22), so they can reach the feed after it opened. Then it falls idle.
        beat = feed.read(3)
        while beat is not None and beat.event is not None and not beat.comments:
            beat = feed.read(3)
        assert beat is not None
        assert beat.comments
        assert beat.id is None
    finally:
        feed.close()


def test_the_global_feed_is_for_ops_and_regulators_and_reports_projection_lag(
    server: Server, database: str
) -> None:
    ops, regulator = create_key(database, "ops"), create_key(database, "regulator")
    frontend = create_key(database, "frontend")
    server.ok("POST", "/v1/tables", ops, {"table_id": TABLE})
    server.ok("GET", "/v1/ping", frontend)
    for path, secret, headers, status in [
        ("/v1/feed", None, {}, 401),
        ("/v1/feed", frontend, {}, 403),
        ("/v1/tables/nowhere/feed", frontend, {}, 404),
        (f"/v1/tables/{TABLE}/feed", frontend, {"Last-Event-ID": "x1"}, 422),
        (f"/v1/tables/{TABLE}/feed?after=-1", frontend, {}, 422),
    ]:
        refused = Feed(server, path, secret, headers)
        refused.close()
        assert refused.status == status, (path, refused.status)
    server.ok("GET", "/v1/ping", regulator)
    feed = Feed(server, "/v1/feed?after=0", regulator)
    assert feed.status == 200
    seen: dict[str, Any] = {}
    while "projection-lag" not in seen or "TableCreated" not in seen:
        message = feed.read(10)
        assert message is not None
        if message.event is not None:
            seen[message.event] = message.document
    feed.close()
    lag = seen["projection-lag"]
    assert {p["name"] for p in lag["projections"]} >= {"wallets", "rounds"}
    assert all(isinstance(p["lag_events"], int) for p in lag["projections"])
