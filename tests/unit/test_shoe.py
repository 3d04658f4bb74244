import copy
import hashlib
import hmac
import logging
import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from domain.cards import card_code, parse_card
from domain.errors import (
    DeckCountOutOfRange,
    InvalidClientSeed,
    InvalidServerSeed,
    InvalidShoeParameters,
    NegativeNonce,
)
from domain.shoe import (
    MIN_CARDS_TO_START_COUP,
    ByteStream,
    ServerSeed,
    commitment,
    coup_can_start,
    random_client_seed,
    shuffle_shoe,
)
from domain.tableau import deal_shoe

# The spec's test vectors, copied from shared/spec/provably-fair.md.
VECTORS = [
    pytest.param(
        "0" * 64,
        "client",
        0,
        "60e05bd1b195af2f94112fa7197a5c88289058840ce7c6df9693756bc6250f55",
        "TD QH 4D 9H 5C 2C 2H 7C 3H 2S 7D 7D 5D TD 5D 3S",
        70,
        id="zeros",
    ),
    pytest.param(
        "a" * 64,
        "table-1",
        1,
        "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb",
        "4D JS 3S KC JS QS 7S 2C 8H 4C QS QD TD 2H TH 2D",
        75,
        id="a-s",
    ),
    pytest.param(
        "3f1c9a0b7d2e4f6a8c1b3d5e7f9a0c2e4b6d8f1a3c5e7092b4d6f8a1c3e5f709",
        "Lucky Seven",
        42,
        "fdb9e3d25e8c85f3d34116abe0eaf3f46fea896ce1953f9d27439b0581c4e5dd",
        "8D 3D 5S AD 7S 4H 7C KS 7S 6S 7C KH TH 5S KC AS",
        70,
        id="lucky-seven",
    ),
]

server_seeds = st.binary(min_size=32, max_size=32).map(bytes.hex)
client_seeds = st.text(
    st.characters(min_codepoint=0x20, max_codepoint=0x7E), min_size=1, max_size=64
)


def reference_shoe(
    server_seed: str, client_seed: str, nonce: int, decks: int
) -> tuple[list[int], int]:
    """The spec read literally: a byte stream, 4-byte reads, rejection, then Fisher-Yates."""
    stream = bytearray()
    blocks = 0
    read = 0

    def next_bytes(count: int) -> bytes:
        nonlocal blocks, read
        while len(stream) - read < count:
            message = f"{client_seed}:{nonce}:{blocks}".encode()
            stream.extend(hmac.new(server_seed.encode("ascii"), message, hashlib.sha256).digest())
            blocks += 1
        chunk = bytes(stream[read : read + count])
        read += count
        return chunk

    def uniform(n: int) -> int:
        limit = 2**32 - (2**32 % n)
        while True:
            u = int.from_bytes(next_bytes(4), "big")
            if u < limit:
                return u % n

    cards = [
        parse_card(rank + suit) for _ in range(decks) for suit in "CDHS" for rank in "A23456789TJQK"
    ]
    for i in range(len(cards) - 1, 0, -1):
        j = uniform(i + 1)
        cards[i], cards[j] = cards[j], cards[i]
    return cards, 70 + uniform(6)


@pytest.mark.parametrize(
    ("server_seed", "client_seed", "nonce", "seed_hash", "first_16", "hands"), VECTORS
)
def test_spec_vector_commitment(
    server_seed: str, client_seed: str, nonce: int, seed_hash: str, first_16: str, hands: int
) -> None:
    assert commitment(server_seed) == seed_hash


@pytest.mark.parametrize(
    ("server_seed", "client_seed", "nonce", "seed_hash", "first_16", "hands"), VECTORS
)
def test_spec_vector_first_sixteen_cards(
    server_seed: str, client_seed: str, nonce: int, seed_hash: str, first_16: str, hands: int
) -> None:
    shoe = shuffle_shoe(server_seed, client_seed, nonce)
    assert " ".join(card_code(card) for card in shoe.cards[:16]) == first_16


@pytest.mark.parametrize(
    ("server_seed", "client_seed", "nonce", "seed_hash", "first_16", "hands"), VECTORS
)
def test_spec_vector_hands(
    server_seed: str, client_seed: str, nonce: int, seed_hash: str, first_16: str, hands: int
) -> None:
    assert shuffle_shoe(server_seed, client_seed, nonce).hands == hands


