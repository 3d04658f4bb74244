"""The roads: Big Road, Bead Plate, dragon tail and the three derived roads, rule by rule."""

import json
from collections.abc import Sequence
from itertools import pairwise

from hypothesis import given
from hypothesis import strategies as st

from domain.outcome import Outcome
from domain.roads import (
    ROWS,
    BigRoadEntry,
    DerivedEntry,
    DerivedRoadKind,
    Mark,
    Roads,
    RoadsBuilder,
    derived_mark,
    roads_from,
)

_OUTCOME_BY_LETTER = {"B": Outcome.BANKER, "P": Outcome.PLAYER, "T": Outcome.TIE}
_LETTER_BY_OUTCOME = {outcome: letter for letter, outcome in _OUTCOME_BY_LETTER.items()}


def hands(letters: str) -> list[Outcome]:
    """Outcomes written as B, P and T; spaces are only for the reader."""
    return [_OUTCOME_BY_LETTER[letter] for letter in letters if letter != " "]


def roads(letters: str) -> Roads:
    return roads_from(hands(letters))


def streaks(road: Roads) -> list[str]:
    return [
        "".join(_LETTER_BY_OUTCOME[entry.winner] for entry in column)
        for column in road.big_road_columns()
    ]


def marks(road: Roads, kind: DerivedRoadKind) -> str:
    return "".join(mark.value[0] for mark in road.derived(kind).marks)


def mark_columns(road: Roads, kind: DerivedRoadKind) -> list[str]:
    return ["".join(mark.value[0] for mark in column) for column in road.derived(kind).columns()]


def cells(entries: Sequence[BigRoadEntry | DerivedEntry]) -> list[tuple[int, int]]:
    return [(entry.grid_column, entry.grid_row) for entry in entries]


def big_road_picture(road: Roads) -> list[str]:
    """The 6-row grid as text, one string per row; '.' is an empty cell."""
    width = max(entry.grid_column for entry in road.big_road)
    grid = [["."] * width for _ in range(ROWS)]
    for entry in road.big_road:
        grid[entry.grid_row][entry.grid_column - 1] = _LETTER_BY_OUTCOME[entry.winner]
    return ["".join(row) for row in grid]


def bead_plate_picture(road: Roads) -> list[str]:
    width = max(bead.column for bead in road.bead_plate)
    grid = [["."] * width for _ in range(ROWS)]
    for bead in road.bead_plate:
        grid[bead.row - 1][bead.column - 1] = _LETTER_BY_OUTCOME[bead.outcome]
    return ["".join(row) for row in grid]


# The hand-worked example. Two leading ties, ties on three cells, a 7-long Player streak that
# reaches the bottom row, and a 6-long Banker streak that meets that tail one row early.
#
#   hands:   TT  B T B  P TT  BBB  P  BB T  PPPPPPP  BBBBBB  P T
#   columns:     1      2     3    4  5     6        7       8
#   lengths:     2      1     3    1  2     7        6       1
#
# Derived roads, worked from the rules with L = column lengths (c from 1, r from 0):
#   new column c:  red if L[c-1] == L[c-1-k] else blue
#   row r >= 1:    blue if L[c-k] == r else red
#
#   entry  | Big Eye Boy (k=1)    | Small Road (k=2)     | Cockroach Pig (k=3)
#   (1,0)  | -                    | -                    | -
#   (1,1)  | -                    | -                    | -
#   (2,0)  | -                    | -                    | -
#   (3,0)  | L2=1 vs L1=2: blue   | -                    | -
#   (3,1)  | L2=1 == 1: blue      | L1=2 > 1: red        | -
#   (3,2)  | L2=1 < 2: red        | L1=2 == 2: blue      | -
#   (4,0)  | L3=3 vs L2=1: blue   | L3=3 vs L1=2: blue   | -
#   (5,0)  | L4=1 vs L3=3: blue   | L4=1 vs L2=1: red    | L4=1 vs L1=2: blue
#   (5,1)  | L4=1 == 1: blue      | L3=3 > 1: red        | L2=1 == 1: blue
#   (6,0)  | L5=2 vs L4=1: blue   | L5=2 vs L3=3: blue   | L5=2 vs L2=1: blue
#   (6,1)  | L5=2 > 1: red        | L4=1 == 1: blue      | L3=3 > 1: red
#   (6,2)  | L5=2 == 2: blue      | L4=1 < 2: red        | L3=3 > 2: red
#   (6,3)  | L5=2 < 3: red        | red                  | L3=3 == 3: blue
#   (6,4)  | red                  | red                  | L3=3 < 4: red
#   (6,5)  | red                  | red                  | red
#   (6,6)  | red                  | red                  | red
#   (7,0)  | L6=7 vs L5=2: blue   | L6=7 vs L4=1: blue   | L6=7 vs L3=3: blue
#   (7,1)  | L6=7 > 1: red        | L5=2 > 1: red        | L4=1 == 1: blue
#   (7,2)  | red                  | L5=2 == 2: blue      | L4=1 < 2: red
#   (7,3)  | red                  | L5=2 < 3: red        | red
#   (7,4)  | red                  | red                  | red
#   (7,5)  | red                  | red                  | red
#   (8,0)  | L7=6 vs L6=7: blue   | L7=6 vs L5=2: blue   | L7=6 vs L4=1: blue
#
# Start points: Big Eye Boy at (3,0) because column 2 has one entry; Small Road at (3,1);
# Cockroach Pig at (5,0) because column 4 has one entry.
WORKED = "TT BTB PTT BBB P BBT PPPPPPP BBBBBB PT"


