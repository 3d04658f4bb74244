"""Every change of an event's stored shape, and how a payload of the older shape is lifted.

The log never changes: an event keeps the payload and `schema_version` it was recorded with,
because the hash covers them. Whatever interprets events (loading an aggregate, a snapshot,
a projection, a replay) reads them through this registry, so the domain only ever sees the
newest shape of each event. The export and the chain checks read events as recorded.

How to change an event's payload:
1. give its class `schema_version: ClassVar[int]`, one more than before, and the new field;
2. add a step below from the old version, a top-level function (a projection rebuild hands
   the registry to processes of its own, which find the steps by reference);
3. document the change in docs/audit-log.md and docs/verification.md's Upcasters table, where
   the independent verifier's matching step is written from.
`tests/unit/test_upcasters.py` checks that every class's `schema_version` has its steps.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache

from domain.wallet import Deposited
from events.store import JsonValue
from events.upcasting import Upcaster, Upcasters
from service.application.streams import EVENT_REGISTRY


def deposited_v1_to_v2(payload: Mapping[str, JsonValue]) -> Mapping[str, JsonValue]:
    """Deposited v2 added `reference`; a deposit recorded before it had none."""
    return {**payload, "reference": None}


STEPS: tuple[tuple[str, int, Upcaster], ...] = ((Deposited.type, 1, deposited_v1_to_v2),)
"""(event type, version lifted from, step), oldest first per type."""


@cache
def upcasters() -> Upcasters:
    """The registry every store and projection of the service reads events through."""
    registry = Upcasters()
    for event_type, from_version, step in STEPS:
        # The registry in events/ is keyed by type alone; a type that two stream categories
        # share (StakeReturned: the round's and the wallet's) would be lifted in both.
        categories = {category for category, name in EVENT_REGISTRY if name == event_type}
        if len(categories) != 1:
            raise ValueError(f"{event_type} is in streams {sorted(categories)}, not just one")
        registry.register(event_type, from_version, step)
    return registry
