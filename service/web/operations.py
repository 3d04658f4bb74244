"""What operators' tools ask the API, outside /v1: health, readiness, metrics, request logs.

- `GET /healthz`: the process answers. No key, no database: a load balancer's liveness probe.
- `GET /readyz`: PostgreSQL answers and every migration in the migrations directory is
  applied (503 otherwise); Redis is reported but never fails it, because the API keeps taking
  bets without Redis (docs/operations.md). No key, and nothing in it is a secret: no URL, no
  host, no error text from a driver.
- `GET /metrics`: Prometheus text (service/runtime/metrics.py), open, behind an ops or
  regulator key, or not on this address at all, as SHOEBOX_METRICS_ACCESS says.
- One JSON log line per request (service/runtime/logs.py), and the request duration histogram.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, Final

import psycopg
from flask import Flask, Response, g, jsonify, request

from events.migrations import applied_migrations_query, migrations_dir
from events.postgres import Pool
from service.application.keys import ApiKey
from service.runtime import metrics
from service.runtime.container import Container
from service.runtime.logs import skip_unwritten_fields
from service.runtime.scheduler import redis_for_requests
from service.web.api import EXTENSION
from service.web.auth import ENDPOINT_ROLES_EXTENSION, OPEN, OVERSIGHT
from service.web.problems import Problem

log = logging.getLogger("shoebox.request")

_KNOWN_METHODS: Final = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
_PROBE_TIMEOUT_SECONDS: Final = 2.0


def register_operations(app: Flask) -> None:
    """Add /healthz, /readyz and (as the settings say) /metrics, and the request log."""
    wiring = app.extensions[EXTENSION]
    assert isinstance(wiring, Container)
    roles: dict[str, frozenset[Any]] = {}
    app.add_url_rule("/healthz", "healthz", _healthz, methods=["GET"])
    roles["healthz"] = OPEN
    app.add_url_rule("/readyz", "readyz", _readyz, methods=["GET"])
    roles["readyz"] = OPEN
    access = wiring.settings.metrics_access
    if access != "off":
        app.add_url_rule("/metrics", "metrics", _metrics, methods=["GET"])
        roles["metrics"] = OPEN if access == "open" else frozenset(OVERSIGHT)
    app.extensions[ENDPOINT_ROLES_EXTENSION] = roles
    hooks = app.before_request_funcs.setdefault(None, [])
    if wiring.settings.metrics_port is not None:
        hooks.insert(0, _keep_ports_apart)
    # First of the before-request hooks, so the duration covers the others.
    hooks.insert(0, _start_clock)
    app.after_request(_log_request)
    skip_unwritten_fields()


def _wiring() -> Container:
    from flask import current_app

    wiring = current_app.extensions[EXTENSION]
    assert isinstance(wiring, Container)
    return wiring


def _healthz() -> Response:
    return jsonify(status="ok")


def readiness(pool: Pool | None, redis_url: str | None) -> tuple[bool, dict[str, Any]]:
    """Whether the API should take traffic, and what each dependency said."""
    checks: dict[str, Any] = {}
    ready = True
    if pool is None:
        checks["postgres"] = {"status": "not used"}
    else:
        try:
            with pool.connection(timeout=_PROBE_TIMEOUT_SECONDS) as conn:
                applied = {str(row[0]) for row in conn.execute(applied_migrations_query())}
            checks["postgres"] = {"status": "ok"}
            expected = sorted(path.stem for path in migrations_dir().glob("*.sql"))
            pending = [name for name in expected if name not in applied]
            checks["migrations"] = {
                "status": "ok" if not pending else "behind",
                "applied": len(applied),
                "pending": pending,
            }
            ready = not pending
        except psycopg.errors.InsufficientPrivilege:
            # Migration 0008 grants the application role this read; before it, we are behind.
            checks["postgres"] = {"status": "ok"}
            checks["migrations"] = {"status": "behind"}
            ready = False
        except (psycopg.Error, TimeoutError, OSError) as error:
            log.warning("readiness: PostgreSQL unavailable: %s", type(error).__name__)
            checks["postgres"] = {"status": "unreachable"}
            ready = False
    checks["redis"] = _redis_check(redis_url)
    return ready, checks


def _redis_check(redis_url: str | None) -> Mapping[str, str]:
    if not redis_url:
        return {"status": "not configured"}
    from redis.exceptions import RedisError

    try:
        redis_for_requests(redis_url).ping()
    except RedisError:
        return {"status": "unreachable", "effect": "betting windows close lazily"}
    return {"status": "ok"}


def _readyz() -> Response:
    wiring = _wiring()
    ready, checks = readiness(wiring.pool, wiring.settings.redis_url)
    response = jsonify(status="ready" if ready else "not ready", checks=checks)
    response.status_code = 200 if ready else 503
    return response


def scrape_time_gauges(pool: Pool | None, redis_url: str | None) -> metrics.ScrapeTimeGauges:
    """The gauges measured at each scrape: the projections' lag, the RQ queues' depth and their
    live workers."""
    lag: Callable[[], Mapping[str, int]] | None = None
    if pool is not None:
        from events.store import utc_now
        from service.application.read_models import projector

        def lag_now() -> Mapping[str, int]:
            return {s.name: s.lag_events for s in projector.status(pool, utc_now())}

        lag = lag_now
    depths: Callable[[], Mapping[str, int]] | None = None
    workers: Callable[[], Mapping[str, int]] | None = None
    if redis_url:
        from events.store import utc_now
        from service.runtime.queues import queue_health

        def depths_now() -> Mapping[str, int]:
            health = queue_health(redis_for_requests(redis_url), utc_now())
            return {h.queue: h.jobs for h in health}

        def workers_now() -> Mapping[str, int]:
            health = queue_health(redis_for_requests(redis_url), utc_now())
            return {h.queue: h.workers for h in health}

        depths, workers = depths_now, workers_now
    unsequenced: Callable[[], Mapping[str, float]] | None = None
    if pool is not None:
        from events.sequencer import unsequenced_backlog

        def backlog_now() -> Mapping[str, float]:
            appends, oldest = unsequenced_backlog(pool)
            return {"appends": appends, "oldest_seconds": oldest}

        unsequenced = backlog_now
    return metrics.ScrapeTimeGauges(lag, depths, workers, unsequenced)


def _metrics() -> Response:
    wiring = _wiring()
    text = metrics.exposition(scrape_time_gauges(wiring.pool, wiring.settings.redis_url))
    return Response(
        text, mimetype=metrics.CONTENT_TYPE.split(";")[0], content_type=metrics.CONTENT_TYPE
    )


_OPERATIONS_ENDPOINTS: Final = frozenset({"healthz", "readyz", "metrics"})


def _keep_ports_apart() -> None:
    """With SHOEBOX_METRICS_PORT, the metrics port serves /metrics (and the probes) only, and
    the API's port everything but /metrics: one gunicorn listens on both (service/cli/serve.py)."""
    port = str(_wiring().settings.metrics_port)
    on_metrics_port = request.environ.get("SERVER_PORT") == port
    endpoint = request.endpoint
    if on_metrics_port and endpoint not in _OPERATIONS_ENDPOINTS:
        raise Problem(404, "not-found", "The metrics port serves /metrics, /healthz and /readyz.")
    if not on_metrics_port and endpoint == "metrics":
        raise Problem(404, "not-found", f"Metrics are served on port {port}.")


def _start_clock() -> None:
    g.started = time.perf_counter()


def _log_request(response: Response) -> Response:
    started = g.get("started")
    duration = time.perf_counter() - started if isinstance(started, float) else 0.0
    rule = request.url_rule
    route = rule.rule if rule is not None else "unmatched"
    method = request.method if request.method in _KNOWN_METHODS else "other"
    metrics.request_duration(route, method, response.status_code).observe(duration)
    key = g.get("api_key")
    log.info(
        "%s %s %d",
        method,
        route,
        response.status_code,
        extra={
            "request_id": g.get("request_id"),
            "method": method,
            "route": route,
            "status": response.status_code,
            "duration_ms": round(duration * 1000, 3),
            # The role only: a key, or its id, never reaches a log line.
            "role": key.role.value if isinstance(key, ApiKey) else None,
        },
    )
    return response
