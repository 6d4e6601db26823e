"""The server's tracing, decided once: on for a configured provider only, and what an answer
records on its span."""

from __future__ import annotations

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from volcano_server.telemetry._tracing import Tracing, configure_from_environment


class TestOnOrOff:
    @pytest.mark.parametrize("provider", [trace.NoOpTracerProvider(), trace.ProxyTracerProvider()])
    def test_off_for_a_provider_that_records_nothing(self, provider: trace.TracerProvider) -> None:
        """A no-op or unset (proxy) provider means no tracing at all."""
        assert Tracing.for_provider(provider, lock_keys=False, database="sqlite") is None

    def test_off_without_a_provider_configured(self) -> None:
        """The test process configures no global provider: no tracing."""
        assert Tracing.for_provider(None, lock_keys=False, database="sqlite") is None

    @pytest.mark.parametrize("exporters", ["", "none", " , "])
    def test_the_environment_asks_for_nothing(
        self, monkeypatch: pytest.MonkeyPatch, exporters: str
    ) -> None:
        """Without exporters named, the server sets up no provider (and has nothing to stop)."""
        monkeypatch.setenv("OTEL_TRACES_EXPORTER", exporters)
        configure_from_environment()()
        assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)

    def test_a_disabled_sdk_sets_up_nothing(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """OTEL_SDK_DISABLED=true wins over named exporters."""
        monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")
        monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
        configure_from_environment()()
        assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


class TestAnswered:
    @pytest.mark.parametrize(
        ("status", "code", "error"),
        [
            (200, StatusCode.UNSET, None),
            (409, StatusCode.UNSET, None),
            (503, StatusCode.ERROR, "503"),
        ],
    )
    def test_only_a_5xx_is_an_error(self, status: int, code: StatusCode, error: str | None) -> None:
        """A server span is an error for 5xx answers only (a 409 is the lock working)."""
        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        tracing = Tracing.for_provider(provider, lock_keys=False, database="sqlite")
        assert tracing is not None
        with provider.get_tracer("t").start_as_current_span("request") as span:
            tracing.answered(span, status, "request-id")
        [ended] = exporter.get_finished_spans()
        assert ended.status.status_code is code
        assert (ended.attributes or {}).get("error.type") == error
        assert (ended.attributes or {})["http.response.status_code"] == status
