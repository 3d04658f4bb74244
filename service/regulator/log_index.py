"""The export's index reads: where a table's slice lies, and its shoes' published facts.

These read the log itself, never a read model, so an export never depends on a projector having
caught up; each goes through an index of migrations/0010_read_models.sql, so the cost of an
export grows with its own slice, not with the log.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from datetime import datetime
from typing import Final

from psycopg import sql

from domain.table import ShoeOpened, ShoeRetired, ShoeRevealed
from domain.wallet import Wallet
from events.postgres import EVENT_COLUMNS, Pool, event_rows
from events.snapshots import PostgresSnapshotStore
from events.store import RecordedEvent
from events.upcasting import Upcasters
from service.application.snapshots import UnreadableSnapshot
from service.application.streams import WALLET, table_stream
from service.application.wallets import wallet_codec

_HOLDS_CATEGORY: Final = """
SELECT EXISTS (SELECT 1 FROM events WHERE category = %s AND position BETWEEN %s AND %s)
"""

# Through events_stream_recorded_at (stream_id, recorded_at): the table's events in the period,
# materialized first. A bare min()/max() is planned as a walk of events_pkey from either end
# of the whole log until a row of the period turns up: from the log's first event to the
# slice's, which for the latest shoe is the whole log.
_TABLE_BOUNDS: Final = """
WITH slice AS MATERIALIZED (
    SELECT position FROM events
    WHERE stream_id = %s AND recorded_at >= %s AND recorded_at <= %s)
SELECT min(position), max(position) FROM slice
"""
# The last wallet event of any round the table has an event of in the period: the rounds come
# from events_stream_recorded_at, and each round's wallet events from events_wallet_round
# (round_id, position), whose predicate the literal category matches, one round at a time
# (LATERAL): joined as a whole, the planner hashed every wallet event of the log against them.
# All on the server, so a whole-history export holds no list of its rounds in memory.
_MONEY_BOUND: Final = sql.SQL(
    """
WITH rounds AS MATERIALIZED (
    SELECT DISTINCT t.payload ->> 'round_id' AS round_id FROM events AS t
    WHERE t.stream_id = %s AND t.recorded_at >= %s AND t.recorded_at <= %s
      AND t.payload ? 'round_id')
SELECT max(money.position) FROM rounds, LATERAL (
    SELECT w.position FROM events AS w
    WHERE w.category = {wallet} AND (w.payload ->> 'round_id') = rounds.round_id
      AND (w.payload ->> 'table_id') = %s
    ORDER BY w.position DESC LIMIT 1) AS money
"""
).format(wallet=sql.Literal(WALLET))
# Through events_shoe (shoe_id, position), whose predicate names the three shoe event types:
# literals here, so that the planner can prove the index applies. The table is checked on the
# few rows found, materialized first: ANDed with events_stream_recorded_at it would read the
# index of the whole stream.
_SHOE_EVENTS: Final = sql.SQL(
    "WITH shoe AS MATERIALIZED (SELECT {columns} FROM events"
    " WHERE (payload ->> 'shoe_id') = ANY(%s) AND type IN ({opened}, {retired}, {revealed}))"
    " SELECT * FROM shoe WHERE stream_id = %s ORDER BY position"
).format(
    columns=sql.SQL(EVENT_COLUMNS),
    opened=sql.Literal(ShoeOpened.type),
    retired=sql.Literal(ShoeRetired.type),
    revealed=sql.Literal(ShoeRevealed.type),
)


# Through events' unique (stream_id, version): a bounded batch of a stream, by version.
_STREAM_BATCH: Final = (
    "SELECT " + EVENT_COLUMNS + " FROM events"  # noqa: S608 - constants only
    " WHERE stream_id = %s AND version > %s AND version <= %s ORDER BY version LIMIT %s"
)
BATCH_SIZE: Final = 5000


class PostgresLogIndex:
    """The export's index reads over a pool of the log's database."""

    def __init__(self, pool: Pool, upcasters: Upcasters | None = None) -> None:
        self._pool = pool
        self._upcasters = upcasters if upcasters is not None else Upcasters()

    def slice_bounds(
        self, table_id: str, start: datetime, end: datetime
    ) -> tuple[int | None, int | None]:
        """From the table's first event in the period to the last event its rounds' money needs."""
        stream = table_stream(table_id)
        with self._pool.connection() as conn, conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            # Each round's lookup is estimated at a hundred rows or more, so a slice of a
            # thousand rounds passes jit_above_cost: compiling took 600 ms for 1 ms of work.
            conn.execute("SET LOCAL jit = off")
            row = conn.execute(_TABLE_BOUNDS, [stream, start, end]).fetchone()
            if row is None or row[0] is None:
                return None, None
            first, last = int(row[0]), int(row[1])
            money = conn.execute(_MONEY_BOUND, [stream, start, end, table_id]).fetchone()
        if money is not None and money[0] is not None:
            last = max(last, int(money[0]))
        return first, last

    def holds_category(self, first: int, last: int, category: str) -> bool:
        """Whether any event from position `first` to `last` is of `category`."""
        # Through events_category_position: one probe, however long the slice.
        with self._pool.connection() as conn:
            row = conn.execute(_HOLDS_CATEGORY, [category, first, last]).fetchone()
        return bool(row and row[0])

    def shoe_events(self, stream_id: str, shoe_ids: Collection[str]) -> list[RecordedEvent]:
        """The opening, retirement and reveal of each of these shoes of one table."""
        with self._pool.connection() as conn:
            cursor = conn.cursor(row_factory=event_rows)
            return cursor.execute(_SHOE_EVENTS, [sorted(shoe_ids), stream_id]).fetchall()

    def wallet_before(self, stream_id: str, version: int) -> tuple[int, Wallet] | None:
        """The wallet's newest snapshot at or before `version`, with its version, if usable.

        Through snapshots' primary key (stream_id, version), backwards from `version`: the
        wallet cache keeps one in every WALLET_KEEP_EVERY versions. A snapshot is derived, so
        one of another schema, one that does not decode, or none at all means None, and the
        caller replays the wallet from its first event, which is slower and as right.
        """
        codec = wallet_codec()
        snapshot = PostgresSnapshotStore(self._pool).at_or_before(stream_id, codec.schema, version)
        if snapshot is None:
            return None
        try:
            return snapshot.version, codec.decode(snapshot.state)
        except UnreadableSnapshot:
            return None

    def stream_batches(
        self, stream_id: str, to_version: int, from_version: int = 1
    ) -> Iterator[list[RecordedEvent]]:
        """A stream's events from `from_version` to `to_version`, upcast as the store's reads
        are, in batches."""
        after = from_version - 1
        while after < to_version:
            with self._pool.connection() as conn:
                cursor = conn.cursor(row_factory=event_rows)
                batch = cursor.execute(
                    _STREAM_BATCH, [stream_id, after, to_version, BATCH_SIZE]
                ).fetchall()
            if not batch:
                return
            yield self._upcasters.upcast_all(batch)
            after = batch[-1].version
