"""The pytest plugin behind `volcano.testing`'s fixtures (entry point `pytest11`: `volcano`).

It is loaded by every pytest run in an environment where volcano is installed, so it only
defines fixtures: nothing starts until a test asks for one, and a fixture that cannot start
the server (no server extra) fails that test with one line saying why. `-p no:volcano`
turns it off.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from collections.abc import Iterator

    import volcano

    from ._server import LocalServer, Project


@pytest.fixture(scope="session")
def volcano_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalServer]:
    """A Volcano reference server for the whole session (a `volcano.testing.LocalServer`).

    It listens on a free loopback port, with a SQLite database that is kept, with the server's
    log, under pytest's temporary directory.
    """
    from ._server import LocalServer, ServerStartError

    server = LocalServer(tmp_path_factory.mktemp("volcano"))
    failure = None
    try:
        server.start()
    except ServerStartError as error:
        failure = f"volcano.testing: {error}"
    if failure is not None:  # outside the except block, so pytest shows this line alone
        pytest.fail(failure, pytrace=False)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def volcano_project(volcano_server: LocalServer) -> Project:
    """A project of this test's own on the session's server: its URL and keys."""
    return volcano_server.new_project()


@pytest.fixture
def volcano_client(volcano_project: Project) -> Iterator[volcano.Client]:
    """A `volcano.Client` in a project of this test's own; closed after the test."""
    with volcano_project.client() as client:
        yield client


@pytest.fixture
def volcano_async_client(volcano_project: Project) -> volcano.AsyncClient:
    """A `volcano.AsyncClient` in a project of this test's own, for async tests.

    It opens a connection per request and keeps none, so nothing is left to close after the
    test's event loop has gone, whichever async plugin runs the test.
    """
    import httpx

    http = httpx.AsyncClient(limits=httpx.Limits(max_keepalive_connections=0))
    return volcano_project.async_client(http_client=http)


@pytest.fixture
def volcano_env(volcano_project: Project, monkeypatch: pytest.MonkeyPatch) -> Project:
    """The VOLCANO_* variables of a project of this test's own, set for the test.

    For code that calls `volcano.Client()` itself. The variables are restored afterwards.
    """
    for name, value in volcano_project.env().items():
        monkeypatch.setenv(name, value)
    return volcano_project
