"""What the pages' views share, kept apart from the pages app that builds it so that the views
and the app that mounts them do not import each other."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

from flask import current_app

from events.store import Clock
from service.application.keys import KeyRing
from service.runtime.demo import DemoKey
from service.runtime.settings import Settings
from service.runtime.web_sessions import SessionStore
from service.web.pages.gateway import ApiGateway

PAGES_EXTENSION: Final = "shoebox-pages"


@dataclass(frozen=True, slots=True)
class PagesContext:
    """What the pages' views share: the API, the sessions, the key ring, the demo keys."""

    settings: Settings
    api: ApiGateway
    sessions: SessionStore
    keys: KeyRing
    demo_keys: Mapping[str, DemoKey]
    redis_url: str | None
    clock: Clock
    # The sequencer's backlog (events, oldest's seconds); None without PostgreSQL.
    unsequenced: Callable[[], tuple[int, float]] | None = None


def pages() -> PagesContext:
    """The current pages app's context."""
    found = current_app.extensions[PAGES_EXTENSION]
    if not isinstance(found, PagesContext):
        raise TypeError("the pages app was not built by mount_pages")
    return found
