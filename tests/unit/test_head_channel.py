"""The Redis channel of a database's head names the database as libpq would reach it.

A publisher (the sequencer's holder, on the primary's URL) and a reader (a feed on a standby's
URL) meet only if they name the same channel; a URL that leaves the database to libpq's
default must still name it.
"""

from service.runtime.head_signal import CHANNEL_PREFIX, head_channel


def test_the_channel_is_the_database_the_url_names() -> None:
    assert head_channel("postgresql://u@h:5432/shoebox", {}) == CHANNEL_PREFIX + "shoebox"
    assert head_channel("host=h dbname=shoebox user=u", {}) == CHANNEL_PREFIX + "shoebox"


def test_a_url_without_a_database_names_libpqs_default_so_both_sides_meet() -> None:
    primary = head_channel("postgresql://shoebox@primary:5432/shoebox", {})
    # libpq's default database is the user's name: the same database, the same channel.
    assert head_channel("postgresql://shoebox@standby:5432", {}) == primary
    # PGDATABASE, then PGUSER, as libpq reads them.
    assert head_channel("host=standby", {"PGDATABASE": "shoebox"}) == primary
    assert head_channel("host=standby", {"PGUSER": "shoebox"}) == primary
    assert head_channel("host=standby user=shoebox", {"PGDATABASE": "other"}) == (
        CHANNEL_PREFIX + "other"
    )
