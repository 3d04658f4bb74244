"""The service's read models by name, run by the game-agnostic machinery of events/projections.

events/ knows how to follow the log, checkpoint and rebuild; it does not know which read models
Shoebox has. This module names them, once, and offers the runner's operations by name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Final

from events.postgres import Pool
from events.projections import runner
from events.projections.base import Projection
from events.projections.runner import (
    GATHER_SECONDS,
    LIVE_BATCH,
    REBUILD_BATCH,
    Catalogue,
    ProjectionFollower,
    ProjectionStatus,
    Projector,
    RebuildResult,
    table_dump,
)
from events.store import Clock, utc_now
from events.subscription import CatchUpSubscription
from service.application.game.open_rounds import OpenRoundsProjection
from service.application.read_models.chat import ChatProjection
from service.application.read_models.ledger import LedgerProjection
from service.application.read_models.overview import OverviewProjection
from service.application.read_models.players import PlayersProjection
from service.application.read_models.rounds import RoundsProjection
from service.application.read_models.shoes import ShoesProjection
from service.application.read_models.significant import SignificantProjection
from service.application.read_models.statistics import StatisticsProjection
from service.application.read_models.wallets import WalletsProjection
from service.application.upcasters import upcasters

__all__ = [
    "NAMES",
    "PROJECTIONS",
    "ProjectionFollower",
    "ProjectionStatus",
    "Projector",
    "RebuildResult",
    "catch_up",
    "follower",
    "projection_class",
    "rebuild",
    "status",
    "subscriptions",
    "table_dump",
]

PROJECTIONS: Final[tuple[type[Projection], ...]] = (
    WalletsProjection,
    RoundsProjection,
    StatisticsProjection,
    PlayersProjection,
    LedgerProjection,
    SignificantProjection,
    ShoesProjection,
    ChatProjection,
    OpenRoundsProjection,
    OverviewProjection,
)
"""Every read model, in the order a rebuild of all of them applies each batch.

The index of open rounds is one of them, so that `projections status` and the lag metric
report it and `projections rebuild` can rebuild it; the projector follows it whatever names
it is given, because its sweeper reads it.
"""

NAMES: Final = tuple(p.name for p in PROJECTIONS)


def projection_class(name: str) -> type[Projection]:
    """The read model called `name`; ValueError names the known ones if there is none."""
    for cls in PROJECTIONS:
        if cls.name == name:
            return cls
    raise ValueError(f"no projection {name!r}; the projections are {', '.join(NAMES)}")


def _classes(names: Iterable[str]) -> list[type[Projection]]:
    return [projection_class(name) for name in dict.fromkeys(names)]


def subscriptions(
    pool: Pool,
    names: Iterable[str] = NAMES,
    *,
    poll_interval: float = 5.0,
    listen: bool = True,
    batch_size: int = LIVE_BATCH,
    clock: Clock = utc_now,
    after_apply: Callable[[], None] | None = None,
) -> list[CatchUpSubscription]:
    """One catch-up subscription per named projection, each checkpointed under its name.

    `after_apply` runs inside each batch's transaction before its checkpoint moves (runner).
    """
    return runner.subscriptions(
        pool,
        _classes(names),
        poll_interval=poll_interval,
        listen=listen,
        batch_size=batch_size,
        clock=clock,
        upcasters=upcasters(),
        after_apply=after_apply,
    )


def follower(
    pool: Pool,
    names: Iterable[str] = NAMES,
    *,
    also: Catalogue = (),
    poll_interval: float = 5.0,
    listen: bool = True,
    batch_size: int = LIVE_BATCH,
    gather: float = GATHER_SECONDS,
    asynchronous_commit: bool = True,
    clock: Clock = utc_now,
    after_apply: Callable[[], None] | None = None,
) -> ProjectionFollower:
    """One follower of the log into the named projections (and `also` these), a transaction a
    batch for all of them: what `shoebox projector` runs."""
    return runner.follower(
        pool,
        # open_rounds is among the names as well: a model given twice would fold twice.
        list(dict.fromkeys([*_classes(names), *also])),
        poll_interval=poll_interval,
        listen=listen,
        batch_size=batch_size,
        gather=gather,
        asynchronous_commit=asynchronous_commit,
        clock=clock,
        upcasters=upcasters(),
        after_apply=after_apply,
    )


def catch_up(pool: Pool, names: Iterable[str] = NAMES) -> int:
    """Bring the named projections up to the log's head now; the events handed to them."""
    return runner.catch_up(pool, _classes(names), upcasters=upcasters())


def rebuild(
    pool: Pool,
    names: Iterable[str] = NAMES,
    *,
    batch_size: int = REBUILD_BATCH,
    clock: Clock = utc_now,
) -> RebuildResult:
    """Rebuild the named projections from position 0 beside the live ones; swap them in."""
    return runner.rebuild(
        pool, _classes(names), batch_size=batch_size, clock=clock, upcasters=upcasters()
    )


def status(pool: Pool, now: datetime, names: Iterable[str] = NAMES) -> list[ProjectionStatus]:
    """Each named projection's checkpoint, the log's head, and the lag."""
    return runner.status(pool, now, names)
