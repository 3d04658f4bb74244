"""Stream ids, the codec between domain events and stored events, and per-process state caches.

Every domain event is a frozen dataclass of JSON-friendly fields with a stable `type`. The
codec turns one into a `NewEvent` and a `RecordedEvent` back into one, through a registry
keyed by (stream category, type): the wallet's `StakeReturned` and the round's are different
facts with the same name, told apart by the stream they live in.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from functools import cache
from typing import Any, Final, Generic, TypeAlias, TypeVar

from domain.chat import CHAT_EVENT_TYPES, ChatEvent
from domain.payloads import from_payload, schema_version_of, to_payload
from domain.player_limits import PLAYER_LIMIT_EVENT_TYPES, PlayerLimitEvent
from domain.seamless import SEAMLESS_EVENT_TYPES, SeamlessEvent
from domain.table import TABLE_EVENT_TYPES, Table, TableEvent, evolve
from domain.wallet import WALLET_EVENT_TYPES, WalletEvent
from events.snapshots import Snapshot, SnapshotStore
from events.store import EventStore, NewEvent, RecordedEvent
from service.application.snapshots import SnapshotCodec, UnreadableSnapshot

log = logging.getLogger(__name__)

TABLE = "table"
WALLET = "wallet"
PLAYER = "player"
CHAT = "chat"
SEAMLESS = "seamless"

DomainEvent: TypeAlias = TableEvent | WalletEvent | PlayerLimitEvent | ChatEvent | SeamlessEvent


def table_stream(table_id: str) -> str:
    """The stream of a table's whole aggregate: settings, seats, rounds, shoe, moderation."""
    return f"{TABLE}:{table_id}"


def wallet_stream(player_id: str) -> str:
    """The stream of a player's wallet."""
    return f"{WALLET}:{player_id}"


def player_stream(player_id: str) -> str:
    """The stream of a player's own settings: their bet limit."""
    return f"{PLAYER}:{player_id}"


def seamless_stream(player_id: str) -> str:
    """The stream of a seamless player's calls to their operator's wallet (domain/seamless.py)."""
    return f"{SEAMLESS}:{player_id}"


def chat_stream(table_id: str) -> str:
    """The stream of a table's chat messages."""
    return f"{CHAT}:{table_id}"


def id_of(stream_id: str) -> str:
    """The id after a stream's category: `table:T1` -> `T1`."""
    return stream_id.partition(":")[2]


_REGISTRY: dict[tuple[str, str], type[Any]] = {}
_CATEGORY_OF: dict[type[Any], str] = {}


def _register(category: str, classes: tuple[type[Any], ...]) -> None:
    for cls in classes:
        key = (category, cls.type)
        if key in _REGISTRY:
            raise AssertionError(f"event type {key} registered twice")
        _REGISTRY[key] = cls
        _CATEGORY_OF[cls] = category


_register(TABLE, TABLE_EVENT_TYPES)
_register(WALLET, WALLET_EVENT_TYPES)
_register(PLAYER, PLAYER_LIMIT_EVENT_TYPES)
_register(CHAT, CHAT_EVENT_TYPES)
_register(SEAMLESS, SEAMLESS_EVENT_TYPES)

EVENT_REGISTRY: Mapping[tuple[str, str], type[Any]] = _REGISTRY
"""Every domain event class, by (stream category, stored type name)."""


def category_for(event: DomainEvent) -> str:
    """The category of stream an event belongs in."""
    return _CATEGORY_OF[type(event)]


def to_new_event(event: DomainEvent) -> NewEvent:
    """The stored form of a domain event: its type, its fields as JSON values, their schema."""
    return NewEvent(
        type=event.type,
        payload=to_payload(event),  # type: ignore[arg-type]
        schema_version=schema_version_of(event),
    )


def from_recorded(recorded: RecordedEvent) -> DomainEvent:
    """The domain event a stored one records; the inverse of `to_new_event`."""
    return decode(recorded.category, recorded.type, recorded.payload)


E = TypeVar("E")


