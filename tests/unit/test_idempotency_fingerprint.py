"""The idempotency fingerprint reads a body with orjson where it agrees with json.loads, and
with json.loads otherwise, so no fingerprint changed with the faster parse."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from service.web.idempotency import _parsed, fingerprint

_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@given(_JSON, st.booleans())
def test_parsed_as_json_loads_would(value: Any, ascii_only: bool) -> None:
    body = json.dumps(value, ensure_ascii=ascii_only).encode()
    assert _canonical(_parsed(body)) == _canonical(json.loads(body))


@pytest.mark.parametrize(
    "body",
    [
        b'{"z":123456789012345678901234567890}',
        b'{"z":-9223372036854775809}',
        b'{"z":18446744073709551616}',
        b"[NaN, Infinity, -Infinity]",
        b'{"y":1e400}',
        b'"\\ud800"',
        b'{"a":1,"a":2}',
        '{"a":"\u00e9"}'.encode("utf-16"),
        b'{"player_id":"p1","spot":"banker","stake_pence":100}',
    ],
)
def test_bodies_orjson_reads_otherwise_are_read_by_json(body: bytes) -> None:
    assert _canonical(_parsed(body)) == _canonical(json.loads(body))


def test_a_fingerprint_is_unchanged() -> None:
    # Computed with json.loads alone, before the orjson read.
    body = b'{"stake_pence": 100, "spot": "banker", "player_id": "p1"}'
    canonical = b'{"player_id":"p1","spot":"banker","stake_pence":100}'
    import hashlib

    digest = hashlib.sha256()
    for part in (b"POST", b"/v1/tables/t/bets?", canonical):
        digest.update(len(part).to_bytes(8, "big"))
        digest.update(part)
    assert fingerprint("post", "/v1/tables/t/bets?", body) == digest.hexdigest()
