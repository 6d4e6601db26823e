"""The contract suite, aimed by URL at a server that only pretends to check the service key, or
that adds a field the spec does not document, fails and says why: it can tell a compliant server
from one that is not."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from starlette.applications import Starlette
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tests.support.server import Project, create_project, serve_in_thread
from volcano_server import ServerConfig, create_app
from volcano_server.http._auth import Authenticator, Principal
from volcano_server.wire._errors import ApiError

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def lax_authenticate(
    self: Authenticator, apikey: str | None, authorization: str | None, *, may_block: bool = True
) -> Principal:
    """Checks the apikey but takes any bearer at all: the bug the custom check exists for."""
    anon = self._lookup(apikey or "", may_block)
    if anon is None or not authorization:
        raise ApiError.unauthorized("unknown apikey or no bearer")
    return Principal(anon.project_id, b"any-bearer")


def with_an_extra_field(app: ASGIApp) -> ASGIApp:
    """`app`, with `"holder_hostname"` added to every JSON object it answers."""

    async def wrapped(scope: Scope, receive: Receive, send: Send) -> None:
        start: Message = {}

        async def add_field(message: Message) -> None:
            nonlocal start
            if message["type"] == "http.response.start":
                start = message
                return
            body = json.loads(message["body"]) if message.get("body") else None
            if isinstance(body, dict):
                message = {**message, "body": json.dumps({**body, "holder_hostname": "x"}).encode()}
            length = str(len(message.get("body", b""))).encode()
            headers = [(k, v) for k, v in start["headers"] if k.lower() != b"content-length"]
            await send({**start, "headers": [*headers, (b"content-length", length)]})
            await send(message)

        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        await app(scope, receive, add_field)

    return wrapped


def run_suite(url: str, env: dict[str, str], *pytest_args: str) -> tuple[int, str]:
    """The contract suite aimed at `url` in a child pytest with `env` as its whole environment:
    (exit status, output)."""
    suite = ["tests/contract", "--contract-url", url, "-q", "-p", "no:cacheprovider"]
    result = subprocess.run(
        [sys.executable, "-m", "pytest", *suite, *pytest_args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    return result.returncode, result.stdout + result.stderr


def run_suite_against(
    app: Starlette, project: Project, wrap: Callable[[ASGIApp], ASGIApp] | None = None
) -> tuple[int, str]:
    """Serve `app` (behind `wrap`, if given) and run the suite's stateless cases against it
    with `project`'s keys, stopping at the first failure."""
    env = {k: v for k, v in os.environ.items() if k != "VOLCANO_OTHER_SERVICE_KEY"}
    with serve_in_thread(app, wrap=wrap) as base:
        return run_suite(base, {**env, **project.env(base)}, "-x", "-k", "test_operation")


class TestContractSuiteByUrl:
    def test_catches_a_server_that_ignores_the_service_key(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """--contract-url runs the suite against that server; a lax bearer check fails it."""
        url = f"sqlite:///{tmp_path / 'lax.db'}"
        project = create_project(url, "lax")
        monkeypatch.setattr(Authenticator, "authenticate", lax_authenticate)
        app = create_app(ServerConfig(database_url=url, access_log=False))
        status, output = run_suite_against(app, project)
        assert status == 1, output
        assert "each_credential_enforced" in output
        assert "with valid apikey, unknown service key answered 200, expected 401 or 403" in output

    def test_catches_a_server_that_adds_an_undocumented_field(self, tmp_path: Path) -> None:
        """The response schemas accept additions, yet the suite fails a server that sends one."""
        url = f"sqlite:///{tmp_path / 'chatty.db'}"
        project = create_project(url, "chatty")
        app = create_app(ServerConfig(database_url=url, access_log=False))
        status, output = run_suite_against(app, project, wrap=with_an_extra_field)
        assert status == 1, output
        assert "only_documented_fields" in output
        assert "with undocumented ['body.holder_hostname']" in output

    def test_refuses_to_run_without_keys(self) -> None:
        """Aimed at a URL without keys in the environment, it stops with a clear message."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("VOLCANO_")}
        status, output = run_suite("http://127.0.0.1:9", env)
        assert status == 4
        assert "VOLCANO_ANON_KEY and VOLCANO_SERVICE_KEY" in output
