"""Issue 17's bad input over the real store: a 4xx problem, and nothing changed.

Each request here once reached PostgreSQL (a NUL in jsonb, a date before year 1) or slipped
past the id grammar (`..` as a wallet). Each must now be refused with a problem document,
leaving the log's head and every balance as they were.
"""

from typing import Any

import pytest

from events.postgres import Pool, PostgresEventStore
from service.application.keys import Role
from service.application.read_models.queries import ProjectionService
from tests.api_harness import Api, head_and_balances

# Control characters but tab and newline (C0, DEL, C1), and lone surrogates of both halves.
NOT_TEXT = ["\x00", "a\x00b", "\x07", "\x1b[2J", "\x7f", "\x85", "\ud800", "x\udfff"]


@pytest.fixture
def api(app_pool: Pool) -> Api:
    """Table T1 with Alice seated and funded, Bob funded, over PostgreSQL and its read models."""
    api = Api(
        store=PostgresEventStore(app_pool),
        projections=lambda clock: ProjectionService(app_pool, clock),
    )
    api.create_table("T1")
    api.fund("alice")
    api.fund("bob")
    api.sit("T1", "alice", 1)
    return api


def refused_and_nothing_changed(
    api: Api, method: str, path: str, body: object, role: Role, status: int = 422
) -> dict[str, Any]:
    """Send a request that must be refused with `status`; assert the log and wallets kept."""
    before = head_and_balances(api.store)
    response = api.call(method, path, body, role=role)
    assert response.status_code == status, (path, body, response.get_data(as_text=True))
    assert response.mimetype == "application/problem+json"
    assert "Location" not in response.headers
    document: dict[str, Any] = response.get_json(force=True)
    assert document["status"] == status
    assert head_and_balances(api.store) == before
    return document


FREE_TEXT: list[tuple[str, str, str, dict[str, Any], Role]] = [
    ("deposit-reason", "/v1/wallets/alice/deposits", "reason", {"amount_pence": 100}, Role.OPS),
    (
        "withdrawal-reason",
        "/v1/wallets/alice/withdrawals",
        "reason",
        {"amount_pence": 100},
        Role.OPS,
    ),
    (
        "correction-reason",
        "/v1/wallets/alice/corrections",
        "reason",
        {"amount_pence": -100},
        Role.OPS,
    ),
    ("mute-reason", "/v1/tables/T1/mutes", "reason", {"player_id": "alice"}, Role.OPS),
    ("removal-reason", "/v1/tables/T1/removals", "reason", {"player_id": "alice"}, Role.OPS),
    (
        "client-seed-rotation-reason",
        "/v1/tables/T1/client-seed-rotations",
        "reason",
        {"client_seed": "fresh"},
        Role.OPS,
    ),
    ("chat-text", "/v1/tables/T1/chat", "text", {"player_id": "alice"}, Role.FRONTEND),
    (
        "malfunction-reason",
        "/v1/tables/T1/malfunctions",
        "reason",
        {"scope": "current_round"},
        Role.OPS,
    ),
    ("reopening-reason", "/v1/tables/T1/reopenings", "reason", {}, Role.OPS),
]


@pytest.mark.parametrize(
    ("path", "field", "rest", "role"),
    [case[1:] for case in FREE_TEXT],
    ids=[case[0] for case in FREE_TEXT],
)
def test_free_text_refuses_control_characters_and_lone_surrogates(
    api: Api, path: str, field: str, rest: dict[str, Any], role: Role
) -> None:
    for text in NOT_TEXT:
        document = refused_and_nothing_changed(api, "POST", path, {**rest, field: text}, role)
        assert [error["field"] for error in document["errors"]] == [field], text
        assert document["type"] == "https://shoebox.example/problems/validation-failed"


def test_free_text_keeps_tabs_newlines_and_any_script_exactly(api: Api) -> None:
    reason = "refund\tticket 7\nper Zoë, 払い戻し 🎲"
    moved = api.ok(
        "POST",
        "/v1/wallets/bob/deposits",
        {"amount_pence": 100, "reason": reason},
        role=Role.OPS,
        status=201,
    )
    assert moved["reason"] == reason
    assert api.projections is not None
    api.projections.catch_up()
    statement = api.ok("GET", "/v1/wallets/bob/statement", role=Role.OPS)
    assert statement["entries"][0]["reason"] == reason


@pytest.mark.parametrize(
    "query",
    [
        "to=0001-01-01",
        "from=0001-01-01&to=2024-05-03",
        "from=1969-12-31&to=1970-01-30",
        "to=9999-12-31",
        "from=9999-12-31&to=9999-12-31",
    ],
)
def test_ledger_days_outside_the_supported_range_are_refused(api: Api, query: str) -> None:
    document = refused_and_nothing_changed(
        api, "GET", f"/v1/tables/T1/ledger?{query}", None, Role.REGULATOR
    )
    assert {error["location"] for error in document["errors"]} == {"query"}


def test_ledger_days_at_the_ends_of_the_range_are_answered(api: Api) -> None:
    for query in ["from=1970-01-01&to=1970-01-02", "from=9999-12-01&to=9999-12-30"]:
        ledger = api.ok("GET", f"/v1/tables/T1/ledger?{query}", role=Role.REGULATOR)
        assert ledger["lines"] == []


@pytest.mark.parametrize(
    "query",
    [
        "from=0001-01-01T00:00:00%2B14:00",
        "from=1969-12-31T23:59:59Z",
        "to=9999-12-31T23:59:59-14:00",
    ],
)
def test_audit_instants_outside_the_supported_range_are_refused(api: Api, query: str) -> None:
    refused_and_nothing_changed(
        api, "GET", f"/v1/audit/significant-events?{query}", None, Role.REGULATOR
    )


def test_a_malfunction_time_range_outside_the_supported_range_is_refused(api: Api) -> None:
    for start, end in [
        ("0001-01-01T00:00:00+14:00", "2024-05-03T20:00:00Z"),
        ("2024-05-03T20:00:00Z", "9999-12-31T23:59:59-14:00"),
    ]:
        body = {"reason": "shuffler jam", "scope": "time_range", "from": start, "to": end}
        refused_and_nothing_changed(api, "POST", "/v1/tables/T1/malfunctions", body, Role.OPS)


DEPOSIT = {"amount_pence": 100, "reason": "top up"}


@pytest.mark.parametrize(
    ("method", "path", "body", "role", "status"),
    [
        ("POST", "/v1/wallets/../deposits", DEPOSIT, Role.OPS, 422),
        ("POST", "/v1/wallets/./deposits", DEPOSIT, Role.OPS, 422),
        ("POST", "/v1/wallets/.alice/withdrawals", DEPOSIT, Role.OPS, 422),
        ("POST", "/v1/tables", {"table_id": ".."}, Role.OPS, 422),
        ("POST", "/v1/tables", {"table_id": "."}, Role.OPS, 422),
        ("POST", "/v1/tables/../seats", {"player_id": "bob", "seat": 2}, Role.FRONTEND, 422),
        ("POST", "/v1/tables/T1/seats", {"player_id": "..", "seat": 2}, Role.FRONTEND, 422),
        ("POST", "/v1/wallets/....//deposits", DEPOSIT, Role.OPS, 404),
        ("GET", "/v1/tables/....//", None, Role.REGULATOR, 404),
        ("GET", "/v1/wallets/alice//statement", None, Role.REGULATOR, 404),
    ],
)
def test_dot_only_ids_and_empty_segments_are_refused_never_redirected(
    api: Api, method: str, path: str, body: object, role: Role, status: int
) -> None:
    refused_and_nothing_changed(api, method, path, body, role, status)
