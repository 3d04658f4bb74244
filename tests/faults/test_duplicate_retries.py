"""Parallel duplicate retries with the same Idempotency-Key, out of order: each applies once."""

from __future__ import annotations

import random
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from events.postgres import Pool, PostgresEventStore
from service.application.keys import Role
from service.web import rate_limits
from tests.api_harness import Api
from tests.faults.figures import Figures, count_found

KEYS = 20
COPIES = 4  # each key sent this many times at once, shuffled among the others


@pytest.mark.slow
def test_parallel_out_of_order_duplicates_each_apply_exactly_once(app_pool: Pool) -> None:
    api = Api(store=PostgresEventStore(app_pool))
    api.app.extensions[rate_limits.EXTENSION] = rate_limits.RateLimiter(0, 1)
    api.fund("alice", 100)
    requests = [
        (f"dup-{number}", {"amount_pence": 100 + number, "reason": f"deposit {number}"})
        for number in range(KEYS)
        for _ in range(COPIES)
    ]
    random.Random(17).shuffle(requests)
    secret = api.keys[Role.OPS]

    def send(request: tuple[str, dict[str, object]]) -> tuple[str, int, str, object]:
        key, body = request
        request_id = uuid.uuid4().hex
        headers = {
            "Authorization": f"Bearer {secret}",
            "Idempotency-Key": key,
            "X-Request-Id": request_id,
        }
        # A client per thread: Flask's test client keeps state between requests.
        response = api.app.test_client().post(
            "/v1/wallets/alice/deposits", json=body, headers=headers
        )
        return key, response.status_code, request_id, response.get_json(force=True)

    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(pool.map(send, requests, timeout=60))

    statuses = {status for _, status, _, _ in answers}
    # A twin still in flight is a 409 idempotency-key-in-progress: retry-able, never applied.
    assert statuses <= {201, 409}, statuses
    applied = [e for e in api.store.read_all(0, 10_000) if e.type == "Deposited"]
    keys = [e.metadata.idempotency_key for e in applied if e.metadata.idempotency_key]
    assert len(keys) == len(set(keys)) == KEYS, "a key applied more or less than once"
    assert api.available("alice") == 100 + sum(100 + n for n in range(KEYS))

    acknowledged = [(key, rid, body) for key, status, rid, body in answers if status == 201]
    firsts = {key: body for key, _, body in acknowledged}
    # Every 2xx of a key carries the same answer: the one whose request id is in the log.
    assert all(body == firsts[key] for key, _, body in acknowledged)
    in_log = count_found([rid for _, rid, _ in acknowledged], api.store)
    assert in_log == KEYS
    Figures(
        "parallel duplicate retries",
        sent=len(requests),
        acknowledged=len(acknowledged),
        found_in_log=len(acknowledged),  # each 2xx is its key's one append, checked above
    ).record()
