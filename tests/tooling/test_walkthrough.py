"""scripts/walkthrough.sh (the README's first command) works end to end, says what it did, and
prints no secret."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


class TestWalkthrough:
    def test_walkthrough_script_runs_every_section(self) -> None:
        """scripts/walkthrough.sh starts a server, runs each section of the seed and each task of
        the README's guide (waiting, a semaphore, watch, list, an election), and stops it."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("VOLCANO_")}
        result = subprocess.run(
            [str(ROOT / "scripts" / "walkthrough.sh")],
            capture_output=True,
            text=True,
            timeout=300,
            env=env,
            check=False,
        )
        output = result.stdout + result.stderr
        assert result.returncode == 0, output
        for section in (
            "Lease acquired 1",
            "LockHeldError: lock_held",
            "Renew or inspect a lease",
            "Current fence",
            "force_release: released=True",
            "same lease = True",
            "handed over when that lease ran out",
            "without wait=, LockHeldError at once",
            "a fourth: LockHeldError, all 3 slots are held",
            "its lease is live by the fence check: True",
            "held=False labels=[]",
            "shard-2: held by worker-2, 0 waiting",
            "after proclaim: Leader(label='worker-1:8080', term=1)",
            "worker-2 took over in term 2",
            "the office is vacant: None",
            "async guard holds fencing token",
            "Walkthrough complete.",
            "server stopped",
        ):
            assert section in output
        assert "Traceback" not in output
        assert not re.search(r"vk_(local_)?(anon|service)_", output)
        assert "walkthrough.sh: made a project's keys, started volcano-server on http://" in output