def from_recorded_as(recorded: RecordedEvent, kinds: tuple[type[E], ...]) -> E:
    """The domain event a stored one records, checked to be one of `kinds`."""
    event = from_recorded(recorded)
    if not isinstance(event, kinds):
        raise TypeError(f"{recorded.stream_id} holds a {recorded.type}, not one of {kinds}")
    return event


def decode(category: str, type_name: str, payload: Mapping[str, object]) -> DomainEvent:
    """The domain event of a stream category, type name and payload."""
    cls = _REGISTRY.get((category, type_name))
    if cls is None:
        raise KeyError(f"no event type {type_name!r} in {category!r} streams")
    event: DomainEvent = from_payload(cls, payload)
    return event


# Caches: the state of a stream at a version, so a load reads only the events after it.

S = TypeVar("S")

SNAPSHOT_EVERY: Final = 100
"""Events between two snapshots of a stream.

A cold load folds at most this many events after the newest snapshot (about 2 to 7 coups of a
table, 50 bets of a wallet: well under a millisecond of folding), and a snapshot costs one
INSERT per this many events appended (a table writes 15-45 events a coup), so neither the
loads nor the writes grow with a stream's age. Per shoe (70-75 coups, up to 3,000 events)
would fold up to thirty times more on every cold load for a saving nobody would notice.
"""


