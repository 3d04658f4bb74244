"""A player's own limit: whole pounds, at most one change a week, the week turning Friday 00:00."""

from datetime import UTC, datetime, timedelta

import pytest

from domain.player_limits import (
    LimitChangedThisWeek,
    LimitNotWholePounds,
    LimitUnchanged,
    PlayerLimit,
    PlayerLimitSet,
    SetPlayerLimit,
    decide_limit,
    evolve_limit,
    week_start,
)
from events.memory import InMemoryEventStore
from service.application.actor import Actor
from service.application.players import PlayerService

# Thursday 2 May 2024, 23:59:59 UTC: one second before the week turns.
THURSDAY_LATE = datetime(2024, 5, 2, 23, 59, 59, tzinfo=UTC)
FRIDAY_MIDNIGHT = datetime(2024, 5, 3, 0, 0, tzinfo=UTC)
PLAYER = Actor("alice", "frontend")


def changed(limit: int | None, at: datetime) -> PlayerLimit:
    current = PlayerLimit("alice")
    for event in decide_limit(current, SetPlayerLimit(limit), at):
        current = evolve_limit(current, event)
    return current


def test_the_week_starts_on_friday_at_midnight_utc() -> None:
    assert week_start(THURSDAY_LATE) == datetime(2024, 4, 26, tzinfo=UTC)
    assert week_start(FRIDAY_MIDNIGHT) == FRIDAY_MIDNIGHT
    assert week_start(datetime(2024, 5, 9, 12, tzinfo=UTC)) == FRIDAY_MIDNIGHT


def test_setting_a_limit_for_the_first_time_is_allowed_and_recorded() -> None:
    assert decide_limit(PlayerLimit("alice"), SetPlayerLimit(5_000), THURSDAY_LATE) == [
        PlayerLimitSet("alice", 5_000, THURSDAY_LATE.isoformat())
    ]


@pytest.mark.parametrize("limit", [0, 50, 150, -100])
def test_a_limit_is_whole_pounds_of_at_least_one(limit: int) -> None:
    with pytest.raises(LimitNotWholePounds):
        decide_limit(PlayerLimit("alice"), SetPlayerLimit(limit), THURSDAY_LATE)


def test_a_second_change_in_the_same_week_is_refused_naming_the_next_friday() -> None:
    current = changed(5_000, FRIDAY_MIDNIGHT + timedelta(hours=1))
    next_friday = FRIDAY_MIDNIGHT + timedelta(days=7)
    with pytest.raises(LimitChangedThisWeek) as refusal:
        decide_limit(current, SetPlayerLimit(2_000), next_friday - timedelta(seconds=1))
    assert refusal.value.next_change_at == next_friday
    assert "2024-05-10T00:00:00+00:00" in refusal.value.message


def test_a_change_just_before_friday_allows_another_just_after() -> None:
    current = changed(5_000, THURSDAY_LATE)
    assert decide_limit(current, SetPlayerLimit(2_000), FRIDAY_MIDNIGHT) == [
        PlayerLimitSet("alice", 2_000, FRIDAY_MIDNIGHT.isoformat())
    ]


def test_removing_the_limit_is_a_change_too() -> None:
    current = changed(5_000, FRIDAY_MIDNIGHT)
    with pytest.raises(LimitChangedThisWeek):
        decide_limit(current, SetPlayerLimit(None), FRIDAY_MIDNIGHT + timedelta(days=1))
    later = FRIDAY_MIDNIGHT + timedelta(days=7)
    removed = decide_limit(current, SetPlayerLimit(None), later)
    assert removed == [PlayerLimitSet("alice", None, later.isoformat())]


def test_setting_the_same_limit_again_is_refused_rather_than_spending_the_weeks_change() -> None:
    current = changed(5_000, THURSDAY_LATE - timedelta(days=8))
    with pytest.raises(LimitUnchanged):
        decide_limit(current, SetPlayerLimit(5_000), THURSDAY_LATE)


def test_the_service_refuses_a_second_change_and_appends_nothing() -> None:
    now = [THURSDAY_LATE]
    store = InMemoryEventStore(clock=lambda: now[0])
    players = PlayerService(store, lambda: now[0])
    players.set_limit("alice", 5_000, PLAYER)
    head = store.head()
    with pytest.raises(LimitChangedThisWeek):
        players.set_limit("alice", 1_000, PLAYER)
    assert store.head() == head
    now[0] = FRIDAY_MIDNIGHT
    players.set_limit("alice", 1_000, PLAYER)
    limit = players.get_limit("alice")
    assert (limit.limit, limit.changed_at) == (1_000, FRIDAY_MIDNIGHT)
