"""The server's OpenTelemetry spans (volcano_server/telemetry/_tracing.py), exported by the SDK's
in-memory exporter from a real server: parented by the caller's W3C traceparent, one for the
request, its lock transaction and its wait, never a secret; none at all when not configured;
and `volcano-server serve` exporting them itself when OTEL_TRACES_EXPORTER asks."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import attrs
import httpx
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from tests.support.raw import Locks, Waiter, new_id, wait_for
from tests.support.server import Project, create_project, serve_in_thread
from volcano_server import ServerConfig, create_app

pytestmark = pytest.mark.slow

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"


@attrs.frozen
class Traced:
    """A server in this process whose spans end in `spans`."""

    url: str
    project: Project
    exporter: InMemorySpanExporter

    @property
    def spans(self) -> tuple[ReadableSpan, ...]:
        return self.exporter.get_finished_spans()

    def http(self, **headers: str) -> httpx.Client:
        return httpx.Client(
            base_url=self.url, headers={**self.project.headers(), **headers}, timeout=30
        )


@contextlib.contextmanager
def traced(database_url: str, **config: object) -> Iterator[Traced]:
    """A server on `database_url` tracing to an in-memory exporter."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    project = create_project(database_url, f"traced-{new_id()[:8]}")
    app = create_app(
        ServerConfig(database_url=database_url, access_log=False, **config),  # type: ignore[arg-type]
        tracer_provider=provider,
    )
    with serve_in_thread(app) as url:
        yield Traced(url, project, exporter)


def named(spans: tuple[ReadableSpan, ...], name: str) -> list[ReadableSpan]:
    return [span for span in spans if span.name == name]


def trace_id(span: ReadableSpan) -> str:
    assert span.context is not None
    return format(span.context.trace_id, "032x")


def every_attribute(spans: tuple[ReadableSpan, ...]) -> str:
    """Every name and value of every attribute and event of `spans`, as one text."""
    parts: list[str] = []
    for span in spans:
        parts.append(span.name)
        parts += [f"{k}={v}" for k, v in (span.attributes or {}).items()]
        for event in span.events:
            parts.append(event.name)
            parts += [f"{k}={v}" for k, v in (event.attributes or {}).items()]
    return "\n".join(parts)


