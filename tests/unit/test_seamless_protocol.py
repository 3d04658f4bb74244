"""The seamless wallet protocol, Shoebox's side: ids, bodies, configuration, signatures, classes."""

from __future__ import annotations

import hashlib
import hmac
import json
from pathlib import Path
from typing import Any

import pytest

from operator_wallet.signing import SignatureError, SigningKey, sign, verify
from service.application.seamless import (
    Exchange,
    Outcome,
    SeamlessWalletConfig,
    Secret,
    WalletCall,
    WalletConfigError,
    balance_call,
    bet_call,
    classify,
    request_uuid,
    rollback_call,
    signature,
    transaction_uuid,
    win_call,
)
from service.runtime.seamless_wallet import load_wallets

VECTORS = json.loads((Path(__file__).parent.parent / "wallet_signing_vectors.json").read_text())
NOW = 1_764_835_200
SECRET = "s3cret-" + "x" * 20


def _config(**changes: Any) -> SeamlessWalletConfig:
    settings: dict[str, Any] = {
        "operator": "acme",
        "base_url": "https://wallet.acme.example/v1/wallet/",
        "key_id": "k1",
        "secret": Secret(SECRET),
        "currency": "GBP",
    }
    return SeamlessWalletConfig(**(settings | changes))


CONFIG = _config()


def _bet(amount: int = 500) -> WalletCall:
    return bet_call(CONFIG, "round-t1-42", 7, "alice", "tok-123", "t1", "42", amount)


# -- ids and bodies ----------------------------------------------------------------------


def test_a_calls_ids_follow_from_its_event_alone() -> None:
    assert _bet().transaction_uuid == _bet().transaction_uuid
    assert _bet().request_uuid == request_uuid(str(_bet().transaction_uuid))
    assert _bet().body() == _bet().body()


def test_a_later_event_on_the_same_stream_gets_a_new_transaction_id() -> None:
    ids = {
        transaction_uuid("bet", "round-t1-42", 7),
        transaction_uuid("bet", "round-t1-42", 8),
        transaction_uuid("bet", "round-t1-43", 7),
        transaction_uuid("win", "round-t1-42", 7),
        transaction_uuid("rollback", "round-t1-42", 7, "a"),
        transaction_uuid("rollback", "round-t1-42", 7, "b"),
    }
    assert len(ids) == 6


def test_the_body_carries_integer_minor_units_with_the_currencys_exponent() -> None:
    body = json.loads(_bet(1250).body())
    assert body == {
        "request_uuid": _bet().request_uuid,
        "transaction_uuid": _bet().transaction_uuid,
        "player_id": "alice",
        "session_token": "tok-123",
        "table_id": "t1",
        "round_id": "42",
        "amount": 1250,
        "currency": "GBP",
        "exponent": 2,
    }


def test_a_win_names_its_bets_and_a_rollback_its_one_transaction() -> None:
    bet = _bet()
    assert bet.transaction_uuid is not None
    win = win_call(CONFIG, "round-t1-42", 9, "alice", "tok", "t1", "42", 0, [bet.transaction_uuid])
    rollback = rollback_call(
        CONFIG, "round-t1-42", 10, "alice", "tok", "t1", "42", bet.transaction_uuid, 500
    )
    assert json.loads(win.body())["reference_transaction_uuid"] == [bet.transaction_uuid]
    assert json.loads(rollback.body())["reference_transaction_uuid"] == bet.transaction_uuid
    assert "transaction_uuid" not in json.loads(balance_call(CONFIG, "alice", "t", "r").body())


@pytest.mark.parametrize("amount", [0, -1, 1.5, True])
def test_a_stake_is_a_positive_whole_number_of_pence(amount: Any) -> None:
    with pytest.raises(ValueError, match="whole number"):
        _bet(amount)


# -- configuration -----------------------------------------------------------------------


def test_a_wallet_in_another_currency_than_the_tables_is_refused_when_configured() -> None:
    with pytest.raises(WalletConfigError, match=r"'EUR' is not the tables' 'GBP'"):
        _config(currency="EUR")


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"base_url": "ftp://wallet.example/"}, "http"),
        ({"base_url": "https://user:pw@wallet.example/"}, "credentials"),
        ({"key_id": "bad key"}, "key_id"),
        ({"secret": Secret("short")}, "16 bytes"),
        ({"read_timeout_seconds": 0.0}, "read_timeout_seconds"),
        ({"connect_timeout_seconds": 61.0}, "connect_timeout_seconds"),
        ({"operator": "no/slash"}, "operator id"),
    ],
)
def test_a_configuration_shoebox_cannot_use_is_refused(
    changes: dict[str, Any], message: str
) -> None:
    with pytest.raises(WalletConfigError, match=message) as refused:
        _config(**changes)
    assert SECRET not in str(refused.value)


