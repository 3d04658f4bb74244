"""Server-side sessions of the pages: what a browser's random session id stands for.

The browser keeps only the id, in an HttpOnly cookie; the player, the role, the CSRF token
and (for the dashboard) the API key stay here, in PostgreSQL's `web_sessions` (migration
0009). Rows are keyed by the id's SHA-256, so a read of the table yields no usable cookie.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from events.postgres import Pool
from events.store import Clock

SESSION_LIFETIME: Final = timedelta(hours=8)
PLAY: Final = "play"
OPS: Final = "ops"


@dataclass(frozen=True, slots=True)
class WebSession:
    """What a session id stands for."""

    kind: str
    role: str
    csrf_token: str
    expires_at: datetime
    player_id: str | None = None
    api_key: str | None = None


def new_secret() -> str:
    """A random token for a session id or a CSRF token: 256 bits, URL-safe."""
    return secrets.token_urlsafe(32)


def _digest(session_id: str) -> str:
    return hashlib.sha256(session_id.encode()).hexdigest()


class SessionStore(ABC):
    """Where sessions live; `start` returns the new session's id, which only the cookie keeps."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    def start(
        self, kind: str, role: str, *, player_id: str | None = None, api_key: str | None = None
    ) -> tuple[str, WebSession]:
        """Open a session; its id (for the cookie) and what it holds."""
        session_id = new_secret()
        session = WebSession(
            kind=kind,
            role=role,
            csrf_token=new_secret(),
            expires_at=self.clock() + SESSION_LIFETIME,
            player_id=player_id,
            api_key=api_key,
        )
        self._put(_digest(session_id), session)
        return session_id, session

    def find(self, session_id: str | None) -> WebSession | None:
        """The live session an id names, or None (unknown, malformed or expired)."""
        if not session_id or len(session_id) > 128:
            return None
        found = self._get(_digest(session_id))
        if found is None or found.expires_at <= self.clock():
            return None
        return found

    def end(self, session_id: str | None) -> None:
        """Forget a session (sign-out); expired ones go with it."""
        if session_id:
            self._delete(_digest(session_id))

    @abstractmethod
    def _put(self, digest: str, session: WebSession) -> None: ...

    @abstractmethod
    def _get(self, digest: str) -> WebSession | None: ...

    @abstractmethod
    def _delete(self, digest: str) -> None: ...


class PostgresSessionStore(SessionStore):
    """Sessions in PostgreSQL's `web_sessions`, shared by every worker and server."""

    def __init__(self, pool: Pool, clock: Clock) -> None:
        super().__init__(clock)
        self.pool = pool

    def _put(self, digest: str, session: WebSession) -> None:
        with self.pool.connection() as conn:
            conn.execute(
                "INSERT INTO web_sessions"
                " (session_sha256, kind, role, player_id, api_key, csrf_token, expires_at)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s)",
                (
                    digest,
                    session.kind,
                    session.role,
                    session.player_id,
                    session.api_key,
                    session.csrf_token,
                    session.expires_at,
                ),
            )
            # Sessions nobody ended: swept as new ones start (index web_sessions_expires_at).
            conn.execute("DELETE FROM web_sessions WHERE expires_at < %s", (self.clock(),))

    def _get(self, digest: str) -> WebSession | None:
        with self.pool.connection() as conn:
            row = conn.execute(
                "SELECT kind, role, csrf_token, expires_at, player_id, api_key"
                " FROM web_sessions WHERE session_sha256 = %s",
                (digest,),
            ).fetchone()
        if row is None:
            return None
        return WebSession(*row)

    def _delete(self, digest: str) -> None:
        with self.pool.connection() as conn:
            conn.execute("DELETE FROM web_sessions WHERE session_sha256 = %s", (digest,))


class InMemorySessionStore(SessionStore):
    """Sessions in this process only: for an app wired without PostgreSQL (unit tests)."""

    def __init__(self, clock: Clock) -> None:
        super().__init__(clock)
        self._sessions: dict[str, WebSession] = {}
        self._lock = threading.Lock()

    def _put(self, digest: str, session: WebSession) -> None:
        with self._lock:
            self._sessions[digest] = session

    def _get(self, digest: str) -> WebSession | None:
        with self._lock:
            return self._sessions.get(digest)

    def _delete(self, digest: str) -> None:
        with self._lock:
            self._sessions.pop(digest, None)
