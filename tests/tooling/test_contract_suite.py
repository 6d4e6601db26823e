"""The contract suite, aimed by URL at a server that only pretends to check the service key,
fails and says why: it can tell a compliant server from one that is not."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.server import create_project, serve_in_thread
from volcano_server import ServerConfig, create_app
from volcano_server._auth import Authenticator, Principal
from volcano_server._errors import ApiError

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def lax_authenticate(
    self: Authenticator, apikey: str | None, authorization: str | None, *, may_wait: bool = True
) -> Principal:
    """Checks the apikey but takes any bearer at all: the bug the custom check exists for."""
    anon = self._lookup(apikey or "", may_wait)
    if anon is None or not authorization:
        raise ApiError.unauthorized("unknown apikey or no bearer")
    return Principal(anon.project_id, b"any-bearer")


class TestContractSuiteByUrl:
    def test_catches_a_server_that_ignores_the_service_key(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """--contract-url runs the suite against that server; a lax bearer check fails it."""
        url = f"sqlite:///{tmp_path / 'lax.db'}"
        project = create_project(url, "lax")
        monkeypatch.setattr(Authenticator, "authenticate", lax_authenticate)
        app = create_app(ServerConfig(database_url=url, access_log=False))
        with serve_in_thread(app) as base:
            env = {**os.environ, **project.env(base)}
            env.pop("VOLCANO_OTHER_SERVICE_KEY", None)
            result = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pytest",
                    "tests/contract",
                    "--contract-url",
                    base,
                    "-x",
                    "-q",
                    "-k",
                    "test_operation",
                    "-p",
                    "no:cacheprovider",
                ],
                cwd=ROOT,
                env=env,
                capture_output=True,
                text=True,
                timeout=600,
                check=False,
            )
        output = result.stdout + result.stderr
        assert result.returncode == 1, output
        assert "each_credential_enforced" in output
        assert "with valid apikey, unknown service key answered 200, expected 401 or 403" in output

    def test_refuses_to_run_without_keys(self) -> None:
        """Aimed at a URL without keys in the environment, it stops with a clear message."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("VOLCANO_")}
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "tests/contract",
                "--contract-url",
                "http://127.0.0.1:9",
                "-q",
                "-p",
                "no:cacheprovider",
            ],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert result.returncode == 4
        assert "VOLCANO_ANON_KEY and VOLCANO_SERVICE_KEY" in result.stdout + result.stderr
