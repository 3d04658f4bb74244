"""A deadline a caller sets (events/deadlines.py): nested ones keep the earlier, and each is
undone by its own token, so one request's deadline never leaks into the next."""

import threading

import pytest

from events import deadlines


def test_without_a_deadline_nothing_is_bounded() -> None:
    assert deadlines.remaining() is None
    assert deadlines.bounded(5.0) == 5.0
    assert deadlines.bounded(None) is None


def test_a_deadline_bounds_every_wait_to_the_time_left() -> None:
    token = deadlines.start(1.0)
    try:
        left = deadlines.remaining()
        assert left is not None
        assert 0.5 < left <= 1.0
        assert deadlines.bounded(30.0) == pytest.approx(left, abs=0.1)
        assert deadlines.bounded(0.1) == 0.1
    finally:
        deadlines.stop(token)
    assert deadlines.remaining() is None


def test_a_nested_deadline_keeps_the_earlier_of_the_two() -> None:
    token = deadlines.start(1.0)
    try:
        with deadlines.until((deadlines.current() or 0.0) + 60.0):  # a later one
            left = deadlines.remaining()
            assert left is not None
            assert left <= 1.0
        inner = deadlines.start(0.2)
        left = deadlines.remaining()
        assert left is not None
        assert left <= 0.2
        deadlines.stop(inner)
        left = deadlines.remaining()
        assert left is not None
        assert left > 0.5
    finally:
        deadlines.stop(token)


def test_a_passed_deadline_leaves_no_time_rather_than_a_negative_one() -> None:
    token = deadlines.start(-1.0)
    try:
        assert deadlines.bounded(5.0) == 0.0
    finally:
        deadlines.stop(token)


def test_another_thread_does_not_see_this_ones_deadline() -> None:
    seen: list[float | None] = []
    token = deadlines.start(1.0)
    try:
        thread = threading.Thread(target=lambda: seen.append(deadlines.remaining()))
        thread.start()
        thread.join()
    finally:
        deadlines.stop(token)
    assert seen == [None]
