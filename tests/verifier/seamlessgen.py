"""Exports of seamless players for the verifier's tests: exportgen's play, with operator wallets.

The play is exportgen's (the domain's decisions, the server's chain). Its internal-wallet events
are left out, and each player's money story is written on a `seamless:{player}` stream the way
service/application/seamless_bets.py and seamless_calls.py write it:

- a SessionOpened before the player's first bet;
- a StakeDebited right after each BetPlaced (the two are one append in the service);
- after each append that owes calls (BetSettled: a win of the payout naming the spot's debits;
  StakeReturned: a rollback of each debit; SettlementReversed: a rollback of the win and of each
  debit), a WalletCallConfirmed of each, as the delivery job appends them;
- with `uncertain`, one bet whose debit was left uncertain: a WalletCallOwed of its rollback;
- with `refused`, one bet the wallet refused: a WalletCallRefused, which owes its rollback.

Transaction ids come from the server's own `transaction_uuid`, so that the verifier's
independent derivation is held to the service's, not to a copy in the tests.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from service.application.seamless import BET, ROLLBACK, WIN, transaction_uuid
from tests.verifier.exportgen import Played, export_lines, rechain


@dataclass
class Options:
    """How the story departs from a clean one: each a tamper or a pending call."""

    uncertain: bool = True
    """One uncertain debit, whose rollback is owed (and confirmed unless `skip`)."""
    skip: set[str] = field(default_factory=set)
    """Transaction ids whose confirmation is left out: still pending at the slice's end."""
    confirm_twice: set[str] = field(default_factory=set)
    """Transaction ids confirmed twice."""
    amount_delta: dict[str, int] = field(default_factory=dict)
    """Transaction ids confirmed for their amount plus this."""
    drop_owed: bool = False
    """Leave out the uncertain debit's WalletCallOwed, keeping its confirmation."""
    refused: bool = True
    """One bet refused by the wallet, whose rollback is owed (and confirmed unless `skip`)."""


@dataclass
class Story:
    """A seamless export and the calls it owes, by kind, for a test to pick from."""

    lines: list[dict[str, Any]]
    owed: list[tuple[str, str, str, int]] = field(default_factory=list)
    """(kind, transaction, owing event type, amount) of each call owed, in log order."""


