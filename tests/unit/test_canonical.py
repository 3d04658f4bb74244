"""The canonical JSON encoding and the hash chain, checked against an independent stdlib encoder."""

import hashlib
import json
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from events.canonical import (
    INT64_MAX,
    INT64_MIN,
    BreakKind,
    CanonicalJsonError,
    ChainBreak,
    RecordedRow,
    canonical_json,
    chain_events,
    event_bytes,
    format_timestamp,
    hash_event,
    metadata_document,
    split_event_documents,
    verify_chain,
    verify_rows,
)
from events.memory import InMemoryEventStore
from events.store import (
    GENESIS_HASH,
    EventMetadata,
    JsonValue,
    NewEvent,
    RecordedEvent,
    StreamAppend,
)
from tests.contract.event_store import StepClock


def reference_json(value: object) -> bytes:
    """The encoding as docs/audit-log.md defines it, written with the standard library."""
    return json.dumps(
        value, ensure_ascii=False, sort_keys=True, separators=(",", ":"), allow_nan=False
    ).encode("utf-8")


# Every Unicode scalar value but U+0000 (PostgreSQL's jsonb cannot store it).
TEXT = st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"))
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(INT64_MIN, INT64_MAX) | TEXT,
    lambda children: st.lists(children) | st.dictionaries(TEXT, children),
    max_leaves=40,
)


@given(JSON_VALUES)
def test_canonical_json_equals_the_stdlib_reference_encoder(value: object) -> None:
    assert canonical_json(value) == reference_json(value)


@pytest.mark.slow
@given(st.dictionaries(TEXT, JSON_VALUES), TEXT, st.integers(1, INT64_MAX))
def test_event_bytes_equal_the_reference_document(
    payload: dict[str, JsonValue], actor: str, position: int
) -> None:
    moment = datetime(2026, 11, 30, 16, 22, 23, 1, tzinfo=UTC)
    metadata = EventMetadata(actor=actor, role="player")
    encoded = event_bytes(
        position,
        "wallet:alice",
        "wallet",
        1,
        "StakeReserved",
        1,
        payload,
        metadata,
        moment,
    )
    assert encoded == reference_json(
        {
            "position": position,
            "stream_id": "wallet:alice",
            "category": "wallet",
            "version": 1,
            "type": "StakeReserved",
            "schema_version": 1,
            "payload": payload,
            "metadata": {
                "actor": actor,
                "role": "player",
                "request_id": None,
                "correlation_id": None,
                "causation_id": None,
                "idempotency_key": None,
            },
            "recorded_at": "2026-11-30T16:22:23.000001Z",
        }
    )


def test_keys_sort_by_code_point_not_by_utf16_unit() -> None:
    value = {"b": 1, "a": 2, "é": 3, "Z": 4, "😀": 5, "\uffff": 6}
    assert canonical_json(value) == '{"Z":4,"a":2,"b":1,"é":3,"\uffff":6,"😀":5}'.encode()


def test_only_quote_backslash_and_control_characters_are_escaped() -> None:
    text = '"\\/\b\f\n\r\t\x01\x1f\x7f\u2028é😀'
    assert canonical_json(text) == ('"\\"\\\\/\\b\\f\\n\\r\\t\\u0001\\u001f\x7f\u2028é😀"'.encode())


def test_integers_are_plain_decimal_to_the_edges_of_64_bits() -> None:
    assert canonical_json([0, -1, INT64_MIN, INT64_MAX, True, None]) == (
        b"[0,-1,-9223372036854775808,9223372036854775807,true,null]"
    )


@pytest.mark.parametrize(
    "value",
    [1.0, float("inf"), INT64_MAX + 1, INT64_MIN - 1, "a\x00", {"\x00": 1}, {1: 2}, b"x", "\udc00"],
)
def test_values_outside_the_canonical_subset_are_refused(value: object) -> None:
    with pytest.raises(CanonicalJsonError):
        canonical_json(value)


@pytest.mark.parametrize(
    ("moment", "written"),
    [
        (datetime(2026, 11, 30, 16, 22, 23, 1, tzinfo=UTC), "2026-11-30T16:22:23.000001Z"),
        (datetime(2026, 11, 30, 16, 22, 23, tzinfo=UTC), "2026-11-30T16:22:23.000000Z"),
        (
            datetime(2026, 12, 1, 1, 0, tzinfo=timezone(timedelta(hours=9))),
            "2026-11-30T16:00:00.000000Z",
        ),
        (datetime(999, 1, 2, 3, 4, 5, 600000, tzinfo=UTC), "0999-01-02T03:04:05.600000Z"),
    ],
)
def test_timestamps_are_utc_with_six_fractional_digits_and_z(
    moment: datetime, written: str
) -> None:
    assert format_timestamp(moment) == written


