"""renew and release with the owner token from VOLCANO_OWNER_TOKEN or --token-file, kept off the
command lines that `ps` shows every user of the machine; and each way of giving it wrongly."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import pytest

from tests.support._actions import Action, Exchange, Forward
from tests.support.proxy import FaultProxy

from .conftest import VOLCANO, WAIT, Shell, finish, one_line

pytestmark = pytest.mark.slow

SOURCES = ("environment", "file", "stdin", "option")


@dataclass(frozen=True)
class HoldUntil(Action):
    """Hold the request until `go` is set, then forward it: its sender waits for the answer."""

    name: ClassVar[str] = "hold_until"
    go: threading.Event = field(default_factory=threading.Event)

    async def run(self, exchange: Exchange) -> bool:
        await asyncio.to_thread(self.go.wait, WAIT)
        return await Forward().run(exchange)


def command_lines() -> list[bytes]:
    """Every process's command line, as `ps` shows them to any user (NULs between arguments)."""
    lines = []
    for path in Path("/proc").glob("[0-9]*/cmdline"):
        with contextlib.suppress(OSError):  # it ended meanwhile
            lines.append(path.read_bytes())
    return lines


def handed_over(source: str, token: str, tmp_path: Path) -> tuple[list[str], dict[str, str], Path]:
    """The arguments, environment and stdin (a file) that hand `token` to volcano by `source`."""
    given = tmp_path / "token"
    given.write_text(f"{token}\n" if source in ("file", "stdin") else "")
    args = {
        "environment": [],
        "file": ["--token-file", str(given)],
        "stdin": ["--token-file", "-"],
        "option": ["--token", token],
    }[source]
    return args, {"VOLCANO_OWNER_TOKEN": token} if source == "environment" else {}, given


# Short names: the shell fixture names a test's project after 100 characters of its node id.
class TestSources:
    @pytest.mark.parametrize("source", SOURCES)
    @pytest.mark.parametrize("command", ["renew", "release"])
    def test_token_from(self, shell: Shell, tmp_path: Path, command: str, source: str) -> None:
        """The token works from each source; only --token puts it on a command line (ps)."""
        lease = shell.client.locks.acquire("k", ttl=30)
        args, env, stdin = handed_over(source, lease.owner_token, tmp_path)
        args += ["--fencing-token", str(lease.fencing_token)]
        args += ["--ttl", "600"] if command == "renew" else []
        with FaultProxy(upstream=shell.env["VOLCANO_API_URL"]) as proxy, stdin.open() as given:
            held = HoldUntil()
            proxy.on("POST", f"/{command}$").then(held)  # volcano waits there, token in hand
            process = subprocess.Popen(
                [str(VOLCANO), "locks", command, "k", *args],
                env={**shell.env, **env, "VOLCANO_API_URL": proxy.url},
                stdin=given,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            proxy.wait_until(lambda records: len(records) >= 1, WAIT, f"the {command}")
            shown = [line for line in command_lines() if lease.owner_token.encode() in line]
            held.go.set()
            status, _, stderr = finish(process)
        assert status == 0, stderr
        assert bool(shown) == (source == "option"), shown
        state = shell.client.locks.get("k")
        assert state.held == (command == "renew")
        if command == "renew":
            assert state.expires_at is not None
            assert state.expires_at > lease.expires_at

    def test_the_option_beats_the_environment(self, shell: Shell, tmp_path: Path) -> None:
        """--token-file is used even when VOLCANO_OWNER_TOKEN holds another token."""
        lease = shell.client.locks.acquire("k", ttl=30)
        given = tmp_path / "token"
        given.write_text(lease.owner_token)
        env = {**shell.env, "VOLCANO_OWNER_TOKEN": "0f8fad5b-d9cb-469f-a165-70867728950e"}
        fencing = str(lease.fencing_token)
        args = ("locks", "release", "k", "--token-file", str(given), "--fencing-token", fencing)
        result = shell.run(*args, env=env)
        assert result.returncode == 0, result.stderr
        assert not shell.client.locks.get("k").held

    @pytest.mark.parametrize(
        ("options", "variable", "stdin", "says"),
        [
            pytest.param([], None, None, "no owner token: give --token-file PATH", id="none"),
            pytest.param([], "", None, "VOLCANO_OWNER_TOKEN is set but empty", id="empty-var"),
            pytest.param(["--token-file", "{empty}"], None, None, "it is empty", id="empty-file"),
            pytest.param(["--token-file", "-"], None, "", "in stdin: it is", id="empty-stdin"),
            pytest.param(["--token-file", "{missing}"], None, None, "No such file", id="missing"),
            pytest.param(["--token-file", "{tmp}"], None, None, "Is a directory", id="directory"),
            pytest.param(["--token-file", "/dev/zero"], None, None, "more than", id="endless"),
            pytest.param(["--token-file", "{junk}"], None, None, "owner_token", id="not-a-token"),
            pytest.param(
                ["--token-file", "{empty}", "--token", "t"], None, None, "not allowed with",
                id="both-options",
            ),
        ],
    )  # fmt: skip
    def test_bad_sources_exit_64(
        self,
        shell: Shell,
        tmp_path: Path,
        options: list[str],
        variable: str | None,
        stdin: str | None,
        says: str,
    ) -> None:
        """No token, an empty, unreadable or oversized file, both options: 64 and one line."""
        (tmp_path / "empty").write_text("\n")
        (tmp_path / "junk").write_text("not-a-token-at-all\n")
        paths = {"empty": tmp_path / "empty", "missing": tmp_path / "x", "tmp": tmp_path}
        paths["junk"] = tmp_path / "junk"
        options = [option.format(**paths) for option in options]
        env = {k: v for k, v in shell.env.items() if k != "VOLCANO_OWNER_TOKEN"}
        if variable is not None:
            env["VOLCANO_OWNER_TOKEN"] = variable
        args = ("locks", "release", "k", *options, "--fencing-token", "1")
        result = shell.run(*args, env=env, stdin=stdin)
        assert result.returncode == 64, result.stderr
        line = one_line(result.stderr)
        assert says in line
        assert "not-a-token" not in line  # a token, even a wrong one, is not repeated
