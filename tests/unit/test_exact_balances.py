"""Money is exact at once: every answer that moves a player's money carries their wallet just
after it, a retried command replays that same figure, and a wallet read folds the wallet's own
stream from its newest snapshot, so it neither lags the log nor grows with the wallet's age."""

from typing import Any

from domain.outcome import Outcome
from events.memory import InMemoryEventStore
from events.snapshots import InMemorySnapshotStore, Snapshot
from events.store import RecordedEvent, utc_now
from service.application.actor import Actor
from service.application.keys import Role
from service.application.streams import SNAPSHOT_EVERY
from service.application.wallets import WalletCache, WalletService
from service.web.idempotency import REPLAYED_HEADER
from tests.api_harness import FLOAT, Api, seed_dealing

OPS = Actor("ops-1", "ops")


def _wallet(api: Api, player_id: str) -> dict[str, Any]:
    found: dict[str, Any] = api.ok("GET", f"/v1/wallets/{player_id}", role=Role.REGULATOR)
    return {key: found[key] for key in ("available_pence", "reserved_pence", "version")}


def _seated(api: Api, *players: str) -> None:
    api.create_table("T1")
    for seat, player in enumerate(players, start=1):
        api.fund(player)
        api.sit("T1", player, seat)


def test_a_bet_answers_with_the_players_wallet_just_after_it() -> None:
    api = Api()
    _seated(api, "alice")
    placed = api.bet("T1", "alice", "banker", 1_000)
    assert placed["balance_after"] == {
        "available_pence": FLOAT - 1_000,
        "reserved_pence": 1_000,
        "version": 2,
    }
    assert placed["balance_after"] == _wallet(api, "alice")


def test_removing_rebetting_and_passing_answer_with_the_wallet_after_each() -> None:
    api = Api(seeds=(seed_dealing((Outcome.PLAYER, Outcome.BANKER)),))
    _seated(api, "alice", "bob")
    api.bet("T1", "alice", "player", 2_000)
    removed = api.call("DELETE", "/v1/tables/T1/bets/alice").get_json()
    assert removed["balance_after"] == {"available_pence": FLOAT, "reserved_pence": 0, "version": 3}
    assert removed["balance_after"] == _wallet(api, "alice")
    api.bet("T1", "alice", "player", 2_000)
    api.bet("T1", "bob", "banker", 500)
    api.act("T1", "deal", "alice")
    api.act("T1", "deal", "bob")  # Player wins: alice is paid £40 on £20
    rebet = api.ok("POST", "/v1/tables/T1/rebet", {"player_id": "alice"}, status=201)
    assert rebet["balance_after"]["available_pence"] == FLOAT + 2_000 - 2_000
    assert rebet["balance_after"]["reserved_pence"] == 2_000
    assert rebet["balance_after"] == _wallet(api, "alice")
    passed = api.act("T1", "pass", "alice")
    assert passed["balance_after"]["available_pence"] == FLOAT + 2_000
    assert passed["balance_after"] == _wallet(api, "alice")


def test_the_deal_answers_with_the_callers_wallet_after_the_settlement_and_no_one_elses() -> None:
    api = Api(seeds=(seed_dealing((Outcome.BANKER,)),))
    _seated(api, "alice", "bob")
    api.bet("T1", "alice", "banker", 1_000)
    api.bet("T1", "bob", "player", 500)
    waiting = api.act("T1", "deal", "alice")
    # Deal pressed while Bob has still to act moves none of Alice's money.
    assert waiting["coup"] is None
    assert waiting["balance_after"] is None
    keyed = {"Idempotency-Key": "bob-deal-1"}
    answer = api.call("POST", "/v1/tables/T1/deal", {"player_id": "bob"}, headers=keyed)
    assert answer.status_code == 200
    dealt = answer.get_json()
    assert dealt["coup"]["outcome"] == "banker"
    # Bob's deal settles Alice too, but the answer is Bob's: his wallet, and only his.
    assert dealt["balance_after"] == {
        "available_pence": FLOAT - 500,
        "reserved_pence": 0,
        "version": 3,
    }
    assert dealt["balance_after"] == _wallet(api, "bob")
    assert "alice" not in str(dealt["balance_after"])
    assert _wallet(api, "alice")["available_pence"] == FLOAT + 950
    # Bob's retry, after he has bet again: the first answer, his balance then included.
    api.bet("T1", "bob", "tie", 100)
    again = api.call("POST", "/v1/tables/T1/deal", {"player_id": "bob"}, headers=keyed)
    assert again.headers[REPLAYED_HEADER] == "true"
    assert again.get_data() == answer.get_data()


