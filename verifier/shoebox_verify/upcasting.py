"""The verifier's own upcasters: old payload shapes lifted for the semantic checks only.

The hash chain always covers the payload as recorded, so chain checks never upcast. The checks
of cards, payouts and money read the newest shape of each event; when the server introduces a
new `schema_version` for an event type, docs/verification.md records the change and a step is
added to UPCASTERS here, written from that description (never imported from the server).

Today every event type the verifier reads is at schema_version 1 and there are no steps. An
event with a schema_version newer than LATEST knows is reported, not guessed at.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeAlias

Payload: TypeAlias = Mapping[str, Any]
Step: TypeAlias = Callable[[Payload], Payload]

UPCASTERS: dict[tuple[str, str, int], Step] = {}
"""(category, type, from_version) -> the step lifting that payload to from_version + 1."""

LATEST: dict[tuple[str, str], int] = {}
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
