"""The reference site (mkdocs.yml) builds with warnings as errors, documents every parameter and
operation, and every Python example on it runs against a real server, as the README's do.

Examples come from two places: the hand-written pages (docs/*.md, with the README's markers) and
the docstrings the Python API pages render, read back from the built HTML, which is what a
reader sees. A docstring example takes a few names as given, as doctest's globs would (`PRELUDE`).
"""

from __future__ import annotations

import html.parser
import inspect
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import volcano
from tests.conftest import LiveServer
from tests.support.readme import (
    ROOT,
    Block,
    blocks,
    count_tests,
    python_blocks,
    run_program,
    run_pytest,
)
from tests.support.server import Project, create_project

pytestmark = pytest.mark.slow

DOCS = ROOT / "docs"
PAGES = sorted(DOCS.glob("*.md"))  # the hand-written pages; reference/ holds only ::: directives

PRELUDE = """\
import volcano, volcano.testing

client = volcano.Client()
work = ["sales", "stock"]


def write(item, fence):
    print("writing", item, "with fencing token", fence)


def alert(reason):
    print("lock lost:", reason)
"""
"""The names the docstring examples use without making them: a client, some work to do."""

ASYNC_PRELUDE = "import volcano\n\nclient = volcano.AsyncClient()\n"
"""The same for the AsyncClient page, whose `client` is an AsyncClient."""


class _PythonBlocks(html.parser.HTMLParser):
    """The text of every `<div class="language-python highlight">` code block of a page, but
    the signatures mkdocstrings renders that way (`doc-signature`)."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []
        self._depth = 0  # >0: inside a Python block's div, counting nested divs

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag != "div":
            return
        classes = set((dict(attrs).get("class") or "").split())
        if self._depth:
            self._depth += 1
        elif "language-python" in classes and "doc-signature" not in classes:
            self._depth = 1
            self.found.append("")

    def handle_endtag(self, tag: str) -> None:
        if tag == "div" and self._depth:
            self._depth -= 1

    def handle_data(self, data: str) -> None:
        if self._depth:
            self.found[-1] += data


def python_in(page: Path) -> list[str]:
    """The Python examples of a built page, as its reader sees them."""
    parser = _PythonBlocks()
    parser.feed(page.read_text())
    return parser.found


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built as CI builds it: `mkdocs build --strict` (a warning fails it)."""
    out = tmp_path_factory.mktemp("site")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", ROOT / "mkdocs.yml", "-d", out],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "WARNING" not in result.stderr, result.stderr
    return out


@pytest.fixture
def project(sqlite_server: LiveServer, request: pytest.FixtureRequest) -> Project:
    return create_project(sqlite_server.database_url, request.node.nodeid[:100])


def docstring_examples(site: Path) -> dict[str, list[str]]:
    """The Python examples of each page built from docstrings, by page."""
    pages = sorted((site / "reference").glob("*.html"))
    return {page.name: found for page in pages if (found := python_in(page))}


class TestBuild:
    def test_with_lock_shows_every_parameter(self, site: Path) -> None:
        """The Client page describes with_lock and each of its arguments, from its docstring;
        the AsyncClient page shows its twin with every argument in the signature."""
        parameters = list(inspect.signature(volcano.Locks.with_lock).parameters)[1:]
        assert len(parameters) >= 8
        client = (site / "reference" / "client.html").read_text()
        assert 'id="volcano.Locks.with_lock"' in client
        for parameter in parameters:
            assert f"<code>{parameter}</code>" in client, parameter  # the Args table
        twin = (site / "reference" / "async.html").read_text()
        assert 'id="volcano.AsyncLocks.with_lock"' in twin
        for parameter in inspect.signature(volcano.AsyncLocks.with_lock).parameters:
            if parameter != "self":
                assert f'<span class="n">{parameter}</span>' in twin, parameter

    def test_http_page_has_every_operation_and_schema(self, site: Path) -> None:
        """The HTTP API page is made from openapi.yaml: every operation and schema is on it."""
        spec = yaml.safe_load((ROOT / "openapi.yaml").read_text())
        text = (site / "http.html").read_text()
        for item in spec["paths"].values():
            for operation in item.values():
                if isinstance(operation, dict) and "operationId" in operation:
                    assert f"<code>{operation['operationId']}</code>" in text
        for name in spec["components"]["schemas"]:
            assert f'id="{name.lower()}"' in text

    def test_site_needs_no_network(self, site: Path) -> None:
        """No page loads a script, stylesheet or font from elsewhere (a CDN): it reads offline."""
        for page in site.rglob("*.html"):
            text = page.read_text()
            for attribute in ('src="http', 'href="//', 'src="//'):
                assert attribute not in text, page
            assert 'rel="stylesheet" href="http' not in text, page


class TestExamples:
    def test_every_python_example_is_accounted_for(self, site: Path) -> None:
        """Each Python block on the built site is a page's (run, or marked) or a docstring's
        (run below): an example added anywhere else would be shown and never run."""
        on_site = sum(len(python_in(page)) for page in site.rglob("*.html"))
        in_pages = sum(len([b for b in blocks(p) if b.language == "python"]) for p in PAGES)
        from_docstrings = sum(len(found) for found in docstring_examples(site).values())
        assert from_docstrings >= 3
        assert on_site == in_pages + from_docstrings

    @pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
    def test_page_examples_run_in_order(
        self, page: Path, sqlite_server: LiveServer, project: Project, tmp_path: Path
    ) -> None:
        """A hand-written page's Python blocks run in order as one program against a real
        server, its pytest blocks pass; fragments are marked as such."""
        run = python_blocks("run", page)
        result = run_program(run, project.child_env(sqlite_server.url), tmp_path, page.name)
        assert result.returncode == 0, result.stdout + result.stderr
        examples = python_blocks("pytest", page)
        if examples:
            tested = run_pytest(examples, tmp_path)
            assert f"{count_tests(b.code for b in examples)} passed" in tested.stdout, tested.stdout

    def test_docstring_examples_run(
        self, site: Path, sqlite_server: LiveServer, project: Project, tmp_path: Path
    ) -> None:
        """Every docstring example on the Python API pages runs against a real server (given
        `PRELUDE`'s names), or passes under pytest when it is a test."""
        for name, found in docstring_examples(site).items():
            examples = [Block("python", 1, code, "run") for code in found]
            tests = [b for b in examples if "def test_" in b.code]
            prelude = ASYNC_PRELUDE if name == "async.html" else PRELUDE
            program = [Block("python", 1, prelude, "run")] + [b for b in examples if b not in tests]
            result = run_program(program, project.child_env(sqlite_server.url), tmp_path, name)
            assert result.returncode == 0, name + ": " + result.stdout + result.stderr
            if name == "client.html":  # with_lock's example did its work through PRELUDE's
                assert "writing sales with fencing token" in result.stdout
            if tests:
                (tmp_path / name).mkdir()
                tested = run_pytest(tests, tmp_path / name)
                passed = f"{count_tests(b.code for b in tests)} passed"
                assert passed in tested.stdout, tested.stdout
