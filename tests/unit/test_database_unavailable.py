"""A database that is away answers 503 with Retry-After, never a 500, and applies nothing."""

from collections.abc import Sequence

import psycopg
import pytest
from psycopg_pool import PoolTimeout

from events.memory import InMemoryEventStore
from events.store import (
    AppendResult,
    EventMetadata,
    Idempotency,
    IdempotencyRecord,
    JsonValue,
    OutboxRow,
    StreamAppend,
)
from service.application.keys import Role
from service.web.problems import PROBLEM_MIMETYPE
from tests.api_harness import Api


class FailingStore(InMemoryEventStore):
    """The in-memory store, whose appends raise `failure` while it is set."""

    failure: Exception | None = None

    def append(
        self,
        streams: Sequence[StreamAppend],
        metadata: EventMetadata,
        idempotency: Idempotency | None = None,
        outbox: Sequence[OutboxRow] = (),
    ) -> AppendResult:
        if self.failure is not None:
            raise self.failure
        return super().append(streams, metadata, idempotency, outbox)


@pytest.mark.parametrize(
    "failure",
    [
        psycopg.OperationalError("server closed the connection unexpectedly"),
        psycopg.errors.AdminShutdown("terminating connection due to administrator command"),
        psycopg.errors.DiskFull("could not extend file"),
        psycopg.errors.ReadOnlySqlTransaction("cannot execute INSERT in a read-only transaction"),
        PoolTimeout("couldn't get a connection after 5.00 sec"),
    ],
    ids=lambda failure: type(failure).__name__,
)
def test_a_database_away_is_a_503_with_retry_after_and_the_key_stays_free(
    failure: Exception,
) -> None:
    store = FailingStore()
    api = Api(store=store)
    api.fund("alice")
    head = store.head()
    store.failure = failure
    body = {"amount_pence": 500, "reason": "while away"}
    headers = {"Idempotency-Key": "retry-me"}
    response = api.call("POST", "/v1/wallets/alice/deposits", body, role=Role.OPS, headers=headers)
    assert response.status_code == 503
    assert response.mimetype == PROBLEM_MIMETYPE
    assert int(response.headers["Retry-After"]) >= 1
    assert response.get_json(force=True)["type"].endswith("/service-unavailable")
    assert store.head() == head

    store.failure = None
    again = api.call("POST", "/v1/wallets/alice/deposits", body, role=Role.OPS, headers=headers)
    assert again.status_code == 201
    assert api.available("alice") == 10_500


class LookupFailingStore(InMemoryEventStore):
    """The in-memory store, whose idempotency reads and writes fail past a count of them."""

    lookups_left: int | None = None
    fail_recording: bool = False

    def idempotency_record(self, key: str) -> IdempotencyRecord | None:
        if self.lookups_left is not None:
            if self.lookups_left <= 0:
                raise PoolTimeout("couldn't get a connection after 0.50 sec")
            self.lookups_left -= 1
        return super().idempotency_record(key)

    def record_response(self, key: str, response: JsonValue) -> JsonValue:
        if self.fail_recording:
            raise PoolTimeout("couldn't get a connection after 0.50 sec")
        return super().record_response(key, response)


@pytest.mark.parametrize("lookups_allowed", [0, 1, 2])
def test_a_keyed_refusal_whose_key_cannot_be_looked_up_is_a_503_not_a_500(
    lookups_allowed: int,
) -> None:
    # Seen at 50 tables: the request's deadline had passed by the time the after-request hook
    # looked its key up, and the pool's timeout escaped the hook as a 500.
    store = LookupFailingStore()
    api = Api(store=store)
    api.fund("alice")
    head = store.head()
    store.lookups_left = lookups_allowed
    body = {"amount_pence": -5, "reason": "refused"}
    headers = {"Idempotency-Key": "refused-then-away"}
    response = api.call("POST", "/v1/wallets/alice/deposits", body, role=Role.OPS, headers=headers)
    assert response.status_code in (422, 503)
    assert response.mimetype == PROBLEM_MIMETYPE
    if response.status_code == 503:
        assert int(response.headers["Retry-After"]) >= 1
    assert store.head() == head


def test_an_applied_command_whose_answer_cannot_be_stored_still_gets_its_answer() -> None:
    store = LookupFailingStore()
    api = Api(store=store)
    api.fund("alice")
    store.fail_recording = True
    body = {"amount_pence": 700, "reason": "applied"}
    headers = {"Idempotency-Key": "applied-then-away"}
    response = api.call("POST", "/v1/wallets/alice/deposits", body, role=Role.OPS, headers=headers)
    assert response.status_code in (201, 503)
    assert response.status_code != 500
    store.fail_recording = False
    assert api.available("alice") == 10_700
