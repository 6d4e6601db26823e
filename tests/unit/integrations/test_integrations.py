"""volcano.integrations without a server: keys built from framework names, the Django exit
statuses pinned to the `volcano` command's, LockedTask's keys, and the adapters' layering (the
public API only; `import volcano` loads none of them)."""

from __future__ import annotations

import ast
import inspect
import re
import subprocess
import sys
from pathlib import Path

import pytest
from celery import Celery

import volcano
from volcano._cli._exit import failure
from volcano.integrations import _naming
from volcano.integrations.celery import LockedTask
from volcano.integrations.django import exit_status

ROOT = Path(__file__).resolve().parents[3]
KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,254}")


class TestNaming:
    @pytest.mark.parametrize(
        "name", ["tasks.send", "a/b c@d", "ünïcødé", "", "-lead", "x" * 1000, "a:b.c_d-e"]
    )
    def test_work_keys_are_valid_keys_whatever_the_name(self, name: str) -> None:
        """Any task name, however long or strange, gives a key the server accepts."""
        assert KEY.fullmatch(_naming.work_key("celery", name, [1, {"a": 2}]))

    def test_cleaning_or_cutting_never_merges_two_works(self) -> None:
        """Names equal once cleaned, or once cut, still give different keys (the digest covers
        the name whole)."""
        assert _naming.work_key("p", "a/b", []) != _naming.work_key("p", "a b", [])
        long = "x" * 300
        assert _naming.work_key("p", long + "1", []) != _naming.work_key("p", long + "2", [])

    def test_the_key_depends_on_the_arguments_not_their_order(self) -> None:
        """Mappings in any order are one work; different values are two."""
        assert _naming.work_key("p", "t", {"a": 1, "b": 2}) == _naming.work_key(
            "p", "t", {"b": 2, "a": 1}
        )
        assert _naming.work_key("p", "t", {"a": 1}) != _naming.work_key("p", "t", {"a": 2})

    def test_labels_are_printable_ascii_and_bounded(self) -> None:
        """A label from any parts is printable ASCII of at most 200 characters."""
        made = _naming.label("höst", None, 42, "x" * 500)
        assert made.startswith("h?st:42:x")
        assert len(made) == 200
        assert all(32 <= ord(c) < 127 for c in made)


def status_error(cls: type[volcano.APIStatusError], status: int) -> volcano.APIStatusError:
    return cls("it went wrong", status_code=status, code=None, request_id=None, retry_after=12)


ERRORS: list[volcano.Error] = [
    volcano.InvalidArgumentError("bad key"),
    status_error(volcano.LockHeldError, 409),
    status_error(volcano.LeaseNotHeldError, 409),
    status_error(volcano.RequestIdReusedError, 409),
    status_error(volcano.LimitMismatchError, 409),
    status_error(volcano.UnprocessableEntityError, 422),
    status_error(volcano.AuthenticationError, 401),
    status_error(volcano.PermissionDeniedError, 403),
    volcano.APIConnectionError("refused"),
    volcano.APITimeoutError("slow"),
    status_error(volcano.ServiceUnavailableError, 503),
    status_error(volcano.InternalServerError, 500),
    status_error(volcano.RateLimitError, 429),
    status_error(volcano.NotFoundError, 404),
    status_error(volcano.UnexpectedResponseError, 200),
]


class TestDjangoExitStatus:
    @pytest.mark.parametrize("error", ERRORS, ids=lambda e: type(e).__name__)
    def test_each_error_exits_as_the_volcano_command_does(self, error: volcano.Error) -> None:
        """A locked Django command and `volcano locks run` give one error one exit status."""
        assert exit_status(error, "k")[0] == failure(error, key="k", api_url="http://x").status

    def test_a_lost_lock_exits_76_as_locks_run_does(self) -> None:
        """Ownership lost while the command ran: 76, the status `locks run` gives a loss."""
        assert exit_status(volcano.LockLostError("gone"), "k")[0] == 76

    def test_held_names_the_key_and_when_it_frees(self) -> None:
        """The one line says whose key and when its lease ends, as the command's does."""
        assert (
            exit_status(ERRORS[1], "k")[1] == "'k' is held by another owner; its lease ends in 12s"
        )