def test_the_secret_is_never_in_a_repr(tmp_path: Path) -> None:
    shown = repr(CONFIG) + str(CONFIG) + repr(_bet()) + str(_bet()) + repr(CONFIG.secret)
    assert SECRET not in shown
    assert "tok-123" not in shown


def test_a_configuration_is_read_with_its_secret_from_a_file(tmp_path: Path) -> None:
    secret_file = tmp_path / "acme.secret"
    secret_file.write_text(SECRET + "\n")
    config = SeamlessWalletConfig.from_document(
        "acme",
        {
            "base_url": "http://127.0.0.1:8100/wallet",
            "key_id": "k1",
            "secret_file": str(secret_file),
            "currency": "GBP",
            "read_timeout_seconds": 3,
        },
    )
    assert config.secret.value == SECRET
    assert config.read_timeout_seconds == 3.0
    assert config.path_prefix == "/wallet"
    with pytest.raises(WalletConfigError, match="exactly one"):
        SeamlessWalletConfig.from_document("acme", {"secret": SECRET, "secret_file": "x"})
    with pytest.raises(WalletConfigError, match="unknown settings"):
        SeamlessWalletConfig.from_document("acme", {"secret": SECRET, "password": "x"})
    with pytest.raises(WalletConfigError, match="cannot read secret_file"):
        SeamlessWalletConfig.from_document(
            "acme", {"secret_file": str(tmp_path / "missing"), "base_url": "http://x"}
        )


# -- signatures --------------------------------------------------------------------------


@pytest.mark.parametrize("vector", VECTORS["vectors"], ids=lambda vector: vector["path"])
def test_the_client_and_the_reference_wallet_sign_the_shared_vectors_alike(
    vector: dict[str, Any],
) -> None:
    body = vector["body"].encode()
    ours = signature(
        vector["key_id"],
        Secret(vector["secret"]),
        vector["method"],
        vector["path"],
        vector["timestamp"],
        body,
    )
    key = SigningKey(vector["key_id"], vector["secret"].encode())
    theirs = sign(key, vector["method"], vector["path"], vector["timestamp"], body)
    assert ours == theirs == vector["header"]
    assert (
        verify(ours, {key.key_id: key}, vector["method"], vector["path"], body, vector["timestamp"])
        == key
    )


def test_a_vector_is_plain_hmac_sha256_of_method_path_timestamp_and_body() -> None:
    vector = VECTORS["vectors"][0]
    digest = hmac.new(
        vector["secret"].encode(),
        f"{vector['method']}\n{vector['path']}\n{vector['timestamp']}\n{vector['body']}".encode(),
        hashlib.sha256,
    ).hexdigest()
    assert vector["header"].endswith(f"hmac_sha256={digest}")


def test_the_wallet_refuses_a_signature_over_another_path_or_time() -> None:
    key = SigningKey("k1", SECRET.encode())
    header = sign(key, "POST", "/wallet/bet", NOW, b"{}")
    with pytest.raises(SignatureError, match="does not match"):
        verify(header, {"k1": key}, "POST", "/wallet/win", b"{}", NOW)
    with pytest.raises(SignatureError, match="300 s"):
        verify(header, {"k1": key}, "POST", "/wallet/bet", b"{}", NOW + 301)
    with pytest.raises(SignatureError, match="malformed"):
        verify("key_id=k1", {"k1": key}, "POST", "/wallet/bet", b"{}", NOW)


# -- the four classes --------------------------------------------------------------------


def _answer(
    call: WalletCall,
    status_code: int = 200,
    signed_by: SeamlessWalletConfig = CONFIG,
    at: int = NOW,
    raw: bytes | None = None,
    **fields: Any,
) -> Exchange:
    document: dict[str, Any] = {"request_uuid": call.request_uuid} | fields
    body = raw if raw is not None else json.dumps(document).encode()
    header = signature(
        signed_by.key_id, signed_by.secret, "POST", f"/v1/wallet/{call.kind}", at, body
    )
    return Exchange(status_code, body, header)


