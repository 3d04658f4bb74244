"""A stateful hypothesis test of the public API: random play, and the books checked every step.

`ShoeboxMachine` drives sequences of sit, bet, rebet, remove, deal, pass, window timeouts,
deposits, withdrawals, corrections, malfunctions, reopenings and limit changes, over several
players of two operators at several tables, through the HTTP API as front ends and ops send
them. After every step it checks, from the API and from the log alone:

- no request was answered with a 5xx;
- money is conserved: acknowledged deposits - withdrawals + corrections = the wallets'
  balances (as the API reports them) + the house's net (stakes - payouts, less reversals);
- no withdrawal or stake ever took a wallet below zero (only a malfunction's reversal of a
  paid bet, or a negative correction, may: docs/api.md);
- every stake is settled or returned exactly once with its whole amount, or still open in its
  table's current round, and the open ones are the wallets' reserved money;
- the hash chain verifies, incrementally from the last verified position.

The same machine runs over the in-memory store (tests/unit) and PostgreSQL (tests/integration).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from events.canonical import verify_chain
from events.store import GENESIS_HASH, EventStore
from service.application.keys import Role, create_key
from service.web.api import EXTENSION
from tests.api_harness import OPERATOR, Api

TABLES = ("T1", "T2")
WINDOW_SECONDS = 15
OTHER_OPERATOR = "casino-b"
# Two players of each operator; "b:" marks the other operator's, and the first of them shares
# a name with a default-operator player, as two casinos' players may.
PLAYERS = ("alice", "bob", "b:alice", "b:carol")
SPOTS = ("player", "banker", "tie")
# Event types, by the names the log holds (domain/wallet.py); read here as an outsider would.
DEPOSITED, WITHDRAWN, CORRECTED = "Deposited", "Withdrawn", "Corrected"
RESERVED, RETURNED, PAID, REVERSED = (
    "StakeReserved",
    "StakeReturned",
    "PayoutCredited",
    "SettlementReversed",
)


def split(player: str) -> tuple[str, str | None]:
    """The player's id and operator (None: the default one)."""
    if player.startswith("b:"):
        return player[2:], OTHER_OPERATOR
    return player, None


@dataclass
class Books:
    """What the log says, folded incrementally: the chain's tip, wallets, stakes, house net."""

    position: int = 0
    last_hash: str = GENESIS_HASH
    credits: int = 0
    house_net: int = 0
    available: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    reserved: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    # (wallet stream, table, round, spot) -> the amount still open on it.
    open_stakes: dict[tuple[str, str, str, str], int] = field(default_factory=dict)
    resolved: set[tuple[str, str, str, str]] = field(default_factory=set)

    def follow(self, store: EventStore) -> None:
        """Verify and fold every event after the last one verified."""
        while batch := store.read_all(self.position, 500, upcast=False):
            broken = verify_chain(batch, self.last_hash, self.position + 1)
            assert broken is None, f"the chain breaks: {broken}"
            for event in batch:
                if event.category == "wallet":
                    self._fold(event.stream_id, event.type, event.payload)
            self.position, self.last_hash = batch[-1].position, batch[-1].hash

    def _fold(self, wallet: str, kind: str, payload: Mapping[str, Any]) -> None:
        key = (wallet, str(payload.get("table_id")), str(payload.get("round_id")))
        stake_key = (*key, str(payload.get("spot")))
        if kind in (DEPOSITED, WITHDRAWN, CORRECTED):
            amount = payload["amount"] * (-1 if kind == WITHDRAWN else 1)
            self.credits += amount
            self.available[wallet] += amount
            if kind == WITHDRAWN:
                assert self.available[wallet] >= 0, f"a withdrawal overdrew {wallet}"
        elif kind == RESERVED:
            assert stake_key not in self.resolved, f"a stake on {stake_key} after it was settled"
            self.available[wallet] -= payload["stake"]
            self.reserved[wallet] += payload["stake"]
            self.open_stakes[stake_key] = self.open_stakes.get(stake_key, 0) + payload["stake"]
            assert self.available[wallet] >= 0, f"a stake overdrew {wallet}"
        elif kind in (RETURNED, PAID):
            held = self.open_stakes.pop(stake_key, None)
            assert held == payload["stake"], f"{kind} of {payload['stake']} on {stake_key}: {held}"
            # A stake given back (removed, passed) leaves the spot open to a new bet in the
            # same round, as a rebet after a remove does; a settled one closes it.
            if kind == PAID:
                self.resolved.add(stake_key)
            self.reserved[wallet] -= payload["stake"]
            self.available[wallet] += payload["payout"] if kind == PAID else payload["stake"]
            if kind == PAID:
                self.house_net += payload["stake"] - payload["payout"]
        elif kind == REVERSED:
            assert stake_key in self.resolved, f"a reversal of {stake_key}, never settled"
            self.available[wallet] += payload["stake"] - payload["payout"]
            self.house_net -= payload["stake"] - payload["payout"]
        assert self.reserved[wallet] >= 0, f"{wallet} reserves less than nothing"


