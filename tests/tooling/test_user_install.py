"""The package as a user installs it: the built wheel in fresh virtual environments, with the
SDK's dependencies alone and with the testing extra, used through the `volcano` command, the
pytest plugin and `import volcano_server`.

Each environment is made once for this module (about ten seconds each, from the package index).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from tests.conftest import LiveServer
from tests.support.readme import count_tests, python_blocks
from tests.support.server import create_project

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
WAIT = 300.0

THROWAWAY_TESTS = """
import os

import pytest

import volcano


def test_client_is_ready(volcano_client):
    with volcano_client.locks.with_lock("shared", ttl=30) as guard:
        assert volcano_client.locks.get("shared").fencing_token == guard.lease.fencing_token


def test_projects_are_isolated_first(volcano_client):
    volcano_client.locks.acquire("never-released", ttl=600)


def test_projects_are_isolated_second(volcano_client):
    volcano_client.locks.acquire("never-released", ttl=600)  # LockHeldError if shared


def test_env_for_code_that_makes_its_own_client(volcano_env):
    assert os.environ["VOLCANO_API_URL"] == volcano_env.url
    with volcano.Client() as client:
        assert client.locks.acquire("mine", ttl=5).fencing_token == 1


@pytest.mark.anyio
async def test_async_client(volcano_async_client):
    async with volcano_async_client.locks.with_lock("async", ttl=5) as guard:
        assert not guard.lost
    assert not (await volcano_async_client.locks.get("async")).held


def test_one_server_for_the_session(volcano_server, volcano_project):
    assert volcano_project.url == volcano_server.url
    assert volcano_server.new_project().anon_key != volcano_project.anon_key
"""

WITHOUT_PYTEST = """
from volcano.testing import local_server

with local_server() as server, server.client() as client:
    print("fencing token", client.locks.acquire("k", ttl=5).fencing_token)
"""


def clean_env() -> dict[str, str]:
    """This environment without anything of this test run's (VOLCANO_*, PYTEST_*, PYTHONPATH)."""
    return {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("VOLCANO_", "PYTEST_")) and k != "PYTHONPATH"
    }


def check(args: list[str | Path], **kwargs: object) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [str(a) for a in args], capture_output=True, text=True, timeout=WAIT, check=False,
        **kwargs,  # type: ignore[arg-type]
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    return result


class Venv:
    """A fresh virtual environment."""

    def __init__(self, path: Path, *requirements: str) -> None:
        self.path = path
        check([sys.executable, "-m", "venv", path])
        check([self.bin("python"), "-m", "pip", "install", "--quiet", *requirements])

    def bin(self, name: str) -> Path:
        return self.path / "bin" / name

    def run(
        self, name: str, *args: str, cwd: Path, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.bin(name)), *args],
            cwd=cwd,
            env=clean_env() if env is None else env,
            capture_output=True,
            text=True,
            timeout=WAIT,
            check=False,
        )

    def pytest(self, project: Path, *args: str) -> subprocess.CompletedProcess[str]:
        """pytest in `project`, as strict as a careful user's (warnings are errors)."""
        (project / "pyproject.toml").write_text(
            '[tool.pytest.ini_options]\nfilterwarnings = ["error"]\n'
        )
        return self.run("python", "-m", "pytest", "-p", "no:cacheprovider", *args, cwd=project)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The package built as a wheel, as it would be published."""
    out = tmp_path_factory.mktemp("wheel")
    check([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", out, ROOT])
    [built] = out.glob("volcano-*.whl")
    return built


@pytest.fixture(scope="module")
def sdk_venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Venv:
    """The SDK alone (no server extra), with pytest, as in a user's project."""
    return Venv(
        tmp_path_factory.mktemp("sdk") / "venv", str(wheel), f"pytest=={pytest.__version__}"
    )


@pytest.fixture(scope="module")
def server_venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Venv:
    """The SDK with the testing extra (the server's, and pytest), as the README says."""
    return Venv(tmp_path_factory.mktemp("server") / "venv", f"volcano[testing] @ {wheel.as_uri()}")