def _ok(call: WalletCall, **changes: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "status": "OK",
        "balance": 700,
        "currency": "GBP",
        "exponent": 2,
        "transaction_uuid": call.transaction_uuid,
    }
    return fields | changes


BET = _bet()
assert BET.transaction_uuid is not None
WIN = win_call(CONFIG, "round-t1-42", 9, "alice", "tok", "t1", "42", 900, [BET.transaction_uuid])
ROLLBACK = rollback_call(
    CONFIG, "round-t1-42", 10, "alice", "tok", "t1", "42", BET.transaction_uuid, 500
)
OTHER_KEY = _config(secret=Secret("another-secret-of-enough-length"))

CASES: list[tuple[str, WalletCall, Exchange, Outcome, str]] = [
    ("ok bet", BET, _answer(BET, **_ok(BET)), Outcome.OK, "OK"),
    ("ok win of 0", WIN, _answer(WIN, **_ok(WIN)), Outcome.OK, "OK"),
    ("timeout", BET, Exchange(None, failure="timeout"), Outcome.UNCERTAIN, "no-answer"),
    ("503", BET, Exchange(503, b"<html>"), Outcome.UNCERTAIN, "http-503"),
    ("500 signed", BET, _answer(BET, 500, status="ERROR"), Outcome.UNCERTAIN, "http-500"),
    ("429", BET, Exchange(429, b""), Outcome.UNCERTAIN, "http-429"),
    ("unreadable", BET, _answer(BET, raw=b"{not json"), Outcome.UNCERTAIN, "unreadable"),
    ("no status", BET, _answer(BET, balance=1), Outcome.UNCERTAIN, "unreadable"),
    (
        "unknown status",
        BET,
        _answer(BET, status="MAYBE"),
        Outcome.UNCERTAIN,
        "unreadable",
    ),
    (
        "ok without balance",
        BET,
        _answer(BET, **_ok(BET, balance="7.00")),
        Outcome.UNCERTAIN,
        "unreadable",
    ),
    (
        "insufficient funds",
        BET,
        _answer(BET, status="INSUFFICIENT_FUNDS"),
        Outcome.REFUSED,
        "INSUFFICIENT_FUNDS",
    ),
    ("limit", BET, _answer(BET, status="LIMIT_REACHED"), Outcome.REFUSED, "LIMIT_REACHED"),
    ("blocked", BET, _answer(BET, status="PLAYER_BLOCKED"), Outcome.REFUSED, "PLAYER_BLOCKED"),
    (
        "session expired",
        BET,
        _answer(BET, status="SESSION_EXPIRED"),
        Outcome.REFUSED,
        "SESSION_EXPIRED",
    ),
    (
        "bet rolled back first",
        BET,
        _answer(BET, status="TRANSACTION_ROLLED_BACK"),
        Outcome.REFUSED,
        "TRANSACTION_ROLLED_BACK",
    ),
    (
        "rollback of unknown",
        ROLLBACK,
        _answer(ROLLBACK, status="UNKNOWN_TRANSACTION"),
        Outcome.OK,
        "UNKNOWN_TRANSACTION",
    ),
    ("401", BET, Exchange(401, b"{}"), Outcome.FATAL, "BAD_SIGNATURE"),
    ("unsigned", BET, Exchange(200, b"{}"), Outcome.FATAL, "bad-answer-signature"),
    (
        "signed by another secret",
        BET,
        _answer(BET, signed_by=OTHER_KEY, **_ok(BET)),
        Outcome.FATAL,
        "bad-answer-signature",
    ),
    (
        "signed long ago",
        BET,
        _answer(BET, at=NOW - 301, **_ok(BET)),
        Outcome.FATAL,
        "bad-answer-signature",
    ),
    (
        "wrong currency answered",
        BET,
        _answer(BET, **_ok(BET, currency="EUR")),
        Outcome.FATAL,
        "WRONG_CURRENCY",
    ),
    (
        "wrong exponent answered",
        BET,
        _answer(BET, **_ok(BET, exponent=0)),
        Outcome.FATAL,
        "WRONG_CURRENCY",
    ),
    (
        "wrong currency said",
        BET,
        _answer(BET, status="WRONG_CURRENCY"),
        Outcome.FATAL,
        "WRONG_CURRENCY",
    ),
    (
        "same id other fields",
        BET,
        _answer(BET, status="TRANSACTION_CONFLICT"),
        Outcome.FATAL,
        "TRANSACTION_CONFLICT",
    ),
    (
        "answer to another transaction",
        BET,
        _answer(BET, **_ok(BET, transaction_uuid="0" * 32)),
        Outcome.FATAL,
        "wrong-transaction",
    ),
    (
        "answer to another request",
        BET,
        _answer(BET, request_uuid="someone-else", **_ok(BET)),
        Outcome.FATAL,
        "wrong-request",
    ),
    ("400", BET, _answer(BET, 400, status="BAD_REQUEST"), Outcome.FATAL, "http-400"),
    (
        "win refused for a block",
        WIN,
        _answer(WIN, status="PLAYER_BLOCKED"),
        Outcome.FATAL,
        "PLAYER_BLOCKED",
    ),
    (
        "win of unknown bet",
        WIN,
        _answer(WIN, status="UNKNOWN_TRANSACTION"),
        Outcome.FATAL,
        "UNKNOWN_TRANSACTION",
    ),
    (
        "rollback refused for funds",
        ROLLBACK,
        _answer(ROLLBACK, status="INSUFFICIENT_FUNDS"),
        Outcome.FATAL,
        "INSUFFICIENT_FUNDS",
    ),
]