def test_worked_example_counts() -> None:
    assert roads(WORKED).counts.to_dict() == {"banker": 13, "player": 10, "ties": 7, "hands": 30}


def test_worked_example_big_road_columns_and_ties() -> None:
    road = roads(WORKED)

    assert streaks(road) == ["BB", "P", "BBB", "P", "BB", "PPPPPPP", "BBBBBB", "P"]
    assert road.leading_ties == 2
    assert [(e.column, e.row, e.ties) for e in road.big_road if e.ties] == [
        (1, 0, 1),
        (2, 0, 2),
        (5, 1, 1),
        (8, 0, 1),
    ]


def test_worked_example_big_road_grid_with_dragon_tails() -> None:
    road = roads(WORKED)

    assert big_road_picture(road) == [
        "BPBPBPBP",
        "B.B.BPB.",
        "..B..PB.",
        ".....PB.",
        ".....PBB",
        ".....PP.",
    ]
    # The Player streak turns at the bottom row; the Banker streak turns a row higher.
    player_streak, banker_streak = road.big_road_columns()[5:7]
    assert cells(player_streak) == [(6, 0), (6, 1), (6, 2), (6, 3), (6, 4), (6, 5), (7, 5)]
    assert cells(banker_streak) == [(7, 0), (7, 1), (7, 2), (7, 3), (7, 4), (8, 4)]


def test_worked_example_bead_plate() -> None:
    assert bead_plate_picture(roads(WORKED)) == [
        "TTBPB",
        "TTBPB",
        "BBTPB",
        "TBPPB",
        "BBPBP",
        "PPPBT",
    ]


def test_worked_example_big_eye_boy() -> None:
    road = roads(WORKED)
    kind = DerivedRoadKind.BIG_EYE_BOY

    assert marks(road, kind) == "bbrbbbbrbrrrrbrrrrrb"
    assert mark_columns(road, kind) == ["bb", "r", "bbbb", "r", "b", "rrrr", "b", "rrrrr", "b"]


def test_worked_example_small_road() -> None:
    road = roads(WORKED)
    kind = DerivedRoadKind.SMALL_ROAD

    assert marks(road, kind) == "rbbrrbbrrrrrbrbrrrb"
    assert mark_columns(road, kind) == ["r", "bb", "rr", "bb", "rrrrr", "b", "r", "b", "rrr", "b"]


def test_worked_example_cockroach_pig() -> None:
    road = roads(WORKED)
    kind = DerivedRoadKind.COCKROACH_PIG

    assert marks(road, kind) == "bbbrrbrrrbbrrrrb"
    assert mark_columns(road, kind) == ["bbb", "rr", "b", "rrr", "bb", "rrrr", "b"]


