"""A database that is away answers 503 with Retry-After, never a 500, and applies nothing."""

from collections.abc import Sequence

import psycopg
import pytest
from psycopg_pool import PoolTimeout

from events.memory import InMemoryEventStore
from events.store import AppendResult, EventMetadata, Idempotency, StreamAppend
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
    ) -> AppendResult:
        if self.failure is not None:
            raise self.failure
        return super().append(streams, metadata, idempotency)


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
