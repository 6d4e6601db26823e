"""The README works as written: its two set-up commands are what CI runs, its quick start runs
pasted as it stands, its Python blocks, shell recipes and SIGTERM recipe run against a real
server as a reader would paste them, and its Contents list matches its sections."""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import volcano
from tests.conftest import LiveServer
from tests.support.readme import (
    MODES,
    README,
    ROOT,
    SHELLS,
    Block,
    anchor,
    blocks,
    count_tests,
    headings,
    python_blocks,
    run_program,
    run_pytest,
)
from tests.support.server import Project, create_project

pytestmark = pytest.mark.slow

BIN = Path(sys.executable).parent
WAIT = 60.0


def run(args: list[str], env: dict[str, str], cwd: Path, **kwargs: object):
    return subprocess.run(
        args, env=env, cwd=cwd, capture_output=True, text=True, timeout=WAIT, check=False,
        **kwargs,  # type: ignore[arg-type]
    )  # fmt: skip


def reader_env() -> dict[str, str]:
    """A new reader's environment: no VOLCANO_* variables, this venv's commands first on PATH
    (as after the quick start's `pip install`)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("VOLCANO_")}
    return {**env, "PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}"}


def bash(script: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run `script` as a reader would in bash, with this venv's commands first on PATH."""
    env = {**env, "PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}"}
    return run(["bash", "-euc", script], env, cwd)


def readme_lines(*lines: str) -> str:
    """`lines` as a script, after checking that the README shows each one verbatim."""
    text = README.read_text()
    for line in lines:
        assert line in text, f"the README no longer shows: {line}"
    return "\n".join(lines)


def commands(block: Block) -> list[str]:
    """A shell block's command lines, without comments, blank lines or trailing comments."""
    found = []
    for line in block.code.splitlines():
        words = shlex.split(line, comments=True)
        if words:
            found.append(shlex.join(words))
    return found


@pytest.fixture
def project(sqlite_server: LiveServer, request: pytest.FixtureRequest) -> Project:
    return create_project(sqlite_server.database_url, request.node.nodeid[:100])


class TestSetUpCommands:
    def test_the_first_shell_block_is_the_walkthrough_then_the_tests(self) -> None:
        """The README's first shell block holds exactly two commands: the walkthrough, then the
        tests, and the second says how long it takes and names a faster tier."""
        first = next(b for b in blocks() if b.language in SHELLS)
        assert first.section == "", "the two commands come before the first section"
        assert commands(first) == ["scripts/walkthrough.sh", "scripts/test.sh"]
        test_line = first.code.splitlines()[1]
        assert re.search(r"about \d+ min on 2 cores", test_line), test_line
        assert "scripts/test.sh tests/unit" in test_line

    def test_ci_runs_the_two_commands_exactly_as_written(self) -> None:
        """.ci/run runs each of the README's two set-up commands as a line of its own, in the
        README's order, and scripts/test.sh states the same duration and tier when run bare."""
        first = next(b for b in blocks() if b.language in SHELLS)
        ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
        where = [ci.index(command) for command in commands(first)]
        assert where == sorted(where)
        script = (ROOT / "scripts" / "test.sh").read_text()
        minutes = re.search(r"about (\d+) min", first.code.splitlines()[1])
        assert minutes is not None
        assert f"about {minutes.group(1)} minutes" in script
        assert "scripts/test.sh tests/unit" in script


class TestContents:
    def test_contents_lists_every_section_in_order(self) -> None:
        """The Contents list links every section after the quick start, in the page's order:
        a section added without its entry, or out of place, fails here."""
        text = README.read_text()
        contents = text[text.index("**Contents:**") :].split("\n\n", 1)[0]
        listed = re.findall(r"\]\(#([^)]+)\)", contents)
        sections = headings()
        assert sections[0] == "Quick start"
        assert listed == [anchor(h) for h in sections[1:]]

    def test_every_link_within_the_page_has_its_heading(self) -> None:
        """Every `(#anchor)` link of the README names a heading that exists."""
        text = README.read_text()
        targets = {anchor(h) for h in headings()} | {
            anchor(line.lstrip("#").strip()) for line in text.splitlines() if line.startswith("#")
        }
        links = set(re.findall(r"\]\(#([^)]+)\)", text))
        assert links, "no links found: the pattern is wrong"
        assert links <= targets, links - targets