def seamless_export(played: Played, options: Options | None = None) -> Story:
    """The export of the whole of `played` with seamless players (shoebox-export/2)."""
    options = options or Options()
    source = list(export_lines(played))
    header = {**source[0], "format": "shoebox-export/2"}
    shoes = [line for line in source if line["kind"] == "shoe"]
    events = [line for line in source if line["kind"] == "event"]
    story = Story([])
    out: list[dict[str, Any]] = []
    versions: dict[str, int] = {}
    debits: dict[tuple[str, str, str, str], list[tuple[str, int]]] = {}
    wins: dict[tuple[str, str, str, str], list[tuple[str, int, list[tuple[str, int]]]]] = {}
    queued: list[tuple[str, str, str, int, list[str]]] = []
    uncertain_done = not options.uncertain
    refused_done = not options.refused

    def emit(player: str, type_: str, payload: dict[str, Any], like: dict[str, Any]) -> int:
        stream = f"seamless:{player}"
        version = versions[stream] = versions.get(stream, 0) + 1
        out.append(
            {
                **like,
                "stream_id": stream,
                "category": "seamless",
                "version": version,
                "type": type_,
                "schema_version": 1,
                "payload": payload,
            }
        )
        return version

    def owe(player: str, kind: str, txn: str, amount: int, refs: list[str], by: str) -> None:
        story.owed.append((kind, txn, by, amount))
        queued.append((player, kind, txn, amount, refs))

    def confirm(player: str, kind: str, txn: str, amount: int, refs: list[str], like: Any) -> None:
        payload = {
            "kind": kind,
            "transaction_uuid": txn,
            "status": "OK",
            "balance": 1_000_000,
            "amount": amount + options.amount_delta.get(txn, 0),
            "reference_transaction_uuid": refs,
        }
        for _ in range(2 if txn in options.confirm_twice else 1):
            emit(player, "WalletCallConfirmed", payload, like)

    for index, line in enumerate(events):
        if index and line["recorded_at"] != events[index - 1]["recorded_at"]:
            # The append before is over: the delivery job confirms what it owed.
            for player, kind, txn, amount, refs in queued:
                if txn not in options.skip:
                    confirm(player, kind, txn, amount, refs, events[index - 1])
            queued.clear()
        if line["category"] == "wallet":
            continue  # no Shoebox wallet: the operator's holds the money
        out.append(line)
        payload, type_, stream = line["payload"], line["type"], line["stream_id"]
        if type_ == "BetPlaced":
            player = payload["player_id"]
            if f"seamless:{player}" not in versions:
                emit(
                    player,
                    "SessionOpened",
                    {
                        "operator": "op",
                        "token_sha256": "0" * 64,
                        "balance": 1_000_000,
                        "opened_at": line["recorded_at"],
                    },
                    line,
                )
            key = (stream.partition(":")[2], payload["round_id"], player, payload["spot"])
            at = versions[f"seamless:{player}"] + 1
            txn = transaction_uuid(BET, f"seamless:{player}", at)
            emit(
                player,
                "StakeDebited",
                {
                    "transaction_uuid": txn,
                    "table_id": key[0],
                    "round_id": key[1],
                    "spot": key[3],
                    "amount": payload["stake"],
                    "balance": 1_000_000,
                },
                line,
            )
            debits.setdefault(key, []).append((txn, payload["stake"]))
            if not uncertain_done:
                # The next bet's debit timed out: the bet was refused, its rollback owed.
                uncertain_done = True
                seamless = f"seamless:{player}"
                at = versions[seamless] + 1
                bet = transaction_uuid(BET, seamless, at)
                rollback = transaction_uuid(ROLLBACK, seamless, at, bet)
                owed = {
                    "kind": ROLLBACK,
                    "transaction_uuid": rollback,
                    "reference_transaction_uuid": bet,
                    "table_id": key[0],
                    "round_id": key[1],
                    "spot": key[3],
                    "amount": 500,
                    "reason": "timeout",
                }
                if options.drop_owed:
                    story.owed.append((ROLLBACK, rollback, "WalletCallOwed", 500))
                    queued.append((player, ROLLBACK, rollback, 500, [bet]))
                else:
                    emit(player, "WalletCallOwed", owed, line)
                    owe(player, ROLLBACK, rollback, 500, [bet], "WalletCallOwed")
            elif not refused_done:
                # The next bet was refused (insufficient funds): its rollback is owed too.
                refused_done = True
                seamless = f"seamless:{player}"
                at = versions[seamless] + 1
                bet = transaction_uuid(BET, seamless, at)
                refusal = {
                    "kind": BET,
                    "transaction_uuid": bet,
                    "table_id": key[0],
                    "round_id": key[1],
                    "spot": key[3],
                    "amount": 700,
                    "reason": "INSUFFICIENT_FUNDS",
                }
                emit(player, "WalletCallRefused", refusal, line)
                rollback = transaction_uuid(ROLLBACK, seamless, at, bet)
                owe(player, ROLLBACK, rollback, 700, [bet], "WalletCallRefused")
        elif type_ in ("BetSettled", "StakeReturned", "SettlementReversed"):
            player = payload["player_id"]
            key = (stream.partition(":")[2], payload["round_id"], player, payload["spot"])
            version = line["version"]
            if type_ == "SettlementReversed":
                for win, amount, paid in wins.pop(key, []):
                    rollback = transaction_uuid(ROLLBACK, stream, version, win)
                    owe(player, ROLLBACK, rollback, amount, [win], type_)
                    for debit, stake in paid:
                        returned = transaction_uuid(ROLLBACK, stream, version, debit)
                        owe(player, ROLLBACK, returned, stake, [debit], type_)
            elif type_ == "StakeReturned":
                for debit, stake in debits.pop(key, []):
                    rollback = transaction_uuid(ROLLBACK, stream, version, debit)
                    owe(player, ROLLBACK, rollback, stake, [debit], type_)
            else:
                paid = debits.pop(key, [])
                win = transaction_uuid(WIN, stream, version)
                owe(player, WIN, win, payload["payout"], [d for d, _ in paid], type_)
                wins.setdefault(key, []).append((win, payload["payout"], paid))
    story.lines = rechain([header, *out, *shoes])
    return story
