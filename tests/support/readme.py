"""The code blocks of the README (and of the docs' pages), and the runner that runs them as a
reader would.

A fenced block may be preceded (on the line before its fence, blank lines allowed) by
`<!-- readme-check: MODE -->`: `fragment` (not run: it needs context the page leaves out) or
`pytest` (a test file, run under pytest with the volcano.testing fixtures). Unmarked Python
blocks are run, in order, as one program (`run_program`).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

import attrs

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
MODES = ("run", "fragment", "pytest")
SHELLS = ("sh", "bash", "shell", "console")
WAIT = 60.0

_MARKER = re.compile(r"<!--\s*readme-check:\s*(\S+)\s*-->")
_FENCE = re.compile(r"^```(\S*)\s*$")

RUNNER = """
import ast, asyncio, inspect, json, sys
namespace = {"__name__": "__main__"}
for block in json.load(sys.stdin):
    # Padded so that a traceback names the page's own line numbers. Top-level await is allowed
    # (an example may show `async with` alone); such a block runs on an event loop of its own.
    code = compile(
        "\\n" * (block["line"] - 1) + block["code"], block["page"], "exec",
        flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT,
    )
    if code.co_flags & inspect.CO_COROUTINE:
        asyncio.run(eval(code, namespace))
    else:
        exec(code, namespace)
"""
"""Runs the blocks given as JSON on stdin, in order, in one namespace."""


@attrs.frozen
class Block:
    """One fenced code block: its language, its first line's number, its text, its mode, and
    the `## ` section it sits in ("" before the first)."""

    language: str
    line: int
    code: str
    mode: str
    section: str = ""


def blocks(path: Path = README) -> list[Block]:
    """Every fenced block of `path`, in order."""
    return blocks_in(path.read_text())


def blocks_in(text: str) -> list[Block]:
    """Every fenced block of the Markdown `text`, in order."""
    found: list[Block] = []
    lines = text.splitlines()
    section = ""
    index = 0
    while index < len(lines):
        if lines[index].startswith("## "):
            section = lines[index][3:].strip()
        fence = _FENCE.match(lines[index])
        if fence is None:
            index += 1
            continue
        end = next(i for i in range(index + 1, len(lines)) if lines[i].startswith("```"))
        found.append(
            Block(
                language=fence.group(1),
                line=index + 2,
                code="\n".join(lines[index + 1 : end]) + "\n",
                mode=_mode_before(lines, index),
                section=section,
            )
        )
        index = end + 1
    return found


def python_blocks(mode: str, path: Path = README) -> list[Block]:
    """The Python blocks of `path` in `mode`."""
    return [b for b in blocks(path) if b.language == "python" and b.mode == mode]


def headings(path: Path = README) -> list[str]:
    """The `## ` headings of `path`, in order (outside code blocks)."""
    found, fenced = [], False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif line.startswith("## ") and not fenced:
            found.append(line[3:].strip())
    return found


def anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation but `-` and `_` dropped."""
    kept = "".join(ch for ch in heading.lower() if ch.isalnum() or ch in " -_")
    return kept.replace(" ", "-")


def run_program(
    code: Sequence[Block], env: dict[str, str], cwd: Path, page: str = "README.md"
) -> subprocess.CompletedProcess[str]:
    """Run `code` in a fresh interpreter as one program, in order (`RUNNER`)."""
    program = [{"line": b.line, "code": b.code, "page": page} for b in code]
    return subprocess.run(
        [sys.executable, "-c", RUNNER],
        env=env,
        cwd=cwd,
        input=json.dumps(program),
        capture_output=True,
        text=True,
        timeout=WAIT,
        check=False,
    )


def run_pytest(code: Sequence[Block], cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run each of `code` as a test file of a throwaway project, under pytest with the
    volcano.testing fixtures, as strict as a careful user's (warnings are errors)."""
    (cwd / "pyproject.toml").write_text('[tool.pytest.ini_options]\nfilterwarnings = ["error"]\n')
    for number, block in enumerate(code):
        (cwd / f"test_example_{number}.py").write_text(block.code)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VOLCANO_", "PYTEST_"))}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider"],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=WAIT,
        check=False,
    )


def count_tests(sources: Iterable[str]) -> int:
    """How many test functions these Python sources define (at any line, the first included)."""
    return sum(len(re.findall(r"^(?:async )?def test_", code, re.MULTILINE)) for code in sources)


def _mode_before(lines: list[str], fence: int) -> str:
    previous = next((lines[i] for i in range(fence - 1, -1, -1) if lines[i].strip()), "")
    marker = _MARKER.search(previous)
    return "run" if marker is None else marker.group(1)