def test_a_retried_bet_replays_the_balance_its_first_answer_carried() -> None:
    api = Api()
    _seated(api, "alice")
    body = {"player_id": "alice", "spot": "banker", "stake_pence": 1_000}
    headers = {"Idempotency-Key": "bet-1"}
    first = api.call("POST", "/v1/tables/T1/bets", body, headers=headers)
    assert first.status_code == 201
    assert first.get_json()["balance_after"]["available_pence"] == FLOAT - 1_000
    # The wallet moves on before the retry: the retry still says what the bet left.
    api.bet("T1", "alice", "player", 500)
    again = api.call("POST", "/v1/tables/T1/bets", body, headers=headers)
    assert again.headers[REPLAYED_HEADER] == "true"
    assert again.get_data() == first.get_data()
    assert _wallet(api, "alice")["available_pence"] == FLOAT - 1_500


def test_a_deposit_answers_with_the_wallet_at_its_own_version() -> None:
    api = Api()
    body = {"amount_pence": 2_500, "reason": "card payment"}
    moved = api.ok("POST", "/v1/wallets/carol/deposits", body, role=Role.OPS, status=201)
    assert (moved["available_pence"], moved["reserved_pence"], moved["version"]) == (2_500, 0, 1)


class CountingStore(InMemoryEventStore):
    """Counts the events each stream read hands back."""

    def __init__(self) -> None:
        super().__init__()
        self.events_read = 0

    def read_stream(
        self, stream_id: str, from_version: int = 1, *, upcast: bool = True
    ) -> list[RecordedEvent]:
        found = super().read_stream(stream_id, from_version, upcast=upcast)
        self.events_read += len(found)
        return found


class WatchedSnapshots(InMemorySnapshotStore):
    """Counts the snapshots saved."""

    def __init__(self) -> None:
        super().__init__()
        self.saved = 0

    def save(
        self, snapshot: Snapshot, *, replacing: int = 0, keep_every: int | None = None
    ) -> None:
        self.saved += 1
        super().save(snapshot, replacing=replacing, keep_every=keep_every)


def _cold_read(store: CountingStore, snapshots: WatchedSnapshots, player_id: str) -> int:
    """The events a new process's wallet read folds; it must save no snapshot."""
    saved, store.events_read = snapshots.saved, 0
    fresh = WalletService(store, utc_now, wallets=WalletCache(snapshots=snapshots))
    balance = fresh.balance(player_id)
    assert snapshots.saved == saved, "a wallet read saved a snapshot"
    assert balance.version > 0
    return store.events_read


def test_a_cold_wallet_read_folds_no_more_events_as_the_wallet_ages() -> None:
    store, snapshots = CountingStore(), WatchedSnapshots()
    writer = WalletService(store, utc_now, wallets=WalletCache(snapshots=snapshots))
    folded: list[int] = []
    for age in (3 * SNAPSHOT_EVERY, 30 * SNAPSHOT_EVERY):
        while writer.balance("dora").version < age:
            writer.deposit("dora", 100, "top-up", OPS)
        writer.deposit("dora", 100, "one past the snapshot", OPS)
        folded.append(_cold_read(store, snapshots, "dora"))
    # Ten times the events, the same read: the newest snapshot and the few events after it.
    assert folded[0] == folded[1]
    assert folded[1] <= SNAPSHOT_EVERY + 1
