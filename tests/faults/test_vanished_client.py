"""A client whose host vanishes has its session, and the advisory lock it holds, freed in 10 s.

A lost host sends nothing: no FIN, no RST. Without TCP keepalives PostgreSQL keeps such a
session, and the advisory lock that makes its process the active sequencer or signer, for
Linux's default of two hours. The embedded server is started with SERVER_KEEPALIVES and every
client connects with KEEPALIVES (issue 26).

The client runs in a network namespace of its own, joined to the test's by a veth pair; a
private PostgreSQL listens on the pair's host end too. The client takes an advisory lock; then
its end of the link goes down (packets to it are dropped unanswered) and the client is killed
behind it, so nothing of its death reaches the server. The lock must be free again within
10 s; the time measured is printed.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from events.postgres import app_conninfo
from tests.faults.private_servers import PrivatePostgres, private_postgres

ROOT = Path(__file__).resolve().parents[2]
LOCK_KEY = 2626
REQUIRED_SECONDS = 10.0
# The requirement, with a margin for a loaded machine: the test fails only on a server that
# keeps the session far longer (two hours without keepalives).
WAIT_AT_MOST_SECONDS = REQUIRED_SECONDS + 5.0

_CLIENT = """
import sys, time, psycopg
from events.postgres import connect_kwargs
url = sys.argv[1]
conn = psycopg.connect(url, autocommit=True, **connect_kwargs(url))
conn.execute("SELECT pg_advisory_lock(%s)", [int(sys.argv[2])])
print(conn.execute("SELECT pg_backend_pid()").fetchone()[0], flush=True)
time.sleep(600)
"""


def _run(*command: str) -> None:
    subprocess.run(command, check=True, capture_output=True, text=True)


class Namespace:
    """A network namespace joined to ours by a veth pair on a /30 of its own."""

    def __init__(self) -> None:
        tag = secrets.token_hex(3)
        self.name = f"shoebox-{tag}"
        self.host_link, self.inner_link = f"sbh{tag}", f"sbi{tag}"
        third = int(tag[:2], 16)
        fourth = int(tag[2:4], 16) & 0xFC
        self.host_address = f"10.226.{third}.{fourth + 1}"
        self.inner_address = f"10.226.{third}.{fourth + 2}"

    def create(self) -> None:
        _run("ip", "netns", "add", self.name)
        _run("ip", "link", "add", self.host_link, "type", "veth", "peer", "name", self.inner_link)
        _run("ip", "link", "set", self.inner_link, "netns", self.name)
        _run("ip", "addr", "add", f"{self.host_address}/30", "dev", self.host_link)
        _run("ip", "link", "set", self.host_link, "up")
        self.inside("ip", "addr", "add", f"{self.inner_address}/30", "dev", self.inner_link)
        self.inside("ip", "link", "set", self.inner_link, "up")
        self.inside("ip", "link", "set", "lo", "up")

    def inside(self, *command: str) -> None:
        _run("ip", "netns", "exec", self.name, *command)

    def vanish(self) -> None:
        """The namespace's end of the link goes down: the host end's packets go unanswered."""
        self.inside("ip", "link", "set", self.inner_link, "down")

    def delete(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):
            _run("ip", "link", "del", self.host_link)
        with contextlib.suppress(subprocess.CalledProcessError):
            _run("ip", "netns", "del", self.name)


@pytest.fixture
def namespace() -> Iterator[Namespace]:
    if os.geteuid() != 0:
        pytest.skip("a network namespace and a veth pair need root")
    if shutil.which("ip") is None or shutil.which("unshare") is None:
        pytest.skip("iproute2's `ip` (and util-linux) are needed for a network namespace")
    space = Namespace()
    try:
        space.create()
    except subprocess.CalledProcessError as error:
        space.delete()
        pytest.skip(f"cannot make a network namespace here: {error.stderr.strip()}")
    try:
        yield space
    finally:
        space.delete()


def _listen_on(postgres: PrivatePostgres, space: Namespace) -> str:
    """Have the private server listen on the veth's host end too; the client's URL there."""
    with psycopg.connect(postgres.server_url, autocommit=True) as conn:
        conn.execute(f"ALTER SYSTEM SET listen_addresses = '127.0.0.1,{space.host_address}'")
        row = conn.execute("SHOW hba_file").fetchone()
        assert row is not None
        hba_file = Path(str(row[0]))
    with hba_file.open("a") as hba:
        hba.write(f"host all all {space.inner_address}/32 trust\n")
    postgres.stop()
    postgres.start()
    owner = postgres.url.replace("127.0.0.1", space.host_address)
    return app_conninfo(owner, environ={})


def _lock_held(admin_url: str, backend: int) -> bool:
    with psycopg.connect(admin_url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND objid = %s AND pid = %s",
            [LOCK_KEY, backend],
        ).fetchone()
    return row is not None


@pytest.mark.slow
def test_a_vanished_clients_advisory_lock_is_released_within_ten_seconds(
    namespace: Namespace, tmp_path: Path
) -> None:
    with private_postgres(tmp_path / "postgres") as postgres:
        client_url = _listen_on(postgres, namespace)
        client = subprocess.Popen(
            [
                "ip",
                "netns",
                "exec",
                namespace.name,
                sys.executable,
                "-c",
                textwrap.dedent(_CLIENT),
                client_url,
                str(LOCK_KEY),
            ],
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        try:
            assert client.stdout is not None
            backend = int(client.stdout.readline())
            assert _lock_held(postgres.url, backend)
            namespace.vanish()
            vanished = time.monotonic()
            # Killed behind a dead link: its FIN never reaches the server.
            client.kill()
            client.wait()
            released = None
            while time.monotonic() - vanished < WAIT_AT_MOST_SECONDS:
                if not _lock_held(postgres.url, backend):
                    released = time.monotonic() - vanished
                    break
                time.sleep(0.1)
            if released is None:
                pytest.fail(f"the lock was still held {WAIT_AT_MOST_SECONDS:g} s after")
            print(f"\nvanished client's advisory lock released after {released:.1f} s")
            assert released <= WAIT_AT_MOST_SECONDS
            with psycopg.connect(postgres.url, autocommit=True) as conn:
                assert conn.execute("SELECT pg_try_advisory_lock(%s)", [LOCK_KEY]).fetchone() == (
                    True,
                )
        finally:
            client.kill()
            client.wait()
            if client.stdout is not None:
                client.stdout.close()
