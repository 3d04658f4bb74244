"""Read-your-writes over replicas: the `Shoebox-Consistency` header and where a read goes.

- Every write (a POST, PUT, PATCH or DELETE answered 2xx) answers a token naming its commit
  (service/runtime/consistency.py). After the write has committed, the primary's current WAL
  write location is at or past its commit record: the log's appends commit with
  `synchronous_commit` on, so the commit was flushed, and written, before it was answered.
  An append reads that location itself: a contended table's in its turn's message after the
  COMMIT, a group commit's once for its batch right after the batch's statement. Where the
  request's last append did so and the request has taken no connection since, the token is
  that location, and otherwise one query after the view reads it.
- A GET of a resource goes to the replica (DATABASE_READ_URL) when there is one, unless its
  view reads exactly (`exact_read`: a balance, a limit, whatever decides money), which always
  goes to the primary.
- A GET that sends a token back waits, up to WAIT_SECONDS in all, until the replica has
  replayed the token's LSN and, if the view reads a read model, until every model's
  checkpoint covers the write's last event; past that, it reads from the primary.
- A token that no Shoebox wrote is a 400 problem, whatever the method.

docs/api.md, "Reading your writes", is the client's account of this.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Final, TypeVar

import psycopg
from flask import Flask, Response, current_app, g, request
from flask.views import MethodView
from psycopg_pool import PoolTimeout

from events import deadlines
from events.postgres import WAL_POSITION, checkouts, one_statement
from service.runtime.consistency import (
    HEADER,
    Consistency,
    MalformedToken,
    WrittenEvents,
    lsn_of,
    parse,
    start_recording,
    stop_recording,
)
from service.runtime.container import Container
from service.runtime.metrics import READ_FALLBACKS, READS
from service.runtime.read_pools import (
    models_cover,
    read_from,
    reading_from,
    replayed,
    stop_reading_from,
    wait_budget,
)
from service.web.api import container
from service.web.problems import Problem

log = logging.getLogger(__name__)

READ_POOL_HEADER: Final = "Shoebox-Read-Pool"
"""Which pool answered a GET: `primary` or `replica` (for operators and tests; not a contract)."""
EXACT_ATTRIBUTE: Final = "_shoebox_exact_read"
_READS: Final = frozenset({"GET", "HEAD"})
_WRITES: Final = frozenset({"POST", "PUT", "PATCH", "DELETE"})
# How long answering a write's token may take: the write is done, and a primary too slow
# to say where its WAL is costs the answer its token, not its success.
_TOKEN_BOUND_SECONDS: Final = 0.25

View = TypeVar("View", bound=Callable[..., Any])


def exact_read(view: View) -> View:
    """Mark a view method whose reads must be exact: it always reads from the primary."""
    setattr(view, EXACT_ATTRIBUTE, True)
    return view


def install(app: Flask) -> None:
    """Add the hooks that route reads and answer tokens; after every other before-request
    hook, so that a read waits for its token only once it is known to be admitted."""
    app.before_request(_route_request)
    app.after_request(_answer_token)
    app.teardown_request(_end_request)


def check_token() -> None:
    """A before-request hook: a malformed token is a 400, before anything (an idempotency
    key's claim, say) has been done for the request."""
    offered = request.headers.get(HEADER)
    if offered is None:
        g.consistency = None
        return
    try:
        g.consistency = parse(offered)
    except MalformedToken as error:
        raise Problem(
            400,
            "invalid-header",
            f"{HEADER} is not a token this service wrote: {error}. Send back the value"
            " of a write's answer as it was, or nothing.",
        ) from None


def _is_exact(endpoint: str | None, method: str) -> bool:
    view_class = getattr(current_app.view_functions.get(endpoint or ""), "view_class", None)
    if not (isinstance(view_class, type) and issubclass(view_class, MethodView)):
        return False
    handler = getattr(view_class, method.lower(), None) or getattr(view_class, "get", None)
    return bool(getattr(handler, EXACT_ATTRIBUTE, False))


def _is_resource(endpoint: str | None) -> bool:
    view_class = getattr(current_app.view_functions.get(endpoint or ""), "view_class", None)
    return isinstance(view_class, type) and issubclass(view_class, MethodView)


def _route_request() -> None:
    token = g.get("consistency")
    if not isinstance(token, Consistency):
        token = None
    if request.method in _WRITES:
        g.written, g.written_token = start_recording()
        return
    if request.method not in _READS or not _is_resource(request.endpoint):
        return
    wiring = container()
    if wiring.pool is None:
        return  # an in-memory store: one node, nothing to wait for
    g.read_until = wait_budget()
    g.before_read_models = _models_cover_write
    replica = wiring.read_pool
    pool_name, reason = "primary", "no-replica"
    if replica is not None:
        if _is_exact(request.endpoint, request.method):
            reason = "exact"
        elif wiring.replica is not None and not wiring.replica.usable():
            reason = "replica-down"
            READ_FALLBACKS.labels(reason).inc()
        elif token is None:
            pool_name, reason = "replica", "untokened"
        elif replayed(replica, token, g.read_until):
            pool_name, reason = "replica", "caught-up"
        else:
            reason = "fallback"
            READ_FALLBACKS.labels("replay").inc()
    if pool_name == "replica":
        g.read_route = read_from(replica)
    g.read_pool_name = pool_name
    READS.labels(pool_name, reason).inc()


def _models_cover_write() -> None:
    """Before a view's first read of a read model: wait until the models hold the write.

    On the replica, a model that does not cover it by the bound sends the rest of the
    request's reads to the primary; on the primary, the read answers what the model holds
    by then (the write is there; the projector has not caught up).
    """
    g.before_read_models = None
    token = g.get("consistency")
    if not isinstance(token, Consistency) or token.stream is None:
        return
    wiring = container()
    routed = reading_from()
    pool = routed if routed is not None else wiring.pool
    if pool is None or models_cover(pool, token, g.read_until):
        return
    if routed is None:
        return
    # Counted once in shoebox_reads_total, as the replica read it was routed as.
    READ_FALLBACKS.labels("read-model").inc()
    g.read_route_primary = read_from(None)
    g.read_pool_name = "primary"


def _answer_token(response: Response) -> Response:
    pool_name = g.get("read_pool_name")
    if isinstance(pool_name, str) and container().read_pool is not None:
        response.headers[READ_POOL_HEADER] = pool_name
    if request.method not in _WRITES or not 200 <= response.status_code < 300:
        return response
    # None when no append was noted: a replay answered before the view (its writes committed
    # with the first request, so the LSN alone covers them).
    written = g.get("written")
    if not isinstance(written, WrittenEvents):
        written = WrittenEvents()
    wiring = container()
    if wiring.pool is None:
        return response
    token = _write_token(wiring, written)
    if token is not None:
        response.headers[HEADER] = token.encode()
    return response


def _write_token(wiring: Container, written: WrittenEvents) -> Consistency | None:
    assert wiring.pool is not None
    commit = written.commit
    if commit is not None and commit[1] == checkouts():
        # The last append read its commit's position itself, and nothing has touched the
        # database since: that position covers every write of the request.
        return _token(lsn_of(commit[0]), written)
    try:
        # One round trip, not BEGIN, the query and a ROLLBACK.
        with deadlines.instead(_TOKEN_BOUND_SECONDS), one_statement(wiring.pool) as conn:
            row = conn.execute(WAL_POSITION).fetchone()
    except (psycopg.Error, PoolTimeout) as error:
        # A pool that reached a standby (mid-failover), or a primary gone since the commit.
        log.warning("a write is answered without its consistency token: %s", error)
        return None
    if row is None or row[0] is None:
        return None
    return _token(lsn_of(str(row[0])), written)


def _token(lsn: int, written: WrittenEvents) -> Consistency:
    if not written:
        return Consistency(lsn)
    stream, version = written[-1]
    return Consistency(lsn, stream, version)


def _end_request(error: BaseException | None) -> None:
    # In the reverse of their setting: each token restores what the one before it replaced.
    for name in ("read_route_primary", "read_route"):
        route = g.pop(name, None)
        if route is not None:
            stop_reading_from(route)
    recording = g.pop("written_token", None)
    if recording is not None:
        stop_recording(recording)
