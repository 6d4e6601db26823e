"""`volcano locks watch`, `volcano locks list` and `--label`, run as the installed command."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

from tests.integration.cli.conftest import WAIT, Shell, one_line
from tests.support.raw import wait_for


def read_state(process: subprocess.Popen[str]) -> dict[str, object]:
    """The next JSON line a watch prints."""
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line, "the watch printed nothing more"
    state: dict[str, object] = json.loads(line)
    return state


class TestWatch:
    def test_one_json_line_per_change_until_ctrl_c(self, shell: Shell) -> None:
        """The state now, then a line for each change; Ctrl-C ends it with 0 and no noise."""
        watch = shell.start("locks", "watch", "scheduler")
        try:
            assert read_state(watch)["version"] == 0
            lease = shell.client.locks.acquire("scheduler", ttl=30, label="node-1")
            state = read_state(watch)
            assert (state["held"], state["version"]) == (True, 1)
            assert state["holders"] == [
                {
                    "fencing_token": lease.fencing_token,
                    "expires_at": state["holders"][0]["expires_at"],  # type: ignore[index]
                    "label": "node-1",
                    "mode": "exclusive",
                }
            ]
            shell.client.locks.release("scheduler", lease)
            assert read_state(watch)["held"] is False
        finally:
            watch.send_signal(signal.SIGINT)
            stdout, stderr = watch.communicate(timeout=WAIT)
        assert (watch.returncode, stdout, stderr) == (0, "", "")

    def test_after_version(self, shell: Shell) -> None:
        """--after-version prints only what changes from there."""
        shell.client.locks.acquire("k", ttl=30)
        watch = shell.start("locks", "watch", "k", "--after-version", "1")
        try:
            shell.client.locks.force_release("k")
            assert read_state(watch)["version"] == 2
        finally:
            watch.send_signal(signal.SIGINT)
            watch.communicate(timeout=WAIT)

    def test_a_closed_pipe_ends_it_quietly(self, shell: Shell) -> None:
        """`volcano locks watch KEY | head -1`: the first line, then exit 0 once the reader has
        gone and the next change comes."""
        watch = shell.start("locks", "watch", "k")
        assert read_state(watch)["version"] == 0
        assert watch.stdout is not None
        watch.stdout.close()
        shell.client.locks.acquire("k", ttl=30)
        assert watch.wait(WAIT) == 0
        assert watch.stderr is not None
        with watch.stderr:
            assert watch.stderr.read() == ""

    def test_refused_credentials_exit_77(self, shell: Shell) -> None:
        """A wrong service key is not retried: one line, 77."""
        env = {**shell.env, "VOLCANO_SERVICE_KEY": "vk_local_" + "0" * 43}
        result = shell.run("locks", "watch", "k", env=env)
        assert result.returncode == 77
        assert "credentials" in one_line(result.stderr)


class TestList:
    def test_a_table_of_held_keys(self, shell: Shell) -> None:
        """Held keys under a prefix, in key order, with labels; others left out."""
        shell.client.locks.acquire("jobs:b", ttl=30, label="node-2")
        shell.client.locks.acquire("jobs:a", ttl=30, label="node-1")
        shell.client.locks.acquire("other", ttl=30)
        result = shell.run("locks", "list", "jobs:")
        assert result.returncode == 0, result.stderr
        lines = [line.split() for line in result.stdout.splitlines()]
        assert lines[0] == [
            "key",
            "held",
            "fencing_token",
            "holders",
            "waiters",
            "version",
            "labels",
            "modes",
        ]
        assert lines[1:] == [
            ["jobs:a", "yes", "1", "1", "0", "1", "node-1", "exclusive"],
            ["jobs:b", "yes", "1", "1", "0", "1", "node-2", "exclusive"],
        ]

    def test_shared_holders_are_listed_with_their_modes(self, shell: Shell) -> None:
        """A key held shared twice: two holders, their labels and modes in order."""
        shell.client.locks.acquire("jobs:r", ttl=30, label="r1", shared=True)
        shell.client.locks.acquire("jobs:r", ttl=60, label="r2", shared=True)
        result = shell.run("locks", "list", "jobs:")
        assert result.returncode == 0, result.stderr
        lines = [line.split() for line in result.stdout.splitlines()]
        assert lines[1:] == [["jobs:r", "yes", "2", "2", "0", "2", "r1,r2", "shared,shared"]]

    def test_json_lines(self, shell: Shell) -> None:
        """--json: one get --json object per key and line."""
        shell.client.locks.acquire("a", ttl=30)
        result = shell.run("locks", "list", "--json")
        assert result.returncode == 0, result.stderr
        (line,) = result.stdout.splitlines()
        assert json.loads(line)["key"] == "a"

    def test_nothing_held_prints_nothing(self, shell: Shell) -> None:
        """No key held: no output, status 0."""
        result = shell.run("locks", "list")
        assert (result.returncode, result.stdout) == (0, "")

    def test_a_bad_prefix_is_a_usage_error(self, shell: Shell) -> None:
        """A prefix with a character keys cannot have: 64, naming it."""
        result = shell.run("locks", "list", "a/b")
        assert result.returncode == 64
        assert "prefix" in one_line(result.stderr)


class TestLabel:
    def test_acquire_and_run_take_a_label(self, shell: Shell) -> None:
        """--label on acquire shows in holders; a bad label is refused (64)."""
        result = shell.run("locks", "acquire", "k", "--ttl", "30", "--label", "node-9")
        assert result.returncode == 0, result.stderr
        assert [h.label for h in shell.client.locks.get("k").holders] == ["node-9"]
        bad = shell.run("locks", "acquire", "j", "--ttl", "30", "--label", "é")
        assert bad.returncode == 64
        assert "label" in one_line(bad.stderr)

    def test_run_while_leader(self, shell: Shell, tmp_path: Path) -> None:
        """Two `locks run` on one key with a long --wait: the second waits in line while the
        first leads (its label showing), and runs once the first has ended, with a higher
        fencing token (term)."""
        done = tmp_path / "done"
        first = shell.start(
            "locks", "run", "leader", "--wait", "60", "--label", "one", "--",
            "sh", "-c", f"echo $VOLCANO_FENCING_TOKEN; while [ ! -e {done} ]; do sleep 0.05; done",
        )  # fmt: skip
        try:
            assert first.stdout is not None
            assert first.stdout.readline().strip() == "1"
            second = shell.start(
                "locks", "run", "leader", "--wait", "60", "--label", "two", "--",
                "sh", "-c", "echo $VOLCANO_FENCING_TOKEN",
            )  # fmt: skip
            wait_for(lambda: shell.client.locks.get("leader").waiters == 1, "second in line")
            assert [h.label for h in shell.client.locks.get("leader").holders] == ["one"]
        finally:
            done.touch()
            first.communicate(timeout=WAIT)
        out, _ = second.communicate(timeout=WAIT)
        assert (first.returncode, second.returncode, out.strip()) == (0, 0, "2")
