"""One cut of issue 23 against the code it replaced: a keyed bet's CPU, old and new alternating.

    python bench/bet_ab.py CUT [--blocks 20] [--bets 25]

The app is built in this process (Flask test client, as bench/bet_time.py plays it) on a
throwaway database with one table of three funded, seated players. Rounds of five keyed bets
and three Deals are played in blocks; before each block the cut's old or new code is put in
place, in turn, and each bet's CPU (`time.process_time`) and wall time is kept. The old code is
the replaced function itself, kept here, so that both run on the same process, database and
machine minute. Medians and the ratio old/new are printed. CUT is one of CUTS below.
"""

from __future__ import annotations

import argparse
import logging
import os
import secrets
import statistics
import sys
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

_ROOT = Path(__file__).resolve().parent.parent
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

from bench.api import (  # noqa: E402
    ROUND_BETS,
    issue_keys,
    player_ids,
    serving,
    set_up_tables,
)
from bench.common import server_url, throwaway_database  # noqa: E402
from events.migrations import apply_migrations  # noqa: E402


def _answer_cut(old: bool, app: Any) -> None:
    """The answer of a table command: marshmallow's dump and jsonify, or orjson once."""
    from flask import Response, jsonify

    from service.web import idempotency
    from service.web.table_actions import TableAction, TableActionSchema, action_json

    if old:
        schema = TableActionSchema()  # one instance, as bets.py's _ACTION was

        def written(action: TableAction, status: int) -> Response:
            response = jsonify(schema.dump(action))
            response.status_code = status
            return response
    else:

        def written(action: TableAction, status: int) -> Response:
            return Response(action_json(action), status=status, mimetype="application/json")

    idempotency._written = written


def _ensure_sync_cut(old: bool, app: Any) -> None:
    """Flask's ensure_sync asked on every call, or remembered per function (service/web/app.py)."""
    from flask import Flask

    if old:
        app.ensure_sync = types.MethodType(Flask.ensure_sync, app)
    else:
        vars(app).pop("ensure_sync", None)


def _log_fields_cut(old: bool, app: Any) -> None:
    """LogRecords filling in their thread and process names, or not (service/runtime/logs.py)."""
    import logging

    logging.logThreads = old
    logging.logMultiprocessing = old


def _metric_children_cut(old: bool, app: Any) -> None:
    """`labels()` on every request and event, or each labelled child kept (metrics.py)."""
    from service.runtime import metrics

    if old:
        metrics._DURATIONS.clear()
        metrics._APPENDED.clear()
        metrics.request_duration = _OLD_REQUEST_DURATION
    else:
        metrics.request_duration = _NEW_REQUEST_DURATION


def _old_request_duration(route: str, method: str, status: int) -> Any:
    from service.runtime import metrics

    metrics._DURATIONS.clear()  # as if there were no cache: a fresh labels() every time
    metrics._APPENDED.clear()
    return metrics.HTTP_REQUEST_DURATION.labels(route, method, str(status))


_OLD_REQUEST_DURATION: Final = _old_request_duration
_NEW_REQUEST_DURATION: Any = None


def _fingerprint_cut(old: bool, app: Any) -> None:
    """The idempotency fingerprint's body read by json.loads, or by orjson where it agrees."""
    import json

    from service.web import idempotency

    setattr(idempotency, "_parsed", json.loads if old else _NEW_PARSED)  # noqa: B010


_NEW_PARSED: Any = None


def _answer_reuse_cut(old: bool, app: Any) -> None:
    """A keyed command's answer rebuilt from its stored form, or the one built returned."""
    from service.web.resources import bets

    setattr(bets, "answer_command", _old_answer_command if old else _NEW_ANSWER_COMMAND)  # noqa: B010


_NEW_ANSWER_COMMAND: Any = None


def _old_answer_command(status: int, schema: Any, command: Any, render: Any) -> Any:
    """answer_command as it was before the answer built was returned as is."""
    from dataclasses import replace

    from flask import g, jsonify

    from service.web.api import actor
    from service.web.idempotency import (
        _replay,
        _stored_form,
        _stored_response,
        _view_answers_in_append,
        _written,
    )
    from service.web.operators import name_players
    from service.web.table_actions import TableAction

    caller = actor()
    if caller.idempotency is None or not _view_answers_in_append():
        answer = render(command(caller))
        if isinstance(answer, TableAction):
            return _written(answer, status)
        return answer

    def respond(outcome: Any) -> Any:
        answer = render(outcome)
        if isinstance(answer, TableAction):
            response = _written(answer, status)
        else:
            response = jsonify(schema.dump(answer))
            response.status_code = status
        return _stored_form(name_players(response))

    receipt = command(replace(caller, respond=respond))
    if receipt.response is None:
        return render(receipt)
    g.idempotency_answered = True
    if receipt.replayed:
        g.idempotency_replayed = True
        return _replay(receipt.response)
    return _stored_response(receipt.response)


