"""The published test vectors, checked against the independent verifier's own code."""

from __future__ import annotations

import hashlib
import json

import pytest
import shoebox_verify.rules as rules
from hypothesis import given
from hypothesis import strategies as st
from shoebox_verify.shoe import ByteStream, commitment, shuffle
from shoebox_verify.strictjson import (
    BadJsonError,
    canonical_json,
    canonical_json_reference,
    loads_line,
)

# ../shared/spec/provably-fair.md, "Test vectors".
SPEC_VECTORS = [
    (
        "0" * 64,
        "client",
        0,
        "60e05bd1b195af2f94112fa7197a5c88289058840ce7c6df9693756bc6250f55",
        "TD QH 4D 9H 5C 2C 2H 7C 3H 2S 7D 7D 5D TD 5D 3S",
        70,
    ),
    (
        "a" * 64,
        "table-1",
        1,
        "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb",
        "4D JS 3S KC JS QS 7S 2C 8H 4C QS QD TD 2H TH 2D",
        75,
    ),
    (
        "3f1c9a0b7d2e4f6a8c1b3d5e7f9a0c2e4b6d8f1a3c5e7092b4d6f8a1c3e5f709",
        "Lucky Seven",
        42,
        "fdb9e3d25e8c85f3d34116abe0eaf3f46fea896ce1953f9d27439b0581c4e5dd",
        "8D 3D 5S AD 7S 4H 7C KS 7S 6S 7C KH TH 5S KC AS",
        70,
    ),
]


@pytest.mark.parametrize(
    ("server_seed", "client_seed", "nonce", "seed_hash", "first_cards", "hands"), SPEC_VECTORS
)
def test_the_spec_vectors(
    server_seed: str, client_seed: str, nonce: int, seed_hash: str, first_cards: str, hands: int
) -> None:
    assert commitment(server_seed) == seed_hash
    shoe = shuffle(server_seed, client_seed, nonce, 8)
    assert len(shoe.cards) == 416
    assert " ".join(shoe.cards[:16]) == first_cards
    assert shoe.hands == hands


def test_the_spec_worked_coups() -> None:
    shoe = shuffle("a" * 64, "table-1", 1, 8)
    first = rules.deal(lambda p: shoe.cards[p] if p < len(shoe.cards) else None, 0)
    assert first.steps == (
        ("card", "player", 0, "4D"),
        ("card", "banker", 1, "JS"),
        ("card", "player", 2, "3S"),
        ("card", "banker", 3, "KC"),
        ("stand", "player"),
        ("card", "banker", 4, "JS"),
        ("complete", 7, 0, "player"),
    )
    second = rules.deal(lambda p: shoe.cards[p], 5)
    assert [s[3] for s in second.steps if s[0] == "card"] == ["QS", "7S", "2C", "8H", "4C", "QS"]
    assert (second.player_total, second.banker_total, second.outcome) == (6, 5, "player")
    assert second.player_draws
    assert second.banker_draws


def test_the_byte_stream_is_hmac_blocks_in_order() -> None:
    stream = ByteStream("a" * 64, "table-1", 1)
    import hmac

    expected = b"".join(
        hmac.new(b"a" * 64, f"table-1:1:{i}".encode(), hashlib.sha256).digest() for i in range(3)
    )
    assert b"".join(stream.read(4) for _ in range(24)) == expected


def test_uniform_rejects_the_biased_top_of_the_range() -> None:
    class Fixed(ByteStream):
        def __init__(self, words: list[int]) -> None:
            super().__init__("0" * 64, "x", 0)
            self._words = words

        def read(self, count: int) -> bytes:
            return self._words.pop(0).to_bytes(4, "big")

    limit = 2**32 - (2**32 % 6)  # 2**32 - 4
    assert Fixed([limit, limit + 3, 7]).uniform(6) == 1
    assert Fixed([limit - 1]).uniform(6) == (limit - 1) % 6


