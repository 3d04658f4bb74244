"""A real server killed with SIGKILL in the middle of a deal, and the round recovered after.

The deal request is held just before its append by the test-only failpoint of
service/recovery.py (armed by two environment variables, one of them a consent sentence), so
the kill lands exactly mid-deal: every player has acted, the coup is decided, nothing is
written. After the kill the round is due but undealt; the restarted server's start-up
recovery (`service.application.game.recovery.recover`, also `shoebox recover` and the
worker's periodic job)
deals it from the committed shoe before taking requests.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from service.cli import main
from service.runtime.failpoints import (
    CONSENT,
    FAILPOINT,
    FAILPOINT_CONSENT,
    FAILPOINT_MARKER,
    PAUSE_BEFORE_DEAL_APPEND,
)
from tests.ports import listening_socket, port_of

SHOEBOX = Path(sys.executable).with_name("shoebox")
START_TIMEOUT_SECONDS = 90.0  # starting at all, on a loaded machine: not a speed bound


def call(base: str, method: str, path: str, secret: str, body: object = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"{base}{path}", data=data, method=method)
    request.add_header("Authorization", f"Bearer {secret}")
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as error:
        raise AssertionError(f"{method} {path}: {error.code} {error.read()!r}") from None


@contextmanager
def serving(
    database_url: str, extra: dict[str, str]
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    environment = {**os.environ, "DATABASE_URL": database_url, **extra}
    environment.pop("SHOEBOX_APP_DATABASE_URL", None)
    # The server accepts on our socket, which we close once it holds its own copy.
    with listening_socket() as listener:
        base = f"http://127.0.0.1:{port_of(listener)}"
        process = subprocess.Popen(
            [str(SHOEBOX), "serve", "--bind", f"fd://{listener.fileno()}", "--workers", "1"],
            env=environment,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            pass_fds=(listener.fileno(),),
            start_new_session=True,  # its own process group: SIGKILL reaches gunicorn's workers
        )
    try:
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while True:
            assert process.poll() is None, "shoebox serve exited"
            try:
                urllib.request.urlopen(f"{base}/v1/ping", timeout=2)
            except urllib.error.HTTPError:
                break  # 401: it answers
            except (ConnectionError, TimeoutError, urllib.error.URLError):
                # Refused, or queued on our listening socket past the timeout while it starts.
                assert time.monotonic() < deadline, "shoebox serve did not start listening"
                time.sleep(0.1)
        yield base, process
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)


def key(database_url: str, role: str) -> str:
    created = CliRunner().invoke(
        main,
        ["keys", "create", "--role", role, "--name", f"e2e-{role}"],
        env={"DATABASE_URL": database_url},
    )
    assert created.exit_code == 0, created.output
    return str(created.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_a_server_killed_mid_deal_leaves_a_round_that_recovery_completes(
    database_url: str, tmp_path: Path
) -> None:
    table = f"K{secrets.token_hex(4)}"
    alice, bob = f"a{secrets.token_hex(4)}", f"b{secrets.token_hex(4)}"
    marker = tmp_path / "paused"
    armed = {
        FAILPOINT: PAUSE_BEFORE_DEAL_APPEND,
        FAILPOINT_CONSENT: CONSENT,
        FAILPOINT_MARKER: str(marker),
    }

    with serving(database_url, armed) as (base, process):
        # Created once `serve` has migrated the database; the server learns keys on a miss.
        ops, frontend, regulator = (
            key(database_url, role) for role in ("ops", "frontend", "regulator")
        )
        limits = {"minimum_pence": 100, "maximum_pence": 250_000, "betting_window_ms": 1000}
        call(base, "POST", "/v1/tables", ops, {"table_id": table, "seats": 7, "decks": 8, **limits})
        for seat, player in enumerate((alice, bob), start=1):
            deposit = {"amount_pence": 10_000, "reason": "e2e float"}
            call(base, "POST", f"/v1/wallets/{player}/deposits", ops, deposit)
            seating = {"player_id": player, "seat": seat}
            call(base, "POST", f"/v1/tables/{table}/seats", frontend, seating)
        for player in (alice, bob):
            bet = {"player_id": player, "spot": "banker", "stake_pence": 1_000}
            call(base, "POST", f"/v1/tables/{table}/bets", frontend, bet)
        # Alice presses Deal; Bob never acts, so the coup is dealt when the window lapses, by
        # whatever next writes to the table: here Bob's chat message, held at the failpoint.
        call(base, "POST", f"/v1/tables/{table}/deal", frontend, {"player_id": alice})
        time.sleep(1.2)
        message = {"player_id": bob, "text": "anyone?"}
        reader = threading.Thread(
            target=_swallow,
            args=(lambda: call(base, "POST", f"/v1/tables/{table}/chat", frontend, message),),
            daemon=True,
        )
        reader.start()
        deadline = time.monotonic() + 10
        while not marker.exists():
            assert time.monotonic() < deadline, "the deal never reached the failpoint"
            time.sleep(0.05)
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)

    # Restarting is all it takes: `shoebox serve` recovers interrupted rounds before it
    # takes a request (the actor below tells that recovery dealt it, not a lazy catch-up).
    with serving(database_url, {}) as (base, _):
        replay = call(base, "GET", f"/v1/rounds/{table}-1/replay", regulator)
    assert replay["status"] == "complete"
    settled = next(e for e in replay["events"] if e["type"] == "BetSettled")
    assert settled["metadata"]["actor"] == "recovery"
    assert settled["payload"]["player_id"] == alice
    # Balances as the wallet streams give them (the wallet endpoint reads a projection, which
    # no projector updates in this test).
    after = {wallet["player_id"]: wallet["after"] for wallet in replay["wallets"]}
    payout = settled["payload"]["payout"]
    assert after[alice] == {"available": 10_000 - 1_000 + payout, "reserved": 0}
    assert after[bob] == {"available": 10_000, "reserved": 0}  # excluded at the lapse
    audit = CliRunner().invoke(main, ["audit", "verify"], env={"DATABASE_URL": database_url})
    assert audit.exit_code == 0, audit.output


def _swallow(request: Callable[[], object]) -> None:
    try:
        request()
    except Exception:
        return
