"""OpenTelemetry spans for requests, their storage transactions and waits, when tracing is on.

Off by default, and then free: `Tracing.for_provider` gives None, and the API, the runner and
the waiting code each keep their untraced path, chosen once at construction. Tracing is on when
a tracer provider is configured in the process: set globally before the server starts
(`opentelemetry-instrument volcano-server serve ...`, or a program embedding the app), given
to `create_app` (tests), or made by `configure_from_environment` when `OTEL_TRACES_EXPORTER`
names exporters (the server extra installs the OpenTelemetry SDK; `console` needs nothing
more, `otlp` its exporter package).

The spans, parented by the request's W3C `traceparent` (the global propagator reads it):
- one per lock request (kind SERVER), named by its operationId, with the HTTP method, the
  route template, the status, the request id; the lock key only with `lock_keys`;
- one per lock transaction that a request runs (`storage acquire`, ...), with the database
  system; background work (heartbeats, timers, purges) and key lookups make none;
- one per wait in a key's line (`volcano.lock.wait`), with how it ended.
No attribute holds an API key, an owner token, a header other than those or a body.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterator, Mapping
from importlib import metadata
from typing import TYPE_CHECKING, Protocol

from starlette.datastructures import Headers

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.trace import Span, Tracer, TracerProvider
    from starlette.types import Scope

    from ._lockmetrics import Waited

__all__ = ["LOCK_KEY", "Tracing", "TracingSetupError", "configure_from_environment"]

log = logging.getLogger("volcano_server")

_NAME = "volcano_server"
# The attribute that names the lock key, set only when the operator asked for it.
LOCK_KEY = "volcano.lock.key"


class Operation(Protocol):
    """What a request's span tells of its operation (the spec's `http._spec.Operation`)."""

    @property
    def method(self) -> str: ...
    @property
    def path(self) -> str: ...
    @property
    def operation_id(self) -> str: ...


def _version() -> str:
    try:
        return metadata.version("volcano")
    except metadata.PackageNotFoundError:
        return "unknown"


class Tracing:
    """Starts the server's spans on one tracer."""

    def __init__(self, tracer: Tracer, *, lock_keys: bool, database: str) -> None:
        from opentelemetry import propagate, trace

        self._tracer = tracer
        self._lock_keys = lock_keys
        self._database = database
        self._trace = trace
        self._propagate = propagate

    @classmethod
    def for_provider(
        cls, provider: TracerProvider | None, *, lock_keys: bool, database: str
    ) -> Tracing | None:
        """Tracing on `provider` (None: the global one), or None when none is configured.

        `database` is the storage's system (`sqlite`, `postgresql`).
        """
        try:
            from opentelemetry import trace
        except ImportError:
            return None
        provider = provider if provider is not None else trace.get_tracer_provider()
        if isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
            return None
        tracer = provider.get_tracer(_NAME, _version())
        return cls(tracer, lock_keys=lock_keys, database=database)

    @contextlib.contextmanager
    def request(
        self, operation: Operation, params: Mapping[str, str], scope: Scope
    ) -> Iterator[Span]:
        """The span of one request, current for its duration."""
        parent = self._propagate.extract(Headers(scope=scope))
        attributes: dict[str, str] = {
            "http.request.method": operation.method,
            "http.route": operation.path,
            "volcano.operation": operation.operation_id,
        }
        if self._lock_keys and "key" in params:
            attributes[LOCK_KEY] = params["key"]
        with self._tracer.start_as_current_span(
            operation.operation_id,
            context=parent,
            kind=self._trace.SpanKind.SERVER,
            attributes=attributes,
        ) as span:
            yield span

    def answered(self, span: Span, status: int, request_id: str) -> None:
        """Record the answer's status (5xx marks the span an error) and request id."""
        span.set_attribute("http.response.status_code", status)
        span.set_attribute("volcano.request_id", request_id)
        if status >= 500:
            span.set_attribute("error.type", str(status))
            span.set_status(self._trace.StatusCode.ERROR)

    @contextlib.contextmanager
    def transaction(self, name: str) -> Iterator[None]:
        """The span of a storage transaction, when a request's span is current; else none."""
        if not self._trace.get_current_span().is_recording():
            yield
            return
        with self._tracer.start_as_current_span(
            f"storage {name}",
            kind=self._trace.SpanKind.CLIENT,
            attributes={"db.system.name": self._database, "db.operation.name": name},
        ):
            yield

    @contextlib.contextmanager
    def wait(self) -> Iterator[Span]:
        """The span of a request's wait in a key's line (`waited` records how it ended)."""
        with self._tracer.start_as_current_span("volcano.lock.wait") as span:
            yield span

    def waited(self, span: Span, outcome: Waited) -> None:
        """Record how a wait ended."""
        span.set_attribute("volcano.lock.wait.outcome", outcome.value)


def configure_from_environment() -> Callable[[], None]:
    """Make and set the global tracer provider from `OTEL_*` variables, if they ask for one.

    Only when `OTEL_TRACES_EXPORTER` names exporters (not `none`), the SDK is not disabled
    (`OTEL_SDK_DISABLED`), and no provider is set already (`opentelemetry-instrument` sets one).
    Each exporter is found by name among the `opentelemetry_traces_exporter` entry points
    (`console` comes with the SDK; `otlp` with opentelemetry-exporter-otlp-proto-http). The
    sampler comes from `OTEL_TRACES_SAMPLER`, the resource from `OTEL_SERVICE_NAME` and
    `OTEL_RESOURCE_ATTRIBUTES` (service.name `volcano-server` by default). Returns what flushes
    and stops it at shutdown (nothing to do when nothing was made).
    """
    names = [n.strip() for n in os.environ.get("OTEL_TRACES_EXPORTER", "").split(",") if n.strip()]
    disabled = os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true"
    if not names or names == ["none"] or disabled:
        return _nothing
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as exc:
        raise TracingSetupError(
            f"OTEL_TRACES_EXPORTER is set but the OpenTelemetry SDK is missing ({exc.name}):"
            ' pip install "volcano[server]"'
        ) from None
    if not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        return _nothing  # configured already, by whoever started this process
    resource = Resource.create()
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: "volcano-server"}))
    provider = SdkTracerProvider(resource=resource)
    for name in names:
        provider.add_span_processor(BatchSpanProcessor(_exporter(name)))
    trace.set_tracer_provider(provider)
    log.info("tracing: spans exported to %s", ", ".join(names))
    return provider.shutdown


class TracingSetupError(Exception):
    """The environment asks for tracing the server cannot set up."""


def _exporter(name: str) -> SpanExporter:
    found = metadata.entry_points(group="opentelemetry_traces_exporter", name=name)
    if not found:
        raise TracingSetupError(
            f"OTEL_TRACES_EXPORTER names {name!r}, which no installed package provides"
            " (otlp: pip install opentelemetry-exporter-otlp-proto-http)"
        )
    exporter: SpanExporter = next(iter(found)).load()()
    return exporter


def _nothing() -> None:
    pass
