"""Every public view a feed sends matches the JSON Schema the OpenAPI document gives its type."""

from __future__ import annotations

import json
from typing import Any

import jsonschema_rs

from events.store import RecordedEvent
from service.application.feed import (
    MODERATION_REASON,
    PUBLIC_EVENT_CLASSES,
    is_public,
    public_view,
    public_view_schema,
)
from service.application.operators import Audience
from tests.verifier.exportgen import Simulation

EVERYONE = Audience(operator=None, alias_secret=b"s" * 32)
ONE_OPERATOR = Audience(operator="casino-a", alias_secret=b"s" * 32)


def _played() -> list[RecordedEvent]:
    records: list[RecordedEvent] = []
    Simulation("T1", players=3, on_record=records.append).play(shoes=1, void_at=12)
    return [record for record in records if is_public(record)]


def test_each_public_view_of_a_played_and_voided_shoe_matches_its_types_schema() -> None:
    validators = {
        name: jsonschema_rs.validator_for(public_view_schema(name), validate_formats=True)
        for name in PUBLIC_EVENT_CLASSES
    }
    seen: set[str] = set()
    for record in _played():
        for audience, oversight in ((EVERYONE, True), (ONE_OPERATOR, False)):
            view = json.loads(json.dumps(public_view(record, audience, oversight=oversight)))
            errors = [str(error) for error in validators[record.type].iter_errors(view)]
            assert errors == [], (record.type, view)
        seen.add(record.type)
    # The shoe exercised most of the table's events: the schemas are not checked vacuously.
    assert len(seen) >= 20, sorted(seen)


def test_a_moderation_views_reason_is_optional_since_front_ends_never_see_it() -> None:
    schema: Any = public_view_schema("PlayerMuted")
    payload = schema["properties"]["payload"]
    assert MODERATION_REASON in payload["properties"]
    assert MODERATION_REASON not in payload["required"]
    assert "player_id" in payload["required"]
