"""Bad input is a 4xx problem, never a 500, and a refused request appends nothing."""

from dataclasses import dataclass
from typing import Any

import pytest

from domain.ids import ID_PATTERN
from service.application.keys import Role
from service.web.fields import IdConverter
from tests.api_harness import Api


@dataclass(frozen=True)
class Raw:
    """A body sent as these exact bytes, not as JSON made from a Python value."""

    text: str | bytes
    content_type: str = "application/json"

    @property
    def data(self) -> bytes:
        return self.text if isinstance(self.text, bytes) else self.text.encode()


BET = "/v1/tables/T1/bets"
VALID_BET = {"player_id": "alice", "spot": "banker", "stake_pence": 1_000}
VALID_TABLE = {
    "table_id": "T2",
    "seats": 7,
    "decks": 8,
    "minimum_pence": 100,
    "maximum_pence": 250_000,
}
DEPOSIT = "/v1/wallets/alice/deposits"
VALID_DEPOSIT = {"amount_pence": 1_000, "reason": "top up"}


def bet(**changes: object) -> dict[str, object]:
    return {**VALID_BET, **changes}


def table(**changes: object) -> dict[str, object]:
    return {**VALID_TABLE, **changes}


def deposit(**changes: object) -> dict[str, object]:
    return {**VALID_DEPOSIT, **changes}


def without(body: dict[str, object], field: str) -> dict[str, object]:
    return {name: value for name, value in body.items() if name != field}


