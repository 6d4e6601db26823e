"""The SDK's OpenTelemetry spans with the server's, exported by the SDK's in-memory exporter in
a process that configured tracing (tests/integration/sdk/traced_run.py): one acquire is one
trace from the SDK's call through its request to the server's request and transaction; a
guard's renewals are traces of their own linked to it; and no exported span holds a secret."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.sdk import Kind

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[3]


def traced_run(kind: Kind, database_url: str, tmp_path: Path, **env: str) -> dict[str, Any]:
    """Run the traced calls in a child process; what it exported and used."""
    out = tmp_path / f"spans-{kind}.json"
    result = subprocess.run(
        [sys.executable, "-m", "tests.integration.sdk.traced_run", kind, database_url, str(out)],
        cwd=ROOT, env={**os.environ, **env}, capture_output=True, text=True, timeout=120,
        check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    found: dict[str, Any] = json.loads(out.read_text())
    return found


def named(spans: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [span for span in spans if span["name"] == name]


def children(spans: list[dict[str, Any]], parent: dict[str, Any]) -> list[dict[str, Any]]:
    return [span for span in spans if span["parent_id"] == parent["context"]["span_id"]]


def only(found: list[dict[str, Any]], name: str) -> dict[str, Any]:
    [span] = [span for span in found if span["name"] == name]
    return span


@pytest.fixture(scope="module", params=["sync", "async"])
def run(
    request: pytest.FixtureRequest, database_url: str, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    """The traced calls, made once per client kind (and backend)."""
    return traced_run(request.param, database_url, tmp_path_factory.mktemp("traced"))


class TestOneTrace:
    def test_an_acquire_is_one_trace_from_the_sdk_into_the_database(
        self, run: dict[str, Any]
    ) -> None:
        """The first acquire: the SDK's call span, its request span (CLIENT), the server's
        request span (SERVER) and its transaction span, parent to child, in one trace."""
        spans = run["spans"]
        call = named(spans, "volcano.acquire")[0]
        assert call["kind"] == "SpanKind.INTERNAL"
        assert call["parent_id"] is None
        sent = only(children(spans, call), "POST /v1/locks/{key}/acquire")
        assert sent["kind"] == "SpanKind.CLIENT"
        served = only(children(spans, sent), "acquireLock")
        assert served["kind"] == "SpanKind.SERVER"
        stored = only(children(spans, served), "storage acquire")
        trace_ids = {span["context"]["trace_id"] for span in (call, sent, served, stored)}
        assert len(trace_ids) == 1
        assert sent["attributes"]["http.response.status_code"] == 200
        assert served["attributes"]["http.response.status_code"] == 200
        assert (
            sent["attributes"]["volcano.request_id"] == served["attributes"]["volcano.request_id"]
        )
        assert call["attributes"]["volcano.lock.fencing_token"] >= 1

    def test_every_call_has_its_span_and_the_servers(self, run: dict[str, Any]) -> None:
        """renew, get, check, release and force_release each make a call span with a request
        span and the server's span under it; a fence check's span says what it found, and a
        semaphore's acquire its limit."""
        spans = run["spans"]
        for operation, served_as in [
            ("renew", "renewLock"),
            ("get", "getLock"),
            ("check", "checkLease"),
            ("release", "releaseLock"),
            ("force_release", "forceReleaseLock"),
        ]:
            call = named(spans, f"volcano.{operation}")[0]
            [sent] = children(spans, call)
            assert sent["kind"] == "SpanKind.CLIENT"
            assert [s["name"] for s in children(spans, sent)] == [served_as]
        check = only(spans, "volcano.check")
        assert check["attributes"]["volcano.lock.live"] is True
        assert check["attributes"]["volcano.lock.fencing_token"] >= 1
        limits = [
            s["attributes"].get("volcano.lock.limit") for s in named(spans, "volcano.acquire")
        ]
        assert 2 in limits

    def test_a_refused_acquire_is_an_error_named_by_its_code(self, run: dict[str, Any]) -> None:
        """The acquire answered 409: its call and request spans are errors with the error's
        class and code, and the server's span is not (a 409 is the lock working)."""
        spans = run["spans"]
        [refused] = [
            s for s in named(spans, "volcano.acquire") if s["status"]["status_code"] == "ERROR"
        ]
        assert refused["attributes"]["error.type"] == "LockHeldError"
        assert refused["status"]["description"] == "lock_held"
        [sent] = children(spans, refused)
        assert sent["attributes"]["http.response.status_code"] == 409
        [served] = children(spans, sent)
        assert served["status"]["status_code"] == "UNSET"


class TestGuards:
    def test_renewals_are_traces_of_their_own_linked_to_the_guard(
        self, run: dict[str, Any]
    ) -> None:
        """A with_lock guard is one span whose acquisition and release requests are its
        children; each
        background renewal is a trace of its own, linked to the guard's span, reaching the
        server."""
        spans = run["spans"]
        guard = only(spans, "volcano.with_lock")
        assert sorted(s["name"] for s in children(spans, guard)) == [
            "POST /v1/locks/{key}/acquire",
            "POST /v1/locks/{key}/release",
        ]
        assert guard["attributes"]["volcano.lock.fencing_token"] >= 1
        renewals = [s for s in named(spans, "volcano.renew") if s["links"]]
        assert renewals
        for renewal in renewals:
            assert renewal["parent_id"] is None
            assert renewal["context"]["trace_id"] != guard["context"]["trace_id"]
            [link] = renewal["links"]
            assert link["context"]["span_id"] == guard["context"]["span_id"]
            [sent] = children(spans, renewal)
            assert [s["name"] for s in children(spans, sent)] == ["renewLock"]


class TestSecrets:
    def test_no_span_holds_a_key_an_owner_token_or_a_lock_key(self, run: dict[str, Any]) -> None:
        """Every name, attribute, event, link and status of every exported span, client's and
        server's, is free of the API keys, the owner tokens and the lock keys used."""
        text = json.dumps([{k: v for k, v in s.items() if k != "resource"} for s in run["spans"]])
        assert len(run["spans"]) > 20
        for secret in (*run["secrets"], *run["owners"], *run["keys"]):
            assert secret not in text, secret

    @pytest.mark.parametrize("client_kind", ["sync"])
    def test_the_lock_key_only_when_asked(
        self, client_kind: Kind, database_url: str, tmp_path: Path
    ) -> None:
        """With VOLCANO_TRACE_LOCK_KEYS=1 the SDK's call spans name their key; owner tokens
        and API keys still appear nowhere."""
        run = traced_run(client_kind, database_url, tmp_path, VOLCANO_TRACE_LOCK_KEYS="1")
        calls = [s for s in run["spans"] if s["name"].startswith("volcano.")]
        assert {s["attributes"].get("volcano.lock.key") for s in calls} == set(run["keys"])
        text = json.dumps([{k: v for k, v in s.items() if k != "resource"} for s in run["spans"]])
        for secret in (*run["secrets"], *run["owners"]):
            assert secret not in text
