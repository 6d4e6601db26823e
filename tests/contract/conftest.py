"""The contract suite's schema: openapi.yaml, real credentials, every phase, every check."""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import schemathesis
from schemathesis.checks import CHECKS, load_all_checks

from tests.conftest import BACKENDS, LiveServer, fresh_database
from tests.contract import hooks  # noqa: F401 - registers the uuid-any-case format and our check
from tests.support.server import Project, ServerProcess, create_project

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

# Cases sent, by phase and by positive/negative data: printed at the end and written to
# reports/contract-stats.json, so a run that quietly generated nothing is visible.
STATS: Counter[str] = Counter()


def count_case(case: schemathesis.Case, phase: str | None = None) -> None:
    """Count one case sent to the server."""
    meta = case.meta
    phase = phase or (meta.phase.name.value if meta is not None else "unknown")
    mode = meta.generation.mode.value if meta is not None else "unknown"
    STATS[f"{phase}/{mode}"] += 1


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not STATS:
        return
    by_phase: Counter[str] = Counter()
    for name, count in STATS.items():
        by_phase[name.split("/")[0]] += count
    terminalreporter.write_sep("-", "schemathesis cases sent")
    for name in sorted(STATS):
        terminalreporter.write_line(f"{name:32} {STATS[name]}")
    terminalreporter.write_line(f"{'total':32} {sum(STATS.values())}")
    reports = ROOT / "reports"
    reports.mkdir(exist_ok=True)
    (reports / "contract-stats.json").write_text(
        json.dumps({"by_phase": by_phase, "detail": STATS}, indent=2)
    )


def all_checks() -> list[schemathesis.CheckFunction]:
    """Every check schemathesis knows, built-in and ours: nothing is excluded."""
    load_all_checks()
    return list(CHECKS.get_all())  # type: ignore[arg-type]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """One run per local backend, or a single run against --contract-url."""
    if "contract_target" in metafunc.fixturenames:
        remote = metafunc.config.getoption("--contract-url")
        metafunc.parametrize(
            "contract_target", ["remote"] if remote else BACKENDS, indirect=True, scope="session"
        )


@pytest.fixture(scope="session")
def contract_target(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveServer]:
    """The server under test: a local reference server per backend, or the one at --contract-url
    with keys from the environment."""
    if request.param == "remote":
        yield _remote(request.config.getoption("--contract-url"))
        return
    with fresh_database(request.param, tmp_path_factory) as database_url:
        project = create_project(database_url, "tests")
        other = create_project(database_url, "other-tests")
        # A child process, not a thread of this one: Hypothesis fails a draw when the global
        # `random` state moves under it, and the server's own threads (psycopg_pool's jitter)
        # would move it at any moment. A process is also how users run it.
        server = ServerProcess(database_url, "--no-access-log").start()
        try:
            yield LiveServer(server.url, database_url, project, other)
        finally:
            server.terminate()


def _remote(url: str) -> LiveServer:
    missing = [
        name for name in ("VOLCANO_ANON_KEY", "VOLCANO_SERVICE_KEY") if not os.environ.get(name)
    ]
    if missing:
        pytest.exit(
            f"--contract-url needs {' and '.join(missing)} in the environment", returncode=4
        )
    project = Project("remote", os.environ["VOLCANO_ANON_KEY"], os.environ["VOLCANO_SERVICE_KEY"])
    other = Project("remote-other", "", os.environ.get("VOLCANO_OTHER_SERVICE_KEY", ""))
    return LiveServer(url.rstrip("/"), "", project, other)


@pytest.fixture(scope="session")
def contract_env(contract_target: LiveServer) -> Iterator[LiveServer]:
    """The keys in the environment, where schemathesis.toml and the hooks read them."""
    keys = {
        "VOLCANO_ANON_KEY": contract_target.project.anon_key,
        "VOLCANO_SERVICE_KEY": contract_target.project.service_key,
        "VOLCANO_OTHER_SERVICE_KEY": contract_target.other.service_key,
    }
    saved = {name: os.environ.get(name) for name in keys}
    for name, value in keys.items():
        if value:
            os.environ[name] = value
        else:
            os.environ.pop(name, None)
    try:
        yield contract_target
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@pytest.fixture(scope="session")
def contract_schema(contract_env: LiveServer) -> schemathesis.BaseSchema:
    """openapi.yaml (the contract, not whatever the server serves) aimed at the server."""
    config = schemathesis.Config.from_path(HERE / "schemathesis.toml")
    schema = schemathesis.openapi.from_path(ROOT / "openapi.yaml", config=config)
    schema.config.update(base_url=contract_env.url)
    return schema
