"""The failover drill, with the primary's PostgreSQL SIGKILLed and its Patroni left running.

With Patroni's default `primary_start_timeout` (300 s) its Patroni would start PostgreSQL again
in place, on the same machine; with 0 (deploy/patroni/cluster) it gives up the leader key at
once and the synchronous standby is promoted, and the old primary rejoins as a standby.
Everything else is tests/faults/test_failover.py's drill, in a file of its own so that the two
drills run side by side under `make test`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.faults.test_failover import _missing, drill

pytestmark = [pytest.mark.slow, pytest.mark.skipif(_missing() is not None, reason=_missing() or "")]


def test_the_primary_postgres_killed_under_load_fails_over_rather_than_restarting(
    tmp_path: Path,
) -> None:
    drill(tmp_path, whole_host=False)
