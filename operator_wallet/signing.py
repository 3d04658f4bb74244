"""HMAC-SHA256 signatures of the wallet protocol's requests and answers (docs/wallets.md).

The signed message is the method, the path (with its query), a Unix timestamp and the raw
body, so that neither a body nor a signature can be moved to another call, and an old
request cannot be replayed past the tolerance. One header carries the key id beside the
signature, so that keys rotate: the wallet holds several ids at once, and signs each answer
with the key that signed its request.

Shoebox's client implements the same rule on its own (service/application/seamless.py): the
reference wallet stands in for a casino's system and shares no code with the server. The
test vectors in tests/wallet_signing_vectors.json hold the two equal.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

HEADER: Final = "Wallet-Signature"
TOLERANCE_SECONDS: Final = 300
"""How far a signature's timestamp may be from the checker's clock, either way."""
_KEY_ID: Final = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_HEADER_VALUE: Final = re.compile(
    r"key_id=(?P<key_id>[A-Za-z0-9_.-]{1,64}),timestamp=(?P<timestamp>[0-9]{1,12}),"
    r"hmac_sha256=(?P<signature>[0-9a-f]{64})"
)


class SignatureError(Exception):
    """A signature is missing, malformed, made with an unknown key, stale, or wrong."""


@dataclass(frozen=True, slots=True)
class SigningKey:
    """A shared secret under its id; the secret never appears in a repr."""

    key_id: str
    secret: bytes

    def __post_init__(self) -> None:
        if not _KEY_ID.fullmatch(self.key_id):
            raise ValueError(f"a key id is 1 to 64 of A-Z a-z 0-9 _ . -; not {self.key_id!r}")
        if len(self.secret) < 16:
            raise ValueError("a signing secret is at least 16 bytes")

    def __repr__(self) -> str:
        return f"SigningKey(key_id={self.key_id!r}, secret=<hidden>)"


def message(method: str, path: str, timestamp: int, body: bytes) -> bytes:
    """The bytes a signature covers."""
    return f"{method.upper()}\n{path}\n{timestamp}\n".encode() + body


def sign(key: SigningKey, method: str, path: str, timestamp: int, body: bytes) -> str:
    """The header value that signs `body` for `method` `path` at `timestamp`."""
    digest = hmac.new(key.secret, message(method, path, timestamp, body), hashlib.sha256)
    return f"key_id={key.key_id},timestamp={timestamp},hmac_sha256={digest.hexdigest()}"


def verify(
    header: str | None,
    keys: Mapping[str, SigningKey],
    method: str,
    path: str,
    body: bytes,
    now: int,
) -> SigningKey:
    """The key that made `header`'s signature of the call, or SignatureError saying why not."""
    if header is None:
        raise SignatureError(f"no {HEADER} header")
    parsed = _HEADER_VALUE.fullmatch(header.strip())
    if parsed is None:
        raise SignatureError(f"the {HEADER} header is malformed")
    key = keys.get(parsed["key_id"])
    if key is None:
        raise SignatureError(f"unknown key id {parsed['key_id']!r}")
    timestamp = int(parsed["timestamp"])
    if abs(now - timestamp) > TOLERANCE_SECONDS:
        raise SignatureError(f"the timestamp is more than {TOLERANCE_SECONDS} s from now")
    expected = sign(key, method, path, timestamp, body)
    if not hmac.compare_digest(expected, header.strip()):
        raise SignatureError("the signature does not match")
    return key
