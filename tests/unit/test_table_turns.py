"""Per process, the commands at one table take turns; other tables do not wait for them."""

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from service.application.game.turns import TableTurns, TurnNotReached

ROOT = Path(__file__).resolve().parents[2]


def test_a_second_command_at_a_table_waits_for_the_first_and_other_tables_do_not() -> None:
    turns = TableTurns()
    holding, let_go = threading.Event(), threading.Event()

    def first() -> None:
        with turns.turn("T1", timeout=5):
            holding.set()
            let_go.wait(5)

    thread = threading.Thread(target=first)
    thread.start()
    assert holding.wait(5)
    with turns.turn("T2", timeout=0.01):
        pass  # another table's turn is free
    with pytest.raises(TurnNotReached), turns.turn("T1", timeout=0.05):
        pass
    threading.Timer(0.1, let_go.set).start()
    started = time.monotonic()
    with turns.turn("T1", timeout=5):
        assert time.monotonic() - started >= 0.05
    thread.join()
    assert len(turns) == 0  # nothing kept of tables nobody is playing


def test_turns_made_before_gevent_patched_threading_still_let_other_greenlets_run() -> None:
    """The turn is held across the append's I/O: under gevent it must be gevent's lock, or the
    greenlet waiting for it would block the worker's one thread, and the holder with it."""
    script = """
from service.application.game.turns import TableTurns
turns = TableTurns()  # made at import time, before the worker patches threading
from gevent import monkey
monkey.patch_all()
import gevent
order = []
def command(n):
    with turns.turn("T1", timeout=5):
        order.append(n)
        gevent.sleep(0.02)  # the append's wait for PostgreSQL
        order.append(n)
finished = gevent.joinall([gevent.spawn(command, n) for n in range(3)], timeout=5)
print(len(finished), order)
"""
    result = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", script],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert result.stdout.split("\n")[0] == "3 [0, 0, 1, 1, 2, 2]", result.stdout + result.stderr