# (id, role, method, path, body, status)
CASES: list[tuple[str, Role, str, str, object, int]] = [
    # The body itself.
    ("malformed-json", Role.FRONTEND, "POST", BET, Raw('{"player_id": "alice", '), 400),
    ("not-utf8", Role.FRONTEND, "POST", BET, Raw(b'{"player_id": "\xff"}'), 400),
    ("a-list", Role.FRONTEND, "POST", BET, [VALID_BET], 422),
    ("a-string", Role.FRONTEND, "POST", BET, "bet", 422),
    ("empty-object", Role.FRONTEND, "POST", BET, {}, 422),
    ("unknown-field", Role.FRONTEND, "POST", BET, bet(note="hi"), 422),
    ("no-stake", Role.FRONTEND, "POST", BET, without(VALID_BET, "stake_pence"), 422),
    ("oversized", Role.FRONTEND, "POST", BET, bet(padding="x" * 20_000), 413),
    ("not-json", Role.FRONTEND, "POST", BET, Raw("stake=1000", "text/plain"), 415),
    ("nested-deep", Role.FRONTEND, "POST", BET, Raw("[" * 8_000 + "]" * 8_000), 400),
    # Amounts: integers of pence only, positive, and not absurd.
    ("stake-string", Role.FRONTEND, "POST", BET, bet(stake_pence="1000"), 422),
    ("stake-float", Role.FRONTEND, "POST", BET, bet(stake_pence=1000.0), 422),
    ("stake-fraction", Role.FRONTEND, "POST", BET, bet(stake_pence=1000.5), 422),
    ("stake-bool", Role.FRONTEND, "POST", BET, bet(stake_pence=True), 422),
    ("stake-null", Role.FRONTEND, "POST", BET, bet(stake_pence=None), 422),
    ("stake-list", Role.FRONTEND, "POST", BET, bet(stake_pence=[1000]), 422),
    (
        "stake-nan",
        Role.FRONTEND,
        "POST",
        BET,
        Raw('{"player_id": "alice", "spot": "banker", "stake_pence": NaN}'),
        422,
    ),
    (
        "stake-infinity",
        Role.FRONTEND,
        "POST",
        BET,
        Raw('{"player_id": "alice", "spot": "banker", "stake_pence": Infinity}'),
        422,
    ),
    (
        "stake-1e400",
        Role.FRONTEND,
        "POST",
        BET,
        Raw('{"player_id": "alice", "spot": "banker", "stake_pence": 1e400}'),
        422,
    ),
    (
        "stake-5000-digits",
        Role.FRONTEND,
        "POST",
        BET,
        Raw('{"player_id": "alice", "spot": "banker", "stake_pence": ' + "9" * 5_000 + "}"),
        400,
    ),
    ("stake-zero", Role.FRONTEND, "POST", BET, bet(stake_pence=0), 422),
    ("stake-negative", Role.FRONTEND, "POST", BET, bet(stake_pence=-1_000), 422),
    ("stake-huge", Role.FRONTEND, "POST", BET, bet(stake_pence=10**13), 422),
    ("stake-2-to-the-64", Role.FRONTEND, "POST", BET, bet(stake_pence=2**64), 422),
    ("stake-not-whole-pounds", Role.FRONTEND, "POST", BET, bet(stake_pence=1_050), 422),
    ("stake-above-maximum", Role.FRONTEND, "POST", BET, bet(stake_pence=300_000), 422),
    ("stake-over-balance", Role.FRONTEND, "POST", BET, bet(stake_pence=20_000), 409),
    # Spots.
    ("spot-unknown", Role.FRONTEND, "POST", BET, bet(spot="banco"), 422),
    ("spot-capitalised", Role.FRONTEND, "POST", BET, bet(spot="Banker"), 422),
    ("spot-number", Role.FRONTEND, "POST", BET, bet(spot=1), 422),
    # Ids: in the body and in the path.
    ("player-id-space", Role.FRONTEND, "POST", BET, bet(player_id="al ice"), 422),
    ("player-id-empty", Role.FRONTEND, "POST", BET, bet(player_id=""), 422),
    ("player-id-too-long", Role.FRONTEND, "POST", BET, bet(player_id="a" * 65), 422),
    ("player-id-newline", Role.FRONTEND, "POST", BET, bet(player_id="alice\n"), 422),
    ("player-id-slash", Role.FRONTEND, "POST", BET, bet(player_id="../alice"), 422),
    ("player-id-unicode", Role.FRONTEND, "POST", BET, bet(player_id="ålice"), 422),
    ("player-id-number", Role.FRONTEND, "POST", BET, bet(player_id=7), 422),
    ("player-id-dot", Role.FRONTEND, "POST", BET, bet(player_id="."), 422),
    ("player-id-dot-dot", Role.FRONTEND, "POST", BET, bet(player_id=".."), 422),
    ("player-id-colon", Role.FRONTEND, "POST", BET, bet(player_id="op:alice"), 422),
    ("player-id-slash-joined", Role.FRONTEND, "POST", BET, bet(player_id="op/alice"), 422),
    ("player-not-seated", Role.FRONTEND, "POST", BET, bet(player_id="mallory"), 409),
    ("table-id-path-space", Role.FRONTEND, "POST", "/v1/tables/T%201/bets", VALID_BET, 422),
    (
        "table-id-path-too-long",
        Role.FRONTEND,
        "POST",
        f"/v1/tables/{'T' * 65}/bets",
        VALID_BET,
        422,
    ),
    ("player-id-path", Role.OPS, "POST", "/v1/wallets/al%3Bice/deposits", VALID_DEPOSIT, 422),
    ("player-id-path-dot", Role.OPS, "POST", "/v1/wallets/./deposits", VALID_DEPOSIT, 422),
    ("player-id-path-dot-dot", Role.OPS, "POST", "/v1/wallets/../deposits", VALID_DEPOSIT, 422),
    ("player-id-path-dot-dot-read", Role.OPS, "GET", "/v1/wallets/..", None, 422),
    ("player-id-path-hidden", Role.OPS, "POST", "/v1/wallets/.alice/deposits", VALID_DEPOSIT, 422),
    ("player-id-path-colon", Role.OPS, "POST", "/v1/wallets/op:alice/deposits", VALID_DEPOSIT, 422),
    (
        "player-id-path-slash",
        Role.OPS,
        "POST",
        "/v1/wallets/op%2Falice/deposits",
        VALID_DEPOSIT,
        404,  # %2F is a `/` by the time the router sees it: no route has that many segments
    ),
    ("player-id-path-nul", Role.OPS, "POST", "/v1/wallets/al%00ice/deposits", VALID_DEPOSIT, 422),
    ("player-id-path-empty", Role.OPS, "POST", "/v1/wallets//deposits", VALID_DEPOSIT, 404),
    (
        "player-id-path-dots-slashes",
        Role.OPS,
        "POST",
        "/v1/wallets/....//deposits",
        VALID_DEPOSIT,
        404,
    ),
    ("table-id-path-dot-dot", Role.FRONTEND, "POST", "/v1/tables/../bets", VALID_BET, 422),
    ("table-id-path-dots-slashes", Role.REGULATOR, "GET", "/v1/tables/....//", None, 404),
    ("table-id-path-double-slash", Role.REGULATOR, "GET", "/v1/tables//T1", None, 404),
    ("table-id-path-trailing-slash", Role.REGULATOR, "GET", "/v1/tables/T1/", None, 404),
    ("round-id-path-dot-dot", Role.REGULATOR, "GET", "/v1/rounds/../replay", None, 422),
    ("round-id-path-too-long", Role.REGULATOR, "GET", f"/v1/rounds/{'R' * 65}", None, 422),
    ("shoe-id-path-dot-dot", Role.REGULATOR, "GET", "/v1/shoes/..", None, 422),
    ("shoe-id-path-colon", Role.REGULATOR, "GET", "/v1/shoes/a:b/verify", None, 422),
    ("player-id-path-get", Role.REGULATOR, "GET", "/v1/wallets/%E2%82%AC", None, 422),
    # Unknown tables.
    ("unknown-table-bet", Role.FRONTEND, "POST", "/v1/tables/T9/bets", VALID_BET, 404),
    ("unknown-table-read", Role.REGULATOR, "GET", "/v1/tables/T9", None, 404),
    ("unknown-table-state", Role.REGULATOR, "GET", "/v1/tables/T9/state", None, 404),
    (
        "unknown-table-sit",
        Role.FRONTEND,
        "POST",
        "/v1/tables/T9/seats",
        {"player_id": "bob", "seat": 1},
        404,
    ),
    ("unknown-table-leave", Role.FRONTEND, "DELETE", "/v1/tables/T9/seats/alice", None, 404),
    (
        "unknown-table-deal",
        Role.FRONTEND,
        "POST",
        "/v1/tables/T9/deal",
        {"player_id": "alice"},
        404,
    ),
    (
        "unknown-table-chat",
        Role.FRONTEND,
        "POST",
        "/v1/tables/T9/chat",
        {"player_id": "alice", "text": "hi"},
        404,
    ),
    ("unknown-table-chat-read", Role.OPS, "GET", "/v1/tables/T9/chat", None, 404),
    (
        "unknown-table-mute",
        Role.OPS,
        "POST",
        "/v1/tables/T9/mutes",
        {"player_id": "alice", "reason": "spam"},
        404,
    ),
    # Seats.
    (
        "seat-zero",
        Role.FRONTEND,
        "POST",
        "/v1/tables/T1/seats",
        {"player_id": "bob", "seat": 0},
        422,
    ),
    (
        "seat-eight",
        Role.FRONTEND,
        "POST",
        "/v1/tables/T1/seats",
        {"player_id": "bob", "seat": 8},
        422,
    ),
    (
        "seat-beyond-table",
        Role.FRONTEND,
        "POST",
        "/v1/tables/T1/seats",
        {"player_id": "bob", "seat": 6},
        422,
    ),
    (
        "seat-string",
        Role.FRONTEND,
        "POST",
        "/v1/tables/T1/seats",
        {"player_id": "bob", "seat": "2"},
        422,
    ),
    (
        "seat-taken",
        Role.FRONTEND,
        "POST",
        "/v1/tables/T1/seats",
        {"player_id": "bob", "seat": 1},
        409,
    ),
    ("leave-not-seated", Role.FRONTEND, "DELETE", "/v1/tables/T1/seats/bob", None, 409),
    ("move-not-seated", Role.FRONTEND, "PUT", "/v1/tables/T1/seats/bob", {"seat": 2}, 409),
    ("move-to-own-seat", Role.FRONTEND, "PUT", "/v1/tables/T1/seats/alice", {"seat": 1}, 409),
    ("move-beyond-seats", Role.FRONTEND, "PUT", "/v1/tables/T1/seats/alice", {"seat": 6}, 422),
    ("move-seat-zero", Role.FRONTEND, "PUT", "/v1/tables/T1/seats/alice", {"seat": 0}, 422),
    ("move-seat-string", Role.FRONTEND, "PUT", "/v1/tables/T1/seats/alice", {"seat": "2"}, 422),
    ("move-no-seat", Role.FRONTEND, "PUT", "/v1/tables/T1/seats/alice", {}, 422),
    ("move-as-ops", Role.OPS, "PUT", "/v1/tables/T1/seats/alice", {"seat": 2}, 403),
    ("move-unknown-table", Role.FRONTEND, "PUT", "/v1/tables/T9/seats/alice", {"seat": 2}, 404),
    # Tables.
    ("table-seats-zero", Role.OPS, "POST", "/v1/tables", table(seats=0), 422),
    ("table-seats-eight", Role.OPS, "POST", "/v1/tables", table(seats=8), 422),
    ("table-decks-nine", Role.OPS, "POST", "/v1/tables", table(decks=9), 422),
    ("table-currency", Role.OPS, "POST", "/v1/tables", table(currency="EUR"), 422),
    ("table-minimum-pence", Role.OPS, "POST", "/v1/tables", table(minimum_pence=150), 422),
    ("table-maximum-below-minimum", Role.OPS, "POST", "/v1/tables", table(maximum_pence=50), 422),
    ("table-window-zero", Role.OPS, "POST", "/v1/tables", table(betting_window_ms=0), 422),
    ("table-window-float", Role.OPS, "POST", "/v1/tables", table(betting_window_ms=1.5), 422),
    (
        "table-window-under-a-second",
        Role.OPS,
        "POST",
        "/v1/tables",
        table(betting_window_ms=999),
        422,
    ),
    (
        "table-window-old-name",
        Role.OPS,
        "POST",
        "/v1/tables",
        table(betting_window_seconds=15),
        422,
    ),
    ("table-chips-unsorted", Role.OPS, "POST", "/v1/tables", table(chips_pence=[500, 100]), 422),
    ("table-id-bad", Role.OPS, "POST", "/v1/tables", table(table_id="T 2"), 422),
    ("table-id-dot", Role.OPS, "POST", "/v1/tables", table(table_id="."), 422),
    ("table-id-dot-dot", Role.OPS, "POST", "/v1/tables", table(table_id=".."), 422),
    ("table-id-dots", Role.OPS, "POST", "/v1/tables", table(table_id="...."), 422),
    ("table-id-colon", Role.OPS, "POST", "/v1/tables", table(table_id="T:2"), 422),
    ("table-exists", Role.OPS, "POST", "/v1/tables", table(table_id="T1"), 409),
    # Wallets.
    ("deposit-zero", Role.OPS, "POST", DEPOSIT, deposit(amount_pence=0), 422),
    ("deposit-negative", Role.OPS, "POST", DEPOSIT, deposit(amount_pence=-5), 422),
    ("deposit-fraction", Role.OPS, "POST", DEPOSIT, deposit(amount_pence=10.5), 422),
    ("deposit-string", Role.OPS, "POST", DEPOSIT, deposit(amount_pence="10"), 422),
    ("deposit-huge", Role.OPS, "POST", DEPOSIT, deposit(amount_pence=10**12 + 1), 422),
    ("deposit-no-reason", Role.OPS, "POST", DEPOSIT, without(VALID_DEPOSIT, "reason"), 422),
    ("deposit-empty-reason", Role.OPS, "POST", DEPOSIT, deposit(reason=""), 422),
    ("deposit-blank-reason", Role.OPS, "POST", DEPOSIT, deposit(reason="   "), 422),
    ("deposit-long-reason", Role.OPS, "POST", DEPOSIT, deposit(reason="x" * 501), 422),
    (
        "withdraw-overdraw",
        Role.OPS,
        "POST",
        "/v1/wallets/alice/withdrawals",
        deposit(amount_pence=10_001),
        409,
    ),
    (
        "correct-zero",
        Role.OPS,
        "POST",
        "/v1/wallets/alice/corrections",
        deposit(amount_pence=0),
        422,
    ),
    (
        "correct-huge",
        Role.OPS,
        "POST",
        "/v1/wallets/alice/corrections",
        deposit(amount_pence=-(10**12) - 1),
        422,
    ),
    ("statement-limit-zero", Role.OPS, "GET", "/v1/wallets/alice/statement?limit=0", None, 422),
    ("statement-limit-word", Role.OPS, "GET", "/v1/wallets/alice/statement?limit=ten", None, 422),
    (
        "statement-limit-fraction",
        Role.OPS,
        "GET",
        "/v1/wallets/alice/statement?limit=1.5",
        None,
        422,
    ),
    (
        "statement-limit-huge",
        Role.OPS,
        "GET",
        "/v1/wallets/alice/statement?limit=100000",
        None,
        422,
    ),
    ("statement-before-zero", Role.OPS, "GET", "/v1/wallets/alice/statement?before=0", None, 422),
    # Player limits.
    (
        "limit-below-a-pound",
        Role.FRONTEND,
        "PUT",
        "/v1/players/alice/limit",
        {"limit_pence": 50},
        422,
    ),
    (
        "limit-not-whole-pounds",
        Role.FRONTEND,
        "PUT",
        "/v1/players/alice/limit",
        {"limit_pence": 150},
        422,
    ),
    ("limit-missing", Role.FRONTEND, "PUT", "/v1/players/alice/limit", {}, 422),
    ("limit-float", Role.FRONTEND, "PUT", "/v1/players/alice/limit", {"limit_pence": 500.0}, 422),
    ("rounds-limit-zero", Role.FRONTEND, "GET", "/v1/players/alice/rounds?limit=0", None, 422),
    # Chat and moderation.
    (
        "chat-too-long",
        Role.FRONTEND,
        "POST",
        "/v1/tables/T1/chat",
        {"player_id": "alice", "text": "x" * 501},
        422,
    ),
    (
        "chat-empty",
        Role.FRONTEND,
        "POST",
        "/v1/tables/T1/chat",
        {"player_id": "alice", "text": ""},
        422,
    ),
    (
        "chat-nul",
        Role.FRONTEND,
        "POST",
        "/v1/tables/T1/chat",
        {"player_id": "alice", "text": "a\x00b"},
        422,
    ),
    (
        "chat-number",
        Role.FRONTEND,
        "POST",
        "/v1/tables/T1/chat",
        {"player_id": "alice", "text": 5},
        422,
    ),
    (
        "chat-not-seated",
        Role.FRONTEND,
        "POST",
        "/v1/tables/T1/chat",
        {"player_id": "bob", "text": "hi"},
        409,
    ),
    ("chat-limit-word", Role.FRONTEND, "GET", "/v1/tables/T1/chat?limit=x", None, 422),
    ("mute-no-reason", Role.OPS, "POST", "/v1/tables/T1/mutes", {"player_id": "alice"}, 422),
    ("unmute-not-muted", Role.OPS, "DELETE", "/v1/tables/T1/mutes/alice", None, 409),
    (
        "remove-empty-reason",
        Role.OPS,
        "POST",
        "/v1/tables/T1/removals",
        {"player_id": "alice", "reason": ""},
        422,
    ),
    # Acting out of turn.
    (
        "deal-without-round",
        Role.FRONTEND,
        "POST",
        "/v1/tables/T1/deal",
        {"player_id": "alice"},
        409,
    ),
    (
        "rebet-without-history",
        Role.FRONTEND,
        "POST",
        "/v1/tables/T1/rebet",
        {"player_id": "alice"},
        409,
    ),
    ("remove-bets-without-round", Role.FRONTEND, "DELETE", "/v1/tables/T1/bets/alice", None, 409),
]
IDS = [case[0] for case in CASES]


