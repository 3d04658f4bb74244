"""The Shoebox-Consistency token: what a write answers, read back exactly, and nothing else."""

import pytest
from hypothesis import given
from hypothesis import strategies as st
from psycopg_pool import PoolClosed

from events.postgres import DeadlinePool, checkouts
from events.store import AppendResult
from service.runtime.consistency import (
    Consistency,
    MalformedToken,
    later,
    lsn_of,
    parse,
    record_append,
    recording_writes,
)
from service.runtime.settings import Settings

# Streams' names are ASCII (a category, ':' and an id); any printable text of that size reads
# back too.
STREAMS = st.one_of(
    st.from_regex(r"[a-z]{1,16}:[A-Za-z0-9_][A-Za-z0-9._-]{0,63}", fullmatch=True),
    st.text(
        alphabet=st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp")),
        min_size=1,
        max_size=32,
    ).filter(str.isprintable),
)


@given(lsn=st.integers(0, 2**64 - 1), stream=STREAMS, version=st.integers(1, 10**17))
def test_a_token_reads_back_as_written(lsn: int, stream: str, version: int) -> None:
    token = Consistency(lsn, stream, version)
    assert parse(token.encode()) == token
    assert parse(Consistency(lsn).encode()) == Consistency(lsn)


def test_the_form_is_the_documented_one() -> None:
    token = Consistency(lsn_of("0/3000148"), "table:T1", 12)
    assert token.encode() == "1.0000000003000148.dGFibGU6VDE.12"
    assert token.lsn_text == "0/3000148"
    assert Consistency(lsn_of("1A/FF")).encode() == "1.0000001A000000FF"


@pytest.mark.parametrize(
    "value",
    [
        "",
        "1",
        "2.0000000003000148",  # another version
        "1.3000148",  # not 16 digits
        "1.000000000300014G",
        "1.0000000003000148.dGFibGU6VDE",  # a stream without its version
        "1.0000000003000148.dGFibGU6VDE.0",
        "1.0000000003000148.dGFibGU6VDE.-1",
        "1.0000000003000148.dGFi bGU6.1",
        "1.0000000003000148.AA.1",  # a NUL stream
        "1.0000000003000148.gA.1",  # not UTF-8
        "1.0000000003000148.x.1.2",
        "1." + "0" * 300,
    ],
)
def test_anything_else_is_malformed(value: str) -> None:
    with pytest.raises(MalformedToken):
        parse(value)


def test_the_later_of_two_tokens_is_the_one_further_on() -> None:
    early, late = Consistency(10, "a", 1), Consistency(20)
    assert later(early, late) == later(late, early) == late


def test_a_write_records_its_last_appended_event() -> None:
    first = AppendResult({"a": 3, "b": 9}, (("a", 2, 3), ("b", 8, 9)))
    guard_only = AppendResult({"c": 4}, ())
    with recording_writes() as written:
        record_append(first)
        record_append(guard_only)
    assert written == [("b", 9)]
    record_append(first)  # outside a write: noted nowhere, and no error


def test_the_read_replica_is_a_setting_and_unset_means_none() -> None:
    url = "postgresql://reader@db2:5432/shoebox"
    chosen = Settings.from_env({"DATABASE_READ_URL": url, "SHOEBOX_APP_DATABASE_READ_URL": ""})
    assert (chosen.database_read_url, chosen.app_database_read_url) == (url, None)
    assert Settings.from_env({"DATABASE_READ_URL": ""}).database_read_url is None


def test_the_last_append_decides_whether_the_request_knows_its_commits_position() -> None:
    read_it = AppendResult({"a": 1}, (("a", 1, 1),), commit_lsn="0/16B3748")
    did_not = AppendResult({"b": 1}, (("b", 1, 1),))
    with recording_writes() as written:
        record_append(read_it)
        assert written.commit == ("0/16B3748", checkouts())
        record_append(did_not)
        assert written.commit is None
        record_append(read_it)
        assert written.commit is not None


def test_every_checkout_from_a_deadline_pool_is_counted_in_its_context() -> None:
    """What tells a request that it touched the database after its last append read its
    commit's position: a checkout counts even when it fails."""
    pool = DeadlinePool("host=127.0.0.1 port=1", min_size=0, max_size=1, open=False)
    before = checkouts()
    with pytest.raises(PoolClosed):
        pool.getconn(timeout=0.1)
    assert checkouts() == before + 1
