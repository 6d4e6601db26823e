"""OpenTelemetry spans for the SDK's calls and requests, with W3C trace context on the wire.

The SDK uses the OpenTelemetry API only (`pip install "volcano[otel]"`), as a library should:
the application configures a tracer provider and its exporters (or runs under
`opentelemetry-instrument`). Tracing is on while the process's global provider is one that was
configured; otherwise (the API not installed, or not imported by anyone, which a configured
provider needs; no provider set; a no-op one) each call and request takes its untraced path
after one look-up in `sys.modules`, and `import volcano` never imports OpenTelemetry.

The spans:
- one per call of `client.locks` (kind INTERNAL): `volcano.acquire`, `volcano.renew`,
  `volcano.release`, `volcano.get`, `volcano.force_release`, `volcano.check`; an acquisition's
  retry and the requests of a chained wait are its children;
- one per request sent (kind CLIENT), named `POST /v1/locks/{key}/acquire` and so on, whose
  `traceparent` header (the global propagator's) makes the server's spans its children;
- one per with_lock guard, `volcano.with_lock`, from entering to the end of its release; its
  acquisition and release are its children, and each request the client's loop sends in the
  background to renew leases (one, or a batch) is a `volcano.renew` of its own trace, linked to
  the span of each guard it renews (a guard may live for hours: its renewals would otherwise
  make one trace without end).

Attributes name the operation, the request id, the ttl, wait and limit asked, the fencing
token (it is public), a fence check's answer, the status and, on failure, the error's class
(`error.type`) and code. Never an owner token, an
API key, a URL or path (the path holds the key), or an error's message (it names the key); the
lock key (`volcano.lock.key`) only when `VOLCANO_TRACE_LOCK_KEYS=1`.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import sys
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from ._version import __version__

if TYPE_CHECKING:
    import httpx
    from opentelemetry.trace import Span, SpanContext, Tracer

    from ._config import Settings

__all__ = ["GuardTrace", "inject", "renewals", "request", "traced", "traced_async"]

P = ParamSpec("P")
R = TypeVar("R")

LOCK_KEYS_ENV = "VOLCANO_TRACE_LOCK_KEYS"
_ROUTES = {
    "acquire": ("POST", "/v1/locks/{key}/acquire"),
    "renew": ("POST", "/v1/locks/{key}/renew"),
    "renew_many": ("POST", "/v1/leases/renew"),
    "release": ("POST", "/v1/locks/{key}/release"),
    "get": ("GET", "/v1/locks/{key}"),
    "force_release": ("DELETE", "/v1/locks/{key}"),
    "check": ("GET", "/v1/locks/{key}/leases/{fencing_token}"),
    "watch": ("GET", "/v1/locks/{key}"),
    "list": ("GET", "/v1/locks"),
}

_cached: tuple[object, Tracer] | None = None


def _tracer() -> Tracer | None:
    """The SDK's tracer while a tracer provider is configured in this process, else None."""
    global _cached  # noqa: PLW0603 - one tracer per provider, made on first use
    trace = sys.modules.get("opentelemetry.trace")
    if trace is None:
        return None  # nobody imported OpenTelemetry, so nobody configured it
    provider = trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
        return None
    if _cached is None or _cached[0] is not provider:
        _cached = (provider, provider.get_tracer("volcano", __version__))
    return _cached[1]


def _lock_keys() -> bool:
    return os.environ.get(LOCK_KEYS_ENV, "") == "1"


def _attributes(operation: str, key: object, options: dict[str, Any]) -> dict[str, Any]:
    attributes: dict[str, Any] = {"volcano.operation": operation}
    if _lock_keys() and isinstance(key, str):
        attributes["volcano.lock.key"] = key
    for name in ("ttl", "wait"):
        value = options.get(name)
        seconds = getattr(value, "total_seconds", lambda v=value: v)()
        if isinstance(seconds, int | float) and not isinstance(seconds, bool):
            attributes[f"volcano.lock.{name}_seconds"] = float(seconds)
    for name in ("limit", "fencing_token"):
        value = options.get(name)
        if isinstance(value, int) and not isinstance(value, bool):
            attributes[f"volcano.lock.{name}"] = value
    return attributes


def _ended(span: Span, result: object) -> None:
    if isinstance(result, bool):  # a fence check's answer
        span.set_attribute("volcano.lock.live", result)
        return
    token = getattr(result, "fencing_token", None)
    if isinstance(token, int):
        span.set_attribute("volcano.lock.fencing_token", token)


def _failed(span: Span, exc: BaseException) -> None:
    from opentelemetry.trace import StatusCode

    span.set_attribute("error.type", type(exc).__qualname__)
    code = getattr(exc, "code", None)  # the API's error code, never the message
    span.set_status(StatusCode.ERROR, code if isinstance(code, str) else type(exc).__qualname__)


@contextlib.contextmanager
def _call_span(tracer: Tracer, operation: str, arguments: dict[str, Any]) -> Iterator[Span]:
    """The span of a call, named by its arguments (the method's, by name)."""
    with tracer.start_as_current_span(
        f"volcano.{operation}",
        attributes=_attributes(operation, arguments.get("key"), arguments),
        record_exception=False,  # an exception's message names the key
        set_status_on_exception=False,
    ) as span:
        try:
            yield span
        except BaseException as exc:
            _failed(span, exc)
            raise