@pytest.fixture
def api() -> Api:
    """Table T1 (five seats, £1 to £2,500), with Alice seated at seat 1 holding £100.

    Bob and Mallory have wallets (so they exist) but no seat.
    """
    api = Api()
    api.create_table("T1", seats=5)
    api.fund("alice")
    api.fund("bob")
    api.fund("mallory")
    api.sit("T1", "alice", 1)
    return api


def send(api: Api, role: Role, method: str, path: str, body: object) -> tuple[int, dict[str, Any]]:
    if isinstance(body, Raw):
        response = api.call(method, path, role=role, data=body.data, content_type=body.content_type)
    else:
        response = api.call(method, path, body, role=role)
    assert response.status_code < 500, response.get_data(as_text=True)
    return response.status_code, response.get_json(force=True)


@pytest.mark.parametrize(
    ("role", "method", "path", "body", "status"), [case[1:] for case in CASES], ids=IDS
)
def test_bad_input_is_a_4xx_problem_and_appends_nothing(
    api: Api, role: Role, method: str, path: str, body: object, status: int
) -> None:
    head = api.store.head()
    got, document = send(api, role, method, path, body)
    assert (got, document["status"]) == (status, status), document
    assert api.responses[-1].mimetype == "application/problem+json"
    assert {"type", "title", "status", "detail"} <= set(document)
    assert api.store.head() == head


