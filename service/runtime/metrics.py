"""Prometheus metrics, added up across gunicorn's workers (prometheus-client's multiprocess mode).

Each process records into files under PROMETHEUS_MULTIPROC_DIR, which `shoebox serve` and
`shoebox run` set before any worker starts; a scrape reads every process's files. Without the
variable (tests, a one-off command) the metrics live in the process's own registry. The
variable must be set before prometheus_client is first imported, which is why nothing in the
CLI imports this module at start-up.

Labels are route templates, methods, statuses, event types, outcomes, queues and projection
names: never an id of a player, key, table, round or seed, so the series stay few and say
nothing about anyone.

Three gauges are measured when scraped rather than recorded: the projections' lag (from their
checkpoints), the RQ queues' depth and their live workers (from Redis). A Redis that is down
leaves the queue gauges out of the scrape; it never fails it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any, Final

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
    start_http_server,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from domain.round import CoupCompleted, RoundVoided
from events.store import (
    AppendResult,
    DelegatingEventStore,
    EventMetadata,
    EventStore,
    Idempotency,
    OutboxRow,
    RecordedEvent,
    StreamAppend,
)
from events.stream_locks import StreamLocks, StreamTurn
from service.runtime.consistency import record_append
from service.runtime.settings import MULTIPROC_VARIABLE

log = logging.getLogger(__name__)

CONTENT_TYPE: Final = CONTENT_TYPE_LATEST

HTTP_REQUEST_DURATION = Histogram(
    "shoebox_http_request_duration_seconds",
    "Time to answer an HTTP request, by route template, method and status.",
    ["route", "method", "status"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)
EVENTS_APPENDED = Counter(
    "shoebox_events_appended_total", "Events appended to the log, by type.", ["type"]
)
ROUNDS = Counter("shoebox_rounds_total", "Coups dealt, by outcome.", ["outcome"])
ROUNDS_VOIDED = Counter("shoebox_rounds_voided_total", "Rounds voided by a malfunction.")
WINDOW_CLOSE_DELAY = Histogram(
    "shoebox_window_close_delay_seconds",
    "How long after its deadline the worker closed a betting window.",
    buckets=(0.05, 0.1, 0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 30.0),
)
WITNESS_FAILURES = Counter(
    "shoebox_witness_failures_total",
    "Tree checkpoints a configured witness did not cosign, by witness and reason; alert on any.",
    ["witness", "reason"],
)
WITNESS_COSIGNED_SIZE = Gauge(
    "shoebox_witness_cosigned_size",
    "The largest tree size each witness has cosigned; a witness left behind shows here.",
    ["witness"],
    multiprocess_mode="max",
)
WALLET_CALLS = Counter(
    "shoebox_wallet_calls_total",
    "Calls to seamless operators' wallets, by operator, call and class; alert on any fatal.",
    ["operator", "call", "outcome"],
)
WALLET_CALLS_PARKED = Counter(
    "shoebox_wallet_calls_parked_total",
    "Owed wallet calls parked on a fatal answer, by operator; each needs an operator.",
    ["operator"],
)
WALLET_CALLS_FLAGGED = Counter(
    "shoebox_wallet_calls_flagged_total",
    "Owed wallet calls still unconfirmed after the operator's flag_after_seconds, by operator.",
    ["operator"],
)
FEED_CLIENTS = Gauge(
    "shoebox_feed_clients",
    "Live feed connections open now.",
    # The sum over the processes alive now: a worker that died takes its clients with it.
    multiprocess_mode="livesum",
)


SEQUENCER_LAG = Histogram(
    "shoebox_sequencer_lag_seconds",
    "How long the oldest append of each sequencer batch waited for its position.",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0),
)
SEQUENCER_BATCH_EVENTS = Histogram(
    "shoebox_sequencer_batch_events",
    "Events placed in the log by each sequencer batch.",
    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048),
)
SEQUENCER_ACTIVE = Gauge(
    "shoebox_sequencer_active",
    "1 in the process that holds the sequencer's role; the sum is 1 when all is well.",
    multiprocess_mode="livesum",
)
LOG_BUSY = Counter(
    "shoebox_log_busy_total",
    "Appends refused with 503 log-busy, by why: the sequencer behind, a stream's lock, or"
    " the request's deadline.",
    ["reason"],
)
READS = Counter(
    "shoebox_reads_total",
    "GET requests of the API by the pool that served them (primary, replica) and why: no"
    " replica configured, an exact read, no token, a token the replica had replayed, a"
    " fallback after the wait, or the replica down.",
    ["pool", "reason"],
)
READ_FALLBACKS = Counter(
    "shoebox_read_fallbacks_total",
    "Reads sent to the primary because the replica had not caught up with their consistency"
    " token within 2 s (replay, or a read model's checkpoint), or had failed to answer.",
    ["reason"],
)
REPLICA_LAG = Gauge(
    "shoebox_replica_lag_seconds",
    "How far the read replica's replay was behind, as last seen by a process's reads (0 when"
    " it had replayed all it received); the largest among the live processes.",
    multiprocess_mode="livemax",
)


# Each labelled child, once found: `labels()` takes the metric's lock and rebuilds the label
# tuple on every call, a few per request. The label values are bounded (route templates,
# methods, statuses, event types), and so is each cache.
_DURATIONS: dict[tuple[str, str, int], Any] = {}
_APPENDED: dict[str, Any] = {}


def request_duration(route: str, method: str, status: int) -> Any:
    """HTTP_REQUEST_DURATION's child for a route template, a method and a status."""
    key = (route, method, status)
    child = _DURATIONS.get(key)
    if child is None:
        child = _DURATIONS[key] = HTTP_REQUEST_DURATION.labels(route, method, str(status))
    return child


