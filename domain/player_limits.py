"""A player's own maximum stake per round: set by the player, applied at every table.

The limit lowers a table's maximum (domain/limits.py `check_stake` takes the lower of the two)
and never raises it. To keep it a considered decision rather than something changed in the
heat of a session, it may change at most once a week, the week turning on Friday at 00:00 GMT
(UTC all year: GMT does not observe summer time). Setting it the first time, changing it and
removing it are all changes.
"""

# ruff: noqa: N818 -- each refusal is named after the rule it enforces, as in domain/errors.py.

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import ClassVar, TypeAlias

from domain.errors import DomainError
from domain.limits import PENCE_PER_POUND, pounds

FRIDAY = 4  # datetime.weekday()
_WEEK = timedelta(days=7)


class PlayerLimitError(DomainError):
    """A change of a player's own limit breaks one of its rules."""

    rule = "player_limit.rule_broken"


class LimitNotWholePounds(PlayerLimitError):
    """A player's own limit is a whole number of pounds, at least £1."""

    rule = "player_limit.not_whole_pounds"


class LimitChangedThisWeek(PlayerLimitError):
    """A player changes their own limit at most once a week; the week turns Friday 00:00 GMT."""

    rule = "player_limit.changed_this_week"

    def __init__(self, message: str, next_change_at: datetime) -> None:
        super().__init__(message)
        self.next_change_at = next_change_at


class LimitUnchanged(PlayerLimitError):
    """A change sets a different limit; setting the same one would spend the week's change."""

    rule = "player_limit.unchanged"


@dataclass(frozen=True, slots=True)
class PlayerLimitSet:
    """The player set their own maximum per round (None: no limit of their own)."""

    type: ClassVar[str] = "PlayerLimitSet"
    player_id: str
    limit: int | None
    set_at: str


PlayerLimitEvent: TypeAlias = PlayerLimitSet
PLAYER_LIMIT_EVENT_TYPES: tuple[type[PlayerLimitEvent], ...] = (PlayerLimitSet,)


@dataclass(frozen=True, slots=True)
class PlayerLimit:
    """A player's own limit in pence (None when unset) and when it last changed."""

    player_id: str
    limit: int | None = None
    changed_at: datetime | None = None

    def next_change_at(self) -> datetime | None:
        """When the limit may next change, or None if it may change at any time."""
        if self.changed_at is None:
            return None
        return week_start(self.changed_at) + _WEEK


@dataclass(frozen=True, slots=True)
class SetPlayerLimit:
    """Set (or with None, remove) the player's own maximum stake per round, in pence."""

    limit: int | None


def week_start(moment: datetime) -> datetime:
    """The Friday 00:00 UTC that began the betting-limit week holding `moment`."""
    moment = _utc(moment)
    midnight = moment.replace(hour=0, minute=0, second=0, microsecond=0)
    return midnight - timedelta(days=(midnight.weekday() - FRIDAY) % 7)


def decide_limit(
    current: PlayerLimit, command: SetPlayerLimit, now: datetime
) -> list[PlayerLimitEvent]:
    """The event setting the limit, or the refusal naming the rule (and when to try again)."""
    now = _utc(now)
    limit = command.limit
    if limit is not None and (
        isinstance(limit, bool)
        or not isinstance(limit, int)
        or limit < PENCE_PER_POUND
        or limit % PENCE_PER_POUND
    ):
        raise LimitNotWholePounds(
            f"a player's own limit is whole pounds, at least £1, not "
            f"{pounds(limit) if isinstance(limit, int) else repr(limit)} "
            f"(rule {LimitNotWholePounds.rule})"
        )
    next_change = current.next_change_at()
    if next_change is not None and now < next_change:
        raise LimitChangedThisWeek(
            f"{current.player_id} changed their limit on {_when(current.changed_at)}; the next "
            f"change is allowed from {next_change.isoformat()} (rule {LimitChangedThisWeek.rule})",
            next_change_at=next_change,
        )
    if current.changed_at is not None and limit == current.limit:
        raise LimitUnchanged(f"the limit is already {_shown(limit)} (rule {LimitUnchanged.rule})")
    return [PlayerLimitSet(current.player_id, limit, now.isoformat())]


def evolve_limit(current: PlayerLimit, event: PlayerLimitEvent) -> PlayerLimit:
    """The player's limit after `event`."""
    return PlayerLimit(current.player_id, event.limit, datetime.fromisoformat(event.set_at))


def _shown(limit: int | None) -> str:
    return "none" if limit is None else pounds(limit)


def _when(moment: datetime | None) -> str:
    return "never" if moment is None else moment.isoformat()


def _utc(now: datetime) -> datetime:
    if now.tzinfo is None or now.utcoffset() is None:
        raise ValueError(f"the clock must give timezone-aware times, not {now!r}")
    return now.astimezone(UTC)