def test_field_errors_name_the_field_and_where_it_was(api: Api) -> None:
    _, document = send(api, Role.FRONTEND, "POST", BET, bet(stake_pence=1.5, spot="banco", extra=1))
    errors = document["errors"]
    assert isinstance(errors, list)
    fields = {(error["field"], error["location"]) for error in errors}
    assert fields == {("stake_pence", "json"), ("spot", "json"), ("extra", "json")}
    _, document = send(api, Role.FRONTEND, "POST", "/v1/tables/T%201/bets", VALID_BET)
    assert document["errors"] == [
        {
            "field": "table_id",
            "message": "Does not match ^[A-Za-z0-9_-][A-Za-z0-9._-]{0,63}$.",
            "location": "path",
        }
    ]


def test_a_refused_game_rule_names_the_rule(api: Api) -> None:
    _, document = send(api, Role.FRONTEND, "POST", BET, bet(stake_pence=1_050))
    assert document["rule"] == "bet.not_whole_pounds"
    assert "bet.not_whole_pounds" in str(document["detail"])


def test_the_valid_requests_the_refusals_vary_are_accepted(api: Api) -> None:
    """The fixture is sound: each refusal above is caused by what it changed, nothing else."""
    # Before the bet, which puts Alice's stake on a round and so keeps her in her seat.
    assert send(api, Role.FRONTEND, "PUT", "/v1/tables/T1/seats/alice", {"seat": 2})[0] == 200
    assert send(api, Role.FRONTEND, "POST", BET, VALID_BET)[0] == 201
    assert send(api, Role.OPS, "POST", "/v1/tables", VALID_TABLE)[0] == 201
    assert send(api, Role.OPS, "POST", DEPOSIT, VALID_DEPOSIT)[0] == 201
    seat = {"player_id": "bob", "seat": 5}
    assert send(api, Role.FRONTEND, "POST", "/v1/tables/T1/seats", seat)[0] == 201
    limit = {"limit_pence": 500}
    assert send(api, Role.FRONTEND, "PUT", "/v1/players/alice/limit", limit)[0] == 200
    message = {"player_id": "alice", "text": "hi"}
    assert send(api, Role.FRONTEND, "POST", "/v1/tables/T1/chat", message)[0] == 201


