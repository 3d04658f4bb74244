"""The seeded shoe of the provably-fair spec, rebuilt from the spec's text alone.

Commitment, the HMAC-SHA256 byte stream, unbiased `uniform(n)`, the Fisher-Yates shuffle from
the end and `hands = 70 + uniform(6)`. Cards are their spec codes ("4D", "TS") throughout.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass

RANKS = "A23456789TJQK"
SUITS = "CDHS"
DECK: tuple[str, ...] = tuple(rank + suit for suit in SUITS for rank in RANKS)
"""One deck in the spec's unshuffled order: suits C, D, H, S, each A to K."""

POINTS: dict[str, int] = {
    rank + suit: min(RANKS.index(rank) + 1, 10) % 10 for rank in RANKS for suit in SUITS
}
"""Each card's baccarat points: A 1, 2-9 face value, T J Q K 0."""

MAX_DECKS = 8
"""The spec's shoe holds 8 decks "unless the table says otherwise"; tables allow 1 to 8."""

_SERVER_SEED = re.compile(r"[0-9a-f]{64}")
_CLIENT_SEED = re.compile(r"[\x20-\x7e]{1,64}")


class SeedError(ValueError):
    """Seeds, nonce or deck count outside what the spec allows."""


def commitment(server_seed: str) -> str:
    """`server_seed_hash`: SHA-256 of the seed's 64 ASCII hex characters, lowercase hex."""
    return hashlib.sha256(server_seed.encode("ascii")).hexdigest()


class ByteStream:
    """Block i is HMAC-SHA256(ASCII(server_seed), UTF-8("{client_seed}:{nonce}:{i}"))."""

    def __init__(self, server_seed: str, client_seed: str, nonce: int) -> None:
        self._key = server_seed.encode("ascii")
        self._client_seed = client_seed
        self._nonce = nonce
        self._block = 0
        self._buffer = b""
        self._offset = 0

    def read(self, count: int) -> bytes:
        """The next `count` bytes of the stream, never reused."""
        while len(self._buffer) - self._offset < count:
            message = f"{self._client_seed}:{self._nonce}:{self._block}".encode()
            block = hmac.new(self._key, message, hashlib.sha256).digest()
            self._buffer = self._buffer[self._offset :] + block
            self._offset = 0
            self._block += 1
        start = self._offset
        self._offset += count
        return self._buffer[start : self._offset]

    def uniform(self, n: int) -> int:
        """An integer in [0, n) by rejection: discard u >= 2**32 - (2**32 % n)."""
        limit = 2**32 - (2**32 % n)
        while True:
            u = int.from_bytes(self.read(4), "big")
            if u < limit:
                return u % n


@dataclass(frozen=True, slots=True)
class Shoe:
    """A shuffled shoe in dealing order (position 0 first) and its number of coups."""

    cards: tuple[str, ...]
    hands: int


def check_parameters(
    server_seed: object, client_seed: object, nonce: object, decks: object
) -> str | None:
    """What makes these shoe parameters invalid under the spec, or None if they are valid."""
    if not isinstance(server_seed, str) or not _SERVER_SEED.fullmatch(server_seed):
        return "the server_seed is not 64 lowercase hex characters"
    if not isinstance(client_seed, str) or not _CLIENT_SEED.fullmatch(client_seed):
        return "the client_seed is not 1 to 64 printable ASCII characters"
    if isinstance(nonce, bool) or not isinstance(nonce, int) or nonce < 0:
        return f"the nonce {nonce!r} is not a non-negative integer"
    if isinstance(decks, bool) or not isinstance(decks, int) or not 1 <= decks <= MAX_DECKS:
        return f"the deck count {decks!r} is not 1 to {MAX_DECKS}"
    return None


def shuffle(server_seed: str, client_seed: str, nonce: int, decks: int = 8) -> Shoe:
    """The spec's shoe: Fisher-Yates from the end, then hands = 70 + uniform(6)."""
    problem = check_parameters(server_seed, client_seed, nonce, decks)
    if problem is not None:
        raise SeedError(problem)
    stream = ByteStream(server_seed, client_seed, nonce)
    cards = list(DECK) * decks
    for i in range(len(cards) - 1, 0, -1):
        j = stream.uniform(i + 1)
        cards[i], cards[j] = cards[j], cards[i]
    hands = 70 + stream.uniform(6)
    return Shoe(tuple(cards), hands)