def traced(operation: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """A `client.locks` method as a span `volcano.<operation>` while tracing is on."""

    def decorate(method: Callable[P, R]) -> Callable[P, R]:
        names = list(inspect.signature(method).parameters)

        @functools.wraps(method)
        def call(*args: P.args, **kwargs: P.kwargs) -> R:
            tracer = _tracer()
            if tracer is None:
                return method(*args, **kwargs)
            arguments = {**dict(zip(names, args, strict=False)), **kwargs}
            with _call_span(tracer, operation, arguments) as span:
                result = method(*args, **kwargs)
                _ended(span, result)
                return result

        return call

    return decorate


def traced_async(
    operation: str,
) -> Callable[[Callable[P, Awaitable[R]]], Callable[P, Awaitable[R]]]:
    """The asyncio twin of `traced`."""

    def decorate(method: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
        names = list(inspect.signature(method).parameters)

        @functools.wraps(method)
        async def call(*args: P.args, **kwargs: P.kwargs) -> R:
            tracer = _tracer()
            if tracer is None:
                return await method(*args, **kwargs)
            arguments = {**dict(zip(names, args, strict=False)), **kwargs}
            with _call_span(tracer, operation, arguments) as span:
                result = await method(*args, **kwargs)
                _ended(span, result)
                return result

        return call

    return decorate


def _no_status(_status: int) -> None:
    pass


_UNTRACED = contextlib.nullcontext(_no_status)


def request(
    operation: str, request_id: str, settings: Settings, *, resend: bool, wait: object
) -> contextlib.AbstractContextManager[Callable[[int], None]]:
    """The span of one request while tracing is on, current while it is sent.

    `resend`: a retry with the same request id; `wait`: the seconds it may wait in line.
    Gives what records the answer's status (a no-op while tracing is off, at no cost).
    """
    tracer = _tracer()
    if tracer is None:
        return _UNTRACED
    return _request(tracer, operation, request_id, settings, resend=resend, wait=wait)


@contextlib.contextmanager
def _request(
    tracer: Tracer,
    operation: str,
    request_id: str,
    settings: Settings,
    *,
    resend: bool,
    wait: object,
) -> Iterator[Callable[[int], None]]:
    from opentelemetry.trace import SpanKind

    method, template = _ROUTES.get(operation, ("POST", operation))
    host, port = _host_and_port(settings.api_url)
    attributes: dict[str, Any] = {
        "http.request.method": method,
        "url.template": template,
        "server.address": host,
        "server.port": port,
        "volcano.operation": operation,
        "volcano.request_id": request_id,
    }
    if resend:
        attributes["http.request.resend_count"] = 1  # a retry, with the same request id
    if isinstance(wait, int | float) and not isinstance(wait, bool):
        attributes["volcano.lock.wait_seconds"] = float(wait)
    with tracer.start_as_current_span(
        f"{method} {template}",
        kind=SpanKind.CLIENT,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        try:
            yield lambda status: span.set_attribute("http.response.status_code", status)
        except BaseException as exc:
            _failed(span, exc)
            raise


def inject(headers: httpx.Headers) -> None:
    """Put the current span's `traceparent` (and the propagator's other fields) on a request."""
    if _tracer() is None:
        return
    from opentelemetry import propagate

    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    headers.update(carrier)


class GuardTrace:
    """A with_lock guard's span: started on entering, ended after its release."""

    __slots__ = ("span",)

    def __init__(self, span: Span) -> None:
        self.span = span

    @classmethod
    def start(cls, key: str, ttl: float, wait: float) -> GuardTrace | None:
        """The guard's span (not current: it is made current around its own requests)."""
        tracer = _tracer()
        if tracer is None:
            return None
        attributes = _attributes("with_lock", key, {"ttl": ttl, "wait": wait})
        return cls(tracer.start_span("volcano.with_lock", attributes=attributes))

    @property
    def link(self) -> SpanContext:
        """What the guard's renewals link to."""
        return self.span.get_span_context()

    @contextlib.contextmanager
    def current(self) -> Iterator[None]:
        """Make the guard's span the parent of the spans started in the block."""
        from opentelemetry.trace import use_span

        with use_span(
            self.span, end_on_exit=False, record_exception=False, set_status_on_exception=False
        ):
            yield

    def end(self, fencing_token: int | None, failure: BaseException | None) -> None:
        """End the span, with the lease's fencing token and what ended the guard, if any."""
        if fencing_token is not None:
            self.span.set_attribute("volcano.lock.fencing_token", fencing_token)
        if failure is not None:
            _failed(self.span, failure)
        self.span.end()


@contextlib.contextmanager
def renewals(guards: Sequence[GuardTrace | None], keys: Sequence[str]) -> Iterator[None]:
    """A background request renewing leases: a trace of its own, linked to each guard's span.

    One span per request, whatever number of leases it carries (`volcano.lock.count`).
    """
    tracer = _tracer()
    if tracer is None:
        yield
        return
    from opentelemetry.context import Context
    from opentelemetry.trace import Link

    links = [Link(guard.link) for guard in guards if guard is not None and guard.link.is_valid]
    attributes = _attributes("renew", keys[0] if len(keys) == 1 else None, {})
    attributes["volcano.lock.count"] = len(keys)
    with tracer.start_as_current_span(
        "volcano.renew",
        context=Context(),  # a root: not a child of whatever the renewal loop runs in
        links=links,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        try:
            yield
        except BaseException as exc:
            _failed(span, exc)
            raise


def _host_and_port(api_url: str) -> tuple[str, int]:
    from urllib.parse import urlsplit

    parts = urlsplit(api_url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return parts.hostname or "", port