def test_a_malformed_path_id_names_every_bad_parameter(api: Api) -> None:
    got, document = send(api, Role.FRONTEND, "DELETE", "/v1/tables/../seats/.alice", None)
    assert got == 422
    assert document["type"] == "https://shoebox.example/problems/validation-failed"
    assert document["title"] == "The request did not validate"
    assert [(e["field"], e["location"]) for e in document["errors"]] == [
        ("table_id", "path"),
        ("player_id", "path"),
    ]


def test_a_malformed_path_id_is_checked_after_the_key(api: Api) -> None:
    response = api.client.post("/v1/wallets/../deposits", json=VALID_DEPOSIT)
    assert response.status_code == 401
    assert response.mimetype == "application/problem+json"


def test_every_path_variable_is_an_id_documented_with_its_pattern(api: Api) -> None:
    for rule in api.app.url_map.iter_rules():
        for name, converter in rule._converters.items():
            assert isinstance(converter, IdConverter), (rule.rule, name)
    spec = api.ok("GET", "/v1/openapi.json", role=Role.REGULATOR)
    for path, item in spec["paths"].items():
        for parameter in item.get("parameters", []):
            if parameter["in"] == "path":
                assert parameter["schema"]["pattern"] == ID_PATTERN, (path, parameter)
                assert parameter["description"], (path, parameter)


