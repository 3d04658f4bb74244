"""A keyed bet in one call: the append stores the key and its answer with the events."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Collection, Sequence
from typing import Any

import psycopg
import pytest

from events.postgres import Pool, PostgresEventStore
from events.store import (
    AppendResult,
    ConcurrencyConflict,
    EventMetadata,
    Idempotency,
    IdempotencyKeyReused,
    IdempotencyRecord,
    JsonValue,
    NewEvent,
    OutboxRow,
    RecordedEvent,
    StreamAppend,
)
from service.application.keys import Role
from service.web import rate_limits
from service.web.idempotency import REPLAYED_HEADER
from tests.api_harness import Api

BET = {"player_id": "alice", "spot": "banker", "stake_pence": 1_000}
META = EventMetadata(actor="test", role="ops")


class CountingStore(PostgresEventStore):
    """The PostgreSQL store, counting every call that reaches the database."""

    def __init__(self, pool: Pool) -> None:
        super().__init__(pool)
        self.calls: Counter[str] = Counter()

    def append(
        self,
        streams: Sequence[StreamAppend],
        metadata: EventMetadata,
        idempotency: Idempotency | None = None,
        outbox: Sequence[OutboxRow] = (),
    ) -> AppendResult:
        self.calls["append"] += 1
        return super().append(streams, metadata, idempotency, outbox)

    def read_stream(
        self, stream_id: str, from_version: int = 1, *, upcast: bool = True
    ) -> list[RecordedEvent]:
        self.calls["read_stream"] += 1
        return super().read_stream(stream_id, from_version, upcast=upcast)

    def read_all(
        self,
        from_position: int = 0,
        limit: int = 1000,
        categories: Collection[str] | None = None,
        types: Collection[str] | None = None,
        *,
        upcast: bool = True,
    ) -> list[RecordedEvent]:
        self.calls["read_all"] += 1
        return super().read_all(from_position, limit, categories, types, upcast=upcast)

    def idempotency_record(self, key: str) -> IdempotencyRecord | None:
        self.calls["idempotency_record"] += 1
        return super().idempotency_record(key)

    def record_response(self, key: str, response: JsonValue) -> JsonValue:
        self.calls["record_response"] += 1
        return super().record_response(key, response)


@pytest.fixture
def api(app_pool: Pool) -> Api:
    api = Api(store=CountingStore(app_pool))
    # Racing twins share one key's budget; the limit is not what these tests are about.
    api.app.extensions[rate_limits.EXTENSION] = rate_limits.RateLimiter(0, 1)
    api.create_table("T1")
    api.fund("alice", 10_000)
    api.sit("T1", "alice", 1)
    return api


def keyed_bet(api: Api, key: str, body: dict[str, Any] = BET) -> Any:
    return api.call("POST", "/v1/tables/T1/bets", body, headers={"Idempotency-Key": key})


def bets_in_log(api: Api) -> int:
    return sum(1 for e in api.store.read_all(0, 10_000) if e.type == "BetPlaced")


def test_a_keyed_bet_after_a_warm_one_is_one_call_to_the_database(api: Api) -> None:
    assert keyed_bet(api, "warm").status_code == 201
    store = api.store
    assert isinstance(store, CountingStore)
    store.calls.clear()
    assert keyed_bet(api, "hot").status_code == 201
    assert store.calls == Counter({"append": 1})


def test_a_retry_replays_the_first_answer_byte_for_byte_and_bets_once(api: Api) -> None:
    first = keyed_bet(api, "retry")
    again = keyed_bet(api, "retry")
    assert first.status_code == again.status_code == 201
    assert again.get_data() == first.get_data()
    assert again.headers[REPLAYED_HEADER] == "true"
    assert REPLAYED_HEADER not in first.headers
    assert bets_in_log(api) == 1
    assert api.available("alice") == 9_000


def test_a_retry_after_the_round_moved_on_still_replays_the_first_answer(api: Api) -> None:
    first = keyed_bet(api, "before-deal")
    api.act("T1", "deal", "alice")  # the round is dealt: the same bet now opens a new one
    again = keyed_bet(api, "before-deal")
    assert again.status_code == 201
    assert again.get_data() == first.get_data()
    assert bets_in_log(api) == 1


def test_a_deal_pressed_twice_with_one_key_answers_the_first_deal(api: Api) -> None:
    keyed_bet(api, "bet")
    headers = {"Idempotency-Key": "deal-once"}
    first = api.call("POST", "/v1/tables/T1/deal", {"player_id": "alice"}, headers=headers)
    again = api.call("POST", "/v1/tables/T1/deal", {"player_id": "alice"}, headers=headers)
    assert first.status_code == again.status_code == 200
    assert again.get_data() == first.get_data()
    assert again.headers[REPLAYED_HEADER] == "true"


def test_a_key_reused_for_another_bet_is_refused_and_bets_nothing(api: Api) -> None:
    assert keyed_bet(api, "reuse").status_code == 201
    other = keyed_bet(api, "reuse", {**BET, "stake_pence": 2_000})
    assert other.status_code == 422
    assert other.get_json(force=True)["type"].endswith("/idempotency-key-reused")
    assert bets_in_log(api) == 1
    assert api.available("alice") == 9_000


def test_every_key_a_bet_records_has_its_answer_in_the_same_commit(
    api: Api, fresh_database: str
) -> None:
    for number in range(5):
        keyed_bet(api, f"k{number}", {**BET, "stake_pence": 100 * (number + 1)})
    with psycopg.connect(fresh_database) as conn:
        unanswered = conn.execute(
            "SELECT count(*) FROM idempotency_keys AS k"
            " LEFT JOIN idempotency_responses AS r USING (key)"
            " WHERE r.key IS NULL AND k.key LIKE '%:k_'"
        ).fetchone()
        answered = conn.execute(
            "SELECT count(*) FROM idempotency_keys AS k JOIN idempotency_responses AS r"
            " USING (key) WHERE k.key LIKE '%:k_' AND k.recorded_at = r.recorded_at"
        ).fetchone()
    assert unanswered == (0,)
    assert answered == (5,)


def test_racing_twins_bet_once_and_answer_alike(api: Api) -> None:
    threads_count = 8
    barrier = threading.Barrier(threads_count)
    answers: list[tuple[int, bytes]] = []
    lock = threading.Lock()
    frontend = api.keys[Role.FRONTEND]

    def send() -> None:
        client = api.app.test_client()
        barrier.wait()
        response = client.post(
            "/v1/tables/T1/bets",
            json=BET,
            headers={"Authorization": f"Bearer {frontend}", "Idempotency-Key": "twin"},
        )
        with lock:
            answers.append((response.status_code, response.get_data()))

    threads = [threading.Thread(target=send) for _ in range(threads_count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert {status for status, _ in answers} == {201}
    assert len({body for _, body in answers}) == 1
    assert bets_in_log(api) == 1
    assert api.available("alice") == 9_000


def test_bets_racing_on_one_wallet_from_many_processes_never_overdraw_it(
    app_pool: Pool,
) -> None:
    # Each Api is its own app with its own caches, as gunicorn's workers are.
    first = Api(store=PostgresEventStore(app_pool))
    first.create_table("T1")
    first.fund("alice", 3_000)
    first.sit("T1", "alice", 1)
    others = [Api(store=PostgresEventStore(app_pool)) for _ in range(3)]
    workers = [first, *others]
    for worker in workers:
        worker.app.extensions[rate_limits.EXTENSION] = rate_limits.RateLimiter(0, 1)
        worker.keys = first.keys
    first.bet("T1", "alice", "banker", 100)  # every cache below starts from its own read
    barrier = threading.Barrier(8)
    statuses: list[int] = []
    lock = threading.Lock()

    def send(number: int) -> None:
        worker = workers[number % len(workers)]
        client = worker.app.test_client()
        barrier.wait()
        response = client.post(
            "/v1/tables/T1/bets",
            json={"player_id": "alice", "spot": "player", "stake_pence": 1_000},
            headers={
                "Authorization": f"Bearer {first.keys[Role.FRONTEND]}",
                "Idempotency-Key": f"race-{number}",
            },
        )
        with lock:
            statuses.append(response.status_code)

    threads = [threading.Thread(target=send, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert statuses.count(201) == 2, statuses  # 2,900 left after the first bet: two more
    assert all(status == 201 or 400 <= status < 500 for status in statuses), statuses
    assert first.available("alice") == 900
    assert sum(1 for e in first.store.read_all(0, 10_000) if e.type == "BetPlaced") == 3


def test_an_append_refused_for_a_stale_version_stores_neither_key_nor_answer(
    app_pool: Pool, fresh_database: str
) -> None:
    store = PostgresEventStore(app_pool)
    event = NewEvent("Counted", {"n": 1})
    store.append([StreamAppend("counter:a", 0, [event])], META)
    stale = Idempotency("stale", "f", response={"status": 201, "body": "{}"})
    with pytest.raises(ConcurrencyConflict):
        store.append([StreamAppend("counter:a", 0, [event])], META, stale)
    assert store.idempotency_record("stale") is None
    with psycopg.connect(fresh_database) as conn:
        assert conn.execute(
            "SELECT count(*) FROM idempotency_responses WHERE key = 'stale'"
        ).fetchone() == (0,)


def test_the_store_replays_a_key_with_its_stored_answer_and_refuses_another_request(
    app_pool: Pool,
) -> None:
    store = PostgresEventStore(app_pool)
    event = NewEvent("Counted", {"n": 1})
    answer: dict[str, JsonValue] = {
        "status": 201,
        "content_type": "application/json",
        "body": '{"n":1}',
    }
    first = store.append(
        [StreamAppend("counter:b", 0, [event])], META, Idempotency("k", "f", response=answer)
    )
    assert not first.replayed
    # A retry sends its own answer (built from a newer state); the first one is kept.
    again = store.append(
        [StreamAppend("counter:b", 1, [event])],
        META,
        Idempotency("k", "f", response={"status": 201, "body": "other"}),
    )
    assert again.replayed
    assert again == first
    assert again.response == answer
    with pytest.raises(IdempotencyKeyReused):
        store.append([StreamAppend("counter:b", 1, [event])], META, Idempotency("k", "g"))
    assert len(store.read_stream("counter:b")) == 1


def test_a_limit_lowered_through_another_worker_refuses_a_bet_decided_on_the_old_one(
    app_pool: Pool,
) -> None:
    # A worker decides a bet on the player's limit from its own cache, without a read, and
    # names the limit's version in the append. The player lowering it through another worker
    # must make that append conflict, so the bet is decided again on the lowered limit.
    first = Api(store=PostgresEventStore(app_pool))
    first.create_table("T1")
    first.fund("alice", 10_000)
    first.sit("T1", "alice", 1)
    second = Api(store=PostgresEventStore(app_pool))
    second.keys = first.keys
    first.bet("T1", "alice", "banker", 100)  # the first worker's cache now holds "no limit"
    second.ok("PUT", "/v1/players/alice/limit", {"limit_pence": 500})
    over = {"player_id": "alice", "spot": "player", "stake_pence": 1_000}
    status, problem = first.refused("POST", "/v1/tables/T1/bets", over)
    assert (status, problem["rule"]) == (422, "bet.above_player_limit"), problem
    assert sum(1 for e in first.store.read_all(0, 10_000) if e.type == "BetPlaced") == 1
    assert first.available("alice") == 9_900