def test_the_worked_example_of_the_audit_log_page() -> None:
    store = InMemoryEventStore(StepClock())
    store.append(
        [StreamAppend("wallet:alice", 0, [NewEvent("StakeReserved", {"amount": 2500})])],
        EventMetadata(actor="alice", role="player", request_id="req-1"),
    )
    [event] = store.read_all()
    document = (
        b'{"category":"wallet","metadata":{"actor":"alice","causation_id":null,'
        b'"correlation_id":null,"idempotency_key":null,"request_id":"req-1","role":"player"},'
        b'"payload":{"amount":2500},"position":1,"recorded_at":"2026-11-30T16:22:23.000001Z",'
        b'"schema_version":1,"stream_id":"wallet:alice","type":"StakeReserved","version":1}'
    )
    expected = hashlib.sha256(GENESIS_HASH.encode("ascii") + document).hexdigest()
    assert event.hash == expected
    assert expected == "d82ec8e46b448f547aab7b0830d719f8147a347d1b056b76ce499873a9edbbd0"


def _log(events: int) -> InMemoryEventStore:
    store = InMemoryEventStore(StepClock())
    for version in range(events):
        store.append(
            [StreamAppend("wallet:alice", version, [NewEvent("StakeReserved", {"n": version})])],
            EventMetadata(actor="alice", role="player"),
        )
    return store


def test_verify_chain_accepts_a_log_verified_in_batches() -> None:
    events = _log(5).read_all(upcast=False)
    assert verify_chain(events[:2]) is None
    assert verify_chain(events[2:], expected_prev_hash=events[1].hash, first_position=3) is None


def test_verify_chain_names_a_batch_that_does_not_follow_the_last_hash() -> None:
    events = _log(5).read_all(upcast=False)
    found = verify_chain(events[3:], expected_prev_hash=events[1].hash)
    assert found == ChainBreak(4, BreakKind.PREV_HASH, events[1].hash, events[2].hash)


def test_verify_chain_from_genesis_must_start_at_position_one() -> None:
    events = _log(3).read_all(upcast=False)
    assert verify_chain(events[1:]) == ChainBreak(1, BreakKind.POSITION, "1", "2")


def field_by_field_timestamp(moment: datetime) -> str:
    """format_timestamp as it was first written, kept as the reference for the fast one."""
    utc = moment.astimezone(UTC)
    return (
        f"{utc.year:04d}-{utc.month:02d}-{utc.day:02d}T"
        f"{utc.hour:02d}:{utc.minute:02d}:{utc.second:02d}.{utc.microsecond:06d}Z"
    )


# Every offset datetime allows: up to a day either way, to the microsecond.
OFFSETS = st.timedeltas(
    min_value=-timedelta(hours=23, minutes=59, seconds=59, microseconds=999_999),
    max_value=timedelta(hours=23, minutes=59, seconds=59, microseconds=999_999),
).map(timezone)


def _outcome(write: Callable[[datetime], str], moment: datetime) -> str:
    try:
        return write(moment)
    except OverflowError:
        # Year 1 or 9999 shifted out of range by its offset: both must refuse it alike.
        return "OverflowError"


@given(st.datetimes(timezones=OFFSETS | st.just(UTC)))
def test_format_timestamp_writes_the_same_bytes_as_the_field_by_field_reference(
    moment: datetime,
) -> None:
    assert _outcome(format_timestamp, moment) == _outcome(field_by_field_timestamp, moment)


def test_format_timestamp_refuses_a_naive_datetime() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        format_timestamp(datetime(2026, 1, 1))


STREAM_IDS = st.text(
    st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"), min_size=1
)


@pytest.mark.slow
@given(
    st.lists(
        st.tuples(
            STREAM_IDS,
            st.integers(0, 2**31 - 10),
            st.lists(st.dictionaries(TEXT, JSON_VALUES), min_size=1, max_size=3),
        ),
        min_size=1,
        max_size=3,
        unique_by=lambda stream: stream[0],
    ),
    TEXT,
    st.integers(0, 2**40),
)
def test_split_documents_rejoined_at_their_positions_are_the_event_bytes(
    streams: list[tuple[str, int, list[dict[str, JsonValue]]]], actor: str, head: int
) -> None:
    appends = [
        StreamAppend(stream_id, expected, [NewEvent("BetPlaced", p) for p in payloads])
        for stream_id, expected, payloads in streams
    ]
    metadata = EventMetadata(actor=actor, role="player", request_id="r-1")
    moment = datetime(2026, 11, 30, 16, 22, 23, 1, tzinfo=UTC)
    records = chain_events(appends, metadata, moment, head, GENESIS_HASH)
    documents = split_event_documents(appends, metadata, moment)
    assert len(documents) == len(records)
    for (before, after), record in zip(documents, records, strict=True):
        rejoined = before + str(record.position).encode() + after
        assert rejoined == event_bytes(
            record.position,
            record.stream_id,
            record.category,
            record.version,
            record.type,
            record.schema_version,
            record.payload,
            record.metadata,
            record.recorded_at,
        )
        # The text a store splices the position into ends exactly where the position goes.
        assert before.endswith(b',"position":')
        assert after.startswith(b',"recorded_at":')