def test_no_malformed_path_is_answered_with_a_redirect_or_html(api: Api) -> None:
    for path in ["/v1/tables/....//", "/v1//tables", "/v1/tables//T1/state", "/v1/tables/T1/"]:
        response = api.call("GET", path, role=Role.REGULATOR)
        assert response.status_code == 404, path
        assert response.mimetype == "application/problem+json", path


# Every endpoint that names a player, with a player nobody has ever deposited to or opened a
# session for (issue 24): the deposit alone may name a new player (it creates it).
NOBODY_CASES = [
    (Role.FRONTEND, "POST", BET, bet(player_id="nobody")),
    (Role.FRONTEND, "DELETE", "/v1/tables/T1/bets/nobody", None),
    (Role.FRONTEND, "POST", "/v1/tables/T1/rebet", {"player_id": "nobody"}),
    (Role.FRONTEND, "POST", "/v1/tables/T1/deal", {"player_id": "nobody"}),
    (Role.FRONTEND, "POST", "/v1/tables/T1/pass", {"player_id": "nobody"}),
    (Role.FRONTEND, "POST", "/v1/tables/T1/seats", {"player_id": "nobody", "seat": 2}),
    (Role.FRONTEND, "PUT", "/v1/tables/T1/seats/nobody", {"seat": 2}),
    (Role.FRONTEND, "DELETE", "/v1/tables/T1/seats/nobody", None),
    (Role.FRONTEND, "POST", "/v1/tables/T1/chat", {"player_id": "nobody", "text": "hi"}),
    (Role.OPS, "POST", "/v1/tables/T1/mutes", {"player_id": "nobody", "reason": "spam"}),
    (Role.OPS, "DELETE", "/v1/tables/T1/mutes/nobody", None),
    (Role.OPS, "POST", "/v1/tables/T1/removals", {"player_id": "nobody", "reason": "abuse"}),
    (Role.FRONTEND, "GET", "/v1/players/nobody/limit", None),
    (Role.FRONTEND, "PUT", "/v1/players/nobody/limit", {"limit_pence": 500}),
    (Role.REGULATOR, "GET", "/v1/players/nobody/rounds", None),
    (Role.REGULATOR, "GET", "/v1/players/nobody/history", None),
    (Role.REGULATOR, "GET", "/v1/wallets/nobody", None),
    (Role.REGULATOR, "GET", "/v1/wallets/nobody/statement", None),
    (Role.OPS, "POST", "/v1/wallets/nobody/withdrawals", {"amount_pence": 100, "reason": "x"}),
    (Role.OPS, "POST", "/v1/wallets/nobody/corrections", {"amount_pence": 100, "reason": "x"}),
]


