"""Catch-up subscriptions against the real server: exactly-once, resumable, woken by NOTIFY."""

import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import psycopg
import pytest
from psycopg import Connection
from psycopg.rows import TupleRow
from psycopg.types.json import Jsonb

from events.canonical import chain_events, metadata_document
from events.postgres import APP_ROLE, Pool, PostgresEventStore, app_conninfo, append_documents
from events.store import EventMetadata, NewEvent, RecordedEvent, StreamAppend, utc_now
from events.subscription import BatchHandler, CatchUpSubscription

DEALER = EventMetadata(actor="dealer-7", role="dealer")
# So long that no test outlives it: an event handled while it runs came through NOTIFY.
LONG_POLL = 3600.0
# How long a test waits for a subscription to catch up before failing: generous, since a
# slow machine only makes the test wait longer, never pass wrongly.
CATCH_UP_WITHIN = 30.0


def stake(amount: int) -> NewEvent:
    return NewEvent("StakeReserved", {"amount": amount})


def card() -> NewEvent:
    return NewEvent("CardDrawn", {"card": "TD"})


@pytest.fixture
def projection(fresh_database: str) -> str:
    """A projection table of the test's own, writable by the app role; no key, so twins show."""
    with psycopg.connect(fresh_database) as conn:
        conn.execute(
            "CREATE TABLE projection (position bigint NOT NULL, stream_id text NOT NULL,"
            " subscriber text NOT NULL)"
        )
        conn.execute(f"GRANT SELECT, INSERT ON projection TO {APP_ROLE}")
    return fresh_database


@pytest.fixture
def store(app_pool: Pool) -> PostgresEventStore:
    return PostgresEventStore(app_pool)


def projector(
    subscriber: str = "only",
) -> BatchHandler:
    def project(conn: Connection[TupleRow], events: Sequence[RecordedEvent]) -> None:
        with conn.cursor() as cursor:
            cursor.executemany(
                "INSERT INTO projection VALUES (%s, %s, %s)",
                [(e.position, e.stream_id, subscriber) for e in events],
            )

    return project


def projected(admin_url: str) -> list[int]:
    with psycopg.connect(admin_url) as conn:
        rows = conn.execute("SELECT position FROM projection ORDER BY position").fetchall()
    return [int(row[0]) for row in rows]


def append_rounds(store: PostgresEventStore, rounds: int, first: int = 0) -> None:
    """Append `rounds` bets: each one event on a wallet and two on a round."""
    for n in range(first, first + rounds):
        store.append(
            [
                StreamAppend(f"wallet:{n}", 0, [stake(n)]),
                StreamAppend(f"round:T1:{n:06d}", 0, [card(), card()]),
            ],
            DEALER,
        )