def test_spec_vector_two_first_coups_are_as_described() -> None:
    coups = deal_shoe(shuffle_shoe("a" * 64, "table-1", 1))
    first = next(coups)
    assert [card_code(card) for card in first.player_cards] == ["4D", "3S"]
    assert [card_code(card) for card in first.banker_cards] == ["JS", "KC", "JS"]
    assert (first.player_total, first.banker_total, first.outcome) == (7, 0, "player")
    assert first.decisions[1].reason == "Banker 0 draws: Player stood, and Banker draws on 0-5"
    second = next(coups)
    assert [card_code(card) for card in second.player_cards] == ["QS", "2C", "4C"]
    assert [card_code(card) for card in second.banker_cards] == ["7S", "8H", "QS"]
    assert (second.player_total, second.banker_total, second.outcome) == (6, 5, "player")
    assert second.decisions[1].reason == "Banker 5 draws: Player's third card 4 is in 4-7"
    assert [drawn.position for drawn in second.cards] == [5, 6, 7, 8, 9, 10]


def test_commitment_is_sha256_of_the_hex_text_not_the_bytes() -> None:
    seed = "ab" * 32
    assert commitment(seed) == hashlib.sha256(seed.encode("ascii")).hexdigest()
    assert commitment(seed) != hashlib.sha256(bytes.fromhex(seed)).hexdigest()


@settings(max_examples=30, deadline=None)
@given(
    server_seed=server_seeds,
    client_seed=client_seeds,
    nonce=st.integers(min_value=0, max_value=10**12),
    decks=st.integers(min_value=1, max_value=8),
)
def test_shuffle_matches_the_spec_read_literally(
    server_seed: str, client_seed: str, nonce: int, decks: int
) -> None:
    shoe = shuffle_shoe(server_seed, client_seed, nonce, decks)
    cards, hands = reference_shoe(server_seed, client_seed, nonce, decks)
    assert list(shoe.cards) == cards
    assert shoe.hands == hands


@settings(max_examples=50, deadline=None)
@given(server_seed=server_seeds, nonce=st.integers(min_value=0, max_value=1000))
def test_a_shoe_deals_70_to_75_hands_and_holds_every_card_once_per_deck(
    server_seed: str, nonce: int
) -> None:
    shoe = shuffle_shoe(server_seed, "players", nonce, decks=2)
    assert 70 <= shoe.hands <= 75
    assert sorted(shoe.cards) == sorted(list(range(52)) * 2)


def test_byte_stream_reads_hmac_blocks_in_order_and_never_reuses_one() -> None:
    seed = "0" * 64
    stream = ByteStream(seed, "client", 0)
    words = [stream.next_u32() for _ in range(16)]
    expected = b"".join(
        hmac.new(seed.encode(), f"client:0:{block}".encode(), hashlib.sha256).digest()
        for block in (0, 1)
    )
    assert words == [int.from_bytes(expected[i : i + 4], "big") for i in range(0, 64, 4)]


class ScriptedStream(ByteStream):
    """A stream whose words are given, to drive uniform() into its rejection branch."""

    def __init__(self, words: list[int]) -> None:
        super().__init__("0" * 64, "client", 0)
        self.words = words

    def next_u32(self) -> int:
        return self.words.pop(0)


def test_uniform_rejects_words_at_or_above_the_limit_and_reads_the_next() -> None:
    # For n = 3, limit = 2**32 - (2**32 % 3) = 2**32 - 1: only the top word is rejected.
    stream = ScriptedStream([2**32 - 1, 7, 100])
    assert stream.uniform(3) == 7 % 3
    assert stream.words == [100]


def test_uniform_keeps_a_word_just_below_the_limit() -> None:
    stream = ScriptedStream([2**32 - 2])
    assert stream.uniform(3) == (2**32 - 2) % 3


def test_uniform_of_one_is_always_zero_and_still_reads_a_word() -> None:
    stream = ScriptedStream([12345, 6])
    assert stream.uniform(1) == 0
    assert stream.words == [6]


@pytest.mark.parametrize("n", [0, -1, 2**32 + 1])
def test_uniform_needs_a_range_it_can_draw_from(n: int) -> None:
    with pytest.raises(ValueError, match="uniform"):
        ByteStream("0" * 64, "client", 0).uniform(n)


@pytest.mark.parametrize("decks", [0, 9, -1])
def test_a_shoe_holds_one_to_eight_decks(decks: int) -> None:
    with pytest.raises(DeckCountOutOfRange) as raised:
        shuffle_shoe("0" * 64, "client", 0, decks)
    assert raised.value.rule == "shoe.decks_out_of_range"
    assert isinstance(raised.value, InvalidShoeParameters)


def test_a_one_deck_shoe_holds_52_cards() -> None:
    assert len(shuffle_shoe("0" * 64, "client", 0, decks=1).cards) == 52


@pytest.mark.parametrize("client_seed", ["", "x" * 65, "tab\there", "caf\u00e9", "line\n"])
def test_client_seed_is_one_to_64_printable_ascii_characters(client_seed: str) -> None:
    with pytest.raises(InvalidClientSeed):
        shuffle_shoe("0" * 64, client_seed, 0)


@pytest.mark.parametrize("client_seed", [" ", "~" * 64, "Lucky Seven"])
def test_client_seed_edges_are_accepted(client_seed: str) -> None:
    assert len(shuffle_shoe("0" * 64, client_seed, 0).cards) == 416


