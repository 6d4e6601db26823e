"""MkDocs hook: the user's guide, one page per section of the README, made at each build.

The README is where users start (on the source host, or on the package index), so it stays
whole and the guide is made from it, as the HTTP page is made from openapi.yaml: never stored,
it cannot drift, and a section added to the README is on the site at the next build, in the
README's order, under "Guide". Each page is its section's text with:

- a first block making what the examples use without making it (a client from the quick start's
  variables, the imports), because a page is read, and run by tests/tooling/test_docs.py, alone;
- its links rewritten: to another section -> that section's page; to `docs/` -> the site's own
  page; to any other file of the repository -> that file on the source host (project.urls).
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path, PurePosixPath

import attrs
from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
FOLDER = "guide"
NAV_TITLE = "Guide"
# Sections that are no page of the guide, and where a link to them leads instead: how to build
# this site (-> its Python API), and the repository's own guide (-> on the source host).
SKIPPED = {"API reference": "reference/client.md", "Contributing": "CONTRIBUTING.md"}
# Names an example may use without making them, and what makes them.
IMPORTS = {
    "asyncio": "import asyncio",
    "os": "import os",
    "threading": "import threading",
    "time": "import time",
    "timedelta": "from datetime import timedelta",
    "uuid": "import uuid",
    "volcano": "import volcano",
}
CLIENT = "client = volcano.Client()  # the quick start's VOLCANO_* variables name the server"

_LINK = re.compile(r"\]\(([^)\s]+)\)")
_MARKER = re.compile(r"<!--\s*readme-check:\s*(\S+)\s*-->")


@attrs.frozen
class Section:
    """A `## ` section of the README: its heading, its page, its text (heading excluded)."""

    heading: str
    body: str

    @property
    def slug(self) -> str:
        """The heading's anchor on the source host, which names its page."""
        return anchor(self.heading)

    @property
    def page(self) -> str:
        """Its page's path under docs/."""
        return f"{FOLDER}/{self.slug}.md"


def anchor(heading: str) -> str:
    """The anchor GitHub gives a heading (tests/support/readme.py spells it the same way)."""
    kept = "".join(ch for ch in heading.lower() if ch.isalnum() or ch in " -_")
    return kept.replace(" ", "-")


def sections(text: str | None = None) -> list[Section]:
    """The README's sections, in order, but the skipped ones."""
    found: list[tuple[str, list[str]]] = []
    fenced = False
    for line in (README.read_text() if text is None else text).splitlines():
        if line.startswith("```"):
            fenced = not fenced
        if line.startswith("## ") and not fenced:
            found.append((line[3:].strip(), []))
        elif found:
            found[-1][1].append(line)
    return [
        Section(heading, "\n".join(lines).strip() + "\n")
        for heading, lines in found
        if heading not in SKIPPED
    ]


def pages(text: str | None = None) -> dict[str, str]:
    """Each guide page's Markdown, by its path under docs/."""
    every = sections(text)
    targets = _targets(every)
    return {section.page: _page(section, targets) for section in every}


def on_config(config: MkDocsConfig) -> MkDocsConfig:
    """List the guide's pages in the navigation, after the home page."""
    entries = [{section.heading.replace("`", ""): section.page} for section in sections()]
    nav = list(config.nav or [])
    nav.insert(1, {NAV_TITLE: entries})
    config.nav = nav
    return config


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Add the guide's pages, made from the README."""
    for path, content in pages().items():
        files.append(File.generated(config, path, content=content))
    return files


def _page(section: Section, targets: dict[str, str]) -> str:
    body = _LINK.sub(lambda m: f"]({_link(m.group(1), section.page, targets)})", section.body)
    prelude = _prelude(body)
    head = f"# {section.heading}\n\n"
    if not prelude:
        return head + body
    return (
        f"{head}The examples on this page run in order, as one program, after the\n"
        "[quick start](quick-start.md) (its keys and URL in the environment), from this:\n\n"
        f"```python\n{prelude}```\n\n{body}"
    )


def _prelude(body: str) -> str:
    """What the page's examples use without making it."""
    code = "\n".join(_runnable(body))
    if not code:
        return ""
    uses_client = re.search(r"\bclient\.", code) is not None and "client = " not in code
    lines = [
        statement
        for name, statement in IMPORTS.items()
        if (re.search(rf"\b{name}\b", code) or (uses_client and name == "volcano"))
        and statement not in code
        and not re.search(rf"^import .*\b{name}\b", code, re.MULTILINE)
    ]
    if uses_client:
        lines += ["", CLIENT]
    return "\n".join(lines) + "\n" if lines else ""


def _runnable(body: str) -> list[str]:
    """The Python blocks of `body` that run (unmarked), as tests/support/readme.py reads them."""
    found, lines, index = [], body.splitlines(), 0
    while index < len(lines):
        if lines[index].strip() == "```python":
            end = next(i for i in range(index + 1, len(lines)) if lines[i].startswith("```"))
            before = next((x for x in reversed(lines[:index]) if x.strip()), "")
            if _MARKER.search(before) is None:
                found.append("\n".join(lines[index + 1 : end]))
            index = end
        index += 1
    return found


def _targets(every: list[Section]) -> dict[str, str]:
    """Where each README anchor lives on the site: a section's page, or a heading within it."""
    targets = {anchor(heading): target for heading, target in SKIPPED.items()}
    for section in every:
        targets[section.slug] = section.page
        fenced = False
        for line in section.body.splitlines():
            fenced = fenced != line.startswith("```")
            if line.startswith("#") and not fenced:  # a heading, not a comment in a block
                name = anchor(line.lstrip("#").strip())
                targets[name] = f"{section.page}#{name}"
    return targets


def _link(target: str, page: str, targets: dict[str, str]) -> str:
    if target.startswith(("http://", "https://", "mailto:")):
        return target
    here = PurePosixPath(page).parent
    if target.startswith("#"):
        found = targets.get(target[1:])
        if found is None:
            return target
        return _link(found, page, targets) if found == "CONTRIBUTING.md" else _relative(found, here)
    path, _, fragment = target.partition("#")
    tail = f"#{fragment}" if fragment else ""
    if path.startswith("docs/"):
        return _relative(path.removeprefix("docs/"), here) + tail
    return f"{_source()}/blob/main/{path}{tail}"


def _relative(path: str, here: PurePosixPath) -> str:
    target, _, fragment = path.partition("#")
    depth = len(here.parts)
    relative = "/".join([".."] * depth + [target]) if depth else target
    return relative + (f"#{fragment}" if fragment else "")


def _source() -> str:
    urls = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]
    return str(urls["Source"]).rstrip("/")