class TestPythonBlocks:
    def test_every_block_is_run_or_marked(self) -> None:
        """Each Python block is run, or explicitly marked as a fragment or a pytest file."""
        modes = [b.mode for b in blocks() if b.language == "python"]
        assert set(modes) <= set(MODES), modes
        assert modes.count("run") >= 8
        assert modes.count("pytest") >= 1

    def test_blocks_run_in_order(
        self, sqlite_server: LiveServer, project: Project, tmp_path: Path
    ) -> None:
        """Every unmarked Python block runs, in order, as one program against a real server."""
        result = run_program(python_blocks("run"), project.child_env(sqlite_server.url), tmp_path)
        assert result.returncode == 0, result.stdout + result.stderr
        assert "Lease acquired" in result.stdout

    def test_pytest_blocks_pass(self, tmp_path: Path) -> None:
        """The README's test examples pass under pytest with the volcano.testing fixtures."""
        examples = python_blocks("pytest")
        result = run_pytest(examples, tmp_path)
        assert result.returncode == 0, result.stdout + result.stderr
        assert f"{count_tests(b.code for b in examples)} passed" in result.stdout


def private_network() -> list[str]:
    """A command prefix running its command in a network namespace of its own, loopback up, so
    that the quick start's fixed port (8787) is free whatever else runs on this machine."""
    unshare, ip = shutil.which("unshare"), shutil.which("ip")
    if unshare is not None and ip is not None:
        prefix = [unshare, "--net", "--map-root-user"] if os.getuid() else [unshare, "--net"]
        probe = subprocess.run(
            [*prefix, ip, "link", "set", "lo", "up"], capture_output=True, check=False
        )
        if probe.returncode == 0:
            return prefix
    reason = "the quick start test needs unshare and ip for a network namespace of its own"
    if os.environ.get("VOLCANO_REQUIRE_NETNS") == "1":
        pytest.fail(reason)
    pytest.skip(reason)


