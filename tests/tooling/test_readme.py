"""The README works as written: its Python blocks, its shell recipes and its SIGTERM recipe run
against a real server, as a reader would paste them."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import volcano
from tests.conftest import LiveServer
from tests.support.readme import MODES, README, blocks, python_blocks
from tests.support.server import Project, create_project

pytestmark = pytest.mark.slow

BIN = Path(sys.executable).parent
WAIT = 60.0

USE_KEYS = f"{sys.executable} -c \"import volcano; print(volcano.Client().locks.get('k').held)\""
"""A shell line that works only if the environment holds a project's keys."""

RUNNER = """
import json, sys
namespace = {"__name__": "__main__"}
for block in json.load(sys.stdin):
    # Padded so that a traceback names the README's own line numbers.
    exec(compile("\\n" * (block["line"] - 1) + block["code"], "README.md", "exec"), namespace)
"""


def run(args: list[str], env: dict[str, str], cwd: Path, **kwargs: object):
    return subprocess.run(
        args, env=env, cwd=cwd, capture_output=True, text=True, timeout=WAIT, check=False,
        **kwargs,  # type: ignore[arg-type]
    )  # fmt: skip


def bash(script: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run `script` as a reader would in bash, with this venv's commands first on PATH."""
    env = {**env, "PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}"}
    return run(["bash", "-euc", script], env, cwd)


def keyless_env(server: LiveServer) -> dict[str, str]:
    """A shell aimed at `server`'s API and database, with no keys yet (as a new reader's)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("VOLCANO_")}
    return {**env, "VOLCANO_API_URL": server.url, "VOLCANO_DATABASE_URL": server.database_url}


def readme_lines(*lines: str) -> str:
    """`lines` as a script, after checking that the README shows each one verbatim."""
    text = README.read_text()
    for line in lines:
        assert line in text, f"the README no longer shows: {line}"
    return "\n".join(lines)


@pytest.fixture
def project(sqlite_server: LiveServer, request: pytest.FixtureRequest) -> Project:
    return create_project(sqlite_server.database_url, request.node.nodeid[:100])


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
        code = [{"line": b.line, "code": b.code} for b in python_blocks("run")]
        result = run(
            [sys.executable, "-c", RUNNER],
            project.child_env(sqlite_server.url),
            tmp_path,
            input=json.dumps(code),
        )
        assert result.returncode == 0, result.stdout + result.stderr
        assert "Lease acquired" in result.stdout

    def test_pytest_blocks_pass(self, tmp_path: Path) -> None:
        """The README's test examples pass under pytest with the volcano.testing fixtures."""
        (tmp_path / "pyproject.toml").write_text(
            '[tool.pytest.ini_options]\nfilterwarnings = ["error"]\n'
        )
        examples = python_blocks("pytest")
        for number, block in enumerate(examples):
            (tmp_path / f"test_readme_{number}.py").write_text(block.code)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("VOLCANO_", "PYTEST_"))}
        result = run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider"], env, tmp_path)
        assert result.returncode == 0, result.stdout + result.stderr
        tests = sum(block.code.count("\ndef test_") for block in examples)
        assert f"{tests} passed" in result.stdout


class TestShellRecipes:
    def test_keys_into_the_environment(self, sqlite_server: LiveServer, tmp_path: Path) -> None:
        """The quick start's one line puts working keys into the shell's environment."""
        script = readme_lines("export $(volcano-server keys create --project demo)")
        result = bash(f"{script}\n{USE_KEYS}", keyless_env(sqlite_server), tmp_path)
        assert (result.returncode, result.stdout) == (0, "False\n"), result.stderr

    def test_keys_kept_in_a_private_file(self, sqlite_server: LiveServer, tmp_path: Path) -> None:
        """The key file is readable by its owner only, and loading it exports both keys."""
        script = readme_lines(
            "(umask 077; volcano-server keys create --project demo > volcano.env)",
            "set -a; . ./volcano.env; set +a",
        )
        result = bash(f"{script}\n{USE_KEYS}", keyless_env(sqlite_server), tmp_path)
        assert (result.returncode, result.stdout) == (0, "False\n"), result.stderr
        assert (tmp_path / "volcano.env").stat().st_mode & 0o777 == 0o600

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
        """acquire, then renew and release with the owner token in VOLCANO_OWNER_TOKEN only."""
        script = readme_lines(
            "lease=$(volcano locks acquire daily-report --ttl 60 --json)",
            'export VOLCANO_OWNER_TOKEN=$(echo "$lease" | jq -r .owner_token)',
            'fence=$(echo "$lease" | jq -r .fencing_token)',
            'volcano locks renew daily-report --fencing-token "$fence" --ttl 60',
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
