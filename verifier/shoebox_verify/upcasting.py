"""The verifier's own upcasters: old payload shapes lifted for the semantic checks only.

The hash chain always covers the payload as recorded, so chain checks never upcast. The checks
of cards, payouts and money read the newest shape of each event; when the server introduces a
new `schema_version` for an event type, docs/verification.md records the change and a step is
added to UPCASTERS here, written from that description (never imported from the server).

One event type has changed so far: wallet `Deposited`, whose v2 added `reference` (the
payment's reference, null when there was none). An event with a schema_version newer than
LATEST knows is reported, not guessed at.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeAlias

Payload: TypeAlias = Mapping[str, Any]
Step: TypeAlias = Callable[[Payload], Payload]


def _deposited_v1_to_v2(payload: Payload) -> Payload:
    # docs/verification.md, Upcasters: a v1 deposit had no reference.
    return {**payload, "reference": None}


UPCASTERS: dict[tuple[str, str, int], Step] = {
    ("wallet", "Deposited", 1): _deposited_v1_to_v2,
}
"""(category, type, from_version) -> the step lifting that payload to from_version + 1."""

LATEST: dict[tuple[str, str], int] = {("wallet", "Deposited"): 2}
"""(category, type) -> the newest schema_version this verifier reads; 1 when absent."""


class UnknownSchemaError(ValueError):
    """A payload in a schema version this verifier cannot read."""


def upcast(category: str, type_: str, schema_version: int, payload: Payload) -> Payload:
    """The payload in the newest shape this verifier knows for its event type."""
    latest = LATEST.get((category, type_), 1)
    if schema_version == latest:
        return payload
    if schema_version > latest or schema_version < 1:
        raise UnknownSchemaError(
            f"{type_} schema_version {schema_version} is not one this verifier reads "
            f"(1 to {latest})"
        )
    version = schema_version
    while version < latest:
        step = UPCASTERS.get((category, type_, version))
        if step is None:
            raise UnknownSchemaError(f"no upcaster for {type_} v{version} -> v{version + 1}")
        payload = step(payload)
        version += 1
    return payload
