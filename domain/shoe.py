"""The provably fair shoe of shared/spec/provably-fair.md, to the byte.

The spec is the contract with every verifier: where this module and the spec
differ, this module is wrong.
"""

import hashlib
import hmac
import re
import secrets
import struct
from dataclasses import dataclass
from typing import NoReturn

from domain.cards import Card, unshuffled_shoe
from domain.errors import (
    DeckCountOutOfRange,
    InvalidClientSeed,
    InvalidServerSeed,
    NegativeNonce,
)

MIN_DECKS = 1
MAX_DECKS = 8
DEFAULT_DECKS = 8
MIN_HANDS = 70
HAND_CHOICES = 6  # hands = 70 + uniform(6): 70 to 75 coups a shoe
MIN_CARDS_TO_START_COUP = 6
MAX_CLIENT_SEED_LENGTH = 64

_SERVER_SEED = re.compile(r"[0-9a-f]{64}")
_CLIENT_SEED = re.compile(r"[\x20-\x7e]{1,64}")
_TWO_TO_32 = 2**32
_WORDS_PER_BLOCK = struct.Struct(">8I")


def _check_server_seed(server_seed: str) -> None:
    if not isinstance(server_seed, str) or not _SERVER_SEED.fullmatch(server_seed):
        # Never echo the value: a malformed seed may still be a real one with a typo.
        raise InvalidServerSeed("a server seed is 64 lowercase hex characters")


def _check_stream_parameters(client_seed: str, nonce: int) -> None:
    if not isinstance(client_seed, str) or not _CLIENT_SEED.fullmatch(client_seed):
        raise InvalidClientSeed(
            f"a client seed is 1 to 64 printable ASCII characters (0x20-0x7E), not {client_seed!r}"
        )
    if isinstance(nonce, bool) or not isinstance(nonce, int) or nonce < 0:
        raise NegativeNonce(f"a nonce is a non-negative integer, not {nonce!r}")


def _check_decks(decks: int) -> None:
    if isinstance(decks, bool) or not isinstance(decks, int) or not MIN_DECKS <= decks <= MAX_DECKS:
        raise DeckCountOutOfRange(f"a shoe holds {MIN_DECKS} to {MAX_DECKS} decks, not {decks!r}")


def commitment(server_seed: str) -> str:
    """The published server_seed_hash: SHA-256 of the seed's 64 ASCII hex characters, as hex."""
    _check_server_seed(server_seed)
    return hashlib.sha256(server_seed.encode("ascii")).hexdigest()


class ByteStream:
    """The spec's HMAC-SHA256 block stream, read 4 bytes at a time and never reused."""

    __slots__ = ("_block", "_key", "_prefix", "_words")

    def __init__(self, server_seed: str, client_seed: str, nonce: int) -> None:
        _check_server_seed(server_seed)
        _check_stream_parameters(client_seed, nonce)
        self._key = server_seed.encode("ascii")
        self._prefix = f"{client_seed}:{nonce}:"
        self._block = 0
        # Every read the spec makes is 4 bytes and a block is 32, so reads never straddle
        # a block: unpacking each block into eight big-endian words is the same stream.
        self._words: list[int] = []

    def __repr__(self) -> str:
        return f"ByteStream(block={self._block})"

    def next_u32(self) -> int:
        """The next 4 bytes of the stream as a big-endian unsigned integer."""
        if not self._words:
            message = f"{self._prefix}{self._block}".encode()
            digest = hmac.digest(self._key, message, "sha256")
            # Reversed so that pop() from the end yields the words in stream order.
            self._words = list(reversed(_WORDS_PER_BLOCK.unpack(digest)))
            self._block += 1
        return self._words.pop()

    def uniform(self, n: int) -> int:
        """An integer in [0, n) without modulo bias, by the spec's rejection sampling."""
        if not 1 <= n <= _TWO_TO_32:
            raise ValueError(f"uniform(n) needs 1 <= n <= 2**32, not {n}")
        limit = _TWO_TO_32 - _TWO_TO_32 % n
        while True:
            u = self.next_u32()
            if u < limit:
                return u % n


@dataclass(frozen=True, slots=True)
class ShuffledShoe:
    """A shuffled shoe in dealing order and the number of coups it deals before it retires."""

    cards: tuple[Card, ...]
    hands: int


def shuffle_shoe(
    server_seed: str, client_seed: str, nonce: int, decks: int = DEFAULT_DECKS
) -> ShuffledShoe:
    """Shuffle a shoe by Fisher-Yates from the end, then draw its hands, all from one stream."""
    _check_decks(decks)
    stream = ByteStream(server_seed, client_seed, nonce)
    cards = unshuffled_shoe(decks)
    # uniform() inlined: this loop is the whole cost of a shuffle, and the method call
    # plus its range check would double it. Same draws, same order, same rejections.
    next_u32 = stream.next_u32
    for i in range(len(cards) - 1, 0, -1):
        n = i + 1
        limit = _TWO_TO_32 - _TWO_TO_32 % n
        u = next_u32()
        while u >= limit:
            u = next_u32()
        j = u % n
        cards[i], cards[j] = cards[j], cards[i]
    hands = MIN_HANDS + stream.uniform(HAND_CHOICES)
    return ShuffledShoe(cards=tuple(cards), hands=hands)


def coup_can_start(cards_left: int, coups_dealt: int, hands: int) -> bool:
    """Whether the shoe deals another coup: it retires after its hands or below 6 cards."""
    return coups_dealt < hands and cards_left >= MIN_CARDS_TO_START_COUP


def random_client_seed() -> str:
    """A fresh client seed for a shoe whose players chose none: 32 hex characters."""
    return secrets.token_hex(16)


class ServerSeed:
    """The secret holder: the only object that holds a live server seed until its shoe retires.

    It shows only its commitment when printed, formatted or logged, and refuses to be
    pickled or copied so that the seed cannot leave it by accident; `reveal()` is the
    one deliberate way out, for when the shoe has retired.
    """

    __slots__ = ("__commitment", "__seed")

    def __init__(self, server_seed: str) -> None:
        _check_server_seed(server_seed)
        self.__seed = server_seed
        self.__commitment = commitment(server_seed)

    @classmethod
    def generate(cls) -> "ServerSeed":
        """A new seed: 32 bytes from the operating system's CSPRNG, as 64 hex characters."""
        return cls(secrets.token_bytes(32).hex())

    @property
    def commitment(self) -> str:
        """The server_seed_hash to publish before the first card is dealt."""
        return self.__commitment

    def shuffle(self, client_seed: str, nonce: int, decks: int = DEFAULT_DECKS) -> ShuffledShoe:
        """Shuffle this seed's shoe without the seed leaving the holder."""
        return shuffle_shoe(self.__seed, client_seed, nonce, decks)

    def reveal(self) -> str:
        """The seed itself, for publishing once its shoe has retired, never before."""
        return self.__seed

    def __repr__(self) -> str:
        return f"ServerSeed(commitment={self.__commitment!r})"

    __str__ = __repr__

    def __format__(self, format_spec: str) -> str:
        return format(repr(self), format_spec)

    def _refuse(self, *args: object) -> NoReturn:
        raise TypeError("a ServerSeed cannot be pickled or copied; reveal() it once retired")

    __reduce__ = _refuse
    __reduce_ex__ = _refuse
    __copy__ = _refuse
    __deepcopy__ = _refuse
    __getstate__ = _refuse
