"""What an operator runs and watches: Prometheus metrics on a private listener (parsed by
prometheus-client's own parser), readiness that follows the database, and TLS."""

from __future__ import annotations

import re
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import trustme
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

import volcano
from tests.conftest import LiveServer
from tests.support.databases import allow_connections, fresh_postgres_database, terminate_backends
from tests.support.raw import new_id, wait_for
from tests.support.server import Project, ServerProcess, create_project, serve_in_thread
from tests.support.sockets import connect, read_reply
from volcano_server import ServerConfig, create_app

pytestmark = pytest.mark.slow


def samples(text: str) -> list[Sample]:
    """Every sample of a scrape, through prometheus-client's own parser."""
    return [sample for family in text_string_to_metric_families(text) for sample in family.samples]


def value(scrape: list[Sample], name: str, **labels: str) -> float:
    """The value of the sample called `name` whose labels include `labels` (0 if none)."""
    found = [s.value for s in scrape if s.name == name and labels.items() <= s.labels.items()]
    assert len(found) <= 1, found
    return found[0] if found else 0.0


@pytest.fixture(scope="module")
def metered(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, str]]:
    """A server with --metrics-port 0, and its metrics URL."""
    db = f"sqlite:///{tmp_path_factory.mktemp('metrics') / 'volcano.db'}"
    with ServerProcess(db, "--metrics-port", "0", "--no-access-log") as server:
        match = re.search(r"metrics on (http://\S+)", server.log)
        assert match is not None, server.log
        yield server, match.group(1)


class TestMetrics:
    def test_scrape_counts_requests_by_operation_and_status(
        self, metered: tuple[ServerProcess, str]
    ) -> None:
        """After three acquires and a refused request, the scrape parses and counts them, with
        a latency histogram per operation."""
        server, metrics_url = metered
        project = create_project(server.database_url, f"m-{new_id()[:8]}")
        with httpx.Client(base_url=server.url, headers=project.headers(), timeout=10) as http:
            for _ in range(3):
                body = {"owner_token": new_id(), "ttl_seconds": 1}
                assert http.post(f"/v1/locks/{new_id()}/acquire", json=body).status_code == 200
            assert http.get("/nowhere").status_code == 404
        scrape = samples(httpx.get(metrics_url, timeout=10).text)
        labels = {"operation": "acquireLock", "status": "200"}
        assert value(scrape, "volcano_requests_total", **labels) == 3
        assert value(scrape, "volcano_requests_total", operation="none", status="404") == 1
        assert value(scrape, "volcano_request_duration_seconds_count", operation="acquireLock") == 3
        assert (
            value(
                scrape,
                "volcano_request_duration_seconds_bucket",
                operation="acquireLock",
                le="60.0",
            )
            == 3
        )
        assert value(scrape, "volcano_max_connections") == 10_000
        assert value(scrape, "volcano_open_connections") >= 1  # this scrape's own
        assert value(scrape, "process_open_fds") > 0

    def test_open_watches_are_a_gauge(self, metered: tuple[ServerProcess, str]) -> None:
        """A watch parked on a key counts in volcano_watches_open until the key changes."""
        server, metrics_url = metered
        project = create_project(server.database_url, "watches")
        key = new_id()

        def watches_open() -> float:
            return value(samples(httpx.get(metrics_url, timeout=10).text), "volcano_watches_open")

        assert watches_open() == 0
        with httpx.Client(base_url=server.url, headers=project.headers(), timeout=70) as http:
            answered: list[httpx.Response] = []
            params = {"after_version": 0, "wait_seconds": 60}
            poll = threading.Thread(
                target=lambda: answered.append(http.get(f"/v1/locks/{key}", params=params))
            )
            poll.start()
            try:
                wait_for(lambda: watches_open() == 1, "the watch counted")
            finally:  # the grant answers the watch, counted or not
                body = {"owner_token": new_id(), "ttl_seconds": 30}
                acquired = httpx.post(
                    f"{server.url}/v1/locks/{key}/acquire",
                    json=body,
                    headers=project.headers(),
                    timeout=10,
                )
                poll.join(30)
            assert acquired.status_code == 200
        assert [response.json()["version"] for response in answered] == [1]
        assert watches_open() == 0

    def test_protocol_refusals_are_counted(self, metered: tuple[ServerProcess, str]) -> None:
        """A request refused before routing (here: unparseable) counts as operation none."""
        server, metrics_url = metered
        before = samples(httpx.get(metrics_url, timeout=10).text)
        with connect(server.port) as sock:
            sock.sendall(b"\x00garbage\r\n\r\n")
            assert read_reply(sock).status == 400
        after = samples(httpx.get(metrics_url, timeout=10).text)
        name, labels = "volcano_requests_total", {"operation": "none", "status": "400"}
        assert value(after, name, **labels) == value(before, name, **labels) + 1

    def test_metrics_are_not_on_the_api_listener(self, metered: tuple[ServerProcess, str]) -> None:
        """/metrics is served only on the metrics listener (loopback by default)."""
        server, metrics_url = metered
        assert metrics_url.startswith("http://127.0.0.1:")
        assert httpx.get(f"{server.url}/metrics", timeout=10).status_code == 404