@pytest.mark.parametrize(
    ("role", "method", "path", "body"),
    NOBODY_CASES,
    ids=[f"{method} {path}" for _, method, path, _ in NOBODY_CASES],
)
def test_a_player_never_seen_is_a_404_player_not_found_and_changes_nothing(
    api: Api, role: Role, method: str, path: str, body: object
) -> None:
    head = api.store.head()
    got, document = send(api, role, method, path, body)
    assert (got, document["type"]) == (
        404,
        "https://shoebox.example/problems/player-not-found",
    ), document
    assert api.responses[-1].mimetype == "application/problem+json"
    assert api.store.head() == head


def test_a_deposit_brings_a_player_into_being(api: Api) -> None:
    assert send(api, Role.REGULATOR, "GET", "/v1/wallets/newcomer", None)[0] == 404
    deposit = {"amount_pence": 1_000, "reason": "first deposit"}
    assert send(api, Role.OPS, "POST", "/v1/wallets/newcomer/deposits", deposit)[0] == 201
    got, balance = send(api, Role.REGULATOR, "GET", "/v1/wallets/newcomer", None)
    assert (got, balance["available_pence"]) == (200, 1_000)
    limit = {"limit_pence": 500}
    assert send(api, Role.FRONTEND, "PUT", "/v1/players/newcomer/limit", limit)[0] == 200


def test_every_path_naming_a_player_is_checked_above(api: Api) -> None:
    """A new endpoint with a `{player_id}` must join NOBODY_CASES (or create players)."""
    checked = {
        (method, path.replace("nobody", "<id:player_id>")) for _, method, path, _ in NOBODY_CASES
    }
    creators = {("POST", "/v1/wallets/<id:player_id>/deposits")}
    for rule in api.app.url_map.iter_rules():
        if "player_id>" not in rule.rule:
            continue
        path = rule.rule.replace("<id:table_id>", "T1")
        for method in sorted((rule.methods or set()) - {"HEAD", "OPTIONS"}):
            assert (method, path) in checked | creators, (method, rule.rule)