class ShoeboxMachine(RuleBasedStateMachine):
    """Random play through the API; the books are checked after every step."""

    # Opens a fresh store for one sequence, and a callable that disposes of it; None: in memory.
    open_store: ClassVar[Callable[[], tuple[EventStore, Callable[[], None]]] | None] = None

    def __init__(self) -> None:
        super().__init__()
        store: EventStore | None = None
        self.dispose: Callable[[], None] = lambda: None
        opener = type(self).open_store
        if opener is not None:
            store, self.dispose = opener()
        self.api = Api(store=store)
        self.api.app.extensions.pop("shoebox.rate_limits", None)  # not what this tests
        self.other_frontend = create_key(
            self.api.store, "casino b web", Role.FRONTEND, OPERATOR, operator=OTHER_OPERATOR
        ).secret
        self.acknowledged_credits = 0
        self.books = Books()
        for table in TABLES:
            self.api.create_table(table, betting_window_ms=WINDOW_SECONDS * 1000)
        for player in PLAYERS:
            self.move("deposits", player, 20_000)
        # Who sits where, as the API acknowledged it; play is drawn from these.
        self.seated: set[tuple[str, str]] = set()
        self.suspended: set[str] = set()
        for number, player in enumerate(PLAYERS):
            self.sit(TABLES[number % len(TABLES)], player, 1 + number // len(TABLES))

    def teardown(self) -> None:
        self.dispose()

    # Sending.

    def send(
        self, method: str, path: str, body: object = None, *, player: str | None = None
    ) -> Any:
        """Send as the player's own operator's front end; the response, never a 5xx."""
        operator = split(player)[1] if player is not None else None
        if operator is None:
            response = self.api.call(method, path, body)
        else:
            headers = {"Authorization": f"Bearer {self.other_frontend}"}
            response = self.api.client.open(path, method=method, json=body, headers=headers)
        assert response.status_code < 500, (method, path, response.get_data(as_text=True))
        return response

    def ops(self, method: str, path: str, body: object = None) -> Any:
        response = self.api.call(method, path, body, role=Role.OPS)
        assert response.status_code < 500, (method, path, response.get_data(as_text=True))
        return response

    def move(self, kind: str, player: str, pence: int) -> None:
        player_id, operator = split(player)
        query = f"?operator={operator}" if operator else ""
        body = {"amount_pence": pence, "reason": "stateful test"}
        response = self.ops("POST", f"/v1/wallets/{player_id}/{kind}{query}", body)
        if response.status_code == 201:
            self.acknowledged_credits += -pence if kind == "withdrawals" else pence

    # Rules.

    @rule(table=st.sampled_from(TABLES), player=st.sampled_from(PLAYERS), seat=st.integers(1, 7))
    def sit(self, table: str, player: str, seat: int) -> None:
        body = {"player_id": split(player)[0], "seat": seat}
        if self.send("POST", f"/v1/tables/{table}/seats", body, player=player).status_code == 201:
            self.seated.add((table, player))

    def draw_seated(self, data: st.DataObject) -> tuple[str, str]:
        """A (table, player) the API seated, or any if none is."""
        choices = sorted(self.seated) or [(TABLES[0], PLAYERS[0])]
        return data.draw(st.sampled_from(choices))

    @rule(data=st.data(), spot=st.sampled_from(SPOTS), pounds=st.integers(1, 60))
    def bet(self, data: st.DataObject, spot: str, pounds: int) -> None:
        self.bet_at(*self.draw_seated(data), spot, pounds)

    def bet_at(self, table: str, player: str, spot: str, pounds: int) -> None:
        body = {"player_id": split(player)[0], "spot": spot, "stake_pence": pounds * 100}
        self.send("POST", f"/v1/tables/{table}/bets", body, player=player)

    @rule(data=st.data(), spot=st.sampled_from(SPOTS), pounds=st.integers(1, 60))
    def bet_and_deal(self, data: st.DataObject, spot: str, pounds: int) -> None:
        """The commonest play: bet, then press Deal at once."""
        table, player = self.draw_seated(data)
        self.bet_at(table, player, spot, pounds)
        self.send(
            "POST", f"/v1/tables/{table}/deal", {"player_id": split(player)[0]}, player=player
        )

    @rule(table=st.sampled_from(TABLES), passes=st.lists(st.booleans(), min_size=4, max_size=4))
    def everyone_acts(self, table: str, passes: list[bool]) -> None:
        """Each player seated at the table presses Deal, or Pass, in turn."""
        at_table = sorted(player for seated_at, player in self.seated if seated_at == table)
        for player, passing in zip(at_table, passes, strict=False):
            action = "pass" if passing else "deal"
            body = {"player_id": split(player)[0]}
            self.send("POST", f"/v1/tables/{table}/{action}", body, player=player)

    @rule(data=st.data())
    def rebet(self, data: st.DataObject) -> None:
        table, player = self.draw_seated(data)
        body = {"player_id": split(player)[0]}
        self.send("POST", f"/v1/tables/{table}/rebet", body, player=player)

    @rule(data=st.data())
    def remove_bets(self, data: st.DataObject) -> None:
        table, player = self.draw_seated(data)
        self.send("DELETE", f"/v1/tables/{table}/bets/{split(player)[0]}", player=player)

    @rule(data=st.data())
    def leave(self, data: st.DataObject) -> None:
        table, player = self.draw_seated(data)
        path = f"/v1/tables/{table}/seats/{split(player)[0]}"
        if self.send("DELETE", path, player=player).status_code < 300:
            self.seated.discard((table, player))

    @rule(data=st.data(), seat=st.integers(1, 7))
    def change_seat(self, data: st.DataObject, seat: int) -> None:
        """Move between hands; a 409 while one's bets are on the round, or the seat is taken."""
        table, player = self.draw_seated(data)
        path = f"/v1/tables/{table}/seats/{split(player)[0]}"
        self.send("PUT", path, {"seat": seat}, player=player)

    @rule(data=st.data(), action=st.sampled_from(("deal", "deal", "pass")))
    def act(self, data: st.DataObject, action: str) -> None:
        table, player = self.draw_seated(data)
        body = {"player_id": split(player)[0]}
        self.send("POST", f"/v1/tables/{table}/{action}", body, player=player)

    @rule(table=st.sampled_from(TABLES))
    def window_times_out(self, table: str) -> None:
        self.api.clock.advance(WINDOW_SECONDS + 1)
        # A GET never writes: the lapsed window shows as closing, and the scheduled job (or
        # the sweeper) closes it through the service, as here.
        state = self.send("GET", f"/v1/tables/{table}/state").get_json()
        if state.get("phase") == "closing":
            wiring = self.api.app.extensions[EXTENSION]
            wiring.games.close_window(table, state["round_id"])

    @rule(player=st.sampled_from(PLAYERS), pounds=st.integers(1, 300))
    def deposit(self, player: str, pounds: int) -> None:
        self.move("deposits", player, pounds * 100)

    @rule(player=st.sampled_from(PLAYERS), pounds=st.integers(1, 300))
    def withdraw(self, player: str, pounds: int) -> None:
        self.move("withdrawals", player, pounds * 100)

    @rule(player=st.sampled_from(PLAYERS), pence=st.integers(-5_000, 5_000))
    def correct(self, player: str, pence: int) -> None:
        self.move("corrections", player, pence)

    @rule(
        table=st.sampled_from(TABLES),
        scope=st.sampled_from(("current_round", "last_round")),
    )
    def malfunction(self, table: str, scope: str) -> None:
        body: dict[str, Any] = {"reason": "stateful test", "scope": "current_round"}
        if scope == "last_round":
            number = self.send("GET", f"/v1/tables/{table}/state").get_json()["round_number"]
            if not number or number < 2:
                return
            body = {**body, "scope": "rounds", "round_ids": [f"{table}-{number - 1}"]}
        if self.ops("POST", f"/v1/tables/{table}/malfunctions", body).status_code == 201:
            self.suspended.add(table)

    @precondition(lambda self: self.suspended)
    @rule(data=st.data())
    def reopen(self, data: st.DataObject) -> None:
        table = data.draw(st.sampled_from(sorted(self.suspended)))
        body = {"reason": "stateful test"}
        if self.ops("POST", f"/v1/tables/{table}/reopenings", body).status_code < 300:
            self.suspended.discard(table)

    @rule(player=st.sampled_from(PLAYERS), pounds=st.none() | st.integers(1, 100))
    def change_limit(self, player: str, pounds: int | None) -> None:
        body = {"limit_pence": None if pounds is None else pounds * 100}
        self.send("PUT", f"/v1/players/{split(player)[0]}/limit", body, player=player)

    @rule(days=st.integers(1, 8))
    def time_passes(self, days: int) -> None:
        """Days go by, so that a weekly limit change is allowed again."""
        self.api.clock.advance(days * 86_400)

    # Invariants.

    @invariant()
    def books_balance(self) -> None:
        current = {
            table: self.api.ok("GET", f"/v1/tables/{table}/state").get("round_id")
            for table in TABLES
        }
        books = self.books
        books.follow(self.api.store)
        assert books.credits == self.acknowledged_credits, "an acknowledged movement is missing"
        balances = reserved = 0
        for player in PLAYERS:
            player_id, operator = split(player)
            query = f"?operator={operator}" if operator else ""
            wallet = self.api.ok("GET", f"/v1/wallets/{player_id}{query}", role=Role.REGULATOR)
            balances += wallet["available_pence"] + wallet["reserved_pence"]
            reserved += wallet["reserved_pence"]
        assert books.credits == balances + books.house_net, "money is not conserved"
        assert reserved == sum(books.open_stakes.values()) == sum(books.reserved.values())
        assert sum(books.available.values()) + reserved == balances
        for _, table, round_id, _ in books.open_stakes:
            assert round_id == current[table], f"a stake left open in {round_id}"
