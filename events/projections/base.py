"""What every read model is: a name, the stream categories it reads, its tables and a fold."""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import date, datetime
from typing import Any, ClassVar, Final

from psycopg import Connection, sql
from psycopg.rows import TupleRow
from psycopg.types.json import Jsonb

from events.store import RecordedEvent

LIVE: Final = ""
SHADOW: Final = "_shadow"
"""Table-name suffixes: the tables readers use, and the ones a rebuild fills beside them."""


class Projection(ABC):
    """A read model: folds batches of events into its tables, in the caller's transaction."""

    name: ClassVar[str]
    categories: ClassVar[tuple[str, ...]]
    tables: ClassVar[tuple[str, ...]]

    def __init__(self, suffix: str = LIVE) -> None:
        self.suffix = suffix

    def table(self, name: str) -> str:
        """The physical table behind one of this projection's tables."""
        return name + self.suffix

    def wants(self, event: RecordedEvent) -> bool:
        """Whether this projection reads the event at all."""
        return event.category in self.categories

    @abstractmethod
    def apply(self, conn: Connection[TupleRow], events: Sequence[RecordedEvent]) -> None:
        """Fold a batch of events, in log order, into the tables over `conn`."""


def load_rows(
    conn: Connection[TupleRow],
    table: str,
    columns: Sequence[str],
    key: str,
    keys: Iterable[str],
) -> dict[str, list[Any]]:
    """The rows whose `key` is one of `keys`, as mutable lists of `columns` keyed by `key`."""
    wanted = list(keys)
    if not wanted:
        return {}
    query = sql.SQL("SELECT {}, {} FROM {} WHERE {} = ANY(%s)").format(
        sql.Identifier(key),
        sql.SQL(", ").join(map(sql.Identifier, columns)),
        sql.Identifier(table),
        sql.Identifier(key),
    )
    return {row[0]: list(row[1:]) for row in conn.execute(query, [wanted])}


STAGE_FROM_ROWS: Final = 2000
"""Rows of one merge from which they go in through a COPY into a staging table; fewer go in
as arrays, in the merge's one statement."""

_column_types: dict[str, dict[str, str]] = {}


def _types(conn: Connection[TupleRow], table: str) -> dict[str, str]:
    """Each column's SQL type, looked up once per process and table."""
    found = _column_types.get(table)
    if found is None:
        query = (
            "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute"
            " WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped"
        )
        found = {name: kind for name, kind in conn.execute(query, [table])}
        _column_types[table] = found
    return found


def _stage(
    conn: Connection[TupleRow],
    table: str,
    columns: Sequence[str],
    rows: Sequence[Sequence[Any]],
) -> sql.Composable:
    """COPY rows into a temporary table shaped like `table`; its name.

    One COPY and one INSERT ... SELECT per table and batch instead of a statement per row:
    executemany's round trips were most of a rebuild's time. The staging table is per session
    (pooled connections keep it) and is emptied at each commit. Only for large merges (a
    rebuild's batches): PostgreSQL truncates every such table of the session, file by file,
    at each commit of a transaction that used one, and the TRUNCATE here gives the table a
    new file and forces the commit to flush; at a live batch's size that was most of the
    projector's cost (docs/benchmarks.md, "The projector at steady state").
    """
    staging = f"stage_{table}"
    conn.execute(
        sql.SQL("CREATE TEMPORARY TABLE IF NOT EXISTS {} (LIKE {}) ON COMMIT DELETE ROWS").format(
            sql.Identifier(staging), sql.Identifier(table)
        )
    )
    conn.execute(sql.SQL("TRUNCATE {}").format(sql.Identifier(staging)))
    copy_rows(conn, staging, columns, rows)
    return sql.Identifier(staging)


def _arrays(
    conn: Connection[TupleRow],
    table: str,
    columns: Sequence[str],
    rows: Sequence[Sequence[Any]],
) -> tuple[sql.Composable, sql.Composable, list[list[str | None]]]:
    """`rows` as a select list and a FROM clause unnesting one text[] per column; the arrays.

    Text, each value cast back to its column's type in the statement: a column's values may
    be of several Python types (a timestamp as text or as a datetime), which psycopg's typed
    arrays refuse.
    """
    types = _types(conn, table)
    names = [sql.Identifier(column) for column in columns]
    select = sql.SQL(", ").join(
        sql.SQL("s.{}::{}").format(name, sql.SQL(types[column]))
        for name, column in zip(names, columns, strict=True)
    )
    source = sql.SQL("unnest({}) AS s({})").format(
        sql.SQL(", ").join([sql.SQL("%s::text[]")] * len(columns)), sql.SQL(", ").join(names)
    )
    arrays = [[_plain_text(v) for v in values] for values in zip(*rows, strict=True)]
    return select, source, arrays


def _plain_text(value: object) -> str | None:
    """A value as its type's input text, unescaped (it travels inside an array parameter)."""
    if value is None:
        return None
    kind = type(value)
    if kind is str:
        return value  # type: ignore[return-value]
    if kind is int:
        return str(value)
    if kind is bool:
        return "t" if value else "f"
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, Jsonb):
        dumped = (value.dumps or json.dumps)(value.obj)
        return dumped.decode() if isinstance(dumped, bytes) else dumped
    if isinstance(value, str):
        return str(value)
    raise TypeError(f"no text for {value!r}")