class StreamCache(Generic[S]):
    """Per process, LRU-bounded: (version, state) per stream, brought up to date on each load.

    A cached state may be stale; that is safe because every append names the version it read
    and the store refuses a stale one. States are immutable, so sharing them across threads
    needs the lock only around the dictionary itself.

    With a snapshot store, a stream that is not cached starts from its newest snapshot of the
    codec's schema and folds only the events after it; `put`, which the services call once an
    append is recorded, takes a new snapshot every SNAPSHOT_EVERY events, and keeps the last
    of every `keep_every` versions if that is given (SnapshotStore.save). A snapshot is used
    only if it decodes and the stream has reached its version; anything else is ignored and the
    stream replayed from the start.
    """

    def __init__(
        self,
        initial: Callable[[str], S],
        fold: Callable[[S, DomainEvent], S],
        capacity: int = 1024,
        *,
        snapshots: SnapshotStore | None = None,
        codec: SnapshotCodec[S] | None = None,
        snapshot_every: int = SNAPSHOT_EVERY,
        keep_every: int | None = None,
    ) -> None:
        if (snapshots is None) != (codec is None):
            raise ValueError("snapshots need a codec, and a codec needs snapshots")
        if snapshot_every < 1:
            raise ValueError("snapshot_every must be at least 1")
        self._initial = initial
        self._fold = fold
        self._capacity = capacity
        self._snapshots = snapshots
        self._codec = codec
        self._snapshot_every = snapshot_every
        self._keep_every = keep_every
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, tuple[int, S]] = OrderedDict()
        # Cached streams that may have moved elsewhere since (`doubt`), each with the number
        # of the doubt: `cached` does not vouch for them until a read that began after the
        # doubt brings them up to date.
        self._doubted: dict[str, int] = {}
        self._doubts = 0
        # Told of the events read from the log and folded into a state here (`on_read`).
        self._readers: list[Callable[[str, Sequence[DomainEvent]], None]] = []
        # The version of each cached stream's newest snapshot that this process knows of.
        self._snapshotted: dict[str, int] = {}

    @property
    def codec(self) -> SnapshotCodec[S] | None:
        """The codec of this cache's snapshots; None when it takes none."""
        return self._codec

    def load(self, store: EventStore, stream_id: str) -> tuple[int, S]:
        """The stream's state and version now: the cached one, plus any events since."""
        version, state, _ = self.load_noting(store, stream_id)
        return version, state

    def load_noting(
        self, store: EventStore, stream_id: str, *, but_role: str | None = None
    ) -> tuple[int, S, bool]:
        """As `load`, and whether the events it added to a cached state include one written
        in a role other than `but_role`: what another writer did since this process last
        wrote or read the stream (this process's own appends are put in the cache)."""
        with self._lock:
            entry = self._entries.get(stream_id)
            if entry is not None:
                self._entries.move_to_end(stream_id)
            # A doubt cast while this read is under way is about a write it may have missed.
            doubt = self._doubted.get(stream_id)
        if entry is not None:
            version, state = entry
            recorded = store.read_stream(stream_id, from_version=version + 1)
            if not recorded:
                self._settle_doubt(stream_id, doubt)
                return version, state, False
            others = any(event.metadata.role != but_role for event in recorded)
        else:
            version, state, recorded = self._cold(store, stream_id)
            others = False
        folded = [from_recorded(event) for event in recorded]
        for event in folded:
            state = self._fold(state, event)
        if recorded:
            version = recorded[-1].version
        if folded:
            # Before the state is cached: nobody may find it without the doubts it casts.
            for reader in self._readers:
                reader(stream_id, folded)
        self._remember(stream_id, version, state)
        self._settle_doubt(stream_id, doubt)
        return version, state, others

    def _settle_doubt(self, stream_id: str, doubt: int | None) -> None:
        """A read that began after doubt number `doubt` (or with none) has answered it."""
        with self._lock:
            if doubt is not None and self._doubted.get(stream_id) == doubt:
                del self._doubted[stream_id]

    def on_read(self, reader: Callable[[str, Sequence[DomainEvent]], None]) -> None:
        """Call `reader` with the stream's id and the events whenever events read from the log
        are folded into a state here: others' writes, mostly (this process's own appends are
        `put`, but a read may find one before its `put` does)."""
        self._readers.append(reader)

    def doubt(self, stream_id: str) -> None:
        """The stream may have been written elsewhere: `cached` answers None for it until a
        `load` that began after this reads what is new.

        A hint that saves a lost race, never what correctness rests on: an append names the
        version it was decided on, and the store refuses a stale one. Only a cached stream is
        doubted, so the doubts are bounded by the cache's capacity.
        """
        with self._lock:
            if stream_id in self._entries:
                self._doubts += 1
                self._doubted[stream_id] = self._doubts

    def _cold(self, store: EventStore, stream_id: str) -> tuple[int, S, list[RecordedEvent]]:
        """Where a stream not in the cache starts: its newest usable snapshot and the tail."""
        found = self._snapshot(stream_id)
        if found is not None:
            version, state = found
            # From the snapshot's own version: its event must exist, or the snapshot is of a
            # stream that never got that far (a restored log, a snapshot from elsewhere).
            recorded = store.read_stream(stream_id, from_version=version)
            if recorded and recorded[0].version == version:
                with self._lock:
                    self._snapshotted[stream_id] = version
                return version, state, recorded[1:]
            log.warning(
                "ignored the snapshot of %s at version %d: beyond the stream", stream_id, version
            )
        with self._lock:
            self._snapshotted[stream_id] = 0
        return 0, self._initial(stream_id), store.read_stream(stream_id)

    def _snapshot(self, stream_id: str) -> tuple[int, S] | None:
        if self._snapshots is None or self._codec is None:
            return None
        try:
            snapshot = self._snapshots.latest(stream_id, self._codec.schema)
        except Exception:
            # A snapshot only saves time: without one the stream is replayed, which is correct.
            log.exception("could not read the snapshot of %s; replaying it", stream_id)
            return None
        if snapshot is None:
            return None
        try:
            return snapshot.version, self._codec.decode(snapshot.state)
        except UnreadableSnapshot as error:
            log.warning(
                "ignored the snapshot of %s at version %d: %s", stream_id, snapshot.version, error
            )
            return None

    def state_at(self, store: EventStore, stream_id: str, version: int) -> S:
        """The stream's state at exactly `version`, which it has reached; never writes.

        The cached state if it is at that version (as it is just after this process appended
        it), else the newest snapshot at or before it and the events after, up to it.
        """
        with self._lock:
            entry = self._entries.get(stream_id)
        if entry is not None and entry[0] == version:
            return entry[1]
        start, state = 0, self._initial(stream_id)
        found = self._snapshot_at_or_before(stream_id, version)
        if found is not None:
            start, state = found
        for event in store.read_stream(stream_id, from_version=start + 1):
            if event.version > version:
                break
            state = self._fold(state, from_recorded(event))
        return state

    def _snapshot_at_or_before(self, stream_id: str, version: int) -> tuple[int, S] | None:
        if self._snapshots is None or self._codec is None:
            return None
        try:
            snapshot = self._snapshots.at_or_before(stream_id, self._codec.schema, version)
            if snapshot is None:
                return None
            return snapshot.version, self._codec.decode(snapshot.state)
        except Exception:
            # A snapshot only saves time: without one the stream is folded from its start.
            log.exception("could not read a snapshot of %s at version %d", stream_id, version)
            return None

    def cached(self, stream_id: str) -> tuple[int, S] | None:
        """The stream's cached version and state without asking the store; None if not cached,
        or doubted (`doubt`).

        Only for a caller whose append names that version, so that a stale entry is refused
        by the store rather than trusted.
        """
        with self._lock:
            if stream_id in self._doubted:
                return None
            entry = self._entries.get(stream_id)
            if entry is not None:
                self._entries.move_to_end(stream_id)
            return entry

    def put(self, stream_id: str, version: int, state: S) -> None:
        """Remember a stream's state just recorded at a version, and snapshot it when due.

        Called once an append has committed, never inside it: a snapshot that fails to be
        written is logged and the next one is tried SNAPSHOT_EVERY events later.
        """
        if not self._remember(stream_id, version, state):
            return
        if self._snapshots is None or self._codec is None or state is None:
            return
        with self._lock:
            taken = self._snapshotted.get(stream_id, 0)
        if version - taken < self._snapshot_every:
            return
        try:
            self._snapshots.save(
                Snapshot(stream_id, version, self._codec.schema, self._codec.encode(state)),
                replacing=taken,
                keep_every=self._keep_every,
            )
        except Exception:
            log.exception("could not snapshot %s at version %d", stream_id, version)
            return
        with self._lock:
            if stream_id in self._entries:
                self._snapshotted[stream_id] = version

    def _remember(self, stream_id: str, version: int, state: S) -> bool:
        """Cache a state unless a newer one is already cached; whether it was."""
        with self._lock:
            entry = self._entries.get(stream_id)
            newer = entry is None or entry[0] < version
            if newer:
                self._entries[stream_id] = (version, state)
            self._entries.move_to_end(stream_id)
            while len(self._entries) > self._capacity:
                evicted, _ = self._entries.popitem(last=False)
                self._snapshotted.pop(evicted, None)
                self._doubted.pop(evicted, None)
            return newer

    def forget(self, stream_id: str) -> None:
        """Drop a stream's cached state."""
        with self._lock:
            self._entries.pop(stream_id, None)
            self._snapshotted.pop(stream_id, None)
            self._doubted.pop(stream_id, None)


