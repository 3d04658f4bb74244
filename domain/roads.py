"""The roads: a shoe's results drawn as the Bead Plate, the Big Road and its three derived roads.

Conventions used throughout, because the derived-road rules are stated in them: logical and grid
columns are numbered from 1, rows from 0, and every road is 6 rows deep. The Bead Plate, which
no rule reads, numbers both its columns and its rows from 1, as a player counts the cells. A
`hand` is the 0-based position of a result in the sequence of outcomes the roads were built from.

Ties before the first Player or Banker win have no previous winner's cell to be marked on, so they
are kept as `leading_ties` and never moved onto a later cell: a cell's tie count then always means
"ties dealt after this win", and a road never changes what it has already drawn.
"""

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from enum import IntEnum, StrEnum
from typing import TypedDict, TypeVar

from domain.outcome import Outcome

ROWS = 6

_Entry = TypeVar("_Entry", "BigRoadEntry", "DerivedEntry")


class Mark(StrEnum):
    """The colour a derived road gives a Big Road entry: red for a repeating pattern, blue not."""

    RED = "red"
    BLUE = "blue"


class DerivedRoadKind(IntEnum):
    """The three derived roads, each valued by its offset: how many columns back it compares."""

    BIG_EYE_BOY = 1
    SMALL_ROAD = 2
    COCKROACH_PIG = 3


class CountsDict(TypedDict):
    """JSON form of `Counts`."""

    banker: int
    player: int
    ties: int
    hands: int


class BeadDict(TypedDict):
    """JSON form of `Bead`."""

    outcome: str
    column: int
    row: int


class BigRoadEntryDict(TypedDict):
    """JSON form of `BigRoadEntry`."""

    winner: str
    hand: int
    column: int
    row: int
    ties: int
    grid_column: int
    grid_row: int


class DerivedEntryDict(TypedDict):
    """JSON form of `DerivedEntry`."""

    mark: str
    source: int
    column: int
    row: int
    grid_column: int
    grid_row: int


class DerivedRoadDict(TypedDict):
    """JSON form of `DerivedRoad`."""

    offset: int
    marks: list[str]
    columns: list[list[str]]
    entries: list[DerivedEntryDict]


class RoadsDict(TypedDict):
    """JSON form of `Roads`."""

    counts: CountsDict
    leading_ties: int
    bead_plate: list[BeadDict]
    big_road: list[BigRoadEntryDict]
    big_eye_boy: DerivedRoadDict
    small_road: DerivedRoadDict
    cockroach_pig: DerivedRoadDict


@dataclass(frozen=True, slots=True)
class Counts:
    """The statistics window's totals: Banker wins, Player wins, ties and hands."""

    banker: int = 0
    player: int = 0
    ties: int = 0
    hands: int = 0

    def to_dict(self) -> CountsDict:
        """The totals as JSON-friendly values."""
        return {
            "banker": self.banker,
            "player": self.player,
            "ties": self.ties,
            "hands": self.hands,
        }


@dataclass(frozen=True, slots=True)
class Bead:
    """One hand on the Bead Plate, which fills each 6-row column top to bottom.

    Columns and rows are both numbered from 1: (1, 1) is the top of the first column.
    """

    outcome: Outcome
    column: int
    row: int

    def to_dict(self) -> BeadDict:
        """The bead as JSON-friendly values."""
        return {"outcome": self.outcome.value, "column": self.column, "row": self.row}


@dataclass(frozen=True, slots=True)
class BigRoadEntry:
    """One Player or Banker win: its logical place in its streak, its grid cell and later ties."""

    winner: Outcome
    hand: int
    column: int
    row: int
    ties: int
    grid_column: int
    grid_row: int

    def to_dict(self) -> BigRoadEntryDict:
        """The entry as JSON-friendly values."""
        return {
            "winner": self.winner.value,
            "hand": self.hand,
            "column": self.column,
            "row": self.row,
            "ties": self.ties,
            "grid_column": self.grid_column,
            "grid_row": self.grid_row,
        }


@dataclass(frozen=True, slots=True)
class DerivedEntry:
    """One mark of a derived road, the index of the Big Road entry it marks, and its places."""

    mark: Mark
    source: int
    column: int
    row: int
    grid_column: int
    grid_row: int

    def to_dict(self) -> DerivedEntryDict:
        """The entry as JSON-friendly values."""
        return {
            "mark": self.mark.value,
            "source": self.source,
            "column": self.column,
            "row": self.row,
            "grid_column": self.grid_column,
            "grid_row": self.grid_row,
        }