def test_split_documents_refuse_what_the_chain_refuses() -> None:
    with pytest.raises(CanonicalJsonError):
        split_event_documents(
            [StreamAppend("wallet:alice", 0, [NewEvent("Odd", {"stake": 2.5})])],  # type: ignore[dict-item]
            EventMetadata(actor="alice", role="player"),
            datetime(2026, 1, 1, tzinfo=UTC),
        )


def as_row(event: RecordedEvent) -> RecordedRow:
    """The row `verify_rows` reads for an event: JSON as text, the rest as it is."""
    return (
        event.position,
        event.stream_id,
        event.category,
        event.version,
        event.type,
        event.schema_version,
        orjson.dumps(event.payload).decode(),
        orjson.dumps(metadata_document(event.metadata)).decode(),
        event.recorded_at,
        event.prev_hash,
        event.hash,
    )


def _shared_metadata_log() -> list[RecordedEvent]:
    store = InMemoryEventStore(StepClock())
    for version in range(0, 6, 2):
        store.append(
            [
                StreamAppend(
                    "wallet:alice",
                    version,
                    [NewEvent("StakeReserved", {"n": version}), NewEvent("Paid", {"é": "百"})],
                )
            ],
            EventMetadata(actor="alice", role="player", request_id=f"r{version}"),
        )
    return store.read_all(upcast=False)


TAMPERINGS: list[Callable[[list[RecordedEvent]], list[RecordedEvent]]] = [
    lambda log: log,
    lambda log: [*log[:3], replace(log[3], payload={"é": "x"}), *log[4:]],
    # The second event of an append alone gets other metadata: a cache keyed on the first
    # event's metadata must not hide it.
    lambda log: [*log[:3], replace(log[3], metadata=EventMetadata("mallory", "player")), *log[4:]],
    lambda log: [
        *log[:3],
        replace(log[3], recorded_at=log[3].recorded_at + timedelta(1)),
        *log[4:],
    ],
    lambda log: [*log[:2], replace(log[2], prev_hash=GENESIS_HASH), *log[3:]],
    lambda log: [*log[:2], replace(log[2], hash=GENESIS_HASH), *log[3:]],
    lambda log: [*log[:2], *log[3:]],
    lambda log: [*log[:4], replace(log[4], version=9)],
]


@pytest.mark.parametrize("tamper", TAMPERINGS)
def test_verify_rows_finds_exactly_what_verify_chain_finds(
    tamper: Callable[[list[RecordedEvent]], list[RecordedEvent]],
) -> None:
    log = tamper(_shared_metadata_log())
    assert verify_rows([as_row(e) for e in log]) == verify_chain(log)
    assert verify_rows([as_row(e) for e in log[2:]], log[1].hash, 3) == verify_chain(
        log[2:], log[1].hash, 3
    )


@pytest.mark.parametrize("tamper", TAMPERINGS[1:])
def test_every_tampering_breaks_the_chain(
    tamper: Callable[[list[RecordedEvent]], list[RecordedEvent]],
) -> None:
    assert verify_chain(tamper(_shared_metadata_log())) is not None


def test_verify_chain_agrees_with_hash_event_on_every_link() -> None:
    log = _shared_metadata_log()
    assert [hash_event(e) for e in log] == [e.hash for e in log]
    assert verify_chain(log) is None


@pytest.mark.parametrize(
    ("column", "damage"),
    [
        ("payload", {6: '{"stake": 1e400}'}),
        ("metadata", {7: "{not json"}),
        ("recorded_at", {8: "infinity"}),
    ],
)
def test_verify_rows_names_a_damaged_row_instead_of_raising(
    column: str, damage: dict[int, object]
) -> None:
    rows = [as_row(e) for e in _shared_metadata_log()]
    damaged = tuple(damage.get(i, value) for i, value in enumerate(rows[2]))

    found = verify_rows([*rows[:2], damaged, *rows[3:]])  # type: ignore[list-item]

    assert found is not None
    assert (found.position, found.kind, found.expected) == (3, BreakKind.UNREADABLE, column)
