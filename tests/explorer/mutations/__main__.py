"""Apply each broken rule to a scratch copy of the checkout and see whether the explorer catches it.

    python -m tests.explorer.mutations                  # every mutation, CI's budget
    python -m tests.explorer.mutations --only clock_before_row_lock --explore 300
    python -m tests.explorer.mutations --control        # the unmutated copy too (must pass)
    python -m tests.explorer.mutations --others tests/explorer/test_found.py tests/unit/server

Run it with the checkout's virtual environment (`.venv/bin/python -m ...`): the scratch copy is
first on the path, so its patched `volcano_server` is the one imported. PostgreSQL runs when
reachable (`VOLCANO_TEST_POSTGRES_URL`), as in the test suite.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import attrs

from tests.explorer.mutations import MUTATIONS, Mutation

ROOT = Path(__file__).resolve().parents[3]
EXPLORER = "tests/explorer/test_schedules.py"
BACKENDS = ("test_sqlite", "test_postgres")


@attrs.frozen
class Verdict:
    """What one backend's explorer run said."""

    caught: bool
    seconds: float
    by: str  # the check that failed (or the error), "" when passed, "skipped"


def main() -> int:
    args = _parser().parse_args()
    chosen = [m for m in MUTATIONS if not args.only or m.name in args.only]
    if args.control:
        chosen.insert(0, Mutation("control", "none: the checkout as it is (must pass)"))
    rows = []
    for mutation in chosen:
        print(f"-- {mutation.name}", file=sys.stderr, flush=True)
        with tempfile.TemporaryDirectory(prefix=f"mutation-{mutation.name}-") as scratch:
            copy = Path(scratch)
            _copy_checkout(copy)
            if mutation.name != "control":
                _apply(copy, mutation)
            started = time.monotonic()
            verdicts = _explore(copy, args.explore)
            wall = time.monotonic() - started
            others = _others(copy, args.others) if args.others else None
        rows.append((mutation, verdicts, wall, others))
        print(_row(*rows[-1]), file=sys.stderr, flush=True)
    print(_table(rows, budget=f"--explore={args.explore}" if args.explore else "CI's budget"))
    missed = [m.name for m, v, _w, _o in rows if m.name != "control" and not _caught(v)]
    control_failed = any(m.name == "control" and _caught(v) for m, v, _w, _o in rows)
    return 1 if missed or control_failed else 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tests.explorer.mutations")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="these mutations only")
    parser.add_argument("--explore", type=int, default=0, metavar="N", help="pytest --explore=N")
    parser.add_argument("--control", action="store_true", help="run the unmutated copy first")
    parser.add_argument(
        "--others", nargs="+", metavar="PATH", help="also run these tests; list those failing"
    )
    return parser


def _copy_checkout(into: Path) -> None:
    """Every file git tracks or would (committed or not), as it is on disk now."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for name in filter(None, listed):
        source = ROOT / os.fsdecode(name)
        if source.is_file():
            target = into / os.fsdecode(name)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)


def _apply(copy: Path, mutation: Mutation) -> None:
    subprocess.run(
        ["git", "apply", "--verbose", str(mutation.patch)],
        cwd=copy,
        check=True,
        capture_output=True,
    )


def _env(copy: Path) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(copy), VOLCANO_EXPLORER_NO_SHRINK="1")
    env.pop("PYTEST_ADDOPTS", None)
    return env


def _explore(copy: Path, explore: int) -> dict[str, Verdict]:
    """Run the explorer in `copy` (each backend to its end), judged from pytest's report."""
    report = copy / "explorer.xml"
    where = subprocess.run(
        [sys.executable, "-c", "import volcano_server; print(volcano_server.__file__)"],
        cwd=copy,
        env=_env(copy),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    if not where.startswith(str(copy)):
        raise SystemExit(f"the scratch copy's server is not the one imported: {where}")
    command = [sys.executable, "-m", "pytest", EXPLORER, "-q", "-p", "no:cacheprovider"]
    command += [f"--junitxml={report}", "-o", "junit_logging=no"]
    if explore:
        command.append(f"--explore={explore}")
    subprocess.run(command, cwd=copy, env=_env(copy), capture_output=True, check=False)
    return _verdicts(report)


def _verdicts(report: Path) -> dict[str, Verdict]:
    verdicts = {}
    for case in ET.parse(report).getroot().iter("testcase"):  # noqa: S314 - our own report
        name = case.get("name", "")
        seconds = float(case.get("time", "0"))
        failure = case.find("failure")
        if failure is None:
            failure = case.find("error")
        if case.find("skipped") is not None:
            verdicts[name] = Verdict(False, seconds, "skipped")
        elif failure is None:
            verdicts[name] = Verdict(False, seconds, "")
        else:
            verdicts[name] = Verdict(True, seconds, _check_of(failure.get("message", "")))
    return verdicts


def _check_of(message: str) -> str:
    """The first violation's kind in an explorer failure, else the exception's name."""
    found = re.search(r"lease promise broke:\s+(\w+):", message)
    if found:
        return found.group(1)
    return message.split(":", 1)[0][:40] or "failed"


def _others(copy: Path, paths: list[str]) -> list[str]:
    """The tests among `paths` that fail in `copy`."""
    report = copy / "others.xml"
    command = [sys.executable, "-m", "pytest", *paths, "-q", "-p", "no:cacheprovider"]
    command += [f"--junitxml={report}", "-o", "junit_logging=no"]
    subprocess.run(command, cwd=copy, env=_env(copy), capture_output=True, check=False)
    failed = []
    for case in ET.parse(report).getroot().iter("testcase"):  # noqa: S314 - our own report
        if case.find("failure") is not None or case.find("error") is not None:
            failed.append(f"{case.get('classname', '').rsplit('.', 1)[-1]}::{case.get('name')}")
    return failed


def _caught(verdicts: dict[str, Verdict]) -> bool:
    return any(v.caught for v in verdicts.values())


def _cell(verdict: Verdict | None) -> str:
    if verdict is None or verdict.by == "skipped":
        return "skipped"
    if verdict.caught:
        return f"yes, {verdict.by}, {verdict.seconds:.1f} s"
    return f"no ({verdict.seconds:.1f} s)"


def _row(
    mutation: Mutation, verdicts: dict[str, Verdict], wall: float, others: list[str] | None
) -> str:
    if mutation.name == "control":
        caught = "**failed**" if _caught(verdicts) else "passed"
    else:
        caught = "yes" if _caught(verdicts) else "**no**"
    cells = [mutation.rule, caught]
    cells += [_cell(verdicts.get(name)) for name in BACKENDS]
    cells.append(f"{wall:.0f} s")
    if others is not None:
        cells.append(
            f"{len(others)}: " + ", ".join(others[:4]) + (" ..." if len(others) > 4 else "")
        )
    return "| " + " | ".join(cells) + " |"


def _table(
    rows: list[tuple[Mutation, dict[str, Verdict], float, list[str] | None]], budget: str
) -> str:
    others = any(o is not None for *_rest, o in rows)
    head = ["rule broken", f"caught ({budget})", "SQLite: caught, check, seconds to find"]
    head += ["PostgreSQL: caught, check, seconds to find", "explorer wall time"]
    if others:
        head.append("other tests failing")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return "\n".join(lines + [_row(*row) for row in rows])


if __name__ == "__main__":
    sys.exit(main())
