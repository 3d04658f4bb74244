"""Fixtures for the verifier's tests: exports made by the domain (see exportgen.py)."""

from __future__ import annotations

from typing import Any

import pytest

# The real-PostgreSQL fixtures, for test_real_export.py.
from tests.integration.conftest import (  # noqa: F401
    app_pool,
    fresh_database,
    migrated_template,
)
from tests.verifier.exportgen import Played, Simulation, export_lines


@pytest.fixture(scope="session")
def played() -> Played:
    """One shoe at a table of three, with a malfunction voiding a settled round at coup 40."""
    return Simulation(seed=11).play(shoes=1, void_at=40)


@pytest.fixture(scope="session")
def played_two_shoes() -> Played:
    """Two whole shoes, no void."""
    return Simulation(seed=12).play(shoes=2)


@pytest.fixture
def lines(played: Played) -> list[dict[str, Any]]:
    """The export of the whole of `played`, as dicts a test may edit."""
    return [dict(line) for line in export_lines(played)]
