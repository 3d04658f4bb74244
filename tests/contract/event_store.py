"""The event store contract, written once and run against every backend (as pyeventsourcing does).

Subclasses override the `make_store` fixture; each call must return a store over an empty log.
"""

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta, timezone
from typing import Protocol

import pytest

from events.canonical import CanonicalJsonError, chain_events, verify_chain
from events.store import (
    GENESIS_HASH,
    AppendResult,
    Clock,
    ConcurrencyConflict,
    EventMetadata,
    EventStore,
    Idempotency,
    IdempotencyKeyReused,
    JsonValue,
    NewEvent,
    ShoeSecretAlreadyStored,
    StreamAppend,
    UnknownIdempotencyKey,
)
from events.upcasting import Upcasters

START = datetime(2026, 11, 30, 16, 22, 23, 1, tzinfo=UTC)
DEALER = EventMetadata(actor="dealer-7", role="dealer", request_id="req-1", correlation_id="c-1")


class StepClock:
    """A clock that reads START, then one second later on every call."""

    def __init__(self, start: datetime = START) -> None:
        self.now = start

    def __call__(self) -> datetime:
        reading = self.now
        self.now += timedelta(seconds=1)
        return reading


class StoreFactory(Protocol):
    def __call__(
        self, clock: Clock | None = None, upcasters: Upcasters | None = None
    ) -> EventStore: ...


def bet(stake: int, spot: str = "banker") -> NewEvent:
    return NewEvent("BetPlaced", {"seat": 3, "spot": spot, "stake": stake})


def one(stream_id: str, expected: int, *events: NewEvent) -> list[StreamAppend]:
    return [StreamAppend(stream_id, expected, events)]


def round_script(store: EventStore) -> None:
    """A fixed sequence of appends whose hashes every backend must reproduce."""
    store.append(
        [
            StreamAppend("round:T1:000001", 0, [NewEvent("RoundOpened", {"table": "T1"})]),
            StreamAppend("table:T1", 0, [NewEvent("TableOpened", {"limits": [100, 500_000]})]),
        ],
        DEALER,
    )
    store.append(
        [
            StreamAppend("round:T1:000001", 1, [bet(2_500)]),
            StreamAppend("wallet:alice", 0, [NewEvent("StakeReserved", {"amount": 2_500})]),
        ],
        EventMetadata(actor="alice", role="player", causation_id="cmd-9"),
        Idempotency("bet-1", "fp-1"),
    )
    store.append(
        one("round:T1:000001", 2, NewEvent("CardDrawn", {"card": "TD", "to": "player", "n": 1})),
        DEALER,
    )


# Hashes of round_script under StepClock, computed by the in-memory store and confirmed
# by the PostgreSQL store: both must produce these exact values.
GOLDEN_HASHES = [
    "d2f97babc16a5b63a0d5bc834657d22515b3166edd7c6e3b1ce234ca0877e511",
    "1e3e7c828a0055f182513fad08fafe26e83de9ecbf74d9b99cd152e3099edd4d",
    "153611942babe979b813cde8e1077ee35fb17e1444bf516b6dadfe54c8155e65",
    "7c6ed59785fff02afeb3e3150843e5b3bc04492f111bf2f0a8ddd0ec6803b744",
    "9ed02d5e61f2009a361fa235e2918ba7f327d80a089cfd95ff8062fe870b2af0",
]


