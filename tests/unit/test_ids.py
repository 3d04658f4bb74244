"""One id grammar for tables, players, rounds, shoes, keys and operators (domain/ids.py)."""

import re

import pytest

from domain.ids import ID_PATTERN, MAX_ID_LENGTH, is_id


@pytest.mark.parametrize(
    "value",
    ["alice", "T1", "T1-42", "a", "_", "-", "a.b", "a..b", "x.", "key_0123abcd", "A" * 64],
)
def test_letters_digits_underscore_dash_and_inner_dots_are_ids(value: str) -> None:
    assert is_id(value)


@pytest.mark.parametrize(
    "value",
    [
        "",
        ".",
        "..",
        "...",
        ".alice",
        "A" * 65,
        "op/alice",
        "op:alice",
        "al ice",
        "alice\n",
        "al\x00ice",
        "ålice",
        "al\ud800ice",
    ],
)
def test_dot_only_names_separators_and_anything_else_are_not_ids(value: str) -> None:
    assert not is_id(value)


def test_only_strings_are_ids() -> None:
    assert not is_id(7)
    assert not is_id(None)


def test_the_documented_pattern_is_the_grammar_checked() -> None:
    documented = re.compile(ID_PATTERN)
    for value in ["alice", "T1-42", "a.b", ".", "..", ".alice", "op/alice", "A" * 65]:
        assert bool(documented.match(value)) == is_id(value), value
    assert MAX_ID_LENGTH == 64