def test_nonce_is_not_negative() -> None:
    with pytest.raises(NegativeNonce):
        shuffle_shoe("0" * 64, "client", -1)


@pytest.mark.parametrize("server_seed", ["", "0" * 63, "0" * 65, "A" * 64, "g" * 64])
def test_server_seed_is_64_lowercase_hex_and_errors_do_not_echo_it(server_seed: str) -> None:
    with pytest.raises(InvalidServerSeed) as raised:
        shuffle_shoe(server_seed, "client", 0)
    if server_seed:
        assert server_seed not in str(raised.value)


@pytest.mark.parametrize(
    ("cards_left", "coups_dealt", "hands", "can_start"),
    [
        (416, 0, 70, True),
        (6, 10, 70, True),
        (5, 10, 70, False),
        (100, 69, 70, True),
        (100, 70, 70, False),
        (100, 75, 75, False),
        (0, 0, 70, False),
    ],
)
def test_shoe_retires_after_its_hands_or_below_six_cards(
    cards_left: int, coups_dealt: int, hands: int, can_start: bool
) -> None:
    assert coup_can_start(cards_left, coups_dealt, hands) is can_start


def test_dealing_a_shoe_stops_after_its_hands() -> None:
    shoe = shuffle_shoe("a" * 64, "table-1", 1)
    assert len(list(deal_shoe(shoe))) == shoe.hands == 75


def test_dealing_a_small_shoe_stops_when_fewer_than_six_cards_are_left() -> None:
    shoe = shuffle_shoe("a" * 64, "table-1", 1, decks=1)
    coups = list(deal_shoe(shoe))
    assert len(coups) < shoe.hands
    assert len(shoe.cards) - coups[-1].next_position < MIN_CARDS_TO_START_COUP
    assert all(
        len(shoe.cards) - coup.cards[0].position >= MIN_CARDS_TO_START_COUP for coup in coups
    )


def test_random_client_seeds_are_valid_and_fresh() -> None:
    first, second = random_client_seed(), random_client_seed()
    assert first != second
    assert len(shuffle_shoe("0" * 64, first, 0).cards) == 416


def test_server_seed_generates_64_hex_characters_and_commits_to_them() -> None:
    seed = ServerSeed.generate()
    revealed = seed.reveal()
    assert len(revealed) == 64
    assert int(revealed, 16) >= 0
    assert seed.commitment == commitment(revealed)
    assert ServerSeed.generate().reveal() != revealed


def test_server_seed_shuffles_the_shoe_its_revealed_seed_replays() -> None:
    seed = ServerSeed("a" * 64)
    assert seed.shuffle("table-1", 1) == shuffle_shoe(seed.reveal(), "table-1", 1)


def test_server_seed_never_shows_in_repr_str_or_format() -> None:
    seed = ServerSeed.generate()
    secret = seed.reveal()
    renderings = [
        repr(seed),
        str(seed),
        f"{seed}",
        f"{seed!r}",
        f"{seed:>200}",
        format(seed),
        "%s %r" % (seed, seed),  # noqa: UP031 -- %-formatting is what logging does
        "{}".format(seed),  # noqa: UP032
        repr([seed]),
        str({"seed": seed}),
    ]
    for rendering in renderings:
        assert secret not in rendering
        assert seed.commitment in rendering


def test_server_seed_never_shows_in_logs(caplog: pytest.LogCaptureFixture) -> None:
    seed = ServerSeed.generate()
    logger = logging.getLogger("shoebox.test")
    with caplog.at_level(logging.DEBUG, logger="shoebox.test"):
        logger.info("opened %s", seed)
        logger.info("opened %r", seed)
        logger.info("opened %(seed)s", {"seed": seed})
        logger.info(seed)
        logger.warning("shoe", extra={"server_seed": seed})
        try:
            raise RuntimeError(seed)
        except RuntimeError:
            logger.exception("failed with %s", seed)
    assert len(caplog.records) == 6
    assert seed.reveal() not in caplog.text
    assert all(seed.reveal() not in record.getMessage() for record in caplog.records)


def test_server_seed_cannot_be_pickled_or_copied() -> None:
    seed = ServerSeed.generate()
    with pytest.raises(TypeError):
        pickle.dumps(seed)
    with pytest.raises(TypeError):
        copy.copy(seed)
    with pytest.raises(TypeError):
        copy.deepcopy({"seed": seed})


def test_server_seed_has_no_instance_dict_to_leak_through() -> None:
    seed = ServerSeed.generate()
    with pytest.raises(TypeError):
        vars(seed)


def test_server_seed_rejects_malformed_seeds_without_echoing_them() -> None:
    with pytest.raises(InvalidServerSeed) as raised:
        ServerSeed("Z" * 64)
    assert "Z" * 64 not in str(raised.value)