def test_worked_example_derived_roads_start_at_their_start_points() -> None:
    road = roads(WORKED)

    def first_marked(kind: DerivedRoadKind) -> tuple[int, int]:
        source = road.big_road[road.derived(kind).entries[0].source]
        return source.column, source.row

    assert first_marked(DerivedRoadKind.BIG_EYE_BOY) == (3, 0)
    assert first_marked(DerivedRoadKind.SMALL_ROAD) == (3, 1)
    assert first_marked(DerivedRoadKind.COCKROACH_PIG) == (5, 0)


# Counts and the Big Road, rule by rule.


def test_counts_tally_banker_player_ties_and_hands() -> None:
    counts = roads("BPTTB").counts

    assert (counts.banker, counts.player, counts.ties, counts.hands) == (2, 1, 2, 5)


def test_consecutive_wins_by_the_same_side_share_a_column() -> None:
    assert streaks(roads("PPP")) == ["PPP"]


def test_a_new_column_starts_when_the_winner_changes() -> None:
    assert streaks(roads("PPBP")) == ["PP", "B", "P"]


def test_a_tie_is_marked_on_the_previous_winners_cell_and_takes_no_cell() -> None:
    road = roads("BTTP")

    assert streaks(road) == ["B", "P"]
    assert [entry.ties for entry in road.big_road] == [2, 0]


def test_a_tie_does_not_break_a_streak() -> None:
    assert streaks(roads("BTB")) == ["BB"]


def test_ties_before_the_first_win_stay_leading_ties() -> None:
    road = roads("TTBT")

    assert road.leading_ties == 2
    assert [entry.ties for entry in road.big_road] == [1]


def test_ties_alone_draw_no_big_road() -> None:
    road = roads("TTT")

    assert road.big_road == ()
    assert road.leading_ties == 3
    assert road.counts.ties == 3


def test_big_road_entries_remember_their_hand() -> None:
    assert [entry.hand for entry in roads("TBTPP").big_road] == [1, 3, 4]


def test_empty_sequence_gives_empty_roads() -> None:
    assert roads_from([]) == Roads()


# Bead Plate.


def test_bead_plate_fills_six_rows_down_then_the_next_column_numbering_both_from_one() -> None:
    road = roads("BPBPBPB")

    assert [(bead.column, bead.row) for bead in road.bead_plate] == [
        (1, 1),
        (1, 2),
        (1, 3),
        (1, 4),
        (1, 5),
        (1, 6),
        (2, 1),
    ]


def test_bead_plate_gives_ties_their_own_bead() -> None:
    assert [bead.outcome for bead in roads("TBT").bead_plate] == hands("TBT")


# The 6-row grid and the dragon tail.


def test_a_streak_turns_right_along_the_bottom_row() -> None:
    assert cells(roads("BBBBBBBB").big_road) == [
        (1, 0),
        (1, 1),
        (1, 2),
        (1, 3),
        (1, 4),
        (1, 5),
        (2, 5),
        (3, 5),
    ]


def test_a_streak_turns_right_when_the_cell_below_is_occupied() -> None:
    road = roads("BBBBBBBB PPPPPP")

    assert cells(road.big_road_columns()[1]) == [(2, 0), (2, 1), (2, 2), (2, 3), (2, 4), (3, 4)]


def test_a_streak_keeps_to_its_row_once_turned() -> None:
    # The Banker tail covers only (2,5), so (3,5) is free, yet the Player tail stays in row 4.
    road = roads("BBBBBBB PPPPPPPP")

    assert cells(road.big_road_columns()[1])[-4:] == [(2, 4), (3, 4), (4, 4), (5, 4)]


def test_a_new_streak_starts_beside_the_previous_streaks_top_cell_even_under_a_tail() -> None:
    road = roads("BBBBBBBB P")

    assert cells(road.big_road_columns()[1]) == [(2, 0)]


def test_a_new_streak_skips_past_a_tail_along_the_top_row() -> None:
    # Each streak turns one row higher than the last, until the sixth turns along the top row.
    road = roads("B" * 11 + "P" * 10 + "B" * 9 + "P" * 8 + "B" * 7 + "P" * 6 + "B")
    columns = road.big_road_columns()

    assert cells(columns[5]) == [(6, 0), (7, 0), (8, 0), (9, 0), (10, 0), (11, 0)]
    assert cells(columns[6]) == [(12, 0)]