def server_requirements() -> list[str]:
    """The distributions the server extra adds, as pyproject.toml names them."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = [
        re.split(r"[<>=!;\[ ]", r, maxsplit=1)[0] for r in extras["optional-dependencies"]["server"]
    ]
    return [name.lower().replace("_", "-") for name in names]


INERT = """
import sys
import volcano_server
web = {"starlette", "uvicorn", "httptools", "uvloop", "yaml", "prometheus_client", "opentelemetry"}
print(sorted(m for m in sys.modules if m.split(".")[0] in web))
try:
    volcano_server.create_app
except ModuleNotFoundError as error:
    print(error)
"""


class TestWithoutServerExtra:
    def test_the_server_extra_is_absent(self, sdk_venv: Venv, tmp_path: Path) -> None:
        """The environment holds the SDK's dependencies (and pytest), none of the server
        extra's (uvicorn, starlette, ...): `pip install volcano` as a user runs it."""
        listed = sdk_venv.run("python", "-m", "pip", "list", "--format=freeze", cwd=tmp_path)
        installed = {
            line.split("==")[0].lower().replace("_", "-") for line in listed.stdout.split()
        }
        assert {"volcano", "httpx", "attrs", "sniffio", "pytest"} <= installed
        assert set(server_requirements()) & installed == set()
        result = sdk_venv.run("python", "-c", "import uvicorn", cwd=tmp_path)
        assert "No module named 'uvicorn'" in result.stderr

    def test_the_server_package_is_inert_without_its_extra(
        self, sdk_venv: Venv, tmp_path: Path
    ) -> None:
        """As CONTRIBUTING.md decides: `import volcano_server` works and imports nothing of the
        web stack; keys and migrate work on SQLite; the app and `serve` name the extra."""
        result = sdk_venv.run("python", "-c", INERT, cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        assert result.stdout.splitlines() == [
            "[]",
            (
                "volcano_server.create_app needs the server extra (starlette is missing):"
                ' pip install "volcano[server]"'
            ),
        ]
        db = f"sqlite:///{tmp_path / 'keys.db'}"
        keys = sdk_venv.run("volcano-server", "keys", "create", "--project", "p", "--db", db,
                            cwd=tmp_path)  # fmt: skip
        assert keys.returncode == 0, keys.stderr
        assert keys.stdout.startswith("VOLCANO_ANON_KEY=vk_local_anon_")
        serve = sdk_venv.run("volcano-server", "serve", "--port", "0", "--db", db, cwd=tmp_path)
        assert serve.returncode == 1
        assert serve.stderr == (
            "volcano-server: serving needs the server extra (uvicorn is missing): pip install"
            ' "volcano[server]" (from a checkout: pip install ".[server]")\n'
        )

    def test_volcano_command_works(
        self, sdk_venv: Venv, sqlite_server: LiveServer, tmp_path: Path
    ) -> None:
        """`volcano` and `python -m volcano` work with the SDK alone, against a real server."""
        project = create_project(sqlite_server.database_url, "user-install")
        env = project.child_env(sqlite_server.url)
        acquired = sdk_venv.run(
            "volcano", "locks", "acquire", "k", "--ttl", "5", cwd=tmp_path, env=env
        )
        assert acquired.returncode == 0, acquired.stderr
        run = sdk_venv.run(
            "python", "-m", "volcano", "locks", "run", "j", "--", "true", cwd=tmp_path, env=env
        )
        assert (run.returncode, run.stderr) == (0, "")

    def test_plugin_leaves_other_tests_alone(self, sdk_venv: Venv, tmp_path: Path) -> None:
        """The plugin is loaded, and a suite that does not use it passes with warnings as errors."""
        (tmp_path / "test_plain.py").write_text("def test_plain():\n    assert 1 + 1 == 2\n")
        result = sdk_venv.pytest(tmp_path)
        assert result.returncode == 0, result.stdout + result.stderr
        assert "1 passed" in result.stdout
        fixtures = sdk_venv.pytest(tmp_path, "--fixtures")
        assert "volcano_client" in fixtures.stdout

    def test_fixture_says_the_server_extra_is_missing(self, sdk_venv: Venv, tmp_path: Path) -> None:
        """A test using the fixtures fails with one line naming the missing extra."""
        (tmp_path / "test_lock.py").write_text("def test_lock(volcano_client):\n    pass\n")
        result = sdk_venv.pytest(tmp_path)
        assert result.returncode == 1, result.stdout + result.stderr
        [line] = [x for x in result.stdout.splitlines() if x.startswith("volcano.testing:")]
        assert line.startswith("volcano.testing: could not start the reference server:")
        assert (
            'serving needs the server extra (uvicorn is missing): pip install "volcano[server]"'
            ' (from a checkout: pip install ".[server]")' in line
        )
        assert "During handling" not in result.stdout
        assert "Traceback" not in result.stdout


class TestToozExtra:
    def test_tooz_finds_the_driver_by_its_url(self, wheel: Path, tmp_path: Path) -> None:
        """`pip install "volcano[tooz]"` alone registers the driver: tooz loads it for a
        `volcano://` URL (no server running there: start() is a ToozConnectionError)."""
        venv = Venv(tmp_path / "venv", f"volcano[tooz] @ {wheel.as_uri()}")
        script = (
            "import tooz.coordination as c\n"
            "driver = c.get_coordinator('volcano://127.0.0.1:1', b'm')\n"
            "print(type(driver).__module__, type(driver).__name__)\n"
            "try:\n"
            "    driver.start()\n"
            "except c.ToozConnectionError:\n"
            "    print('not connected')\n"
        )
        env = {**clean_env(), "VOLCANO_ANON_KEY": "vk_anon_x", "VOLCANO_SERVICE_KEY": "vk_s_x"}
        result = venv.run("python", "-c", script, cwd=tmp_path, env=env)
        assert result.returncode == 0, result.stderr
        assert result.stdout.splitlines() == ["volcano.tooz VolcanoDriver", "not connected"]


class TestPytestPlugin:
    def test_fixtures_in_a_users_project(self, server_venv: Venv, tmp_path: Path) -> None:
        """A throwaway project's tests use every fixture, and the README's example, and pass."""
        (tmp_path / "test_locks.py").write_text(THROWAWAY_TESTS)
        for number, block in enumerate(python_blocks("pytest")):
            (tmp_path / f"test_readme_{number}.py").write_text(block.code)
        result = server_venv.pytest(tmp_path, "-v")
        assert result.returncode == 0, result.stdout + result.stderr
        readme = [block.code for block in python_blocks("pytest")]
        expected = count_tests([THROWAWAY_TESTS, *readme])
        assert f"{expected} passed" in result.stdout

    def test_plugin_can_be_turned_off(self, server_venv: Venv, tmp_path: Path) -> None:
        """`-p no:volcano` removes the fixtures."""
        (tmp_path / "test_lock.py").write_text("def test_lock(volcano_client):\n    pass\n")
        result = server_venv.pytest(tmp_path, "-p", "no:volcano")
        assert "fixture 'volcano_client' not found" in result.stdout

    def test_local_server_without_pytest(self, server_venv: Venv, tmp_path: Path) -> None:
        """`volcano.testing.local_server()` runs a server for a plain script."""
        result = server_venv.run("python", "-c", WITHOUT_PYTEST, cwd=tmp_path)
        assert (result.returncode, result.stdout) == (0, "fencing token 1\n"), result.stderr


class TestMetadata:
    def test_project_urls_name_the_four_places(self, wheel: Path) -> None:
        """The wheel's metadata names the documentation, the source, the changelog and the
        issues, as a package index shows them; the changelog and the issues are the source's."""
        with zipfile.ZipFile(wheel) as built:
            [name] = [n for n in built.namelist() if n.endswith(".dist-info/METADATA")]
            metadata = built.read(name).decode()
        urls = dict(
            line.removeprefix("Project-URL: ").split(", ", 1)
            for line in metadata.splitlines()
            if line.startswith("Project-URL: ")
        )
        assert set(urls) == {"Homepage", "Documentation", "Source", "Changelog", "Issues"}
        assert urls["Changelog"] == f"{urls['Source']}/blob/main/CHANGELOG.md"
        assert urls["Issues"] == f"{urls['Source']}/issues"
        assert urls["Documentation"].startswith(urls["Source"])
        assert (ROOT / "CHANGELOG.md").exists()
        assert "SECURITY.md" in (ROOT / "CHANGELOG.md").read_text()
