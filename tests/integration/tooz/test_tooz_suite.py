"""tooz's own driver suite against the Volcano driver (volcano.tooz) and a real server.

tooz ships its driver tests in its wheel (`tooz.tests.test_coordination`), aimed at a backend
by `TOOZ_TEST_URL`: its test classes are collected here as they are, unchanged, against a
reference server started for this module (its keys in `VOLCANO_ANON_KEY` and
`VOLCANO_SERVICE_KEY`, where the driver reads them, and where the suite's child processes find
them too). tooz skips what a driver raises `tooz.NotImplemented` for, and the tests that only
apply to other drivers; the README lists every skip and why.

The coordinators run their calls on tooz's synchronous executor (`executor=sync`): every call's
outcome is the same, and the suite takes a third of the time (tooz's default, a futurist thread
pool, takes about a second to stop each of the suite's ~100 coordinators: 20 s against 68 s,
with the same 77 passed and 6 skipped).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from tooz.tests import test_coordination

from tests.conftest import running_server


@pytest.fixture(scope="module", autouse=True)
def tooz_backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A reference server on a fresh SQLite database, and the environment tooz's suite reads."""
    path: Path = tmp_path_factory.mktemp("tooz") / "volcano.db"
    with running_server(f"sqlite:///{path}") as server, pytest.MonkeyPatch.context() as patch:
        url = server.url.replace("http://", "volcano://", 1) + "?executor=sync"
        patch.setenv("TOOZ_TEST_URL", url)
        patch.setenv("VOLCANO_ANON_KEY", server.project.anon_key)
        patch.setenv("VOLCANO_SERVICE_KEY", server.project.service_key)
        assert os.environ["TOOZ_TEST_URL"] == url
        yield url


class TestToozAPI(test_coordination.TestAPI):
    """tooz's TestAPI, every test of it, on Volcano."""


class TestToozHook(test_coordination.TestHook):
    """tooz's TestHook (the hooks list itself: no backend)."""
