"""Prometheus metrics of one server process, in a registry of its own.

Served in the Prometheus text format on the listener `--metrics-port` opens (keep it private).
A new metric is one attribute in `Metrics.__init__`, registered in `self.registry`; the lock
metrics (waits, holds, grants, expiries, fence checks) are `locks` (`_lockmetrics`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sized
from typing import TYPE_CHECKING

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
)
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from ._lockmetrics import KeyPrefixes, LockMetrics

if TYPE_CHECKING:
    from ._accesslog import RequestRecord

__all__ = ["Metrics"]

# The event loop's lag: under a millisecond when idle; health probes time out at seconds.
_LAG_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# Lock operations take about a millisecond; a request may wait for a lock up to a minute.
_LATENCY_BUCKETS = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
)  # fmt: skip


class Metrics:
    """The counters, histograms and gauges a server exports.

    `key_prefixes`: the opt-in allow-list that labels the lock metrics by key prefix.
    """

    def __init__(self, key_prefixes: KeyPrefixes | None = None) -> None:
        self.registry = CollectorRegistry()
        ProcessCollector(registry=self.registry)  # memory, CPU, open files against their limit
        PlatformCollector(registry=self.registry)
        self.requests = Counter(
            "volcano_requests",
            "Requests answered, by operation (operationId, or none before routing) and status.",
            ["operation", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "volcano_request_duration_seconds",
            "Time from a request's arrival to its answer, by operation.",
            ["operation"],
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.storage_errors = Counter(
            "volcano_storage_errors",
            "Times the database could not serve (answered 503, or a background task retried).",
            ["during"],
            registry=self.registry,
        )
        for during in ("request", "readiness", "purge", "key_use"):
            self.storage_errors.labels(during)  # exported from the start, at 0
        self.open_connections = Gauge(
            "volcano_open_connections",
            "Client connections open now (waiting requests included).",
            registry=self.registry,
        )
        self.refused_connections = Counter(
            "volcano_refused_connections",
            "Connections refused with 503 because --max-connections were open.",
            registry=self.registry,
        )
        self.max_connections = Gauge(
            "volcano_max_connections",
            "The connection cap in force (--max-connections, lowered to fit the open-files limit).",
            registry=self.registry,
        )
        self.waiters = Gauge(
            "volcano_waiters_queued",
            "Acquire requests this server holds open in a lock's queue, waiting for their turn.",
            registry=self.registry,
        )
        self.watches = Gauge(
            "volcano_watches_open",
            "Watching GETs (after_version) this server holds open until their key changes.",
            registry=self.registry,
        )
        self.loop_lag = Histogram(
            "volcano_event_loop_lag_seconds",
            "How late the event loop ran a timer (sampled every 0.1 s): what every request and"
            " health probe waits on top of its own work.",
            buckets=_LAG_BUCKETS,
            registry=self.registry,
        )
        self.admission_waiting = Gauge(
            "volcano_admission_waiting",
            "Storage work waiting in line for a slot (each project's share: _admission).",
            registry=self.registry,
        )
        self.over_time_share = Counter(
            "volcano_over_time_share",
            "Requests refused 429 because their project's work waited past the patience.",
            registry=self.registry,
        )
        self.locks = LockMetrics(self.registry, key_prefixes)

    def expect(self, operations: Iterable[str]) -> None:
        """Export each operation's latency histogram from the start, at zero.

        A series born at its first request loses that request to `rate()` (no earlier sample
        to count from), and a dashboard shows nothing until a second one.
        """
        for operation in operations:
            self.latency.labels(operation)

    def count_reaped(self, reaped: Callable[[], int]) -> None:
        """Export `volcano_reaped_connections_total`, counted by the listener's seats."""
        self.registry.register(_Reaped(reaped))

    def watch_admission(self, waiting: Callable[[], float]) -> None:
        """Report the work waiting for a slot (`waiting`: the admission's count) at each scrape."""
        self.admission_waiting.set_function(waiting)

    def watch_waiters(self, room: Sized, watches: Sized) -> None:
        """Report how many waiting acquires (`room`) and watches are open, at each scrape."""
        self.waiters.set_function(lambda: len(room))
        self.watches.set_function(lambda: len(watches))

    def observe(self, record: RequestRecord) -> None:
        """Count one answered request and its latency."""
        self.requests.labels(record.operation, str(record.status)).inc()
        if record.seconds is not None:
            self.latency.labels(record.operation).observe(record.seconds)


class _Reaped(Collector):
    """The seats' own count of idle keyless connections closed to seat a newcomer."""

    def __init__(self, reaped: Callable[[], int]) -> None:
        self._reaped = reaped

    def collect(self) -> Iterator[CounterMetricFamily]:
        """The counter's one sample, read at the scrape."""
        yield CounterMetricFamily(
            "volcano_reaped_connections",
            "Idle connections without keys closed to give their seat to a newcomer.",
            value=self._reaped(),
        )