# docs/audit-log.md, "Worked example".
WORKED_DOCUMENT = (
    '{"category":"wallet","metadata":{"actor":"alice","causation_id":null,"correlation_id":null,'
    '"idempotency_key":null,"request_id":"req-1","role":"player"},"payload":{"amount":2500},'
    '"position":1,"recorded_at":"2026-11-30T16:22:23.000001Z","schema_version":1,'
    '"stream_id":"wallet:alice","type":"StakeReserved","version":1}'
)
WORKED_HASH = "d82ec8e46b448f547aab7b0830d719f8147a347d1b056b76ce499873a9edbbd0"


def test_the_audit_log_worked_example() -> None:
    document = {
        "position": 1,
        "stream_id": "wallet:alice",
        "category": "wallet",
        "version": 1,
        "type": "StakeReserved",
        "schema_version": 1,
        "payload": {"amount": 2500},
        "metadata": {
            "actor": "alice",
            "role": "player",
            "request_id": "req-1",
            "correlation_id": None,
            "causation_id": None,
            "idempotency_key": None,
        },
        "recorded_at": "2026-11-30T16:22:23.000001Z",
    }
    for encode in (canonical_json, canonical_json_reference):
        body = encode(document)
        assert body.decode() == WORKED_DOCUMENT
        assert len(body) == 316
        assert hashlib.sha256(b"0" * 64 + body).hexdigest() == WORKED_HASH


def test_canonical_strings_escape_exactly_what_the_doc_lists() -> None:
    text = '"\\\b\f\n\r\t\x01\x1f/\x7f\u2028é😀'
    expected = '"\\"\\\\\\b\\f\\n\\r\\t\\u0001\\u001f/\x7f\u2028é😀"'
    assert canonical_json(text).decode() == expected
    assert canonical_json_reference(text).decode() == expected
    assert canonical_json({"é": 1, "Z": 2, "a": 3, "😀": 4, "\uffff": 5}).decode() == (
        '{"Z":2,"a":3,"é":1,"\uffff":5,"😀":4}'
    )


_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00")),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00")),
            children,
            max_size=4,
        )
    ),
    max_leaves=20,
)


@given(_json)
def test_the_fast_encoder_is_the_rule_by_rule_one(value: object) -> None:
    assert canonical_json(value) == canonical_json_reference(value)
    assert loads_line(canonical_json(value)) == value


@pytest.mark.parametrize(
    ("line", "words"),
    [
        (b'{"a":1e400}', "1e400 is not an integer"),
        (b'{"a":2.5}', "2.5 is not an integer"),
        (b'{"a":NaN}', "NaN is not a JSON value"),
        (b'{"a":-Infinity}', "-Infinity is not a JSON value"),
        (b'{"a":9223372036854775808}', "outside signed 64-bit"),
        (b'{"a":1,"a":2}', "appears twice"),
        (b'{"a":"x\\u0000"}', "U+0000"),
        (b'{"a":"x', "cut short"),
        (b"\xff\xfe", "not UTF-8"),
        (b'{"a":' + b"1" * 5000 + b"}", "far outside signed 64-bit"),
        (b"[" * 100_000, "nested too deeply"),
    ],
)
def test_json_outside_the_log_value_space_is_refused_with_a_reason(line: bytes, words: str) -> None:
    with pytest.raises(BadJsonError, match=words.replace("+", r"\+")):
        loads_line(line)


def test_an_escaped_backslash_before_u0000_is_not_a_nul() -> None:
    assert loads_line(b'{"a":"\\\\u0000"}') == {"a": "\\u0000"}
    assert json.loads(b'{"a":"\\\\u0000"}') == {"a": "\\u0000"}


def test_unpaired_surrogates_cannot_be_hashed() -> None:
    value = loads_line(b'{"a":"\\ud800"}')
    with pytest.raises(BadJsonError, match="surrogate"):
        canonical_json(value)
