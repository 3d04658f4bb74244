"""The service's upcasters: every changed event can be lifted from each of its old versions, and
an old Deposited (v1, before `reference`) still reads everywhere the service interprets events."""

from datetime import UTC, datetime

import pytest

from domain.payloads import schema_version_of
from domain.wallet import Deposited
from events.memory import InMemoryEventStore
from events.store import EventMetadata, NewEvent, StreamAppend
from service.application.actor import Actor
from service.application.streams import EVENT_REGISTRY, from_recorded, to_new_event
from service.application.upcasters import STEPS, upcasters
from service.application.wallets import WalletService

T0 = datetime(2024, 5, 3, 20, 0, tzinfo=UTC)
OPS = Actor("ops-1", "ops")
V1_DEPOSIT = NewEvent("Deposited", {"amount": 2_500, "reason": "cash"}, schema_version=1)


def _store_with_v1_deposit() -> InMemoryEventStore:
    store = InMemoryEventStore(lambda: T0, upcasters())
    store.append([StreamAppend("wallet:alice", 0, [V1_DEPOSIT])], EventMetadata("ops", "ops"))
    return store


def test_every_event_class_schema_version_has_a_step_from_each_older_version() -> None:
    registry = upcasters()
    for cls in EVENT_REGISTRY.values():
        assert registry.latest_version(cls.type) == getattr(cls, "schema_version", 1), cls
    for event_type, from_version, _ in STEPS:
        assert from_version < registry.latest_version(event_type)


def test_a_new_deposit_is_written_in_schema_two_with_its_reference() -> None:
    written = to_new_event(Deposited(100, "card", "psp-42"))
    assert written.schema_version == 2 == schema_version_of(Deposited(100, "card", None))
    assert written.payload == {"amount": 100, "reason": "card", "reference": "psp-42"}


def test_a_v1_deposit_reads_as_the_newest_shape_with_no_reference() -> None:
    [recorded] = _store_with_v1_deposit().read_stream("wallet:alice")
    assert recorded.schema_version == 2
    assert from_recorded(recorded) == Deposited(2_500, "cash", None)


def test_a_v1_deposit_is_kept_as_recorded_for_the_chain() -> None:
    [recorded] = _store_with_v1_deposit().read_all(upcast=False)
    assert (recorded.schema_version, dict(recorded.payload)) == (
        1,
        {"amount": 2_500, "reason": "cash"},
    )


def test_without_the_upcaster_a_v1_deposit_cannot_be_read_by_the_domain() -> None:
    store = InMemoryEventStore(lambda: T0)
    store.append([StreamAppend("wallet:alice", 0, [V1_DEPOSIT])], EventMetadata("ops", "ops"))
    [recorded] = store.read_stream("wallet:alice")
    with pytest.raises(TypeError):
        from_recorded(recorded)


def test_a_wallet_with_old_and_new_deposits_loads_and_states_both() -> None:
    store = _store_with_v1_deposit()
    wallets = WalletService(store, lambda: T0)
    wallets.deposit("alice", 500, "card", OPS, reference="psp-7")
    assert wallets.balance("alice").available == 3_000
    entries = wallets.statement("alice")
    assert [entry.amount for entry in entries] == [500, 2_500]
    recorded = store.read_all(upcast=False)
    assert [e.schema_version for e in recorded] == [1, 2]
    assert recorded[1].payload["reference"] == "psp-7"
