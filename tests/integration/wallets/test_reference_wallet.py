"""The reference operator wallet over real HTTP: every call, its rules, signatures and faults."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from psycopg_pool import ConnectionPool

from operator_wallet import WalletServer
from operator_wallet.ledger import Ledger
from operator_wallet.signing import SigningKey, sign
from service.application.seamless import Outcome, bet_call
from service.runtime.seamless_wallet import SeamlessWalletClient

from .conftest import KEYS, SECRET_2, Admin, MovableClock, bet_document, client_config, raw_call


def _win(player_id: str, token: str, bets: list[str], amount: int) -> dict[str, object]:
    document = bet_document(player_id, token, amount)
    document["reference_transaction_uuid"] = bets
    return document


def _rollback(player_id: str, token: str, cancelled: str, amount: int) -> dict[str, object]:
    document = bet_document(player_id, token, amount)
    document["reference_transaction_uuid"] = cancelled
    return document


def test_balance_answers_the_players_balance_for_an_open_session(
    wallet: WalletServer, admin: Admin
) -> None:
    player, token = admin.player(deposit=1234)
    answer = raw_call(
        wallet,
        "balance",
        {
            "request_uuid": str(uuid.uuid4()),
            "player_id": player,
            "session_token": token,
            "currency": "GBP",
            "exponent": 2,
        },
    )
    assert answer.status == 200
    assert answer.body["status"] == "OK"
    assert answer.body["balance"] == 1234
    assert (answer.body["currency"], answer.body["exponent"]) == ("GBP", 2)


def test_a_session_that_is_over_or_unknown_is_refused(
    wallet: WalletServer, admin: Admin, wallet_clock: MovableClock
) -> None:
    player, token = admin.player()
    assert raw_call(wallet, "bet", bet_document(player, "not-a-token")).body["status"] == (
        "SESSION_EXPIRED"
    )
    wallet_clock.offset = timedelta(hours=2)
    answer = raw_call(wallet, "bet", bet_document(player, token), timestamp=None)
    # The signature's timestamp is real time, two hours from the wallet's clock: refused first.
    assert answer.status == 401
    stamp = int((datetime.now(UTC) + timedelta(hours=2)).timestamp())
    answer = raw_call(wallet, "bet", bet_document(player, token), timestamp=stamp)
    assert answer.body["status"] == "SESSION_EXPIRED"
    assert admin.balance(player) == 10_000


def test_a_bet_debits_the_stake_and_answers_the_balance_after(
    wallet: WalletServer, admin: Admin
) -> None:
    player, token = admin.player(deposit=1000)
    answer = raw_call(wallet, "bet", bet_document(player, token, 300))
    assert answer.body["status"] == "OK"
    assert answer.body["balance"] == 700
    assert admin.balance(player) == 700


def test_a_bet_above_the_balance_is_refused_and_moves_nothing(
    wallet: WalletServer, admin: Admin
) -> None:
    player, token = admin.player(deposit=400)
    answer = raw_call(wallet, "bet", bet_document(player, token, 401))
    assert answer.body["status"] == "INSUFFICIENT_FUNDS"
    assert answer.body["balance"] == 400
    assert admin.balance(player) == 400


def test_a_bet_past_the_wager_limit_is_refused(wallet: WalletServer, admin: Admin) -> None:
    player, token = admin.player(deposit=10_000, wager_limit=1000)
    assert raw_call(wallet, "bet", bet_document(player, token, 600)).body["status"] == "OK"
    answer = raw_call(wallet, "bet", bet_document(player, token, 500))
    assert answer.body["status"] == "LIMIT_REACHED"
    assert admin.balance(player) == 9400


def test_a_player_blocked_mid_round_bets_no_more_but_is_paid_the_open_bet(
    wallet: WalletServer, admin: Admin
) -> None:
    player, token = admin.player(deposit=1000)
    bet = bet_document(player, token, 200)
    assert raw_call(wallet, "bet", bet).body["status"] == "OK"
    admin.update(player, blocked=True)
    assert raw_call(wallet, "bet", bet_document(player, token, 100)).body["status"] == (
        "PLAYER_BLOCKED"
    )
    paid = raw_call(wallet, "win", _win(player, token, [bet["transaction_uuid"]], 400))
    assert paid.body["status"] == "OK"
    assert admin.balance(player) == 1200


def test_a_replayed_bet_is_answered_as_before_and_debited_once(
    wallet: WalletServer, admin: Admin
) -> None:
    player, token = admin.player(deposit=1000)
    bet = bet_document(player, token, 250)
    first = raw_call(wallet, "bet", bet)
    again = raw_call(wallet, "bet", bet)
    assert first.body == again.body
    assert admin.balance(player) == 750


def test_a_transaction_id_reused_with_other_fields_is_a_conflict_and_moves_nothing(
    wallet: WalletServer, admin: Admin
) -> None:
    player, token = admin.player(deposit=1000)
    bet = bet_document(player, token, 250)
    raw_call(wallet, "bet", bet)
    answer = raw_call(wallet, "bet", {**bet, "amount": 260, "request_uuid": str(uuid.uuid4())})
    assert answer.body["status"] == "TRANSACTION_CONFLICT"
    assert admin.balance(player) == 750


def test_a_win_credits_its_bets_and_a_lost_bet_is_closed_by_a_win_of_zero(
    wallet: WalletServer, admin: Admin
) -> None:
    player, token = admin.player(deposit=1000)
    first, second = bet_document(player, token, 100), bet_document(player, token, 200)
    raw_call(wallet, "bet", first)
    raw_call(wallet, "bet", second)
    bets = [first["transaction_uuid"], second["transaction_uuid"]]
    assert raw_call(wallet, "win", _win(player, token, bets, 600)).body["balance"] == 1300
    lost = bet_document(player, token, 100)
    raw_call(wallet, "bet", lost)
    zero = raw_call(wallet, "win", _win(player, token, [lost["transaction_uuid"]], 0))
    assert zero.body["status"] == "OK"
    assert admin.balance(player) == 1200


def test_a_bet_is_never_paid_twice_nor_a_bet_unknown_to_the_wallet_paid(
    wallet: WalletServer, admin: Admin
) -> None:
    player, token = admin.player(deposit=1000)
    bet = bet_document(player, token, 100)
    raw_call(wallet, "bet", bet)
    raw_call(wallet, "win", _win(player, token, [bet["transaction_uuid"]], 200))
    twice = raw_call(wallet, "win", _win(player, token, [bet["transaction_uuid"]], 200))
    assert twice.body["status"] == "TRANSACTION_CONFLICT"
    unknown = raw_call(wallet, "win", _win(player, token, [str(uuid.uuid4())], 200))
    assert unknown.body["status"] == "UNKNOWN_TRANSACTION"
    assert admin.balance(player) == 1100


def test_a_rollback_of_a_bet_gives_the_stake_back_once(wallet: WalletServer, admin: Admin) -> None:
    player, token = admin.player(deposit=1000)
    bet = bet_document(player, token, 300)
    raw_call(wallet, "bet", bet)
    rollback = _rollback(player, token, str(bet["transaction_uuid"]), 300)
    assert raw_call(wallet, "rollback", rollback).body["balance"] == 1000
    assert raw_call(wallet, "rollback", rollback).body["balance"] == 1000
    other = _rollback(player, token, str(bet["transaction_uuid"]), 300)
    assert raw_call(wallet, "rollback", other).body["status"] == "OK"
    assert admin.balance(player) == 1000


def test_a_rollback_of_a_win_applies_even_below_zero(wallet: WalletServer, admin: Admin) -> None:
    player, token = admin.player(deposit=100)
    bet = bet_document(player, token, 100)
    raw_call(wallet, "bet", bet)
    win = _win(player, token, [bet["transaction_uuid"]], 900)
    raw_call(wallet, "win", win)
    raw_call(wallet, "bet", bet_document(player, token, 850))  # spent most of the win
    # A void after settlement: the win and the bet are both rolled back.
    taken = raw_call(
        wallet, "rollback", _rollback(player, token, str(win["transaction_uuid"]), 900)
    )
    assert taken.body["status"] == "OK"
    assert taken.body["balance"] == 50 - 900
    back = raw_call(wallet, "rollback", _rollback(player, token, str(bet["transaction_uuid"]), 100))
    assert back.body["balance"] == 50 - 900 + 100


def test_a_rollback_naming_another_amount_is_a_conflict(wallet: WalletServer, admin: Admin) -> None:
    player, token = admin.player(deposit=1000)
    bet = bet_document(player, token, 300)
    raw_call(wallet, "bet", bet)
    wrong = raw_call(wallet, "rollback", _rollback(player, token, str(bet["transaction_uuid"]), 30))
    assert wrong.body["status"] == "TRANSACTION_CONFLICT"
    assert admin.balance(player) == 700


def test_a_rollback_of_an_unknown_transaction_is_done_and_remembered(
    wallet: WalletServer, admin: Admin
) -> None:
    player, token = admin.player(deposit=1000)
    late_bet = bet_document(player, token, 300)
    rollback = _rollback(player, token, str(late_bet["transaction_uuid"]), 300)
    done = raw_call(wallet, "rollback", rollback)
    assert done.body["status"] == "UNKNOWN_TRANSACTION"
    assert raw_call(wallet, "rollback", rollback).body == done.body
    # The bet arrives after its rollback (it was delayed in the network): never applied.
    refused = raw_call(wallet, "bet", late_bet)
    assert refused.body["status"] == "TRANSACTION_ROLLED_BACK"
    assert admin.balance(player) == 1000


def test_a_float_amount_or_an_unknown_field_is_a_bad_request_and_moves_nothing(
    wallet: WalletServer, admin: Admin
) -> None:
    player, token = admin.player(deposit=1000)
    assert raw_call(wallet, "bet", bet_document(player, token, 1.5)).status == 400  # type: ignore[arg-type]
    assert raw_call(wallet, "bet", {**bet_document(player, token), "bonus": 1}).status == 400
    assert raw_call(wallet, "bet", bet_document(player, token, True)).status == 400
    assert admin.balance(player) == 1000


def test_a_currency_or_exponent_other_than_the_players_is_refused(
    wallet: WalletServer, admin: Admin
) -> None:
    player, token = admin.player(deposit=1000, currency="EUR")
    assert raw_call(wallet, "bet", bet_document(player, token)).body["status"] == "WRONG_CURRENCY"
    player, token = admin.player(deposit=1000)
    answer = raw_call(wallet, "bet", bet_document(player, token, exponent=3))
    assert answer.body["status"] == "WRONG_CURRENCY"
    assert admin.balance(player) == 1000


# -- signatures ---------------------------------------------------------------------------


def test_an_unsigned_a_forged_a_stale_or_a_tampered_call_is_refused_unapplied(
    wallet: WalletServer, admin: Admin
) -> None:
    player, token = admin.player(deposit=1000)
    forged = SigningKey("k1", b"not-the-secret-at-all")
    now = int(datetime.now(UTC).timestamp())
    answers = [
        raw_call(wallet, "bet", bet_document(player, token), key=None),
        raw_call(wallet, "bet", bet_document(player, token), key=forged),
        raw_call(wallet, "bet", bet_document(player, token), timestamp=now - 301),
        raw_call(wallet, "bet", bet_document(player, token), key=SigningKey("k9", b"x" * 32)),
        raw_call(
            wallet,
            "bet",
            bet_document(player, token, 900),
            signed_body=json.dumps(bet_document(player, token, 1)).encode(),
        ),
    ]
    assert [(answer.status, answer.body["status"]) for answer in answers] == [
        (401, "BAD_SIGNATURE")
    ] * 5
    assert all("Wallet-Signature" not in answer.headers for answer in answers)
    assert admin.balance(player) == 1000


def test_keys_rotate_and_each_answer_is_signed_with_its_calls_key(
    wallet: WalletServer, admin: Admin
) -> None:
    player, token = admin.player(deposit=1000)
    old = raw_call(wallet, "bet", bet_document(player, token, 100), key=KEYS["k1"])
    new = raw_call(wallet, "bet", bet_document(player, token, 100), key=KEYS["k2"])
    assert old.body["status"] == new.body["status"] == "OK"
    assert old.headers["Wallet-Signature"].startswith("key_id=k1,")
    assert new.headers["Wallet-Signature"].startswith("key_id=k2,")
    assert SECRET_2 not in new.headers["Wallet-Signature"]


# -- faults ---------------------------------------------------------------------------------


def test_a_delay_fault_answers_late_and_applies_the_call(
    wallet: WalletServer, admin: Admin
) -> None:
    player, token = admin.player(deposit=1000)
    admin.fault("delay", "bet", delay_ms=400)
    started = time.monotonic()
    answer = raw_call(wallet, "bet", bet_document(player, token, 100))
    assert time.monotonic() - started >= 0.4
    assert answer.body["status"] == "OK"
    assert admin.balance(player) == 900


def test_a_timeout_fault_hangs_up_without_applying(wallet: WalletServer, admin: Admin) -> None:
    player, token = admin.player(deposit=1000)
    admin.fault("timeout", "bet", delay_ms=100)
    try:
        raw_call(wallet, "bet", bet_document(player, token, 100))
    except OSError as error:  # urllib's RemoteDisconnected is an OSError
        assert "closed" in str(error).lower() or "reset" in str(error).lower()  # noqa: PT017
    else:
        raise AssertionError("the wallet answered a call it was told to time out")
    assert admin.balance(player) == 1000
    assert wallet.faults.fired == [("timeout", "bet")]


def test_a_5xx_fault_answers_the_error_unsigned_without_applying(
    wallet: WalletServer, admin: Admin
) -> None:
    player, token = admin.player(deposit=1000)
    admin.fault("error_5xx", "bet", status=502, times=2)
    answers = [raw_call(wallet, "bet", bet_document(player, token, 100)) for _ in range(3)]
    assert [answer.status for answer in answers] == [502, 502, 200]
    assert "Wallet-Signature" not in answers[0].headers
    assert admin.balance(player) == 900


def test_a_duplicate_fault_applies_once_and_answers_the_replay(
    wallet: WalletServer, admin: Admin
) -> None:
    player, token = admin.player(deposit=1000)
    bet = bet_document(player, token, 100)
    admin.fault("duplicate", "bet")
    doubled = raw_call(wallet, "bet", bet)
    assert doubled.headers.get("Wallet-Replayed") == "true"
    assert doubled.body["status"] == "OK"
    assert raw_call(wallet, "bet", bet).body == doubled.body
    assert admin.balance(player) == 900


def test_a_lost_answer_fault_applies_the_call_and_a_retry_reads_the_same_answer(
    wallet: WalletServer, admin: Admin
) -> None:
    player, token = admin.player(deposit=1000)
    bet = bet_document(player, token, 100)
    admin.fault("lose_answer", "bet")
    try:
        raw_call(wallet, "bet", bet)
    except OSError:
        pass
    else:
        raise AssertionError("the answer was not lost")
    assert admin.balance(player) == 900
    retry = raw_call(wallet, "bet", bet)
    assert retry.body["status"] == "OK"
    assert retry.body["balance"] == 900
    assert admin.balance(player) == 900


def test_a_fault_fires_only_on_the_call_it_names(wallet: WalletServer, admin: Admin) -> None:
    player, token = admin.player(deposit=1000)
    admin.fault("error_5xx", "win")
    assert raw_call(wallet, "bet", bet_document(player, token, 100)).status == 200
    assert wallet.faults.pending() == [
        {"action": "error_5xx", "call": "win", "times": 1, "delay_ms": 0, "status": 503}
    ]


# -- concurrency --------------------------------------------------------------------------


def test_identical_bets_racing_are_applied_once(wallet: WalletServer, admin: Admin) -> None:
    player, token = admin.player(deposit=10_000)
    bet = bet_document(player, token, 700)
    answers: list[dict[str, object]] = []
    start = threading.Barrier(8)

    def send() -> None:
        start.wait()
        answers.append(raw_call(wallet, "bet", bet).body)

    threads = [threading.Thread(target=send) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(answers) == 8
    assert all(answer == answers[0] for answer in answers)
    assert answers[0]["balance"] == 9300
    assert admin.balance(player) == 9300


def test_racing_bets_of_one_player_never_take_the_balance_below_zero(
    wallet: WalletServer, admin: Admin
) -> None:
    player, token = admin.player(deposit=1000)
    statuses: list[str] = []
    start = threading.Barrier(10)

    def send() -> None:
        start.wait()
        statuses.append(
            str(raw_call(wallet, "bet", bet_document(player, token, 300)).body["status"])
        )

    threads = [threading.Thread(target=send) for _ in range(10)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(statuses) == ["INSUFFICIENT_FUNDS"] * 7 + ["OK"] * 3
    assert admin.balance(player) == 100


def test_a_rollback_racing_its_own_bet_leaves_the_stake_with_the_player(
    wallet: WalletServer, admin: Admin
) -> None:
    # Whichever lands first, the player ends with the stake: bet then rollback gives it back;
    # rollback first is remembered and the bet is refused.
    for _ in range(5):
        player, token = admin.player(deposit=1000)
        bet = bet_document(player, token, 400)
        rollback = _rollback(player, token, str(bet["transaction_uuid"]), 400)
        start = threading.Barrier(2)

        def send(kind: str, document: dict[str, object], start: threading.Barrier) -> None:
            start.wait()
            raw_call(wallet, kind, document)

        threads = [
            threading.Thread(target=send, args=("bet", bet, start)),
            threading.Thread(target=send, args=("rollback", rollback, start)),
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert admin.balance(player) == 1000


# -- the transaction list and the command line --------------------------------------------


def test_the_transaction_list_pages_through_a_time_range_in_order(
    wallet: WalletServer, admin: Admin
) -> None:
    since = datetime.now(UTC) - timedelta(seconds=1)
    player, token = admin.player(deposit=1000)
    sent = []
    for amount in (10, 20, 30, 40, 50):
        bet = bet_document(player, token, amount)
        raw_call(wallet, "bet", bet)
        sent.append(bet["transaction_uuid"])
    until = datetime.now(UTC) + timedelta(seconds=1)
    seen = [
        row.transaction_uuid
        for row in wallet.ledger.transactions(since, until, None, 1000)
        if row.player_id == player and row.kind == "bet"
    ]
    assert seen == sent
    pages, after = [], None
    while True:
        page = wallet.ledger.transactions(since, until, after, 2)
        pages.append(page)
        if len(page) < 2:
            break
        after = (page[-1].created_at, page[-1].seq)
    flattened = [row.transaction_uuid for page in pages for row in page if row.player_id == player]
    assert [uuid for uuid in flattened if uuid in sent] == sent
    assert all(len(page) <= 2 for page in pages)
    assert wallet.ledger.transactions(until, until + timedelta(hours=1), None, 10) == []


@pytest.mark.parametrize(
    "program",
    [
        [sys.executable, "-m", "operator_wallet", "serve"],
        [str(Path(sys.executable).parent / "shoebox"), "wallet-reference", "serve"],
    ],
    ids=["python -m operator_wallet", "shoebox wallet-reference"],
)
def test_the_command_line_serves_the_wallet_until_terminated(
    wallet_database_url: str, program: list[str]
) -> None:
    environment = {"OPERATOR_WALLET_KEYS": "k1:" + "s" * 32, "PATH": "/usr/bin:/bin"}
    command = [*program, "--database-url", wallet_database_url, "--port", "0"]
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment
    ) as process:
        try:
            assert process.stdout is not None
            line = process.stdout.readline()
            assert line.startswith("reference wallet serving on http://127.0.0.1:")
            url = line.rsplit(" ", 1)[1].strip()
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(url + "/bet", data=b"{}", timeout=5)
            refused.value.close()
            assert refused.value.code == 401  # unsigned
        finally:
            process.terminate()
            process.communicate(timeout=10)
        assert process.returncode == 0


def test_a_win_and_a_rollback_may_come_without_a_session_but_a_bet_may_not(
    wallet: WalletServer, admin: Admin
) -> None:
    player, token = admin.player(deposit=1000)
    bet = bet_document(player, token, 100)
    raw_call(wallet, "bet", bet)
    win = _win(player, token, [bet["transaction_uuid"]], 300)
    del win["session_token"]
    assert raw_call(wallet, "win", win).body["status"] == "OK"
    other = bet_document(player, token, 100)
    raw_call(wallet, "bet", other)
    rollback = _rollback(player, token, str(other["transaction_uuid"]), 100)
    del rollback["session_token"]
    assert raw_call(wallet, "rollback", rollback).body["status"] == "OK"
    sessionless = bet_document(player, token, 100)
    del sessionless["session_token"]
    assert raw_call(wallet, "bet", sessionless).status == 400
    assert raw_call(wallet, "bet", bet_document(player, "", 100)).status == 400
    assert admin.balance(player) == 1200


def test_the_admin_side_is_hidden_from_a_caller_without_its_token(
    wallet: WalletServer, admin: Admin
) -> None:
    player, _ = admin.player(deposit=1000)
    request = urllib.request.Request(
        admin.base + "/admin/players",
        data=json.dumps({"player_id": player, "currency": "GBP", "deposit": 10**6}).encode(),
        method="POST",
        headers={"Authorization": "Bearer guess"},
    )
    with pytest.raises(urllib.error.HTTPError) as hidden:
        urllib.request.urlopen(request, timeout=5)
    hidden.value.close()
    assert hidden.value.code == 404
    assert admin.balance(player) == 1000


def test_a_malformed_transaction_list_request_is_a_signed_400(wallet: WalletServer) -> None:
    key = KEYS["k1"]
    for query in ("from=2026-12-04T00:00:00&to=2026-12-05T00:00:00%2B00:00", "limit=0", ""):
        path = f"/wallet/transactions?{query}"
        now = int(datetime.now(UTC).timestamp())
        request = urllib.request.Request(
            admin_base(wallet) + path,
            headers={"Wallet-Signature": sign(key, "GET", path, now, b"")},
        )
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=5)
        refused.value.close()
        assert refused.value.code == 400
        assert refused.value.headers["Wallet-Signature"].startswith("key_id=k1,")


def test_a_wallet_whose_database_fails_answers_500_and_the_client_reads_it_uncertain(
    wallet_database_url: str, wallet_clock: MovableClock
) -> None:
    pool = ConnectionPool(wallet_database_url, min_size=1, max_size=1, open=True)
    pool.close()  # every checkout now fails, as when PostgreSQL is gone
    server = WalletServer(Ledger(pool, wallet_clock), KEYS, clock=wallet_clock)
    server.start()
    try:
        config = client_config(server)
        call = bet_call(config, "round-x", 1, "alice", "token", "t1", "r1", 100)
        result = SeamlessWalletClient(config, wallet_clock).send(call)
    finally:
        server.stop()
    assert (result.outcome, result.reason) == (Outcome.UNCERTAIN, "http-500")


def admin_base(server: WalletServer) -> str:
    return server.url.removesuffix("/wallet")
