"""A process with OpenTelemetry configured, for tests/integration/sdk/test_tracing.py.

    python -m tests.integration.sdk.traced_run KIND DATABASE_URL OUT

Sets a global tracer provider exporting to memory (which makes the SDK trace), serves a
reference server in a thread on the same provider, runs a set of SDK calls with a client of
KIND (sync or async), and writes OUT: every exported span (`ReadableSpan.to_json()`), the lock
keys and owner tokens it used, and the spans' ids per call. It runs apart from the test
process because a process's global tracer provider can be set only once.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from pathlib import Path
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import volcano
from tests.support.raw import new_id
from tests.support.sdk import Sdk
from tests.support.server import create_project, serve_in_thread
from volcano_server import ServerConfig, create_app


def main(kind: str, database_url: str, out: Path) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    project = create_project(database_url, f"traced-{new_id()[:8]}")
    app = create_app(
        ServerConfig(database_url=database_url, access_log=False), tracer_provider=provider
    )
    used: dict[str, Any] = {
        "secrets": [project.anon_key, project.service_key],
        "keys": [],
        "owners": [],
    }
    with serve_in_thread(app) as url:
        sdk = Sdk(kind, project.client_args(url))  # type: ignore[arg-type]
        try:
            calls(sdk, used)
        finally:
            sdk.close()
    spans = [json.loads(span.to_json()) for span in exporter.get_finished_spans()]
    out.write_text(json.dumps({"spans": spans, **used}))


def calls(sdk: Sdk, used: dict[str, Any]) -> None:
    key, other, guarded = (f"traced-{new_id()[:8]}" for _ in range(3))
    used["keys"] += [key, other, guarded]

    def owner() -> str:
        token = new_id()
        used["owners"].append(token)
        return token

    lease = sdk.acquire(key, ttl=30, token=owner())
    lease = sdk.renew(key, lease, ttl=30)
    sdk.get(key)
    assert sdk.check(key, lease.fencing_token)
    with contextlib.suppress(volcano.LockHeldError):
        sdk.acquire(key, ttl=30, token=owner())
    sdk.release(key, lease)
    held = sdk.acquire(other, ttl=30, limit=2, token=owner())
    used["owners"].append(held.owner_token)
    sdk.force_release(other)
    # A guard held long enough for the background loop to renew it (ttl 0.6 s: after 0.2 s).
    with sdk.lock(guarded, ttl=0.6, token=owner()) as guard:
        first = sdk.read(lambda: guard.lease)
        deadline = time.monotonic() + 10
        while sdk.read(lambda: guard.lease) == first and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not sdk.read(lambda: guard.lost)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], Path(sys.argv[3]))