def test_derived_roads_are_laid_out_with_the_same_dragon_tail() -> None:
    # Column 1 of length 1 against a long column 2: Big Eye Boy marks red from row 2 on.
    road = roads("B PPPPPPPPPP")

    assert marks(road, DerivedRoadKind.BIG_EYE_BOY) == "brrrrrrrr"
    assert cells(road.big_eye_boy.entries) == [
        (1, 0),
        (2, 0),
        (2, 1),
        (2, 2),
        (2, 3),
        (2, 4),
        (2, 5),
        (3, 5),
        (4, 5),
    ]


# The derived roads, rule by rule. Columns number from 1 and rows from 0.


def test_new_column_entry_is_red_when_the_two_columns_before_match() -> None:
    # Big Eye Boy at (3,0) compares columns 2 and 1: both length 1.
    assert derived_mark([1, 1, 1], 3, 0, 1) is Mark.RED


def test_new_column_entry_is_blue_when_the_two_columns_before_differ() -> None:
    assert derived_mark([2, 1, 1], 3, 0, 1) is Mark.BLUE


def test_new_column_entry_compares_columns_offset_plus_one_apart() -> None:
    # Cockroach Pig at (5,0) compares columns 4 and 1.
    assert derived_mark([2, 9, 9, 2, 1], 5, 0, 3) is Mark.RED
    assert derived_mark([3, 9, 9, 2, 1], 5, 0, 3) is Mark.BLUE


def test_deeper_entry_is_red_when_column_k_back_has_an_entry_at_that_row() -> None:
    # Small Road at (3,2) looks at column 1, which reaches row 2.
    assert derived_mark([3, 1, 3], 3, 2, 2) is Mark.RED


def test_deeper_entry_is_blue_when_column_k_back_has_exactly_that_length() -> None:
    assert derived_mark([2, 1, 3], 3, 2, 2) is Mark.BLUE


def test_deeper_entry_is_red_when_column_k_back_is_shorter_still() -> None:
    assert derived_mark([1, 1, 3], 3, 2, 2) is Mark.RED


def test_derived_road_starts_at_row_one_of_column_k_plus_one() -> None:
    # Small Road (k=2): column 3 has two entries, so the first mark is at (3,1).
    road = roads("B P BB")

    assert [road.big_road[entry.source].hand for entry in road.small_road.entries] == [3]


def test_derived_road_starts_at_column_k_plus_two_when_column_k_plus_one_is_single() -> None:
    # Small Road (k=2): column 3 is a single win, so nothing is marked until column 4 starts.
    road = roads("B P B")
    assert road.small_road.entries == ()

    road = roads("B P B P")
    assert [road.big_road[entry.source].hand for entry in road.small_road.entries] == [3]


def test_derived_road_marks_nothing_before_its_start_point() -> None:
    road = roads("BBBB PPPP")

    assert road.big_eye_boy.marks != ()
    assert road.small_road.marks == ()
    assert road.cockroach_pig.marks == ()


def test_derived_road_ignores_ties() -> None:
    assert roads("BTPTBBT").big_eye_boy == roads("BPBB").big_eye_boy


def test_derived_road_starts_a_column_whenever_the_colour_changes() -> None:
    road = roads(WORKED)
    entries = road.big_eye_boy.entries

    for previous, entry in pairwise(entries):
        assert (entry.row == 0) == (entry.mark is not previous.mark)


# Incremental use and the JSON form.


def test_a_snapshot_does_not_change_when_more_hands_are_added() -> None:
    builder = RoadsBuilder()
    builder.extend(hands("BBT"))
    before = builder.snapshot()

    builder.extend(hands("TPPBP"))

    assert before == roads("BBT")
    assert builder.snapshot() == roads("BBTTPPBP")