def _hooks_cut(old: bool, app: Any) -> None:
    """Every before- and after-request hook called by Flask, or one merged hook each (app.py)."""
    global _MERGED
    if _MERGED is None:
        _MERGED = (app.before_request_funcs[None], app.after_request_funcs[None])
    before, after = _MERGED
    if old:
        app.before_request_funcs[None] = list(before[0].hooks)
        app.after_request_funcs[None] = list(reversed(after[0].hooks))
    else:
        app.before_request_funcs[None], app.after_request_funcs[None] = before, after


_MERGED: Any = None


def _web3_cut(old: bool, app: Any) -> None:
    """Every cut of the web tier's 7 December pass at once (docs/benchmarks.md)."""
    for cut in (
        _log_fields_cut,
        _metric_children_cut,
        _fingerprint_cut,
        _answer_reuse_cut,
        _hooks_cut,
    ):
        cut(old, app)


CUTS: Final[dict[str, Callable[[bool, Any], None]]] = {
    "answer": _answer_cut,
    "ensure_sync": _ensure_sync_cut,
    "log_fields": _log_fields_cut,
    "metric_children": _metric_children_cut,
    "fingerprint": _fingerprint_cut,
    "answer_reuse": _answer_reuse_cut,
    "hooks": _hooks_cut,
    "web3": _web3_cut,
}


def _remember_new_code() -> None:
    """The new functions, taken before any cut replaces them."""
    global _NEW_REQUEST_DURATION, _NEW_PARSED, _NEW_ANSWER_COMMAND
    from service.runtime import metrics
    from service.web import idempotency

    _NEW_REQUEST_DURATION = metrics.request_duration
    _NEW_PARSED = idempotency._parsed
    _NEW_ANSWER_COMMAND = idempotency.answer_command


def main(argv: list[str] | None = None) -> None:
    """Alternate the cut's old and new code over blocks of rounds and print the medians."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("cut", choices=sorted(CUTS))
    parser.add_argument("--blocks", type=int, default=20, help="blocks of each, alternating")
    parser.add_argument("--rounds", type=int, default=5, help="rounds a block")
    args = parser.parse_args(argv)
    install = CUTS[args.cut]

    from service.runtime.logs import configure_logging
    from service.runtime.settings import Settings
    from service.web.app import create_app

    cpu: dict[bool, list[float]] = {True: [], False: []}
    wall: dict[bool, list[float]] = {True: [], False: []}
    with throwaway_database(server_url(), prefix="bench_ab") as database_url:
        apply_migrations(database_url)
        keys = issue_keys(database_url)
        with serving(database_url, 1, 1) as port:
            table_id = set_up_tables(port, keys, 1, secrets.token_hex(3))[0]
        # The request's log line written, as `shoebox serve` writes it (to /dev/null here).
        configure_logging("api")
        handler = logging.getLogger().handlers[0]
        assert isinstance(handler, logging.StreamHandler)
        handler.setStream(open(os.devnull, "w"))  # noqa: SIM115
        app = create_app(Settings(database_url=database_url, rate_limit_per_second=0), pool_size=2)
        _remember_new_code()
        client = app.test_client()
        players = player_ids(table_id)
        headers = {"Authorization": f"Bearer {keys.frontend}"}

        def keyed() -> dict[str, str]:
            return {**headers, "Idempotency-Key": secrets.token_hex(12)}

        def play(rounds: int, old: bool | None) -> None:
            for _ in range(rounds):
                for seat, spot, stake in ROUND_BETS:
                    body: dict[str, Any] = {
                        "player_id": players[seat],
                        "spot": spot,
                        "stake_pence": stake,
                    }
                    started, used = time.perf_counter(), time.process_time()
                    answer = client.post(f"/v1/tables/{table_id}/bets", json=body, headers=keyed())
                    if old is not None:
                        cpu[old].append(time.process_time() - used)
                        wall[old].append(time.perf_counter() - started)
                    if answer.status_code != 201:
                        raise RuntimeError(f"bet answered {answer.status_code}")
                for player_id in players:
                    answer = client.post(
                        f"/v1/tables/{table_id}/deal",
                        json={"player_id": player_id},
                        headers=keyed(),
                    )
                    if answer.status_code != 200:
                        raise RuntimeError(f"Deal answered {answer.status_code}")

        play(3, None)  # warm: shoe open, caches filled
        for block in range(args.blocks * 2):
            old = block % 2 == 0 if (block // 2) % 2 == 0 else block % 2 == 1
            install(old, app)
            play(args.rounds, old)

    old_cpu, new_cpu = statistics.median(cpu[True]), statistics.median(cpu[False])
    old_wall, new_wall = statistics.median(wall[True]), statistics.median(wall[False])
    command = "python bench/bet_ab.py " + " ".join(sys.argv[1:] if argv is None else argv)
    print(f"Command: `{command.strip()}`; {len(cpu[True])} bets each, old and new alternating\n")
    print("| code | CPU ms a bet (median) | wall ms a bet (median) |")
    print("|:--|--:|--:|")
    print(f"| old | {old_cpu * 1000:.3f} | {old_wall * 1000:.3f} |")
    print(f"| new | {new_cpu * 1000:.3f} | {new_wall * 1000:.3f} |")
    print(f"| old/new | {old_cpu / new_cpu:.2f}x | {old_wall / new_wall:.2f}x |")


if __name__ == "__main__":
    main()
