"""The README's code blocks, with the markers that say how the README check treats them.

A fenced block may be preceded (on the line before its fence, blank lines allowed) by
`<!-- readme-check: MODE -->`: `fragment` (not run: it needs context the page leaves out) or
`pytest` (a test file, run under pytest with the volcano.testing fixtures). Unmarked Python
blocks are run, in order, as one program.
"""

from __future__ import annotations

import re
from pathlib import Path

import attrs

README = Path(__file__).resolve().parents[2] / "README.md"
MODES = ("run", "fragment", "pytest")

_MARKER = re.compile(r"<!--\s*readme-check:\s*(\S+)\s*-->")
_FENCE = re.compile(r"^```(\S*)\s*$")


@attrs.frozen
class Block:
    """One fenced code block: its language, its first line's number, its text, its mode."""

    language: str
    line: int
    code: str
    mode: str


def blocks(path: Path = README) -> list[Block]:
    """Every fenced block of `path`, in order."""
    found: list[Block] = []
    lines = path.read_text().splitlines()
    index = 0
    while index < len(lines):
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
            )
        )
        index = end + 1
    return found


def python_blocks(mode: str, path: Path = README) -> list[Block]:
    """The Python blocks of `path` in `mode`."""
    return [b for b in blocks(path) if b.language == "python" and b.mode == mode]


def _mode_before(lines: list[str], fence: int) -> str:
    previous = next((lines[i] for i in range(fence - 1, -1, -1) if lines[i].strip()), "")
    marker = _MARKER.search(previous)
    return "run" if marker is None else marker.group(1)