@pytest.mark.parametrize(
    ("call", "exchange", "outcome", "reason"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_every_answer_falls_into_exactly_one_class(
    call: WalletCall, exchange: Exchange, outcome: Outcome, reason: str
) -> None:
    result = classify(CONFIG, call, "POST", exchange, NOW)
    assert (result.outcome, result.reason) == (outcome, reason)
    assert (result.balance is not None) == (outcome is Outcome.OK and reason == "OK")


def test_a_win_or_rollback_may_go_without_the_session_token_but_a_bet_may_not() -> None:
    assert BET.transaction_uuid is not None
    win = win_call(CONFIG, "round-t1-42", 9, "alice", None, "t1", "42", 0, [BET.transaction_uuid])
    assert "session_token" not in json.loads(win.body())
    with pytest.raises(ValueError, match="session token"):
        WalletCall("bet", "r", "alice", None, "GBP", 2, "t", "t1", "42", 5)


def test_a_wallets_file_configures_each_seamless_operator(tmp_path: Path) -> None:
    secret_file = tmp_path / "beta.secret"
    secret_file.write_text("beta-secret-of-enough-length\n")
    wallets = tmp_path / "wallets.toml"
    wallets.write_text(
        f"""
[operators.acme]
base_url = "http://127.0.0.1:8100/wallet"
key_id = "k1"
secret = "{SECRET}"
currency = "GBP"

[operators.beta]
base_url = "https://wallet.beta.example/shoebox"
key_id = "2026-12"
secret_file = "{secret_file}"
currency = "GBP"
read_timeout_seconds = 5
"""
    )
    loaded = load_wallets(wallets)
    assert sorted(loaded) == ["acme", "beta"]
    assert loaded["beta"].secret.value == "beta-secret-of-enough-length"
    assert loaded["beta"].read_timeout_seconds == 5.0


def test_a_wallets_file_in_another_currency_is_refused_without_showing_the_secret(
    tmp_path: Path,
) -> None:
    wallets = tmp_path / "wallets.toml"
    wallets.write_text(
        f'[operators.acme]\nbase_url = "http://w/x"\nkey_id = "k1"\nsecret = "{SECRET}"\n'
        'currency = "EUR"\n'
    )
    with pytest.raises(WalletConfigError, match="acme: the wallet's currency 'EUR'") as refused:
        load_wallets(wallets)
    assert SECRET not in str(refused.value)
    wallets.write_text(f'[operators.acme]\nsecret = "{SECRET}\n')
    with pytest.raises(WalletConfigError, match="is not TOML") as broken:
        load_wallets(wallets)
    assert SECRET not in str(broken.value)


def test_the_command_lines_names_for_the_wallets_secrets_are_the_wallets_own() -> None:
    from operator_wallet import command
    from service.cli import wallet_reference

    assert wallet_reference.KEYS_VARIABLE == command.KEYS_VARIABLE
    assert wallet_reference.ADMIN_VARIABLE == command.ADMIN_VARIABLE
