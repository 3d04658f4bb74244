"""Event type names are written once, in domain/: everything else refers to `CardDrawn.type`."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

from domain.events import EVENT_CLASSES, EVENT_TYPE_NAMES

ROOT = Path(__file__).resolve().parents[2]
# domain/ defines the names; tests spell out what they expect; migrations are SQL history;
# verifier/ is an independent implementation that must not share our definitions.
EXEMPT = frozenset({"domain", "tests", "migrations", "verifier"})
_SQL_LITERAL = re.compile(r"'([A-Za-z]+)'")


def _sources() -> Iterator[Path]:
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT).parts
        if parts[0] in EXEMPT or any(part.startswith(".") for part in parts):
            continue
        yield path


def _event_type_literals(path: Path) -> Iterator[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
            continue
        # A name on its own, or quoted as a literal inside SQL.
        named = {node.value} | set(_SQL_LITERAL.findall(node.value))
        for name in sorted(named & EVENT_TYPE_NAMES):
            yield f"{path.relative_to(ROOT)}:{node.lineno}: {name!r}"


def test_no_event_type_name_is_a_string_literal_outside_domain() -> None:
    found = [literal for path in _sources() for literal in _event_type_literals(path)]

    assert found == [], "refer to the event class's `type` instead:\n" + "\n".join(found)


def test_the_check_reads_the_packages_it_guards() -> None:
    checked = {path.relative_to(ROOT).parts[0] for path in _sources()}

    assert {"events", "service", "bench"} <= checked


def test_every_event_class_is_named_once_in_the_set_of_names() -> None:
    assert {cls.type for cls in EVENT_CLASSES} == EVENT_TYPE_NAMES
    assert all(name.isidentifier() and name[0].isupper() for name in EVENT_TYPE_NAMES)


def test_the_independent_verifiers_own_list_of_event_types_is_the_domains() -> None:
    from shoebox_verify.events import EVENT_TYPES

    assert EVENT_TYPES == EVENT_TYPE_NAMES
