"""Every connection Shoebox opens asks libpq for TCP keepalives, unless DATABASE_URL says."""

from events.postgres import CONNECT_TIMEOUT_SECONDS, KEEPALIVES, connect_kwargs


def test_a_plain_url_gets_the_keepalives_and_the_connect_timeout() -> None:
    kwargs = connect_kwargs("postgresql://app@db.example:5432/shoebox")
    assert kwargs == {**KEEPALIVES, "connect_timeout": CONNECT_TIMEOUT_SECONDS}
    # A lost server is noticed well within the 10 s that issue 26 asks of the server side.
    idle, interval, count = (
        KEEPALIVES["keepalives_idle"],
        KEEPALIVES["keepalives_interval"],
        KEEPALIVES["keepalives_count"],
    )
    assert idle + interval * count < 10
    assert KEEPALIVES["tcp_user_timeout"] < 10_000


def test_what_the_url_sets_is_kept() -> None:
    kwargs = connect_kwargs(
        "postgresql://app@db.example/shoebox?keepalives_idle=30&tcp_user_timeout=0"
    )
    assert "keepalives_idle" not in kwargs
    assert "tcp_user_timeout" not in kwargs
    assert kwargs["keepalives_count"] == KEEPALIVES["keepalives_count"]
