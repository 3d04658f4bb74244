"""PostgreSQL and Redis servers shipped in wheels, so that a machine with only Python runs Shoebox.

One module a server (postgres, redis), the sharing of a running server between handles in
server, and the process plumbing both use in processes. Callers need only what is named here.
"""

from service.embedded.errors import (
    EmbeddedServerError,
    ServerBinaryNotFoundError,
    ServerStartTimeoutError,
)
from service.embedded.postgres import POSTGRES_ACCOUNT, EmbeddedPostgres, database_url
from service.embedded.processes import HOST
from service.embedded.redis import EmbeddedRedis, redis_url

__all__ = [
    "HOST",
    "POSTGRES_ACCOUNT",
    "EmbeddedPostgres",
    "EmbeddedRedis",
    "EmbeddedServerError",
    "ServerBinaryNotFoundError",
    "ServerStartTimeoutError",
    "database_url",
    "redis_url",
]
