"""The adapters' examples in examples/ run as their docstrings say, against a real server."""

from __future__ import annotations

import importlib.util
import subprocess

import httpx
import pytest

from tests.integration.frameworks.conftest import ROOT, WAIT, python

pytestmark = pytest.mark.slow

EXAMPLES = ROOT / "examples"


class TestExamples:
    def test_django_command_migrates_runs_and_exits_75_when_held(
        self, child_env: dict[str, str]
    ) -> None:
        """examples/django_command.py: locked_migrate applies Django's migrations, the command
        runs under its lock, and exits 75 while another owner holds it."""
        result = subprocess.run(
            python(str(EXAMPLES / "django_command.py")), env=child_env, cwd=EXAMPLES,
            capture_output=True, text=True, timeout=WAIT, check=False,
        )  # fmt: skip
        assert result.returncode == 0, result.stdout + result.stderr
        assert "Applying auth.0001_initial... OK" in result.stdout
        assert "reminder for bob sent, fencing token 1" in result.stdout
        assert "exit status 75: 'django:send_reminders' is held by another owner" in result.stdout

    def test_asgi_app_leads_both_jobs_when_alone(self, spawn, child_env: dict[str, str]) -> None:
        """examples/asgi_app.py under uvicorn, alone: it is elected for both of its jobs."""
        argv = python("-m", "uvicorn", "asgi_app:app", "--host", "127.0.0.1", "--port", "0")
        env = {**child_env, "PYTHONPATH": f"{EXAMPLES}:{child_env['PYTHONPATH']}"}
        server = spawn("asgi-example", argv, env)
        url = server.wait_for(r"Uvicorn running on (http://\S+)").group(1)
        server.wait_for(r"watching the queue in term 1")
        server.wait_for(r"digests sent")
        assert httpx.get(url, timeout=10).json() == {"queue-watcher": True, "digests": True}

    def test_celery_app_declares_locked_tasks_and_an_elected_beat(self) -> None:
        """examples/celery_app.py loads, its tasks are LockedTasks retrying on a held key."""
        spec = importlib.util.spec_from_file_location("celery_example", EXAMPLES / "celery_app.py")
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        assert module.send_invoices.lock_on_held == "retry"
        assert module.send_invoices.lock_key_for((42,), {}) == module.send_invoices.lock_key_for(
            (), {"customer_id": 42}
        )
        assert module.app.conf.volcano_beat_election == "billing-beat"