def test_to_dict_is_plain_json() -> None:
    road = roads(WORKED)
    document = road.to_dict()

    assert json.loads(json.dumps(document)) == document
    assert document["counts"] == {"banker": 13, "player": 10, "ties": 7, "hands": 30}
    assert document["big_road"][0] == {
        "winner": "banker",
        "hand": 2,
        "column": 1,
        "row": 0,
        "ties": 1,
        "grid_column": 1,
        "grid_row": 0,
    }
    assert document["bead_plate"][0] == {"outcome": "tie", "column": 1, "row": 1}
    assert document["cockroach_pig"]["offset"] == 3
    assert document["cockroach_pig"]["columns"][0] == ["blue", "blue", "blue"]
    assert "".join(mark[0] for mark in document["big_eye_boy"]["marks"]) == "bbrbbbbrbrrrrbrrrrrb"


# Properties.

_SIDES = st.sampled_from([Outcome.BANKER, Outcome.PLAYER, Outcome.TIE])
# Runs of one outcome, up to twice the grid's depth, so dragon tails and stacked tails are common.
_OUTCOMES = st.lists(st.tuples(_SIDES, st.integers(1, 2 * ROWS + 1)), max_size=40).map(
    lambda runs: [outcome for outcome, length in runs for _ in range(length)]
)


def _expected_marks(lengths: Sequence[int], offset: int) -> list[Mark]:
    """An independent reading of the rules: find the start point first, then mark from there."""
    if len(lengths) < offset + 1:
        return []
    start = (offset + 1, 1) if lengths[offset] >= 2 else (offset + 2, 0)
    result: list[Mark] = []
    for column, length in enumerate(lengths, start=1):
        for row in range(length):
            if (column, row) < start:
                continue
            if row == 0:
                same = lengths[column - 2] == lengths[column - 2 - offset]
                result.append(Mark.RED if same else Mark.BLUE)
            else:
                compared = lengths[column - 1 - offset]
                if compared > row:
                    result.append(Mark.RED)
                elif compared == row:
                    result.append(Mark.BLUE)
                else:
                    result.append(Mark.RED)
    return result


@given(_OUTCOMES)
def test_big_road_entries_plus_ties_equal_hands(outcomes: list[Outcome]) -> None:
    road = roads_from(outcomes)
    ties_on_cells = sum(entry.ties for entry in road.big_road)

    assert len(road.big_road) + ties_on_cells + road.leading_ties == road.counts.hands
    assert road.counts.ties == ties_on_cells + road.leading_ties
    assert road.counts.hands == len(outcomes) == len(road.bead_plate)


@given(_OUTCOMES)
def test_derived_roads_follow_the_rules_from_their_start_points(outcomes: list[Outcome]) -> None:
    road = roads_from(outcomes)
    lengths = road.column_lengths()

    for kind in DerivedRoadKind:
        assert list(road.derived(kind).marks) == _expected_marks(lengths, int(kind))


@given(_OUTCOMES)
def test_grid_cells_never_collide_and_stay_within_six_rows(outcomes: list[Outcome]) -> None:
    road = roads_from(outcomes)
    roads_drawn: list[Sequence[BigRoadEntry | DerivedEntry]] = [road.big_road]
    roads_drawn += [road.derived(kind).entries for kind in DerivedRoadKind]

    for entries in roads_drawn:
        placed = cells(entries)
        assert len(set(placed)) == len(placed)
        assert all(0 <= row < ROWS and column >= 1 for column, row in placed)
        for previous, entry in pairwise(entries):
            if entry.row == 0:
                assert entry.grid_row == 0
            else:
                across = entry.grid_column - previous.grid_column
                down = entry.grid_row - previous.grid_row
                assert (across, down) in {(0, 1), (1, 0)}


@given(_OUTCOMES, st.data())
def test_adding_one_hand_at_a_time_equals_building_from_scratch(
    outcomes: list[Outcome], data: st.DataObject
) -> None:
    split = data.draw(st.integers(0, len(outcomes)), label="split")
    builder = RoadsBuilder()
    snapshots = [builder.snapshot()]
    for outcome in outcomes:
        builder.add(outcome)
        snapshots.append(builder.snapshot())

    assert snapshots[split] == roads_from(outcomes[:split])
    assert snapshots[-1] == roads_from(outcomes)