def record_appended(streams: Sequence[StreamAppend]) -> None:
    """Count a committed append's events, and the rounds it dealt or voided."""
    for stream in streams:
        for event in stream.events:
            counter = _APPENDED.get(event.type)
            if counter is None:
                counter = _APPENDED[event.type] = EVENTS_APPENDED.labels(event.type)
            counter.inc()
            if event.type == CoupCompleted.type:
                ROUNDS.labels(str(event.payload.get("outcome"))).inc()
            elif event.type == RoundVoided.type:
                ROUNDS_VOIDED.inc()


class _MeteredTurn:
    """A turn whose append is counted as MeteredEventStore counts one."""

    def __init__(self, inner: StreamTurn) -> None:
        self._inner = inner

    @property
    def read_from(self) -> int | None:
        return self._inner.read_from

    @property
    def events(self) -> list[RecordedEvent] | None:
        return self._inner.events

    @property
    def open(self) -> bool:
        return self._inner.open

    def append(
        self,
        streams: Sequence[StreamAppend],
        metadata: EventMetadata,
        idempotency: Idempotency | None = None,
        outbox: Sequence[OutboxRow] = (),
    ) -> AppendResult:
        result = self._inner.append(streams, metadata, idempotency, outbox)
        # As MeteredEventStore's: the write's last event goes in its consistency token.
        record_append(result)
        if not result.replayed:
            record_appended(streams)
        return result


class MeteredStreamLocks:
    """Stream locks whose turns' appends are counted (they bypass the metered store)."""

    def __init__(self, inner: StreamLocks) -> None:
        self._inner = inner

    @contextmanager
    def hold(
        self, stream_id: str, timeout: float, *, read_from: int | None = None
    ) -> Iterator[StreamTurn]:
        """The inner locks' turn, counted."""
        with self._inner.hold(stream_id, timeout, read_from=read_from) as turn:
            yield _MeteredTurn(turn)


class MeteredEventStore(DelegatingEventStore):
    """An event store that counts what it appends; everything else goes straight through."""

    @property
    def inner(self) -> EventStore:
        """The store being counted."""
        return self._inner

    def append(
        self,
        streams: Sequence[StreamAppend],
        metadata: EventMetadata,
        idempotency: Idempotency | None = None,
        outbox: Sequence[OutboxRow] = (),
    ) -> AppendResult:
        """Append through the inner store, then count the events unless it was a replay."""
        result = self._inner.append(streams, metadata, idempotency, outbox)
        # The write's last event goes in its consistency token (service/runtime/consistency.py).
        record_append(result)
        if not result.replayed:
            record_appended(streams)
        return result

    def __getattr__(self, name: str) -> Any:
        # A backend's own extras (PostgresEventStore.iter_rows, say) stay reachable.
        return getattr(self._inner, name)


def observe_window_close(deadline: datetime, closed_at: datetime) -> None:
    """Record how late a betting window was closed (0 if on time)."""
    WINDOW_CLOSE_DELAY.observe(max(0.0, (closed_at - deadline).total_seconds()))


