"""docs/safety.md names the tests that prove each promise: every one it names must exist."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "safety.md").read_text()


def test_every_test_named_exists() -> None:
    """Each `tests/...py[::Class][::test]` in the page is a file holding those names."""
    named = re.findall(r"`(tests/[\w/]+\.py)((?:::\w+)*)`", DOC)
    assert len(named) > 10
    missing = []
    for path, names in named:
        source = ROOT / path
        if not source.is_file():
            missing.append(path)
            continue
        text = source.read_text()
        missing += [
            f"{path}::{name}"
            for name in filter(None, names.split("::"))
            if not re.search(rf"^\s*(async )?(def|class) {name}\b", text, re.MULTILINE)
        ]
    assert missing == []


def test_every_explorer_property_named_exists() -> None:
    """Each explorer property the page names (`TwoHolders`, ...) is a Violation of _checks."""
    checks = (ROOT / "tests" / "explorer" / "_checks.py").read_text()
    # "explorer `A`", "explorer `A`, `B`", "explorer `A`, `B` and `C`", ...
    runs = re.findall(r"explorer (`\w+`(?:(?:,| and|, and) `\w+`)*)", DOC)
    flat = {name for run in runs for name in re.findall(r"`(\w+)`", run)}
    assert flat
    assert {name for name in flat if f"class {name}(Violation)" not in checks} == set()
    defined = set(re.findall(r"^class (\w+)\(Violation\)", checks, re.MULTILINE))
    assert defined <= flat, "a property the explorer checks is missing from docs/safety.md"
