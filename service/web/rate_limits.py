"""Rate limits per API key: a key that floods gets 429 problems, and every other key is served.

One token bucket per key: it holds at most `burst` tokens, refills at `per_second`, and each
request takes one. An empty bucket is a 429 whose `Retry-After` says when the next token comes.

The buckets live in this process, one set per gunicorn worker, not in PostgreSQL or Redis: a
shared counter would cost every request a round trip, and a Redis one would make the API
depend on Redis, which it deliberately does not (docs/operations.md, "Redis outage"). So a
server of N workers admits up to N times the limit from one key in the worst case; the
setting is sized for that (docs/operations.md, "Rate limits"). Requests without a valid key
never reach a bucket: they are 401s, answered before the key is known.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from flask import Flask, current_app, g

from service.application.keys import ApiKey
from service.web.problems import Problem

EXTENSION: Final = "shoebox.rate_limits"


@dataclass(slots=True)
class _Bucket:
    tokens: float
    filled_at: float


class RateLimiter:
    """Token buckets, one per API key, safe to share between a worker's threads."""

    def __init__(
        self,
        per_second: float,
        burst: int,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.per_second = per_second
        self.burst = burst
        self._monotonic = monotonic
        self._buckets: dict[str, _Bucket] = {}
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        """Whether any limit applies: a rate of 0 turns limiting off."""
        return self.per_second > 0

    def take(self, key_id: str) -> float:
        """Take a token for `key_id`: 0 when admitted, else the seconds until one is due."""
        now = self._monotonic()
        with self._lock:
            # Buckets are per key, and keys are only those the log holds: the dict stays small.
            bucket = self._buckets.get(key_id)
            if bucket is None:
                bucket = self._buckets[key_id] = _Bucket(float(self.burst), now)
            bucket.tokens = min(
                float(self.burst), bucket.tokens + (now - bucket.filled_at) * self.per_second
            )
            bucket.filled_at = now
            if bucket.tokens >= 1:
                bucket.tokens -= 1
                return 0.0
            return (1 - bucket.tokens) / self.per_second


def install(app: Flask, per_second: float, burst: int) -> None:
    """Give `app` its buckets; `limit_request_rate` reads them."""
    app.extensions[EXTENSION] = RateLimiter(per_second, burst)


def limit_request_rate() -> None:
    """Before each authenticated request: a token from its key's bucket, or a 429 problem."""
    limiter = current_app.extensions.get(EXTENSION)
    api_key = g.get("api_key")
    if not isinstance(limiter, RateLimiter) or not limiter.enabled:
        return
    if not isinstance(api_key, ApiKey):
        return
    wait = limiter.take(api_key.key_id)
    if wait > 0:
        seconds = max(1, math.ceil(wait))
        raise Problem(
            429,
            "too-many-requests",
            f"This API key sent more than {limiter.per_second:g} requests a second (bursts of"
            f" {limiter.burst}) to this server process; retry after {seconds} s.",
            headers={"Retry-After": str(seconds)},
        )
