"""Fixtures shared by the integration, contract and fault suites: real servers on real ports."""

from __future__ import annotations

import contextlib
import re
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest

from tests.support.conformance import check_response
from tests.support.databases import fresh_postgres_database
from tests.support.load import hogging
from tests.support.sdk import Kind, Sdk, SdkTarget
from tests.support.server import Project, create_project, serve_in_thread
from volcano_server import ServerConfig, create_app


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--contract-url",
        default=None,
        metavar="URL",
        help="run tests/contract against the Volcano server at URL instead of a local reference"
        " server; keys from VOLCANO_ANON_KEY and VOLCANO_SERVICE_KEY (and, for the cross-project"
        " probe, VOLCANO_OTHER_SERVICE_KEY)",
    )
    parser.addoption(
        "--explore",
        type=int,
        default=0,
        metavar="N",
        help="run the schedule explorer (tests/explorer) for N examples per backend, with longer"
        " schedules and a fresh random seed, instead of CI's fixed bounded budget",
    )
    parser.addoption(
        "--long-faults",
        action="store_true",
        default=False,
        help="run tests/faults/network at the issues' full length (a 30 s black hole, 15 s"
        " before a standby is promoted, 60 s of load) instead of CI's shorter runs; prints the"
        " figures",
    )
    parser.addoption(
        "--cpu-hog",
        type=int,
        default=0,
        metavar="N",
        help="keep N processes spinning on the CPU for the whole session (the tests beside a"
        " loaded machine, as on a busy CI runner); they are killed when the session ends",
    )


@pytest.fixture(scope="session", autouse=True)
def cpu_hog(request: pytest.FixtureRequest) -> Iterator[int]:
    """`--cpu-hog N`: N child processes that only spin, for the whole session; yields N."""
    count: int = request.config.getoption("--cpu-hog")
    with hogging(count):
        yield count


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """`--explore=N` runs as long as its N schedules take: no per-test timeout for them."""
    if config.getoption("--explore"):
        for item in items:
            if item.nodeid.startswith("tests/explorer/test_schedules.py"):
                item.add_marker(pytest.mark.timeout(0))


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


@attrs.frozen
class LiveServer:
    """A reference server on a loopback port, with two projects' keys."""

    url: str
    database_url: str
    project: Project
    other: Project

    def http(
        self, project: Project | None = None, *, check: bool = True, **kwargs: object
    ) -> httpx.Client:
        """A raw httpx client with `project`'s credentials (None: no credentials); every answer
        is checked against openapi.yaml unless `check` is False."""
        headers = project.headers() if project is not None else {}
        hooks = {"response": [check_response]} if check else {}
        options: dict[str, object] = {"timeout": 30, **kwargs}
        return httpx.Client(base_url=self.url, headers=headers, event_hooks=hooks, **options)  # type: ignore[arg-type]


BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@contextlib.contextmanager
def fresh_database(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A fresh database of `backend` (PostgreSQL: dropped at the end)."""
    if backend == "postgres":
        with fresh_postgres_database() as url:
            yield url
        return
    path: Path = tmp_path_factory.mktemp("db") / "volcano.db"
    yield f"sqlite:///{path}"


@contextlib.contextmanager
def running_server(database_url: str) -> Iterator[LiveServer]:
    """An in-thread reference server on `database_url`, with two projects' keys."""
    project = create_project(database_url, "tests")
    other = create_project(database_url, "other-tests")
    app = create_app(ServerConfig(database_url=database_url, access_log=False))
    with serve_in_thread(app) as url:
        yield LiveServer(url, database_url, project, other)


@pytest.fixture(scope="session", params=BACKENDS)
def database_url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """A fresh database for this test session, per backend."""
    with fresh_database(request.param, tmp_path_factory) as url:
        yield url


@pytest.fixture(scope="session")
def live_server(database_url: str) -> Iterator[LiveServer]:
    """One in-thread reference server for the session (tests use keys of their own)."""
    with running_server(database_url) as server:
        yield server


@pytest.fixture(scope="session")
def sqlite_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """One in-thread reference server on SQLite, for commands run as child processes."""
    with fresh_database("sqlite", tmp_path_factory) as url, running_server(url) as server:
        yield server


@pytest.fixture(params=["sync", "async"])
def client_kind(request: pytest.FixtureRequest) -> Kind:
    """Which client a test's `sdk` is (tests/support/sdk.py): each test runs with both."""
    kind: Kind = request.param
    return kind


@pytest.fixture
def sdk_target(live_server: LiveServer) -> SdkTarget:
    """Where `make_sdk`'s clients send: the live server's main project, straight (a suite
    overrides it: through a wire, or a proxy)."""
    return SdkTarget(live_server.project.client_args(live_server.url))


@pytest.fixture
def make_sdk(client_kind: Kind, sdk_target: SdkTarget) -> Iterator[Callable[..., Sdk]]:
    """Clients of `client_kind` (tests/support/sdk.py) aimed at `sdk_target`; keyword
    arguments override the Client's. Each is closed after the test."""
    made: list[Sdk] = []

    def make(**overrides: Any) -> Sdk:
        arguments = {**sdk_target.arguments, **overrides}
        transport = sdk_target.transport(client_kind)
        made.append(
            Sdk(
                client_kind,
                arguments,
                transport=transport,
                check=sdk_target.check,
                own=sdk_target.own,
            )
        )
        return made[-1]

    yield make
    for sdk in made:
        sdk.close()


@pytest.fixture
def sdk(make_sdk: Callable[..., Sdk]) -> Sdk:
    """One client from `make_sdk`."""
    return make_sdk()


@pytest.fixture
def api(live_server: LiveServer) -> Iterator[httpx.Client]:
    """A raw HTTP client with the main project's credentials, checked against the spec."""
    with live_server.http(live_server.project) as client:
        yield client


@pytest.fixture
def key(request: pytest.FixtureRequest) -> str:
    """A lock key no other test uses."""
    name = re.sub(r"[^A-Za-z0-9._:-]", "-", request.node.name)[:200]
    return f"t-{name}-{uuid.uuid4().hex[:8]}"
