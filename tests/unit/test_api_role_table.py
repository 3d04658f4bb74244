"""docs/api.md's role table lists exactly the operations of openapi.yaml, with their roles."""

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
METHODS = {"get", "post", "put", "patch", "delete"}
# | `GET /v1/tables` | frontend, ops, regulator | |
# Served beside the operations, but the document does not describe itself.
NOT_AN_OPERATION = {("GET", "/v1/openapi.json")}
ROW = re.compile(r"^\| `(GET|POST|PUT|PATCH|DELETE) (/v1/[^`]*)` \| ([a-z, ]+) \|")


def documented() -> dict[tuple[str, str], set[str]]:
    rows: dict[tuple[str, str], set[str]] = {}
    for line in (ROOT / "docs" / "api.md").read_text().splitlines():
        found = ROW.match(line)
        if found:
            method, path, roles = found.groups()
            assert (method, path) not in rows, f"{method} {path} is listed twice"
            rows[method, path] = {role.strip() for role in roles.split(",")}
    return rows


def specified() -> dict[tuple[str, str], set[str]]:
    spec = yaml.safe_load((ROOT / "openapi.yaml").read_text())
    return {
        (method.upper(), path): set(operation["x-roles"])
        for path, operations in spec["paths"].items()
        for method, operation in operations.items()
        if method in METHODS
    }


def test_the_role_table_lists_every_operation_of_the_spec_and_no_other() -> None:
    table, spec = documented(), specified()
    table = {
        operation: roles for operation, roles in table.items() if operation not in NOT_AN_OPERATION
    }
    assert sorted(set(spec) - set(table)) == [], "in openapi.yaml, missing from docs/api.md"
    assert sorted(set(table) - set(spec)) == [], "in docs/api.md, not in openapi.yaml"


def test_the_role_table_gives_each_operation_the_roles_the_spec_admits() -> None:
    table, spec = documented(), specified()
    wrong = {
        f"{m} {p}": (table[m, p], spec[m, p])
        for m, p in spec
        if table.get((m, p), spec[m, p]) != spec[m, p]
    }
    assert wrong == {}