def wait_until(condition: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


class ObservedSubscription(CatchUpSubscription):
    """A subscription that tells the test each time it has caught up and is about to wait."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.caught_up = threading.Event()

    def run_until_caught_up(self) -> int:
        handled = super().run_until_caught_up()
        self.caught_up.set()
        return handled


class Runner:
    """A subscription's `run` on a thread of its own, with its error kept for the test."""

    def __init__(self, subscription: CatchUpSubscription) -> None:
        self.stop = threading.Event()
        self.errors: list[BaseException] = []
        self._subscription = subscription
        self._thread = threading.Thread(target=self._run)

    def _run(self) -> None:
        try:
            self._subscription.run(self.stop)
        except BaseException as error:
            self.errors.append(error)

    def __enter__(self) -> "Runner":
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        self._thread.join(timeout=5)
        assert not self._thread.is_alive(), "run() did not stop within 5 s of its stop event"
        assert self.errors == []


def append_silently(admin_url: str, stream_id: str) -> None:
    """Append a valid event but send no NOTIFY: a notification lost on the way."""
    # As the owner: the application role may append only through append_events(), which
    # always notifies.
    with psycopg.connect(admin_url) as conn:
        hold_append(conn, stream_id)


def hold_store_append(conn: Connection[TupleRow], stream_id: str) -> None:
    """Call the store's append function in `conn`'s open transaction (no position yet)."""
    documents = append_documents([StreamAppend(stream_id, 0, [stake(1)])], DEALER, utc_now())
    row = conn.execute(
        "SELECT append_id FROM append_batch(%s, %s, %s, %s, NULL, NULL, NULL)",
        [[documents], [None], [None], [None]],
    ).fetchone()
    assert row is not None


def hold_append(conn: Connection[TupleRow], stream_id: str) -> RecordedEvent:
    """Append by hand in `conn` up to, but not including, the commit, and send no NOTIFY."""
    # As the sequencer does (the owner may): no other writer of events meanwhile.
    conn.execute("LOCK TABLE events IN EXCLUSIVE MODE")
    head = conn.execute(
        "SELECT coalesce(max(position), 0), coalesce((SELECT hash FROM events"
        " ORDER BY position DESC LIMIT 1), repeat('0', 64)) FROM events"
    ).fetchone()
    assert head is not None
    [event] = chain_events([StreamAppend(stream_id, 0, [stake(1)])], DEALER, utc_now(), *head)
    conn.execute(
        "INSERT INTO events VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
        [
            event.position,
            event.stream_id,
            event.category,
            event.version,
            event.type,
            event.schema_version,
            Jsonb(event.payload),
            Jsonb(metadata_document(DEALER)),
            event.recorded_at,
            event.prev_hash,
            event.hash,
        ],
    )
    return event


def test_the_projection_equals_the_log_once_even_after_a_failed_batch_is_retried(
    app_pool: Pool, store: PostgresEventStore, projection: str
) -> None:
    append_rounds(store, 40)
    failures = Counter[str]()
    project = projector()

    def flaky(conn: Connection[TupleRow], events: Sequence[RecordedEvent]) -> None:
        # Writes its rows first, so a rollback that missed them would show as duplicates.
        project(conn, events)
        if any(e.position == 57 for e in events) and not failures["once"]:
            failures["once"] += 1
            raise RuntimeError("the projection's disk is full")

    subscription = CatchUpSubscription(app_pool, "ledger", flaky, batch_size=10)
    with pytest.raises(RuntimeError, match="disk is full"):
        subscription.run_until_caught_up()
    assert subscription.checkpoint() == 50
    assert projected(projection) == list(range(1, 51))

    assert subscription.run_until_caught_up() == 70
    append_rounds(store, 10, first=40)
    assert subscription.run_until_caught_up() == 30
    assert projected(projection) == list(range(1, 151))
    assert subscription.checkpoint() == store.head() == 150


def test_a_restarted_subscription_resumes_from_its_checkpoint(
    app_pool: Pool, store: PostgresEventStore
) -> None:
    seen: list[int] = []

    def remember(_: Connection[TupleRow], events: Sequence[RecordedEvent]) -> None:
        seen.extend(e.position for e in events)

    append_rounds(store, 3)
    assert CatchUpSubscription(app_pool, "ledger", remember).run_until_caught_up() == 9
    append_rounds(store, 2, first=3)

    seen.clear()
    restarted = CatchUpSubscription(app_pool, "ledger", remember, batch_size=4)
    assert restarted.checkpoint() == 9
    assert restarted.run_until_caught_up() == 6
    assert seen == list(range(10, 16))

    seen.clear()
    CatchUpSubscription(app_pool, "another", remember).run_until_caught_up()
    assert seen == list(range(1, 16))


@pytest.mark.parametrize(
    ("categories", "types", "wanted"),
    [
        ({"wallet"}, None, [1, 4, 7, 10, 13]),
        (None, {"CardDrawn"}, [2, 3, 5, 6, 8, 9, 11, 12, 14, 15]),
        ({"round"}, {"StakeReserved"}, []),
    ],
)
def test_a_filtered_subscription_gets_only_its_events_and_skips_the_rest_for_good(
    app_pool: Pool,
    store: PostgresEventStore,
    categories: set[str] | None,
    types: set[str] | None,
    wanted: list[int],
) -> None:
    batches: list[list[int]] = []

    def remember(_: Connection[TupleRow], events: Sequence[RecordedEvent]) -> None:
        batches.append([e.position for e in events])

    append_rounds(store, 5)
    subscription = CatchUpSubscription(
        app_pool, "filtered", remember, batch_size=2, categories=categories, types=types
    )
    subscription.run_until_caught_up()
    assert [p for batch in batches for p in batch] == wanted
    # The log ends with events the filter rejects; the checkpoint still reaches the head.
    assert subscription.checkpoint() == 15
    batches.clear()
    assert subscription.run_until_caught_up() == 0
    assert batches == []


def test_a_filtered_checkpoint_never_passes_an_append_still_in_flight(
    app_pool: Pool, store: PostgresEventStore, fresh_database: str
) -> None:
    seen: list[int] = []

    def remember(_: Connection[TupleRow], events: Sequence[RecordedEvent]) -> None:
        seen.extend(e.position for e in events)

    store.append([StreamAppend("round:T1:000001", 0, [card()])], DEALER)
    subscription = CatchUpSubscription(app_pool, "wallets", remember, categories={"wallet"})
    with psycopg.connect(app_conninfo(fresh_database, environ={})) as slow:
        hold_store_append(slow, "wallet:slow")
        late = threading.Thread(
            target=store.append, args=([StreamAppend("wallet:late", 0, [stake(2)])], DEALER)
        )
        late.start()
        late.join(timeout=10)
        assert not late.is_alive()
        subscription.run_until_caught_up()
        # The later append overtook the one in flight: it is sequenced first, and the
        # checkpoint moves past it, but not past anything in flight, which has no position.
        assert subscription.checkpoint() == 2
        slow.commit()
    store.sequence()
    subscription.run_until_caught_up()
    assert seen == [2, 3]
    assert [e.stream_id for e in store.read_all(from_position=1)] == ["wallet:late", "wallet:slow"]


def test_a_running_subscription_wakes_on_notify_long_before_its_poll_interval(
    app_pool: Pool, store: PostgresEventStore, projection: str
) -> None:
    subscription = ObservedSubscription(app_pool, "live", projector(), poll_interval=LONG_POLL)
    with Runner(subscription):
        # Each time it has caught up it waits out LONG_POLL, longer than this test's whole
        # run, so events appended while it waits can only reach it through NOTIFY.
        assert subscription.caught_up.wait(CATCH_UP_WITHIN)
        subscription.caught_up.clear()
        append_rounds(store, 1)
        assert wait_until(lambda: projected(projection) == [1, 2, 3], CATCH_UP_WITHIN)
        assert subscription.caught_up.wait(CATCH_UP_WITHIN)
        append_rounds(store, 1, first=1)
        assert wait_until(lambda: len(projected(projection)) == 6, CATCH_UP_WITHIN)
    assert projected(projection) == list(range(1, 7))


@pytest.mark.parametrize("listen", [True, False], ids=["notification-lost", "poll-only"])
def test_a_subscription_without_notifications_still_catches_up_by_polling(
    app_pool: Pool, projection: str, listen: bool
) -> None:
    subscription = CatchUpSubscription(
        app_pool, "polling", projector(), poll_interval=0.3, listen=listen
    )
    with Runner(subscription):
        time.sleep(0.2)
        append_silently(projection, "wallet:quiet")
        assert wait_until(lambda: projected(projection) == [1], 5.0)
        append_silently(projection, "wallet:quieter")
        assert wait_until(lambda: projected(projection) == [1, 2], 5.0)


def test_twin_subscribers_of_one_name_apply_each_event_once(
    app_pool: Pool, store: PostgresEventStore, projection: str
) -> None:
    def slow_projector(
        name: str,
    ) -> BatchHandler:
        project = projector(name)

        def apply(conn: Connection[TupleRow], events: Sequence[RecordedEvent]) -> None:
            project(conn, events)
            # Hold the batch open a moment, so the twin is sure to try the same batch.
            time.sleep(0.005)

        return apply

    twins = [
        CatchUpSubscription(app_pool, "ledger", slow_projector(n), batch_size=7, poll_interval=0.2)
        for n in ("left", "right")
    ]
    writers = [threading.Thread(target=append_rounds, args=(store, 25, 25 * w)) for w in range(3)]
    with Runner(twins[0]), Runner(twins[1]):
        for writer in writers:
            writer.start()
        for writer in writers:
            writer.join()
        assert wait_until(lambda: twins[0].checkpoint() == 225, 20.0)
    assert projected(projection) == list(range(1, 226))


def test_a_handler_error_ends_the_run_and_leaves_its_batch_unprocessed(
    app_pool: Pool, store: PostgresEventStore
) -> None:
    def refuse(_: Connection[TupleRow], events: Sequence[RecordedEvent]) -> None:
        raise ValueError(f"cannot project {events[0].type}")

    append_rounds(store, 1)
    subscription = CatchUpSubscription(app_pool, "strict", refuse, poll_interval=LONG_POLL)
    with pytest.raises(ValueError, match="cannot project StakeReserved"):
        subscription.run(threading.Event())
    assert subscription.checkpoint() == 0


@pytest.mark.parametrize(
    ("name", "batch_size", "poll_interval"), [("", 1, 1.0), ("x", 0, 1.0), ("x", 1, 0.0)]
)
def test_a_subscription_refuses_settings_it_could_not_honour(
    app_pool: Pool, name: str, batch_size: int, poll_interval: float
) -> None:
    with pytest.raises(ValueError, match=r"must|needs"):
        CatchUpSubscription(
            app_pool, name, projector(), batch_size=batch_size, poll_interval=poll_interval
        )