class TestReadiness:
    def test_ready_while_the_database_serves(self, live_server: LiveServer) -> None:
        """/readyz answers 200 {"status": "ready"} without credentials."""
        with live_server.http(check=False) as http:  # /readyz is the server's, not the spec's
            response = http.get("/readyz")
        assert response.status_code == 200
        assert response.json() == {"status": "ready"}

    @pytest.mark.postgres
    def test_not_ready_while_postgres_refuses_connections(self) -> None:
        """With the database refusing connections, /readyz is 503 unavailable (and counted as
        a storage error) while /healthz stays 200; it recovers by itself."""
        with fresh_postgres_database("volcano_ready") as url:
            app = create_app(ServerConfig(database_url=url, access_log=False))
            with serve_in_thread(app) as base, httpx.Client(base_url=base, timeout=30) as http:
                assert http.get("/readyz").status_code == 200
                allow_connections(url, False)
                try:
                    terminate_backends(url)
                    response = http.get("/readyz")
                    assert response.status_code == 503
                    assert response.json()["error"]["code"] == "unavailable"
                    assert response.headers["retry-after"] == "1"
                    assert http.get("/healthz").status_code == 200
                finally:
                    allow_connections(url, True)
                wait_for(lambda: http.get("/readyz").status_code == 200, "ready again", 30)
            scrape = samples(generate(app))
            assert value(scrape, "volcano_storage_errors_total", during="readiness") >= 1


def generate(app: object) -> str:
    from prometheus_client import generate_latest

    return generate_latest(app.state.metrics.registry).decode()  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[trustme.CA, Path, Path]:
    """A throwaway CA, and a certificate for 127.0.0.1 and localhost (its PEM files)."""
    ca = trustme.CA()
    leaf = ca.issue_cert("127.0.0.1", "localhost")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    leaf.private_key_pem.write_to_path(str(key))
    leaf.cert_chain_pems[0].write_to_path(str(cert))
    with cert.open("ab") as chain:
        for pem in leaf.cert_chain_pems[1:]:
            chain.write(pem.bytes())
    return ca, cert, key


class TestTLS:
    def test_sdk_talks_to_a_tls_server_through_a_custom_ca(
        self, certificate: tuple[trustme.CA, Path, Path], tmp_path: Path
    ) -> None:
        """--ssl-certfile/--ssl-keyfile serve HTTPS: the SDK, given an httpx client that trusts
        the test CA, acquires and releases; a client that does not trust it gets a volcano
        connection error, and plain HTTP on the port gets no lock."""
        ca, cert, key = certificate
        db = f"sqlite:///{tmp_path / 'tls.db'}"
        project = create_project(db, "tls")
        args = ("--ssl-certfile", str(cert), "--ssl-keyfile", str(key))
        with ServerProcess(db, *args) as server:
            assert server.url.startswith("https://127.0.0.1:")
            context = ssl.create_default_context()
            ca.configure_trust(context)
            with (
                httpx.Client(verify=context) as trusting,
                volcano.Client(**keys(project), api_url=server.url, http_client=trusting) as client,
            ):
                lease = client.locks.acquire("tls-key", ttl=30)
                client.locks.release("tls-key", lease)
            with (
                volcano.Client(**keys(project), api_url=server.url) as untrusting,
                pytest.raises(volcano.APIConnectionError),
            ):
                untrusting.locks.get("tls-key")
            with pytest.raises(httpx.HTTPError):
                httpx.get(f"http://127.0.0.1:{server.port}/healthz", timeout=5)

    def test_unreadable_certificate_is_one_line(self, tmp_path: Path) -> None:
        """A certificate that cannot be loaded stops the server with one line, no traceback."""
        bad = tmp_path / "bad.pem"
        bad.write_text("not a certificate")
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "volcano_server",
                "serve",
                "--port",
                "0",
                "--db",
                f"sqlite:///{tmp_path / 'x.db'}",
                "--ssl-certfile",
                str(bad),
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert result.returncode == 1
        assert "cannot load the TLS certificate and key" in result.stderr
        assert "Traceback" not in result.stderr


def keys(project: Project) -> dict[str, str]:
    return {"anon_key": project.anon_key, "service_key": project.service_key}