@dataclass(frozen=True, slots=True)
class DerivedRoad:
    """A derived road, itself laid out as a road with a column per run of one colour."""

    kind: DerivedRoadKind
    entries: tuple[DerivedEntry, ...] = ()

    @property
    def marks(self) -> tuple[Mark, ...]:
        """The marks in the order they were made."""
        return tuple(entry.mark for entry in self.entries)

    def columns(self) -> tuple[tuple[Mark, ...], ...]:
        """The marks grouped into the road's logical columns."""
        return tuple(tuple(entry.mark for entry in column) for column in _columns(self.entries))

    def to_dict(self) -> DerivedRoadDict:
        """The road as JSON-friendly values, both flat and by column."""
        return {
            "offset": int(self.kind),
            "marks": [mark.value for mark in self.marks],
            "columns": [[mark.value for mark in column] for column in self.columns()],
            "entries": [entry.to_dict() for entry in self.entries],
        }


@dataclass(frozen=True, slots=True)
class Roads:
    """Every road of a sequence of outcomes, as one immutable value."""

    counts: Counts = Counts()
    leading_ties: int = 0
    bead_plate: tuple[Bead, ...] = ()
    big_road: tuple[BigRoadEntry, ...] = ()
    big_eye_boy: DerivedRoad = DerivedRoad(DerivedRoadKind.BIG_EYE_BOY)
    small_road: DerivedRoad = DerivedRoad(DerivedRoadKind.SMALL_ROAD)
    cockroach_pig: DerivedRoad = DerivedRoad(DerivedRoadKind.COCKROACH_PIG)

    def big_road_columns(self) -> tuple[tuple[BigRoadEntry, ...], ...]:
        """The Big Road's logical columns: one per streak, however it is drawn."""
        return _columns(self.big_road)

    def column_lengths(self) -> tuple[int, ...]:
        """The length of each Big Road streak, which is all the derived roads are computed from."""
        return tuple(len(column) for column in self.big_road_columns())

    def derived(self, kind: DerivedRoadKind) -> DerivedRoad:
        """The derived road of the given kind."""
        match kind:
            case DerivedRoadKind.BIG_EYE_BOY:
                return self.big_eye_boy
            case DerivedRoadKind.SMALL_ROAD:
                return self.small_road
            case DerivedRoadKind.COCKROACH_PIG:
                return self.cockroach_pig

    def to_dict(self) -> RoadsDict:
        """Every road as JSON-friendly values, for the API and dashboards."""
        return {
            "counts": self.counts.to_dict(),
            "leading_ties": self.leading_ties,
            "bead_plate": [bead.to_dict() for bead in self.bead_plate],
            "big_road": [entry.to_dict() for entry in self.big_road],
            "big_eye_boy": self.big_eye_boy.to_dict(),
            "small_road": self.small_road.to_dict(),
            "cockroach_pig": self.cockroach_pig.to_dict(),
        }


def derived_mark(lengths: Sequence[int], column: int, row: int, offset: int) -> Mark | None:
    """The mark a derived road gives the Big Road entry at (column, row), None before its start.

    `lengths[i]` is the length of Big Road column i + 1, up to and including `column`.
    """
    # The start point (row 1 of column k+1, else the top of column k+2) is exactly the
    # first entry whose compared columns exist, so "no column to compare" means "not started".
    if row == 0:
        if column - 1 - offset < 1:
            return None
        same = lengths[column - 2] == lengths[column - 2 - offset]
        return Mark.RED if same else Mark.BLUE
    if column - offset < 1:
        return None
    # Red when column c-k reaches row r or stops short of it; blue only when it ends just above.
    return Mark.BLUE if lengths[column - offset - 1] == row else Mark.RED


class _Layout:
    """Places one road's entries on the 6-row grid, turning long streaks right (the dragon tail)."""

    __slots__ = ("_column", "_occupied", "_row", "_start_column", "_turned")

    def __init__(self) -> None:
        self._occupied: set[tuple[int, int]] = set()
        self._start_column = 0
        self._column = 0
        self._row = 0
        self._turned = False

    def place(self, starts_column: bool) -> tuple[int, int]:
        """The grid cell (column, row) of the next entry, which the layout then occupies."""
        if starts_column:
            # A streak starts beside the previous streak's top cell, running under its tail if
            # that tail turned right; only a tail along the top row itself pushes it further.
            column = self._start_column + 1
            while (column, 0) in self._occupied:
                column += 1
            row = 0
            self._start_column = column
            self._turned = False
        else:
            column, row = self._column, self._row
            below = (column, row + 1)
            if not self._turned and row + 1 < ROWS and below not in self._occupied:
                row += 1
            else:
                # Once turned, a tail keeps to its row so the streak reads as one line.
                self._turned = True
                column += 1
        self._occupied.add((column, row))
        self._column, self._row = column, row
        return column, row