class TestSpans:
    def test_a_request_joins_the_callers_trace(self, database_url: str) -> None:
        """An acquire carrying a traceparent is a SERVER span of that trace, child of the
        caller's span, with its lock transaction as its child; no secret in any attribute."""
        with traced(database_url) as server, server.http(traceparent=PARENT) as http:
            key, owner = f"k-{new_id()[:8]}", new_id()
            lease = Locks(http).acquire(key, owner, 30, request_id=(request_id := new_id()))
            assert lease.status_code == 200
            [request] = named(server.spans, "acquireLock")
            [storage] = named(server.spans, "storage acquire")
        assert request.kind is SpanKind.SERVER
        assert trace_id(request) == TRACE_ID
        assert request.parent is not None
        assert format(request.parent.span_id, "016x") == "00f067aa0ba902b7"
        assert storage.parent is not None
        assert request.context is not None
        assert storage.parent.span_id == request.context.span_id
        assert dict(request.attributes or {}) == {
            "http.request.method": "POST",
            "http.route": "/v1/locks/{key}/acquire",
            "volcano.operation": "acquireLock",
            "http.response.status_code": 200,
            "volcano.request_id": request_id,
        }
        text = every_attribute(server.spans)
        for secret in (owner, server.project.anon_key, server.project.service_key, key):
            assert secret not in text

    def test_a_wait_is_a_span_with_how_it_ended(self, database_url: str) -> None:
        """A waiting acquire's wait in line is a span of its own under its request's, saying
        how it ended; a wait that ran out says so too."""
        with traced(database_url) as server, server.http() as http:
            key, owner = f"k-{new_id()[:8]}", new_id()
            held = Locks(http).acquire(key, owner, 30).json()
            assert Locks(http).acquire(key, new_id(), 30, wait=0.2).status_code == 409
            waiter = Waiter(server.http(traceparent=PARENT), key, wait=20)
            wait_for(lambda: Locks(http).state(key)["waiters"] == 1, "the waiter in line")
            assert Locks(http).release(key, owner, held["fencing_token"]).status_code == 204
            assert waiter.result().status_code == 200
            spans = server.spans
        outcomes = sorted(
            (trace_id(span), (span.attributes or {})["volcano.lock.wait.outcome"])
            for span in named(spans, "volcano.lock.wait")
        )
        assert len(outcomes) == 2
        assert (TRACE_ID, "granted") in outcomes
        assert "timed_out" in [outcome for _, outcome in outcomes]

    def test_a_malformed_traceparent_starts_a_trace_of_its_own(self, database_url: str) -> None:
        """A traceparent that is not W3C's format is ignored, never refused: the request is
        answered and its span has no parent."""
        with traced(database_url) as server, server.http(traceparent="00-nonsense-01") as http:
            assert Locks(http).acquire(f"k-{new_id()[:8]}", new_id(), 30).status_code == 200
            [request] = named(server.spans, "acquireLock")
        assert request.parent is None

    def test_the_lock_key_is_an_attribute_only_when_asked(self, database_url: str) -> None:
        """With trace_lock_keys the request span names its key (volcano.lock.key)."""
        with traced(database_url, trace_lock_keys=True) as server, server.http() as http:
            key = f"k-{new_id()[:8]}"
            assert Locks(http).acquire(key, new_id(), 30).status_code == 200
            [request] = named(server.spans, "acquireLock")
        assert (request.attributes or {})["volcano.lock.key"] == key

    def test_nothing_is_traced_without_a_provider(self, database_url: str) -> None:
        """A server in a process with no tracer provider configured keeps no tracing at all."""
        app = create_app(ServerConfig(database_url=database_url, access_log=False))
        assert app.state.tracing is None


class TestCommandLine:
    def test_serve_exports_to_the_console_when_asked(self, tmp_path: Path) -> None:
        """OTEL_TRACES_EXPORTER=console makes `serve` print its spans, the last ones flushed
        when SIGTERM stops it; the span carries the caller's trace id."""
        db = f"sqlite:///{tmp_path / 'volcano.db'}"
        project = create_project(db, "demo")
        env = {**os.environ, "OTEL_TRACES_EXPORTER": "console", "OTEL_SERVICE_NAME": "locks-a"}
        command = [sys.executable, "-m", "volcano_server", "serve", "--port", "0", "--db", db]
        with subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        ) as process:
            assert process.stderr is not None
            url = None
            for line in process.stderr:
                found = re.search(r"listening on (http://\S+)", line)
                if found:
                    url = found.group(1)
                    break
            assert url is not None
            with httpx.Client(base_url=url, headers=project.headers(), timeout=30) as http:
                headers = {"traceparent": PARENT}
                assert http.get("/v1/locks/some-key", headers=headers).status_code == 200
            process.send_signal(signal.SIGTERM)
            out, _ = process.communicate(timeout=30)
        spans = [json.loads(chunk) for chunk in re.findall(r"^\{.*?^\}", out, re.M | re.S)]
        [request] = [span for span in spans if span["name"] == "getLock"]
        assert request["context"]["trace_id"] == f"0x{TRACE_ID}"
        assert request["resource"]["attributes"]["service.name"] == "locks-a"

    def test_an_exporter_nobody_provides_is_one_line(self, tmp_path: Path) -> None:
        """OTEL_TRACES_EXPORTER naming an exporter no installed package provides stops `serve`
        with one line naming it."""
        env = {**os.environ, "OTEL_TRACES_EXPORTER": "nonesuch"}
        result = subprocess.run(
            [sys.executable, "-m", "volcano_server", "serve", "--port", "0",
             "--db", f"sqlite:///{tmp_path / 'v.db'}"],
            capture_output=True, text=True, timeout=60, env=env, check=False,
        )  # fmt: skip
        assert result.returncode == 1
        assert result.stderr.count("\n") == 1
        assert "'nonesuch'" in result.stderr
