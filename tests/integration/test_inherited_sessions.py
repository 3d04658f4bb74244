"""A forked child cannot use, close or keep alive its parent's PostgreSQL sessions.

`shoebox worker` runs rq, which forks its scheduler. The child inherited the worker's pool
sockets and outlived a killed worker: the server saw no disconnect, so a session idle in a
transaction kept the `open_rounds` checkpoint row locked and every other worker's sweeper
hung. events/postgres.py cuts the inherited sockets off in children, service/runtime/rq_worker.py
has rq's children die with their parent, and events/subscription.py bounds the wait for a
checkpoint's lock.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import psycopg
import pytest
from psycopg import Connection
from psycopg.rows import TupleRow

from events import subscription
from events.postgres import Pool, PostgresEventStore, app_conninfo
from events.store import EventMetadata, NewEvent, RecordedEvent, StreamAppend
from events.subscription import CatchUpSubscription

DEALER = EventMetadata(actor="dealer-7", role="dealer")
ROOT = Path(__file__).resolve().parents[2]
# A bound on waiting for the server or the kernel to notice a death: generous, since a slow
# machine only makes the test wait longer, never pass wrongly.
NOTICE_WITHIN = 20.0


def wait_until(condition: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def test_a_forked_child_can_neither_use_nor_close_its_parents_session(app_pool: Pool) -> None:
    with app_pool.connection() as conn:
        conn.execute("BEGIN")
        parent_pid = conn.execute("SELECT pg_backend_pid()").fetchone()
        reader, writer = os.pipe()
        child = os.fork()
        if child == 0:  # pragma: no cover - the child reports through the pipe
            os.close(reader)
            try:
                row = conn.execute("SELECT pg_backend_pid()").fetchone()
                verdict = f"used {row}"
            except psycopg.Error as error:
                verdict = f"refused {type(error).__name__}"
            # Closing sends Terminate on a socket still the parent's: it must reach no server.
            conn.close()
            os.write(writer, verdict.encode())
            os._exit(0)
        os.close(writer)
        _, status = os.waitpid(child, 0)
        with os.fdopen(reader) as pipe:
            verdict = pipe.read()
        assert os.WIFEXITED(status)
        assert verdict.startswith("refused"), verdict
        # The parent's session, mid-transaction, is untouched.
        assert conn.execute("SELECT pg_backend_pid()").fetchone() == parent_pid
        conn.execute("COMMIT")


_HOLDER = """
import os, sys, time
from events.postgres import open_pool
pool = open_pool(sys.argv[1], max_size=1)
conn = pool.getconn()
conn.execute("BEGIN")
conn.execute("SELECT pg_advisory_xact_lock(2626)")
backend = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
child = os.fork()
if child == 0:
    time.sleep(120)
    os._exit(0)
print(backend, child, flush=True)
time.sleep(120)
"""


def _session_alive(admin_url: str, backend: int) -> bool:
    with psycopg.connect(admin_url, autocommit=True) as conn:
        row = conn.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", [backend]).fetchone()
    return row is not None


def _process_gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return True
    return state in {"Z", "X"}


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def test_a_killed_parents_session_ends_though_its_forked_child_lives_on(
    fresh_database: str,
) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(_HOLDER), app_conninfo(fresh_database, environ={})],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    child = 0
    try:
        assert holder.stdout is not None
        backend, child = (int(word) for word in holder.stdout.readline().split())
        assert _session_alive(fresh_database, backend)
        holder.send_signal(signal.SIGKILL)
        holder.wait()
        assert not _process_gone(child), "the child should outlive its parent here"
        # Were the child still holding the socket, the server would see no disconnect and the
        # session, with its lock, would live as long as the child.
        assert wait_until(lambda: not _session_alive(fresh_database, backend), NOTICE_WITHIN)
        with psycopg.connect(fresh_database, autocommit=True) as conn:
            got = conn.execute("SELECT pg_try_advisory_lock(2626)").fetchone()
        assert got == (True,)
    finally:
        _kill(holder.pid)
        holder.wait()
        if holder.stdout is not None:
            holder.stdout.close()
        if child:
            _kill(child)


_FORKER = """
import os, sys, time
from service.runtime.rq_worker import die_with_parent_in_children
die_with_parent_in_children()
child = os.fork()
if child == 0:
    time.sleep(120)
    os._exit(0)
print(child, flush=True)
time.sleep(120)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_the_workers_forked_children_die_with_it() -> None:
    worker = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(_FORKER)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    child = 0
    try:
        assert worker.stdout is not None
        child = int(worker.stdout.readline())
        assert not _process_gone(child)
        worker.send_signal(signal.SIGKILL)
        worker.wait()
        assert wait_until(lambda: _process_gone(child), NOTICE_WITHIN)
    finally:
        _kill(worker.pid)
        worker.wait()
        if worker.stdout is not None:
            worker.stdout.close()
        if child:
            _kill(child)


def test_a_subscription_gives_up_a_held_checkpoint_lock_and_takes_it_once_free(
    app_pool: Pool, fresh_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(subscription, "CHECKPOINT_LOCK_WAIT", "100ms")
    store = PostgresEventStore(app_pool)
    store.append([StreamAppend("wallet:1", 0, [NewEvent("StakeReserved", {"amount": 5})])], DEALER)
    seen: list[str] = []

    def handler(conn: Connection[TupleRow], events: Sequence[RecordedEvent]) -> None:
        # The bound was for the checkpoint's lock alone: the handler's session has its own.
        row = conn.execute("SHOW lock_timeout").fetchone()
        assert row is not None
        seen.append(str(row[0]))

    follower = CatchUpSubscription(app_pool, "held", handler, listen=False)
    assert follower.checkpoint() == 0
    follower.process_batch()  # creates the row
    store.append([StreamAppend("wallet:2", 0, [NewEvent("StakeReserved", {"amount": 6})])], DEALER)
    with psycopg.connect(fresh_database) as holder:
        holder.execute("SELECT 1 FROM checkpoints WHERE subscription = 'held' FOR UPDATE")
        with pytest.raises(psycopg.errors.LockNotAvailable):
            follower.process_batch()
    outcome = follower.process_batch()
    assert outcome.advanced
    assert seen == ["0", "0"]