@pytest.fixture
def app() -> Celery:
    return Celery("unit", set_as_current=False)


class TestLockedTaskKeys:
    def test_positional_keyword_and_default_arguments_are_one_key(self, app: Celery) -> None:
        """send(1), send(1, "eu") and send(customer=1) lock the same key; send(2) another."""

        @app.task(base=LockedTask, name="billing.send")
        def send(customer: int, region: str = "eu") -> None: ...

        key = send.lock_key_for((1,), {})
        assert key == send.lock_key_for((1, "eu"), {}) == send.lock_key_for((), {"customer": 1})
        assert key != send.lock_key_for((2,), {})
        assert key.startswith("celery:billing.send:")
        assert KEY.fullmatch(key)

    def test_a_format_or_a_callable_names_the_key(self, app: Celery) -> None:
        """lock_key as a format is filled with the arguments by name; as a callable, called."""

        @app.task(base=LockedTask, lock_key="report:{day}")
        def report(day: str, force: bool = False) -> None: ...

        @app.task(base=LockedTask, lock_key=lambda day, **_: f"other:{day}")
        def other(day: str) -> None: ...

        assert report.lock_key_for(("2026-12-01",), {"force": True}) == "report:2026-12-01"
        assert other.lock_key_for(("d",), {}) == "other:d"

    def test_reading_the_lock_outside_a_run_says_so(self, app: Celery) -> None:
        """self.lock outside the body raises GuardStateError naming the task."""

        @app.task(base=LockedTask, name="t.idle")
        def idle() -> None: ...

        with pytest.raises(volcano.GuardStateError, match=r"t\.idle\.lock is read outside"):
            _ = idle.lock


def volcano_imports(path: Path) -> set[str]:
    """The modules of `volcano` that `path` imports by absolute name."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "volcano")
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.update([node.module] if node.module.split(".")[0] == "volcano" else [])
    return found


class TestLayering:
    def test_adapters_use_only_the_public_api(self) -> None:
        """Every adapter imports `volcano` itself (its public names) or its own package,
        never a private module of the SDK."""
        package = ROOT / "volcano" / "integrations"
        offenders = {
            str(path.relative_to(ROOT)): sorted(
                name
                for name in volcano_imports(path)
                if name != "volcano" and not name.startswith("volcano.integrations")
            )
            for path in package.rglob("*.py")
        }
        assert {path: names for path, names in offenders.items() if names} == {}
        assert volcano_imports(package / "celery.py") == {"volcano"}  # the scan sees imports

    def test_import_volcano_loads_no_adapter_and_no_framework(self) -> None:
        """`import volcano` (and the asgi adapter, which needs no framework) stays as light as
        before: no adapter, no Celery, Django, APScheduler or Starlette."""
        code = (
            "import sys, volcano, volcano.integrations.asgi\n"
            "heavy = ('celery', 'django', 'apscheduler', 'starlette', 'kombu')\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy\n"
            "      or m in ('volcano.integrations.celery', 'volcano.integrations.django')))\n"
        )
        result = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
        )
        assert result.stdout.strip() == "[]"

    def test_every_public_name_has_a_docstring(self) -> None:
        """The adapters' public classes, functions and methods are documented."""
        import volcano.integrations.asgi as asgi
        import volcano.integrations.celery as celery_adapter
        import volcano.integrations.django as django_adapter

        missing = []
        for module in (asgi, celery_adapter, django_adapter):
            for name in module.__all__:
                obj = getattr(module, name)
                if (inspect.isclass(obj) or inspect.isfunction(obj)) and not obj.__doc__:
                    missing.append(f"{module.__name__}.{name}")
        assert missing == []
