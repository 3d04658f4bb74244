"""The embedded servers that let a machine with only Python run Shoebox.

These start their own servers in temporary directories even when DATABASE_URL or REDIS_URL
is set, so that CI proves the path a bare machine takes.
"""

import os
import socket
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path

import psycopg
import pytest
import redis

from service import embedded
from service.embedded import (
    EmbeddedPostgres,
    EmbeddedRedis,
    EmbeddedServerError,
    ServerBinaryNotFoundError,
    ServerStartTimeoutError,
)
from service.embedded.redis import redis_answers
from service.runtime.settings import Settings, SettingsError


def count_coups(url: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT count(*) FROM coup").fetchone()
    assert row is not None
    return int(row[0])


def answers(url: str) -> bool:
    try:
        with psycopg.connect(url, connect_timeout=2) as conn:
            return conn.execute("SELECT 1").fetchone() == (1,)
    except psycopg.OperationalError:
        return False


@pytest.fixture(scope="module")
def cluster_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One cluster for the tests that start and stop a server on it, so initdb runs once."""
    return tmp_path_factory.mktemp("shared") / "postgres"


@pytest.mark.slow
def test_embedded_postgres_keeps_its_data_across_restarts(tmp_path: Path) -> None:
    data_dir = tmp_path / "postgres"
    with EmbeddedPostgres(data_dir) as server:
        assert not server.reused
        with psycopg.connect(server.url) as conn:
            conn.execute("CREATE TABLE coup (number integer PRIMARY KEY)")
            conn.execute("INSERT INTO coup VALUES (1), (2), (3)")
    # A fast shutdown removes postmaster.pid; a crash would leave it behind.
    assert not (data_dir / "pgdata" / "postmaster.pid").exists()

    with EmbeddedPostgres(data_dir) as server:
        assert not server.reused
        assert count_coups(server.url) == 3


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="only root hands the cluster to another account")
def test_embedded_postgres_stops_though_an_ancestor_lost_its_search_bit_meanwhile(
    tmp_path: Path,
) -> None:
    # What pytest does to /tmp/pytest-of-<user> whenever another run or xdist worker starts:
    # back to 0700, which took the server's own account's way to its data.
    guarded = tmp_path / "guarded"
    guarded.mkdir()
    data_dir = guarded / "postgres"
    with EmbeddedPostgres(data_dir) as server:
        assert answers(server.url)
        guarded.chmod(0o700)
    assert not (data_dir / "pgdata" / "postmaster.pid").exists()


@pytest.mark.slow
def test_embedded_postgres_connects_as_superuser_postgres_over_tcp(cluster_dir: Path) -> None:
    with EmbeddedPostgres(cluster_dir) as server:
        assert server.url == f"postgresql://postgres@127.0.0.1:{server.port}/postgres"
        with psycopg.connect(server.url) as conn:
            row = conn.execute(
                "SELECT current_user, current_database(), rolsuper,"
                " inet_server_addr()::text, current_setting('server_encoding')"
                " FROM pg_roles WHERE rolname = current_user"
            ).fetchone()
        assert row == ("postgres", "postgres", True, "127.0.0.1/32", "UTF8")


@pytest.mark.slow
def test_second_handle_on_a_running_cluster_dir_shares_the_server(cluster_dir: Path) -> None:
    with EmbeddedPostgres(cluster_dir) as first:
        with EmbeddedPostgres(cluster_dir) as second:
            assert second.reused
            assert (second.url, second.pid) == (first.url, first.pid)
        url = first.url
        assert answers(url)
    assert not answers(url)


@pytest.mark.slow
def test_last_handle_to_leave_stops_the_shared_server(cluster_dir: Path) -> None:
    with ExitStack() as first_stack, ExitStack() as second_stack:
        url = first_stack.enter_context(EmbeddedPostgres(cluster_dir)).url
        second_stack.enter_context(EmbeddedPostgres(cluster_dir))
        first_stack.close()
        assert answers(url)
        second_stack.close()
        assert not answers(url)


@pytest.mark.slow
def test_server_left_by_a_killed_process_is_shared_then_stopped(cluster_dir: Path) -> None:
    # The child starts a server and dies without leaving, as `kill -9` of `make run` would.
    subprocess.run(
        [
            sys.executable,
            "-c",
            "import os, sys; from pathlib import Path;"
            " from service.embedded import EmbeddedPostgres;"
            " EmbeddedPostgres(Path(sys.argv[1])).__enter__(); os._exit(0)",
            str(cluster_dir),
        ],
        check=True,
        timeout=60,
    )
    with EmbeddedPostgres(cluster_dir) as server:
        assert server.reused
        url = server.url
    assert not answers(url)


@pytest.mark.slow
def test_postmaster_pid_left_by_a_crash_does_not_stop_a_restart(cluster_dir: Path) -> None:
    with EmbeddedPostgres(cluster_dir):
        pass
    # A crash leaves postmaster.pid behind, and its pid may since belong to anyone: here, us.
    (cluster_dir / "pgdata" / "postmaster.pid").write_text(
        f"{os.getpid()}\n{cluster_dir / 'pgdata'}\n1000000000\n5432\n\n127.0.0.1\n0 0\nready\n"
    )
    with EmbeddedPostgres(cluster_dir) as server:
        assert not server.reused
        assert answers(server.url)


def test_postgres_that_cannot_listen_fails_naming_its_log(cluster_dir: Path) -> None:
    with socket.socket() as occupant:
        occupant.bind(("127.0.0.1", 0))
        occupant.listen()
        port = occupant.getsockname()[1]
        server = EmbeddedPostgres(cluster_dir, port=port)
        with pytest.raises(EmbeddedServerError, match="Address already in use") as failure:
            server.__enter__()
    assert failure.value.log_path == cluster_dir / "postgresql.log"
    assert str(failure.value.log_path) in str(failure.value)


def test_missing_postgres_binaries_are_a_clear_error(tmp_path: Path) -> None:
    server = EmbeddedPostgres(tmp_path / "postgres", bin_dir=tmp_path / "no-such-bin")
    with pytest.raises(ServerBinaryNotFoundError, match="initdb is not at"):
        server.__enter__()


def test_embedded_redis_answers_ping_set_and_get(tmp_path: Path) -> None:
    with EmbeddedRedis(tmp_path / "redis") as server:
        port = server.port
        assert server.url == f"redis://127.0.0.1:{port}/0"
        client = redis.Redis.from_url(server.url)
        try:
            assert client.ping()
            client.set("shoe", "S1")
            assert client.get("shoe") == b"S1"
        finally:
            client.close()
    assert not redis_answers(port)


def test_second_redis_handle_shares_the_running_server(tmp_path: Path) -> None:
    with (
        EmbeddedRedis(tmp_path / "redis") as first,
        EmbeddedRedis(tmp_path / "redis") as second,
    ):
        assert second.reused
        assert second.url == first.url


def test_redis_that_cannot_listen_fails_naming_its_log(tmp_path: Path) -> None:
    with socket.socket() as occupant:
        occupant.bind(("127.0.0.1", 0))
        occupant.listen()
        port = occupant.getsockname()[1]
        server = EmbeddedRedis(tmp_path / "redis", port=port)
        with pytest.raises(EmbeddedServerError, match="could not listen") as failure:
            server.__enter__()
    assert not isinstance(failure.value, ServerStartTimeoutError)
    assert str(tmp_path / "redis" / "redis.log") in str(failure.value)


def test_redis_that_never_answers_times_out_naming_its_log(tmp_path: Path) -> None:
    silent = tmp_path / "redis-server"
    silent.write_text("#!/bin/sh\nexit 0\n")
    silent.chmod(0o755)
    server = EmbeddedRedis(tmp_path / "redis", server_binary=silent, start_timeout=0.2)
    with pytest.raises(ServerStartTimeoutError, match="did not answer PING") as failure:
        server.__enter__()
    assert failure.value.log_path == tmp_path / "redis" / "redis.log"
    assert str(failure.value.log_path) in str(failure.value)


def test_database_url_is_the_environments_when_set(tmp_path: Path) -> None:
    settings = Settings.from_env(
        {"DATABASE_URL": "postgresql://app@db.example/shoebox", "SHOEBOX_DATA_DIR": str(tmp_path)}
    )
    with embedded.database_url(settings) as url:
        assert url == "postgresql://app@db.example/shoebox"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_database_url_starts_an_embedded_server_in_the_data_dir_when_unset(
    cluster_dir: Path,
) -> None:
    settings = Settings.from_env({"DATABASE_URL": "", "SHOEBOX_DATA_DIR": str(cluster_dir.parent)})
    with embedded.database_url(settings) as url:
        assert answers(url)
    assert not answers(url)


def test_redis_url_is_the_environments_when_set(tmp_path: Path) -> None:
    settings = Settings.from_env(
        {"REDIS_URL": "redis://cache.example:6379/2", "SHOEBOX_DATA_DIR": str(tmp_path)}
    )
    with embedded.redis_url(settings) as url:
        assert url == "redis://cache.example:6379/2"
    assert list(tmp_path.iterdir()) == []


def test_redis_url_starts_an_embedded_server_in_the_data_dir_when_unset(tmp_path: Path) -> None:
    settings = Settings.from_env({"SHOEBOX_DATA_DIR": str(tmp_path)})
    with embedded.redis_url(settings) as url:
        client = redis.Redis.from_url(url)
        try:
            assert client.ping()
        finally:
            client.close()
        assert (tmp_path / "redis" / "redis.log").is_file()


def test_settings_default_to_embedded_servers_under_dot_shoebox() -> None:
    settings = Settings.from_env({})
    assert settings == Settings(
        database_url=None,
        redis_url=None,
        data_dir=Path(".shoebox"),
        app_database_url=None,
        embedded_postgres_port=None,
        embedded_redis_port=None,
        api_host="127.0.0.1",
        api_port=8000,
    )


def test_settings_read_every_variable() -> None:
    settings = Settings.from_env(
        {
            "DATABASE_URL": "postgresql://owner@db/shoebox",
            "REDIS_URL": "redis://cache:6379/0",
            "SHOEBOX_DATA_DIR": "/var/lib/shoebox",
            "SHOEBOX_APP_DATABASE_URL": "postgresql://app@db/shoebox",
            "SHOEBOX_POSTGRES_PORT": "5433",
            "SHOEBOX_REDIS_PORT": "6380",
            "SHOEBOX_API_HOST": "0.0.0.0",
            "SHOEBOX_API_PORT": "9000",
        }
    )
    assert settings == Settings(
        database_url="postgresql://owner@db/shoebox",
        redis_url="redis://cache:6379/0",
        data_dir=Path("/var/lib/shoebox"),
        app_database_url="postgresql://app@db/shoebox",
        embedded_postgres_port=5433,
        embedded_redis_port=6380,
        api_host="0.0.0.0",
        api_port=9000,
    )


@pytest.mark.parametrize("value", ["http", "0", "65536", "-1", "80.5"])
def test_settings_refuse_a_port_that_is_not_a_tcp_port(value: str) -> None:
    with pytest.raises(SettingsError, match="SHOEBOX_API_PORT"):
        Settings.from_env({"SHOEBOX_API_PORT": value})


def test_settings_read_the_process_environment_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHOEBOX_DATA_DIR", "/srv/shoebox")
    assert Settings.from_env().data_dir == Path("/srv/shoebox")