def _merge(
    conn: Connection[TupleRow],
    table: str,
    columns: Sequence[str],
    rows: Iterable[Sequence[Any]],
    conflict: sql.Composable,
) -> None:
    batch = list(rows)
    if not batch:
        return
    names = sql.SQL(", ").join(map(sql.Identifier, columns))
    params: list[list[str | None]] | None = None
    source: sql.Composable
    select: sql.Composable = names
    if len(batch) >= STAGE_FROM_ROWS:
        source = _stage(conn, table, columns, batch)
    else:
        select, source, params = _arrays(conn, table, columns, batch)
    conn.execute(
        sql.SQL("INSERT INTO {} AS t ({}) SELECT {} FROM {} {}").format(
            sql.Identifier(table), names, select, source, conflict
        ),
        params,
    )


def upsert(
    conn: Connection[TupleRow],
    table: str,
    keys: Sequence[str],
    columns: Sequence[str],
    rows: Iterable[Sequence[Any]],
) -> None:
    """Insert rows of `keys + columns`, replacing the `columns` of a row whose keys exist."""
    conflict = sql.SQL("ON CONFLICT ({}) DO UPDATE SET {}").format(
        sql.SQL(", ").join(map(sql.Identifier, keys)),
        sql.SQL(", ").join(
            sql.SQL("{} = EXCLUDED.{}").format(sql.Identifier(c), sql.Identifier(c))
            for c in columns
        ),
    )
    _merge(conn, table, [*keys, *columns], rows, conflict)


def add_rows(
    conn: Connection[TupleRow],
    table: str,
    keys: Sequence[str],
    sums: Sequence[str],
    rows: Iterable[Sequence[Any]],
    *,
    fixed: Sequence[str] = (),
    flags: Sequence[str] = (),
) -> None:
    """Insert rows of `keys + fixed + sums + flags`, or add the sums to (and OR the flags into)
    the row with those keys, whose `fixed` columns never change."""
    updates = [
        sql.SQL("{} = t.{} + EXCLUDED.{}").format(*(sql.Identifier(c),) * 3) for c in sums
    ] + [sql.SQL("{} = t.{} OR EXCLUDED.{}").format(*(sql.Identifier(c),) * 3) for c in flags]
    conflict = sql.SQL("ON CONFLICT ({}) DO UPDATE SET {}").format(
        sql.SQL(", ").join(map(sql.Identifier, keys)), sql.SQL(", ").join(updates)
    )
    _merge(conn, table, [*keys, *fixed, *sums, *flags], rows, conflict)


def insert_new(
    conn: Connection[TupleRow],
    table: str,
    columns: Sequence[str],
    rows: Iterable[Sequence[Any]],
) -> None:
    """Insert rows, leaving any whose key is already there as it is."""
    _merge(conn, table, columns, rows, sql.SQL("ON CONFLICT DO NOTHING"))


def copy_rows(
    conn: Connection[TupleRow],
    table: str,
    columns: Sequence[str],
    rows: Iterable[Sequence[Any]],
) -> None:
    """Append new rows with COPY, much the fastest way in for rows that only ever get added."""
    query = sql.SQL("COPY {} ({}) FROM STDIN").format(
        sql.Identifier(table), sql.SQL(", ").join(map(sql.Identifier, columns))
    )
    # The text format written here rather than row by row through psycopg's dumpers, which
    # cost about 5 µs a row: the largest share of a rebuild's Python time.
    fast = _FAST_TEXT.get
    text = "".join(
        ["\t".join([(fast(type(v)) or _copy_text)(v) for v in row]) + "\n" for row in rows]
    )
    with conn.cursor() as cursor, cursor.copy(query) as copy:
        copy.write(text.encode())


def copy_lines(
    conn: Connection[TupleRow], table: str, columns: Sequence[str], lines: Iterable[str]
) -> None:
    """Append rows already written as lines of COPY text (see `copy_text_or_null`)."""
    query = sql.SQL("COPY {} ({}) FROM STDIN").format(
        sql.Identifier(table), sql.SQL(", ").join(map(sql.Identifier, columns))
    )
    with conn.cursor() as cursor, cursor.copy(query) as copy:
        copy.write("".join(lines).encode())


def copy_text_or_null(value: str | int | None) -> str:
    """A text or integer value, or NULL, in COPY's text format."""
    if value is None:
        return "\\N"
    if type(value) is int:
        return str(value)
    return str(value).translate(_ESCAPES)


_ESCAPES: Final = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def _copy_text(value: object) -> str:
    """One value in COPY's text format."""
    if value is None:
        return "\\N"
    kind = type(value)
    if kind is int:
        return str(value)
    if kind is str:
        return str.translate(value, _ESCAPES)  # type: ignore[arg-type]
    if kind is bool:
        return "t" if value else "f"
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, Jsonb):
        dumped = (value.dumps or json.dumps)(value.obj)
        text = dumped.decode() if isinstance(dumped, bytes) else dumped
        return text.translate(_ESCAPES)
    if isinstance(value, str):
        return value.translate(_ESCAPES)
    raise TypeError(f"no COPY text for {value!r}")


def _escaped(value: str) -> str:
    return value.translate(_ESCAPES)


def _null(value: None) -> str:
    return "\\N"


def _boolean(value: bool) -> str:
    return "t" if value else "f"


# By exact type, the common cases without _copy_text's chain of tests (bool before int would
# matter there; here type() tells them apart).
_FAST_TEXT: Final[dict[type, Callable[[Any], str]]] = {
    int: str,
    str: _escaped,
    type(None): _null,
    bool: _boolean,
    datetime: datetime.isoformat,
    date: date.isoformat,
}


def by_key(rows: Mapping[str, list[Any]]) -> list[list[Any]]:
    """Rows keyed by their first column, flattened back into key-first lists."""
    # Unsorted: one writer per table at a time (the checkpoint lock), so no lock-order deadlock
    # to avoid, and the rows go through a staging table whose order nothing depends on.
    return [[key, *values] for key, values in rows.items()]