class TestQuickStart:
    @pytest.fixture
    def leftover(self, tmp_path: Path) -> Iterator[Path]:
        """Where the quick start runs; every server still running afterwards (found by the pid
        files there) is stopped."""
        yield tmp_path
        for pid_file in tmp_path.glob("*.pid"):
            with contextlib.suppress(FileNotFoundError, ProcessLookupError, ValueError):
                os.kill(int(pid_file.read_text()), signal.SIGKILL)

    @staticmethod
    def quick_start() -> tuple[list[str], str, str]:
        """The quick start's shell lines (install aside), its Python as a heredoc, its stop."""
        quick = [b for b in blocks() if b.section == "Quick start" and b.mode == "run"]
        assert [b.language for b in quick] == ["sh", "python", "sh"]
        setup, program, stop = quick
        lines = setup.code.splitlines()
        # Installing is test_user_install.py's (from the built wheel, in fresh venvs): this
        # venv holds the package already, first on PATH.
        assert lines[0].startswith('pip install ".[server]"')
        return lines[1:], f"python3 - <<'QUICK_START'\n{program.code}QUICK_START", stop.code

    def test_quick_start_pasted_in_order(self, leftover: Path) -> None:
        """The quick start's lines, pasted in order with no sleep into a new reader's shell
        (install aside), start the server, make keys, run the Python against it and stop it:
        the server never races the client, its log goes to the file, not the terminal, and
        the keys file is private and names the server."""
        lines, python, stop = self.quick_start()
        script = "\n".join(["ip link set lo up", *lines, python, stop])
        result = run([*private_network(), "bash", "-euc", script], reader_env(), leftover)
        assert result.returncode == 0, result.stdout + result.stderr
        assert result.stdout == "Lease acquired 1\n", result.stdout + result.stderr
        assert "volcano-server listening on http://127.0.0.1:8787" in result.stderr
        pid_file = leftover / "volcano-server.pid"
        deadline = time.monotonic() + WAIT
        while pid_file.exists():  # removed by the server once it has stopped
            assert time.monotonic() < deadline, "the server did not stop"
            time.sleep(0.05)
        log = (leftover / "volcano-server.log").read_text()
        assert "POST /v1/locks/daily-report/acquire 200" in log
        assert "POST /v1/locks/daily-report/acquire" not in result.stderr
        assert "volcano-server stopped" in log
        keys_file = leftover / "volcano.env"
        assert keys_file.stat().st_mode & 0o777 == 0o600
        assert "VOLCANO_API_URL=http://127.0.0.1:8787\n" in keys_file.read_text()

    def test_quick_start_with_8787_taken(self, leftover: Path) -> None:
        """With another server on 8787 (its own database, as in the issue), the quick start
        pasted line by line into an interactive shell (which goes on after a failed line)
        talks to no server: `serve` fails naming the port and `--port`, no keys file is
        written, and the Python stops at the missing keys. The same lines again with the
        README's other port then work against the server they started, never the other."""
        lines, python, stop = self.quick_start()
        serve = next(line for line in lines if "serve --daemon" in line)
        assert "--port 8787" in serve
        assert "`--port 8788`" in README.read_text()
        other = (
            "volcano-server serve --daemon --port 8787 --db sqlite:///other.db"
            " --log-file other.log --pid-file other.pid >/dev/null"
        )
        again = [line.replace("--port 8787", "--port 8788") for line in lines]
        script = "\n".join([
            "ip link set lo up", other, "echo '== the quick start'", *lines, python,
            "echo '== again on 8788' | tee /dev/stderr", *again, python, stop,
        ])  # fmt: skip
        # bash without -e, as an interactive shell: every line runs, failed or not.
        result = run([*private_network(), "bash", "-uc", script], reader_env(), leftover)
        first, second = result.stderr.split("== again on 8788")[0], result.stdout
        assert (
            "volcano-server: cannot listen on 127.0.0.1:8787: address already in use (another"
            " server?): choose another port with --port, e.g. --port 8788, or --port 0 for any"
            " free one" in result.stderr
        ), result.stderr
        assert "argument --api-url: the URL is empty" in result.stderr, result.stderr
        assert (
            "volcano.InvalidArgumentError: anon_key is required: pass anon_key= or set"
            " VOLCANO_ANON_KEY" in first
        ), first
        assert second.splitlines() == ["== the quick start", "== again on 8788", "Lease acquired 1"]
        assert "listening on http://127.0.0.1:8788" in result.stderr
        assert first.count("Traceback") == 1  # the Python's; the commands fail in one line
        other_log = (leftover / "other.log").read_text()
        assert "/v1/" not in other_log, other_log  # the other server was never asked anything
        ours = (leftover / "volcano-server.log").read_text()
        assert "POST /v1/locks/daily-report/acquire 200" in ours
        keys = (leftover / "volcano.env").read_text()
        assert "VOLCANO_API_URL=http://127.0.0.1:8788\n" in keys

    def test_quick_start_files_are_git_ignored(self) -> None:
        """What the quick start writes into a checkout (keys, database, log, pid) is ignored."""
        ignored = subprocess.run(
            ["git", "check-ignore", "--no-index", "volcano.env", "volcano.db",
             "volcano-server.log", "volcano-server.pid", "site/index.html"],
            cwd=ROOT, capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert ignored.stdout.split() == [
            "volcano.env", "volcano.db", "volcano-server.log", "volcano-server.pid",
            "site/index.html",
        ]  # fmt: skip


class TestShellRecipes:
    @pytest.mark.parametrize("busy", [False, True])
    def test_cron_line_treats_busy_as_success(
        self, sqlite_server: LiveServer, project: Project, tmp_path: Path, busy: bool
    ) -> None:
        """`... || [ $? -eq 75 ]` succeeds whether it ran the job or another owner had it."""
        script = readme_lines("volcano locks run daily-report -- ./make-report.sh || [ $? -eq 75 ]")
        report = tmp_path / "make-report.sh"
        report.write_text("#!/bin/sh\ntouch made\n")
        report.chmod(0o755)
        if busy:
            with project_client(project, sqlite_server) as client:
                client.locks.acquire("daily-report", ttl=60)
        result = bash(script, project.child_env(sqlite_server.url), tmp_path)
        assert result.returncode == 0, result.stderr
        assert (tmp_path / "made").exists() is not busy

    @pytest.mark.skipif(shutil.which("jq") is None, reason="the recipe uses jq")
    def test_owner_token_in_the_environment(
        self, sqlite_server: LiveServer, project: Project, tmp_path: Path
    ) -> None:
        """acquire, then renew, check and release with the owner token in VOLCANO_OWNER_TOKEN
        only (check exits 0 while the lease is live, and bash -e stops on anything else)."""
        script = readme_lines(
            "lease=$(volcano locks acquire daily-report --ttl 60 --json)",
            'export VOLCANO_OWNER_TOKEN=$(echo "$lease" | jq -r .owner_token)',
            'fence=$(echo "$lease" | jq -r .fencing_token)',
            'volcano locks renew daily-report --fencing-token "$fence" --ttl 60',
            'volcano locks check daily-report "$fence"    # exit 0: that lease is live (1 once it'
            " is not)",
            'volcano locks release daily-report --fencing-token "$fence"',
        )
        result = bash(script, project.child_env(sqlite_server.url), tmp_path)
        assert result.returncode == 0, result.stderr
        with project_client(project, sqlite_server) as client:
            state = client.locks.get("daily-report")
        assert (state.held, state.fencing_token) == (False, 1)


class TestSigtermRecipe:
    @pytest.mark.parametrize("with_recipe", [True, False])
    def test_sigterm_releases_only_with_the_recipe(
        self, sqlite_server: LiveServer, project: Project, tmp_path: Path, with_recipe: bool
    ) -> None:
        """With the README's handler SIGTERM releases at once (143); without it the lock stays."""
        [block] = [b for b in python_blocks("run") if "signal.SIGTERM" in b.code]
        handler = block.code.split("signal.signal(signal.SIGTERM, stop)")[0]
        recipe = handler + "signal.signal(signal.SIGTERM, stop)\n" if with_recipe else ""
        script = f"""
import pathlib, sys, time
import volcano
client = volcano.Client()
{recipe}
with client.locks.with_lock("daily-report", ttl=600) as guard:
    pathlib.Path("inside").write_text("holding\\n")
    while True:
        time.sleep(0.05)
"""
        process = subprocess.Popen(
            [sys.executable, "-c", script], env=project.child_env(sqlite_server.url), cwd=tmp_path
        )
        inside = tmp_path / "inside"
        deadline = time.monotonic() + WAIT
        while not inside.exists() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert inside.exists(), "the script never entered its with_lock block"
        process.send_signal(signal.SIGTERM)
        status = process.wait(timeout=WAIT)
        with project_client(project, sqlite_server) as client:
            held = client.locks.get("daily-report").held
        if with_recipe:
            assert (status, held) == (128 + signal.SIGTERM, False)
        else:  # the problem the recipe solves: killed at once, the lease left for its ttl
            assert (status, held) == (-signal.SIGTERM, True)


def project_client(project: Project, server: LiveServer) -> volcano.Client:
    return volcano.Client(**project.client_args(server.url))