class _DerivedRoadBuilder:
    """Appends the marks of one derived road as Big Road entries arrive."""

    __slots__ = ("_column", "_entries", "_kind", "_layout", "_offset", "_row")

    def __init__(self, kind: DerivedRoadKind) -> None:
        self._kind = kind
        self._offset = int(kind)
        self._entries: list[DerivedEntry] = []
        self._layout = _Layout()
        self._column = 0
        self._row = 0

    def mark(self, lengths: Sequence[int], column: int, row: int, source: int) -> None:
        """Marks the Big Road entry at (column, row) if the road has reached its start point."""
        mark = derived_mark(lengths, column, row, self._offset)
        if mark is None:
            return
        starts_column = not self._entries or self._entries[-1].mark is not mark
        if starts_column:
            self._column += 1
            self._row = 0
        else:
            self._row += 1
        grid_column, grid_row = self._layout.place(starts_column)
        self._entries.append(
            DerivedEntry(mark, source, self._column, self._row, grid_column, grid_row)
        )

    def snapshot(self) -> DerivedRoad:
        """The road so far, as an immutable value."""
        return DerivedRoad(self._kind, tuple(self._entries))


class RoadsBuilder:
    """Keeps every road up to date one outcome at a time, for projections; `snapshot` freezes it.

    Each `add` does a constant amount of work (amortised), since a new mark looks at the last few
    streaks and nothing already drawn changes except the tie count of the latest cell.
    """

    __slots__ = (
        "_banker",
        "_beads",
        "_big_road",
        "_derived",
        "_layout",
        "_leading_ties",
        "_lengths",
        "_player",
        "_ties",
    )

    def __init__(self) -> None:
        self._banker = 0
        self._player = 0
        self._ties = 0
        self._leading_ties = 0
        self._beads: list[Bead] = []
        self._big_road: list[BigRoadEntry] = []
        self._lengths: list[int] = []
        self._layout = _Layout()
        self._derived = tuple(_DerivedRoadBuilder(kind) for kind in DerivedRoadKind)

    def add(self, outcome: Outcome) -> None:
        """Records the outcome of the next hand on every road."""
        hand = len(self._beads)
        self._beads.append(Bead(outcome, hand // ROWS + 1, hand % ROWS + 1))
        if outcome is Outcome.TIE:
            self._ties += 1
            if self._big_road:
                last = self._big_road[-1]
                self._big_road[-1] = replace(last, ties=last.ties + 1)
            else:
                self._leading_ties += 1
            return
        if outcome is Outcome.BANKER:
            self._banker += 1
        else:
            self._player += 1
        starts_column = not self._big_road or self._big_road[-1].winner is not outcome
        if starts_column:
            self._lengths.append(1)
        else:
            self._lengths[-1] += 1
        column = len(self._lengths)
        row = self._lengths[-1] - 1
        grid_column, grid_row = self._layout.place(starts_column)
        self._big_road.append(BigRoadEntry(outcome, hand, column, row, 0, grid_column, grid_row))
        source = len(self._big_road) - 1
        for derived in self._derived:
            derived.mark(self._lengths, column, row, source)

    def extend(self, outcomes: Iterable[Outcome]) -> None:
        """Records several outcomes in order."""
        for outcome in outcomes:
            self.add(outcome)

    def snapshot(self) -> Roads:
        """The roads so far, as an immutable value that later `add`s do not change."""
        big_eye_boy, small_road, cockroach_pig = (road.snapshot() for road in self._derived)
        return Roads(
            counts=Counts(self._banker, self._player, self._ties, len(self._beads)),
            leading_ties=self._leading_ties,
            bead_plate=tuple(self._beads),
            big_road=tuple(self._big_road),
            big_eye_boy=big_eye_boy,
            small_road=small_road,
            cockroach_pig=cockroach_pig,
        )


def roads_from(outcomes: Iterable[Outcome]) -> Roads:
    """Every road of a sequence of outcomes, built from scratch."""
    builder = RoadsBuilder()
    builder.extend(outcomes)
    return builder.snapshot()


def _columns(entries: Sequence[_Entry]) -> tuple[tuple[_Entry, ...], ...]:
    columns: list[list[_Entry]] = []
    for entry in entries:
        if entry.row == 0:
            columns.append([])
        columns[-1].append(entry)
    return tuple(tuple(column) for column in columns)