def _fold_table(table: Table | None, event: DomainEvent) -> Table | None:
    if category_for(event) != TABLE:
        raise TypeError(f"{event.type} is not a table event")
    return evolve(table, event)  # type: ignore[arg-type]


def _no_table(stream_id: str) -> Table | None:
    return None


@cache
def table_codec() -> SnapshotCodec[Table | None]:
    """The codec of table snapshots (built once: its schema reads the domain's source)."""
    return SnapshotCodec(Table, evolve)


class TableCache(StreamCache["Table | None"]):
    """The per-process cache of table states: (version, Table) per table stream."""

    def __init__(
        self,
        capacity: int = 1024,
        *,
        snapshots: SnapshotStore | None = None,
        snapshot_every: int = SNAPSHOT_EVERY,
    ) -> None:
        super().__init__(
            _no_table,
            _fold_table,
            capacity,
            snapshots=snapshots,
            codec=table_codec() if snapshots is not None else None,
            snapshot_every=snapshot_every,
        )

    def table(self, store: EventStore, table_id: str) -> tuple[int, Table | None]:
        """A table's version and state (None if it was never created)."""
        return self.load(store, table_stream(table_id))

    def table_noting(
        self, store: EventStore, table_id: str, but_role: str
    ) -> tuple[int, Table | None, bool]:
        """As `table`, and whether another writer in a role other than `but_role` wrote it."""
        return self.load_noting(store, table_stream(table_id), but_role=but_role)