class EventStoreContract:
    """Rules every EventStore implementation must follow."""

    @pytest.fixture
    def make_store(self) -> StoreFactory:
        raise NotImplementedError

    @pytest.fixture
    def store(self, make_store: StoreFactory) -> EventStore:
        return make_store()

    def test_empty_log_has_head_zero_and_no_events(self, store: EventStore) -> None:
        assert store.head() == 0
        assert store.read_all() == []
        assert store.read_stream("wallet:nobody") == []

    def test_first_event_takes_position_one_and_version_one(self, store: EventStore) -> None:
        result = store.append(one("wallet:alice", 0, bet(100)), DEALER)
        assert result == AppendResult({"wallet:alice": 1}, (("wallet:alice", 1, 1),))
        [event] = store.read_stream("wallet:alice")
        assert (event.position, event.version, event.category) == (1, 1, "wallet")
        assert event.prev_hash == GENESIS_HASH
        assert store.head() == 1

    def test_positions_are_gapless_across_streams(self, store: EventStore) -> None:
        store.append(one("wallet:alice", 0, bet(1), bet(2)), DEALER)
        store.append(one("wallet:bob", 0, bet(3)), DEALER)
        store.append(one("wallet:alice", 2, bet(4)), DEALER)
        events = store.read_all()
        assert [e.position for e in events] == [1, 2, 3, 4]
        assert [(e.stream_id, e.version) for e in events] == [
            ("wallet:alice", 1),
            ("wallet:alice", 2),
            ("wallet:bob", 1),
            ("wallet:alice", 3),
        ]

    def test_read_stream_starts_at_the_given_version(self, store: EventStore) -> None:
        store.append(one("round:T1:000001", 0, bet(1), bet(2), bet(3)), DEALER)
        events = store.read_stream("round:T1:000001", from_version=2)
        assert [e.version for e in events] == [2, 3]
        assert [e.payload["stake"] for e in events] == [2, 3]

    def test_last_of_stream_is_its_newest_event_or_none(self, store: EventStore) -> None:
        assert store.last_of_stream("wallet:alice") is None
        store.append(one("wallet:alice", 0, bet(1), bet(2)), DEALER)
        store.append(one("wallet:bob", 0, bet(3)), DEALER)
        last = store.last_of_stream("wallet:alice")
        assert last is not None
        assert (last.version, last.position, last.payload["stake"]) == (2, 2, 2)

    def test_read_all_returns_events_after_the_position_in_batches(self, store: EventStore) -> None:
        store.append(one("wallet:alice", 0, *(bet(n) for n in range(1, 8))), DEALER)
        first = store.read_all(from_position=0, limit=3)
        second = store.read_all(from_position=first[-1].position, limit=3)
        third = store.read_all(from_position=second[-1].position, limit=3)
        assert [e.position for e in first + second + third] == [1, 2, 3, 4, 5, 6, 7]
        assert store.read_all(from_position=7) == []

    def test_read_all_filters_by_category_and_type(self, store: EventStore) -> None:
        store.append(
            [
                StreamAppend("round:T1:000001", 0, [bet(5), NewEvent("CardDrawn", {"n": 1})]),
                StreamAppend("wallet:alice", 0, [NewEvent("StakeReserved", {"amount": 5})]),
                StreamAppend("table:T1", 0, [NewEvent("TableOpened", {})]),
            ],
            DEALER,
        )
        by_category = store.read_all(categories=["wallet", "table"])
        assert [e.stream_id for e in by_category] == ["wallet:alice", "table:T1"]
        by_type = store.read_all(types=["CardDrawn"])
        assert [e.position for e in by_type] == [2]
        both = store.read_all(categories=["round"], types=["BetPlaced", "StakeReserved"])
        assert [e.position for e in both] == [1]
        assert store.read_all(from_position=1, categories=["round"]) == by_type
        assert store.read_all(categories=[]) == []

    def test_append_to_several_streams_is_all_or_nothing(self, store: EventStore) -> None:
        store.append(one("wallet:alice", 0, bet(1)), DEALER)
        with pytest.raises(ConcurrencyConflict):
            store.append(
                [
                    StreamAppend("round:T1:000001", 0, [bet(10)]),
                    StreamAppend("wallet:alice", 0, [NewEvent("StakeReserved", {"amount": 10})]),
                ],
                DEALER,
            )
        assert store.read_stream("round:T1:000001") == []
        assert store.head() == 1

    def test_stale_expected_version_raises_a_typed_conflict(self, store: EventStore) -> None:
        store.append(one("wallet:alice", 0, bet(1), bet(2)), DEALER)
        with pytest.raises(ConcurrencyConflict) as caught:
            store.append(one("wallet:alice", 1, bet(3)), DEALER)
        assert (caught.value.stream_id, caught.value.expected, caught.value.actual) == (
            "wallet:alice",
            1,
            2,
        )

    def test_expected_version_ahead_of_the_stream_conflicts(self, store: EventStore) -> None:
        with pytest.raises(ConcurrencyConflict) as caught:
            store.append(one("wallet:alice", 4, bet(1)), DEALER)
        assert caught.value.actual == 0
        assert store.head() == 0

    def test_a_stale_guard_refuses_the_append_and_nothing_is_appended(
        self, store: EventStore
    ) -> None:
        # A bet guards the player's limits it decided on: a limit changed meanwhile refuses it.
        store.append(one("player:alice", 0, bet(1)), DEALER)
        store.append(one("player:alice", 1, bet(2)), DEALER)
        guarded = [*one("table:T1", 0, bet(5)), StreamAppend("player:alice", 1, [])]
        with pytest.raises(ConcurrencyConflict) as caught:
            store.append(guarded, DEALER)
        assert (caught.value.stream_id, caught.value.expected, caught.value.actual) == (
            "player:alice",
            1,
            2,
        )
        assert store.head() == 2
        assert store.read_stream("table:T1") == []

    def test_a_guard_ahead_of_its_stream_or_on_a_stream_never_written_conflicts(
        self, store: EventStore
    ) -> None:
        with pytest.raises(ConcurrencyConflict) as caught:
            store.append([*one("table:T1", 0, bet(5)), StreamAppend("player:bob", 3, [])], DEALER)
        assert (caught.value.stream_id, caught.value.actual) == ("player:bob", 0)
        assert store.head() == 0

    def test_a_current_guard_appends_and_its_version_is_in_the_result_and_the_replay(
        self, store: EventStore
    ) -> None:
        store.append(one("player:alice", 0, bet(1)), DEALER)
        key = Idempotency("req-7", "fp-7")
        guarded = [*one("table:T1", 0, bet(5)), StreamAppend("player:alice", 1, [])]
        result = store.append(guarded, DEALER, key)
        assert result.versions == {"table:T1": 1, "player:alice": 1}
        assert [e.stream_id for e in store.read_all()] == ["player:alice", "table:T1"]
        # The guarded stream moving on later does not turn the key's replay into a conflict.
        store.append(one("player:alice", 1, bet(2)), DEALER)
        replay = store.append(guarded, DEALER, key)
        assert replay.replayed
        assert replay.versions == {"table:T1": 1, "player:alice": 1}

    def test_an_append_without_events_or_with_a_stream_twice_is_refused(
        self, store: EventStore
    ) -> None:
        with pytest.raises(ValueError, match="at least one event"):
            store.append([StreamAppend("wallet:alice", 0, [])], DEALER)
        with pytest.raises(ValueError, match="twice"):
            store.append(one("wallet:alice", 0, bet(1)) + one("wallet:alice", 0, bet(2)), DEALER)
        assert store.head() == 0

    def test_repeated_idempotency_key_returns_the_original_result_and_appends_nothing(
        self, store: EventStore
    ) -> None:
        key = Idempotency("req-42", "sha256:abc")
        original = store.append(one("wallet:alice", 0, bet(1)), DEALER, key)
        store.append(one("wallet:bob", 0, bet(2)), DEALER)
        replay = store.append(one("wallet:alice", 0, bet(1)), DEALER, key)
        assert replay == original
        assert replay.replayed
        assert not original.replayed
        assert store.head() == 2

    def test_idempotency_key_with_a_different_request_is_refused(self, store: EventStore) -> None:
        store.append(one("wallet:alice", 0, bet(1)), DEALER, Idempotency("req-42", "fp-a"))
        with pytest.raises(IdempotencyKeyReused):
            store.append(one("wallet:alice", 1, bet(9)), DEALER, Idempotency("req-42", "fp-b"))
        assert store.head() == 1

    def test_idempotency_key_is_recorded_in_every_event_of_its_append(
        self, store: EventStore
    ) -> None:
        store.append(one("wallet:alice", 0, bet(1), bet(2)), DEALER, Idempotency("k", "f"))
        assert [e.metadata.idempotency_key for e in store.read_all()] == ["k", "k"]
        record = store.idempotency_record("k")
        assert record is not None
        assert (record.fingerprint, record.result) == (
            "f",
            AppendResult({"wallet:alice": 2}, (("wallet:alice", 1, 2),)),
        )

    def test_a_failed_append_does_not_spend_its_idempotency_key(self, store: EventStore) -> None:
        store.append(one("wallet:alice", 0, bet(1)), DEALER)
        with pytest.raises(ConcurrencyConflict):
            store.append(one("wallet:alice", 0, bet(2)), DEALER, Idempotency("k", "f"))
        assert store.idempotency_record("k") is None
        assert store.append(one("wallet:alice", 1, bet(2)), DEALER, Idempotency("k", "f")) == (
            AppendResult({"wallet:alice": 2}, (("wallet:alice", 2, 2),))
        )

    def test_a_response_given_with_the_key_is_stored_by_the_append_and_replayed(
        self, store: EventStore
    ) -> None:
        answer: Mapping[str, JsonValue] = {"status": 201, "body": '{"bet_id":"b-1"}'}
        first = store.append(
            one("wallet:alice", 0, bet(1)), DEALER, Idempotency("k", "f", response=answer)
        )
        assert first.response is None  # a fresh append answers with its own result
        record = store.idempotency_record("k")
        assert record is not None
        assert record.response == answer
        # A retry carries an answer built from a newer state; the first one is what replays.
        again = store.append(
            one("wallet:alice", 1, bet(1)), DEALER, Idempotency("k", "f", response={"x": 1})
        )
        assert again.replayed
        assert again == first
        assert again.response == answer
        assert store.head() == 1

    def test_a_refused_append_stores_neither_its_key_nor_its_response(
        self, store: EventStore
    ) -> None:
        store.append(one("wallet:alice", 0, bet(1)), DEALER)
        with pytest.raises(ConcurrencyConflict):
            store.append(
                one("wallet:alice", 0, bet(2)), DEALER, Idempotency("k", "f", response={"a": 1})
            )
        assert store.idempotency_record("k") is None

    def test_a_stored_response_reads_back_and_the_first_one_wins(self, store: EventStore) -> None:
        store.append(one("wallet:alice", 0, bet(1)), DEALER, Idempotency("k", "f"))
        response: Mapping[str, JsonValue] = {"status": 201, "body": {"bet_id": "b-1"}}
        assert store.record_response("k", response) == response
        # A twin storing second is told the winner's response, so it can answer alike.
        assert store.record_response("k", {"status": 500}) == response
        record = store.idempotency_record("k")
        assert record is not None
        assert record.response == response
        with pytest.raises(UnknownIdempotencyKey):
            store.record_response("never-used", {"status": 201})

    def test_a_v1_event_reads_back_as_v2(self, make_store: StoreFactory) -> None:
        upcasters = Upcasters()
        upcasters.register(
            "BetPlaced", 1, lambda p: {**p, "currency": "GBP", "stake_pence": p["stake"]}
        )
        store = make_store(upcasters=upcasters)
        store.append(one("round:T1:000001", 0, bet(2_500)), DEALER)
        [event] = store.read_stream("round:T1:000001")
        assert event.schema_version == 2
        assert event.payload == {
            "seat": 3,
            "spot": "banker",
            "stake": 2_500,
            "currency": "GBP",
            "stake_pence": 2_500,
        }
        assert store.read_all() == [event]
        [recorded] = store.read_all(upcast=False)
        assert (recorded.schema_version, recorded.payload) == (1, bet(2_500).payload)
        assert verify_chain([recorded]) is None

    def test_events_already_at_the_latest_version_are_not_upcast(
        self, make_store: StoreFactory
    ) -> None:
        upcasters = Upcasters()
        upcasters.register("BetPlaced", 1, lambda p: {"wrong": True})
        store = make_store(upcasters=upcasters)
        v2 = NewEvent("BetPlaced", {"stake_pence": 7}, schema_version=2)
        store.append(one("round:T1:000001", 0, v2), DEALER)
        [event] = store.read_stream("round:T1:000001")
        assert (event.schema_version, event.payload) == (2, {"stake_pence": 7})

    def test_hash_chain_has_the_same_values_on_every_backend(
        self, make_store: StoreFactory
    ) -> None:
        store = make_store(clock=StepClock())
        round_script(store)
        events = store.read_all(upcast=False)
        assert [e.hash for e in events] == GOLDEN_HASHES
        assert [e.prev_hash for e in events] == [GENESIS_HASH, *GOLDEN_HASHES[:-1]]
        assert verify_chain(events) is None

    def test_recorded_at_is_the_clock_reading_in_utc(self, make_store: StoreFactory) -> None:
        paris = datetime(2026, 6, 1, 12, 0, 0, 123456, tzinfo=timezone(timedelta(hours=2)))
        store = make_store(clock=lambda: paris)
        store.append(one("wallet:alice", 0, bet(1), bet(2)), DEALER)
        for event in store.read_all():
            assert event.recorded_at == datetime(2026, 6, 1, 10, 0, 0, 123456, tzinfo=UTC)
            assert event.recorded_at.utcoffset() == timedelta(0)

    def test_recorded_at_never_runs_backwards_when_the_clock_does(
        self, make_store: StoreFactory
    ) -> None:
        readings = iter([START, START + timedelta(seconds=5), START, START + timedelta(hours=1)])
        store = make_store(clock=lambda: next(readings))
        store.append(one("wallet:alice", 0, bet(1)), DEALER)
        store.append(one("wallet:bob", 0, bet(2), bet(3)), DEALER)
        # Read before the bob append's lock, this reading is older than the head.
        store.append(one("wallet:carol", 0, bet(4), bet(5)), DEALER)
        store.append(one("wallet:dave", 0, bet(6)), DEALER)

        events = store.read_all(upcast=False)
        times = [event.recorded_at for event in events]
        assert times == [START] + [START + timedelta(seconds=5)] * 4 + [START + timedelta(hours=1)]
        assert verify_chain(events) is None

    def test_a_naive_clock_reading_is_refused(self, make_store: StoreFactory) -> None:
        store = make_store(clock=lambda: datetime(2026, 6, 1, 12, 0))
        with pytest.raises(ValueError, match="naive"):
            store.append(one("wallet:alice", 0, bet(1)), DEALER)

    @pytest.mark.parametrize(
        "payload",
        [
            {"stake": 2.5},
            {"stake": float("nan")},
            {"stake": 2**63},
            {"stake": -(2**63) - 1},
            {"note": "a\x00b"},
            {"note": "\ud800"},
            {1: "non-string key"},
            {"when": datetime(2026, 1, 1, tzinfo=UTC)},
        ],
    )
    def test_payloads_outside_canonical_json_are_refused_and_nothing_is_appended(
        self, store: EventStore, payload: dict[object, object]
    ) -> None:
        with pytest.raises(CanonicalJsonError):
            store.append(one("wallet:alice", 0, NewEvent("Odd", payload)), DEALER)  # type: ignore[arg-type]
        assert store.head() == 0

    def test_payloads_round_trip_exactly(self, store: EventStore) -> None:
        payload: dict[str, JsonValue] = {
            "max": 2**63 - 1,
            "min": -(2**63),
            "text": 'Baccarat — 百家乐 "quoted" \\ \n\t\x1f\x7f \u2028 😀',
            "nested": {"list": [1, None, True, False, "x", []], "empty": {}},
            "tuple": (1, 2),
        }
        store.append(one("wallet:alice", 0, NewEvent("Odd", payload)), DEALER)
        [event] = store.read_all()
        assert event.payload == {**payload, "tuple": [1, 2]}
        assert verify_chain(store.read_all(upcast=False)) is None

    def test_non_ascii_text_hashes_exactly_as_the_reference_chain(
        self, make_store: StoreFactory
    ) -> None:
        # The PostgreSQL store hashes on the server; its bytes must be the UTF-8 of the
        # reference implementation, whatever the text, keys and metadata hold.
        metadata = EventMetadata(actor="joueur-é", role="player", request_id="請求-😀")
        streams = [
            StreamAppend(
                "wallet:zoë",
                0,
                [
                    NewEvent("BetPlaced", {"note": "百家乐 — «banque»", "ключ": "\u2028\x7f"}),
                    NewEvent("BetPlaced", {"😀": ["ß", {"Ω": "\U0010ffff"}], "position": "x"}),
                ],
            ),
            StreamAppend("round:T1:ü", 0, [NewEvent("RoundOpened", {"table": "テーブル"})]),
        ]
        store = make_store(clock=StepClock())
        store.append(streams, metadata)
        reference = chain_events(streams, metadata, START, 0, GENESIS_HASH)
        events = store.read_all(upcast=False)
        assert [e.hash for e in events] == [r.hash for r in reference]
        assert events == reference
        assert verify_chain(events) is None

    def test_metadata_is_recorded_with_every_event(self, store: EventStore) -> None:
        store.append(one("wallet:alice", 0, bet(1)), DEALER)
        [event] = store.read_all()
        assert event.metadata == DEALER

    def test_shoe_secrets_are_kept_out_of_the_log(self, store: EventStore) -> None:
        seed = "3f1c9a0b7d2e4f6a8c1b3d5e7f9a0c2e4b6d8f1a3c5e7092b4d6f8a1c3e5f709"
        store.claim_shoe_secret("T1", 1, "shoe:T1:1", seed)
        store.append(one("shoe:T1:1", 0, NewEvent("ShoeOpened", {"nonce": 1})), DEALER)
        assert store.load_shoe_secret("shoe:T1:1") == seed
        assert store.load_shoe_secret("shoe:T1:2") is None
        with pytest.raises(ShoeSecretAlreadyStored):
            store.claim_shoe_secret("T2", 1, "shoe:T1:1", "0" * 64)
        assert store.load_shoe_secret("shoe:T1:1") == seed
        assert all(seed not in repr(event) for event in store.read_all())

    def test_a_tables_nonce_keeps_the_first_seed_claimed_for_it(self, store: EventStore) -> None:
        first, second = "1" * 64, "2" * 64
        assert store.claim_shoe_secret("T1", 1, "shoe-a", first) == ("shoe-a", first)
        # A retry, or a twin that lost the race, gets the kept shoe back, not its own.
        assert store.claim_shoe_secret("T1", 1, "shoe-b", second) == ("shoe-a", first)
        assert store.load_shoe_secret("shoe-b") is None
        assert store.claim_shoe_secret("T1", 2, "shoe-c", second) == ("shoe-c", second)
        assert store.claim_shoe_secret("T2", 1, "shoe-d", second) == ("shoe-d", second)
        assert store.load_shoe_secret("shoe-a") == first
        with pytest.raises(ShoeSecretAlreadyStored):
            store.claim_shoe_secret("T3", 1, "shoe-a", second)
