"""The monitoring shipped in deploy/monitoring, checked with the real tools: the alert rules by
promtool (`check rules`, and the unit tests beside them), the Grafana dashboard by a real
Prometheus scraping a real server under a short contended load, where every query of every
panel must name only metrics the server exports and return data.

Needs Debian's prometheus package (promtool and prometheus); without it these tests skip, or
fail when VOLCANO_REQUIRE_PROMETHEUS=1 (CI, where scripts/prometheus.sh installs it first).
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.raw import Locks, Waiter, new_id, wait_for
from tests.support.server import Project, ServerProcess, create_project

ROOT = Path(__file__).resolve().parents[2]
MONITORING = ROOT / "deploy" / "monitoring"
RULES = MONITORING / "volcano-alerts.yml"
RULE_TESTS = MONITORING / "volcano-alerts.test.yml"
DASHBOARD = MONITORING / "volcano-dashboard.json"

# What the dashboard's variables stand for here: every server and key prefix, and a rate window
# that holds the whole load.
VARIABLES = {"$__rate_interval": "30s", "$instance": ".*", "$key_prefix": ".*"}


def tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        why = f"{name} is not installed (scripts/prometheus.sh installs Debian's prometheus)"
        if os.environ.get("VOLCANO_REQUIRE_PROMETHEUS") == "1":
            pytest.fail(why)
        pytest.skip(why)
    return found


def panel_targets() -> list[tuple[str, str]]:
    """(panel title, query) of every query of every panel of the dashboard."""
    dashboard = json.loads(DASHBOARD.read_text())
    return [
        (panel["title"], target["expr"])
        for panel in dashboard["panels"]
        for target in panel.get("targets", [])
    ]


def substituted(query: str) -> str:
    for variable, value in VARIABLES.items():
        query = query.replace(variable, value)
    assert "$" not in query, f"a dashboard variable this test does not know: {query}"
    return query


def metric_names(query: str) -> set[str]:
    """The metrics a query selects (every selector of the dashboard has braces)."""
    return set(re.findall(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\{", query))


class TestRules:
    def test_the_rules_are_valid(self) -> None:
        """promtool check rules accepts the alert rules."""
        result = subprocess.run(
            [tool("promtool"), "check", "rules", str(RULES)],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert result.returncode == 0, result.stdout + result.stderr

    def test_the_rules_pass_their_unit_tests(self) -> None:
        """promtool test rules: each alert fires with its text where it should, and not just
        below its threshold or before its `for`."""
        result = subprocess.run(
            [tool("promtool"), "test", "rules", RULE_TESTS.name],
            capture_output=True, text=True, timeout=60, check=False, cwd=MONITORING,
        )  # fmt: skip
        assert result.returncode == 0, result.stdout + result.stderr
        assert "SUCCESS" in result.stdout


class TestDashboard:
    def test_every_panel_is_a_query_on_the_chosen_data_source(self) -> None:
        """Panels have unique ids, each query is on the dashboard's data source variable, and
        selects only volcano_*, process_* metrics with the server filter."""
        dashboard = json.loads(DASHBOARD.read_text())
        ids = [panel["id"] for panel in dashboard["panels"]]
        assert len(ids) == len(set(ids))
        for panel in dashboard["panels"]:
            if panel["type"] == "row":
                continue
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
            assert panel["targets"], panel["title"]
        for title, query in panel_targets():
            for name in metric_names(query):
                assert name.startswith(("volcano_", "process_")), (title, name)
            assert 'instance=~"$instance"' in query, title

    def test_every_query_has_data_from_a_real_server(self, tmp_path: Path) -> None:
        """A real Prometheus scrapes a real server (1 s) through a short contended load; then
        every panel's query names only metrics that exist and returns data that is a number,
        and the alert rules, loaded beside it, evaluate without error."""
        prometheus = tool("prometheus")
        db = f"sqlite:///{tmp_path / 'volcano.db'}"
        with ServerProcess(db, "--metrics-port", "0", "--no-access-log") as server:
            found = re.search(r"metrics on http://(\S+)/metrics", server.log)
            assert found is not None, server.log
            with running_prometheus(prometheus, found.group(1), tmp_path) as query:
                wait_for(lambda: query("up")["result"], "the first scrape", 30)
                project = create_project(db, "dashboard")
                contended_load(server.url, project)
                ended = time.time()
                # Scrapes two seconds past the load, so a series it started has samples to rate.
                wait_for(
                    lambda: query(f"timestamp(up) > {ended + 2}")["result"],
                    "scrapes after the load",
                    30,
                )
                names = set(query_path(query, "/api/v1/label/__name__/values"))
                empty: list[str] = []
                for title, expr in panel_targets():
                    missing = metric_names(expr) - names
                    assert not missing, f"{title}: no such metric {missing}"
                    result = query(substituted(expr))["result"]
                    values = [float(series["value"][1]) for series in result]
                    if not [v for v in values if not math.isnan(v)]:
                        empty.append(f"{title}: {expr}")
                assert empty == []
                rules = query_path(query, "/api/v1/rules")["groups"]
                assert [r["health"] for group in rules for r in group["rules"]] == ["ok"] * 9


def query_path(query: Callable[..., Any], path: str) -> Any:
    return query(None, path=path)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class running_prometheus:  # noqa: N801 - a context manager, named for its `with` line
    """Prometheus scraping `target` every second, with the alert rules loaded."""

    def __init__(self, binary: str, target: str, directory: Path) -> None:
        self._binary = binary
        self._target = target
        self._directory = directory
        self._process: subprocess.Popen[bytes] | None = None
        self._http: httpx.Client | None = None

    def __enter__(self) -> Callable[..., Any]:
        config = self._directory / "prometheus.yml"
        config.write_text(
            json.dumps(
                {
                    "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                    "rule_files": [str(RULES)],
                    "scrape_configs": [
                        {"job_name": "volcano", "static_configs": [{"targets": [self._target]}]}
                    ],
                }
            )
        )
        port = free_port()
        with (self._directory / "prometheus.log").open("wb") as log:
            self._process = subprocess.Popen(
                [
                    self._binary,
                    f"--config.file={config}",
                    f"--storage.tsdb.path={self._directory / 'tsdb'}",
                    f"--web.listen-address=127.0.0.1:{port}",
                    "--log.level=warn",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        http = self._http = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10)

        def ready() -> bool:
            assert self._process is not None
            if self._process.poll() is not None:
                pytest.fail((self._directory / "prometheus.log").read_text())
            try:
                return http.get("/-/ready").status_code == 200
            except httpx.TransportError:
                return False

        wait_for(ready, "prometheus ready", 30)

        def query(expr: str | None, *, path: str = "/api/v1/query") -> Any:
            params = {"query": expr} if expr is not None else {}
            response = http.get(path, params=params)
            assert response.status_code == 200, (expr, response.text)
            return response.json()["data"]

        return query

    def __exit__(self, *exc: object) -> None:
        if self._http is not None:
            self._http.close()
        if self._process is not None:
            self._process.terminate()
            self._process.wait(30)


def contended_load(url: str, project: Project) -> None:
    """A few seconds of what the dashboard shows: four clients queueing on one key, a holder
    that lets its lease expire with a waiter behind it, a wait that runs out, a lease found
    lost at renewal, a force release, the holder acquiring again, live and stale fence checks."""

    def client() -> httpx.Client:
        return httpx.Client(base_url=url, headers=project.headers(), timeout=30)

    def contender() -> None:
        with client() as http:
            locks = Locks(http)
            for _ in range(3):
                owner = new_id()
                lease = locks.acquire("contended", owner, 30, wait=20).json()
                time.sleep(0.05)
                assert locks.release("contended", owner, lease["fencing_token"]).status_code == 204

    threads = [threading.Thread(target=contender, daemon=True) for _ in range(4)]
    for thread in threads:
        thread.start()
    with client() as http:
        locks = Locks(http)
        assert locks.acquire("crashed-holder", new_id(), 0.5).status_code == 200
        behind = Waiter(client(), "crashed-holder", wait=10)
        owner = new_id()
        held = locks.acquire("busy", owner, 30).json()
        assert locks.acquire("busy", owner, 30).status_code == 200  # already held
        assert locks.acquire("busy", new_id(), 30, wait=0.2).status_code == 409
        assert locks.check("busy", held["fencing_token"]).json()["live"] is True
        assert locks.force_release("busy").status_code == 200
        short = locks.acquire("too-short", (late := new_id()), 0.2).json()
        time.sleep(0.3)
        assert locks.renew("too-short", late, short["fencing_token"]).status_code == 409
        assert behind.result().status_code == 200
        for thread in threads:
            thread.join(60)
        assert locks.check("busy", held["fencing_token"]).json()["live"] is False
