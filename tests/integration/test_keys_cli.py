"""`shoebox keys` against the real database: the secret is shown once and only its hash kept."""

import re

import psycopg
from click.testing import CliRunner, Result

from events.postgres import Pool, PostgresEventStore
from service.application.keys import KeyRing, hash_key
from service.cli import main


def keys(database: str, *arguments: str) -> Result:
    return CliRunner().invoke(main, ["keys", *arguments], env={"DATABASE_URL": database})


def created_secret(result: Result) -> str:
    assert result.exit_code == 0, result.output
    secret = result.stdout.strip().splitlines()[-1]
    assert re.fullmatch(r"sbx_[A-Za-z0-9_-]{43}", secret)
    return secret


def key_id_of(result: Result) -> str:
    match = re.search(r"key id: (key_[0-9a-f]{16})", result.stderr)
    assert match is not None, result.stderr
    return match.group(1)


def test_create_prints_the_key_once_and_the_log_keeps_only_its_hash(fresh_database: str) -> None:
    result = keys(fresh_database, "create", "--role", "ops", "--name", "pit boss")
    secret = created_secret(result)
    with psycopg.connect(fresh_database) as conn:
        rows = conn.execute(
            "SELECT stream_id, type, payload::text, metadata::text FROM events"
        ).fetchall()
    ((stream_id, event_type, payload, metadata),) = rows
    assert stream_id == f"apikey:{key_id_of(result)}"
    assert event_type == "ApiKeyCreated"
    assert hash_key(secret) in payload
    assert secret not in payload + metadata
    assert secret[4:] not in payload + metadata
    assert '"role": "ops"' in payload


def test_a_created_key_authenticates_and_a_revoked_one_does_not(
    fresh_database: str, app_pool: Pool
) -> None:
    created = keys(fresh_database, "create", "--role", "regulator", "--name", "gambling commission")
    secret = created_secret(created)
    ring = KeyRing(PostgresEventStore(app_pool))
    key = ring.authenticate(secret)
    assert key is not None
    assert key.role.value == "regulator"
    revoked = keys(fresh_database, "revoke", key_id_of(created), "--reason", "audit finished")
    assert revoked.exit_code == 0, revoked.output
    ring.refresh()
    assert ring.authenticate(secret) is None


def test_list_shows_every_key_and_revocations_but_never_a_secret(fresh_database: str) -> None:
    first = keys(fresh_database, "create", "--role", "frontend", "--name", "casino one")
    second = keys(fresh_database, "create", "--role", "ops", "--name", "ops desk")
    keys(fresh_database, "revoke", key_id_of(first), "--reason", "rotated")
    listing = keys(fresh_database, "list")
    assert listing.exit_code == 0, listing.output
    lines = listing.stdout.strip().splitlines()
    assert len(lines) == 2
    assert lines[0].startswith(f"{key_id_of(first)}\tfrontend\tcasino one\t")
    assert lines[0].endswith(": rotated")
    assert lines[1].startswith(f"{key_id_of(second)}\tops\tops desk\t")
    assert lines[1].endswith("\tlive")
    for secret in (created_secret(first), created_secret(second)):
        assert secret not in listing.output


def test_revoking_an_unknown_or_revoked_key_fails_with_a_message(fresh_database: str) -> None:
    unknown = keys(fresh_database, "revoke", "key_0000000000000000", "--reason", "typo")
    assert unknown.exit_code == 1
    assert "there is no API key" in unknown.output
    created = keys(fresh_database, "create", "--role", "ops", "--name", "a")
    assert keys(fresh_database, "revoke", key_id_of(created), "--reason", "x").exit_code == 0
    again = keys(fresh_database, "revoke", key_id_of(created), "--reason", "y")
    assert again.exit_code == 1
    assert "already revoked" in again.output


def test_a_role_outside_the_three_is_refused(fresh_database: str) -> None:
    result = keys(fresh_database, "create", "--role", "admin", "--name", "a")
    assert result.exit_code == 2
    assert "admin" in result.output


def test_a_key_belongs_to_the_operator_it_is_created_for_or_to_the_default(
    fresh_database: str, app_pool: Pool
) -> None:
    casino = keys(
        fresh_database, "create", "--role", "frontend", "--name", "a", "--operator", "casino-a"
    )
    plain = keys(fresh_database, "create", "--role", "frontend", "--name", "b")
    overseer = keys(fresh_database, "create", "--role", "regulator", "--name", "c")
    ring = KeyRing(PostgresEventStore(app_pool))
    operators = [ring.authenticate(created_secret(r)) for r in (casino, plain, overseer)]
    assert [key.operator if key else "?" for key in operators] == ["casino-a", "default", None]
    assert ring.operators() == {"default", "casino-a"}
    listing = keys(fresh_database, "list").stdout.strip().splitlines()
    assert [line.split("\t")[3] for line in listing] == ["casino-a", "default", "all operators"]


def test_an_operator_id_outside_the_id_grammar_is_refused(fresh_database: str) -> None:
    for bad in ("..", "a/b", "has space"):
        result = keys(fresh_database, "create", "--role", "ops", "--name", "x", "--operator", bad)
        assert result.exit_code == 2, (bad, result.output)
        assert "--operator" in result.output