class ScrapeTimeGauges(Collector):
    """The gauges read when scraped: projection lag, RQ queues and workers, the unsequenced."""

    def __init__(
        self,
        projection_lag: Callable[[], Mapping[str, int]] | None,
        queue_depths: Callable[[], Mapping[str, int]] | None,
        queue_workers: Callable[[], Mapping[str, int]] | None = None,
        unsequenced: Callable[[], Mapping[str, float]] | None = None,
    ) -> None:
        self._projection_lag = projection_lag
        self._queue_depths = queue_depths
        self._queue_workers = queue_workers
        self._unsequenced = unsequenced

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """Yield each gauge whose source answers; log and leave out one that does not."""
        sources = (
            (
                "shoebox_projection_lag_events",
                "Events in the log that a projection has not applied yet.",
                "projection",
                self._projection_lag,
            ),
            (
                "shoebox_rq_queue_depth",
                "Jobs waiting in an RQ queue.",
                "queue",
                self._queue_depths,
            ),
            (
                "shoebox_rq_workers",
                # Depth with no worker is a queue nobody consumes (service/runtime/queues.py).
                "RQ workers serving a queue whose heartbeat is live.",
                "queue",
                self._queue_workers,
            ),
            (
                "shoebox_log_unsequenced",
                "Committed appends still waiting for the sequencer: how many (at most), and the"
                " oldest one's age in seconds (appends are refused past 2 s).",
                "measure",
                self._unsequenced,
            ),
        )
        sourced: tuple[tuple[str, str, str, Callable[[], Mapping[str, float]] | None], ...] = (
            sources
        )
        for name, documentation, label, source in sourced:
            if source is None:
                continue
            try:
                values = source()
            except Exception as error:
                log.warning("metrics: %s unavailable: %s", name, error)
                continue
            family = GaugeMetricFamily(name, documentation, labels=[label])
            for key, value in sorted(values.items()):
                family.add_metric([key], value)
            yield family

    def describe(self) -> list[GaugeMetricFamily]:
        """Nothing up front: describing would run the sources at registration."""
        return []


def exposition(scrape_time: Collector | None = None) -> bytes:
    """Every metric in Prometheus' text format: all processes' in multiprocess mode."""
    if os.environ.get(MULTIPROC_VARIABLE):
        recorded = CollectorRegistry()
        multiprocess.MultiProcessCollector(recorded)  # type: ignore[no-untyped-call]
    else:
        recorded = REGISTRY
    text = generate_latest(recorded)
    if scrape_time is not None:
        # Families of other names, so the two texts may simply follow each other.
        measured = CollectorRegistry()
        measured.register(scrape_time)
        text += generate_latest(measured)
    return text


class MetricsServer:
    """A process's own /metrics on a port of its own, served from a daemon thread."""

    def __init__(self, host: str, port: int, scrape_time: Collector | None = None) -> None:
        if os.environ.get(MULTIPROC_VARIABLE):
            # Beside the API under `shoebox run`, where the API's scrape already adds this
            # process's files up: served here too, it would be counted twice.
            raise ValueError(
                f"a process's own metrics port is for a process alone; with {MULTIPROC_VARIABLE}"
                " set, GET /metrics on the API serves this process's figures already"
            )
        registry = CollectorRegistry()
        # The process's own families (REGISTRY), and the gauges measured when scraped.
        registry.register(_Recorded())
        if scrape_time is not None:
            registry.register(scrape_time)
        self._server, self._thread = start_http_server(port, addr=host, registry=registry)

    @property
    def port(self) -> int:
        """The port it listens on (the one asked for, or the one given for 0)."""
        return int(self._server.server_port)

    def stop(self) -> None:
        """Stop serving and wait for the thread."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


class _Recorded(Collector):
    """The default registry's families, as a collector another registry can hold."""

    def collect(self) -> Iterator[Any]:
        """Every family recorded in this process."""
        yield from REGISTRY.collect()

    def describe(self) -> list[Any]:
        """Nothing up front, like ScrapeTimeGauges."""
        return []


def mark_process_dead(pid: int) -> None:
    """Forget a dead process's live gauges (gunicorn's child_exit hook)."""
    if os.environ.get(MULTIPROC_VARIABLE):
        multiprocess.mark_process_dead(pid)  # type: ignore[no-untyped-call]
