"""`volcano locks run`: the installed command, a real child command, a real server.

Child commands are small Python programs that write what happened to them into a file; the
tests wait for that file instead of sleeping, and bound every wait generously (no timing is
asserted).
"""

from __future__ import annotations

import contextlib
import os
import pty
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.databases import queued
from tests.support.proxy import FaultProxy
from tests.support.raw import wait_for as until
from tests.support.sockets import closed_url

from .conftest import VOLCANO, WAIT, Shell, finish, one_line, wait_for

pytestmark = pytest.mark.slow

PYTHON = sys.executable

HOLD = """
import os, pathlib, signal, sys, time
report, status, on_term = pathlib.Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]

def stop(signum, frame):
    with report.open("a") as out:
        out.write(f"got {signal.Signals(signum).name}\\n")
    sys.exit(status)

for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    signal.signal(signum, stop)
if on_term == "ignore":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
report.write_text(f"started {os.getpid()} {os.environ['VOLCANO_FENCING_TOKEN']}\\n")
while True:
    time.sleep(0.05)
"""
"""Write `started PID FENCING_TOKEN`, then wait; on a signal, note it and exit with STATUS."""

CHECK_FENCING_TOKEN = """
import os, volcano
key, token = os.environ["VOLCANO_LOCK_KEY"], int(os.environ["VOLCANO_FENCING_TOKEN"])
with volcano.Client() as client:
    state = client.locks.get(key)
raise SystemExit(0 if state.held and state.fencing_token == token else 1)
"""
"""Exit 0 only if the lock it was given is held, with the fencing token it was given."""

FORCE_RELEASE_ITSELF = """
import os, volcano
with volcano.Client() as client:
    client.locks.force_release(os.environ["VOLCANO_LOCK_KEY"])
"""
"""Take the lock away behind the guard's back, then exit 0 before any renewal notices."""


def hold(shell: Shell, report: Path, *options: str, status: int = 9, on_term: str = "exit"):
    """Start `volcano locks run k OPTIONS -- python HOLD`; return it once the command runs."""
    process = shell.start(
        "locks", "run", "k", *options, "--", PYTHON, "-c", HOLD, str(report), str(status), on_term
    )
    started = wait_for(report, process)
    assert started.startswith("started ")
    return process, int(started.split()[1])


def gone(pid: int) -> bool:
    """Whether process `pid` has ended (a zombie waiting for init to reap it has ended)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


class TestRunToTheEnd:
    def test_command_sees_the_lock_it_holds(self, shell: Shell) -> None:
        """The command gets the key and the current fencing token, and the lock is held."""
        shell.client.locks.release("k", shell.client.locks.acquire("k", ttl=30))  # token 1 used
        result = shell.run("locks", "run", "k", "--", PYTHON, "-c", CHECK_FENCING_TOKEN)
        assert result.returncode == 0, result.stderr
        assert result.stderr == ""
        state = shell.client.locks.get("k")
        assert (state.held, state.fencing_token) == (False, 2)

    @pytest.mark.parametrize("status", [0, 3, 255])
    def test_exit_status_is_the_commands(self, shell: Shell, status: int) -> None:
        """volcano exits with the command's status, silently, and releases the lock."""
        result = shell.run("locks", "run", "k", "--", "sh", "-c", f"exit {status}")
        assert (result.returncode, result.stderr) == (status, "")
        assert not shell.client.locks.get("k").held

    def test_death_by_signal_is_128_plus_its_number(self, shell: Shell) -> None:
        """A command killed by signal N gives 128 + N, as a shell reports it."""
        result = shell.run("locks", "run", "k", "--", "sh", "-c", "kill -KILL $$")
        assert result.returncode == 128 + signal.SIGKILL
        assert not shell.client.locks.get("k").held

    def test_stdin_and_stdout_are_the_commands(self, shell: Shell) -> None:
        """Input piped to volcano reaches the command; its output is volcano's."""
        result = shell.run("locks", "run", "k", "--", "cat", stdin="lines\nof input\n")
        assert (result.returncode, result.stdout) == (0, "lines\nof input\n")

    def test_terminal_is_not_given_to_the_command(self, shell: Shell) -> None:
        """When volcano's stdin is a terminal, the command reads end of file, never hangs."""
        primary, secondary = pty.openpty()
        try:
            result = subprocess.run(
                [str(VOLCANO), "locks", "run", "k", "--", "sh", "-c", 'read x; echo "[$x]"'],
                env=shell.env,
                stdin=secondary,
                capture_output=True,
                text=True,
                timeout=WAIT,
                check=False,
            )
        finally:
            os.close(secondary)
            os.close(primary)
        assert (result.returncode, result.stdout) == (0, "[]\n"), result.stderr

    def test_command_inherits_the_environment(self, shell: Shell) -> None:
        """Apart from the two lock variables, the command inherits volcano's environment."""
        env = {**shell.env, "SOMETHING_OF_MINE": "kept"}
        echo = 'echo "$SOMETHING_OF_MINE"'
        result = shell.run("locks", "run", "k", "--", "sh", "-c", echo, env=env)
        assert result.stdout == "kept\n"

    def test_ttl_option_sets_the_lease(self, shell: Shell, tmp_path: Path) -> None:
        """--ttl is the lease's time to live while the command runs."""
        process, _ = hold(shell, tmp_path / "report", "--ttl", "45")
        try:
            state = shell.client.locks.get("k")
            assert state.held
            assert state.expires_at is not None
        finally:
            process.send_signal(signal.SIGTERM)
            finish(process)


class TestRunWaits:
    def test_waits_for_the_holder_and_then_runs(self, shell: Shell, tmp_path: Path) -> None:
        """--wait: the command runs as soon as the holder releases, with the next token."""
        held = shell.client.locks.acquire("k", ttl=60)
        report = tmp_path / "fence"
        process = shell.start(
            "locks", "run", "k", "--wait", "30", "--",
            "sh", "-c", f'echo "$VOLCANO_FENCING_TOKEN" > {report}',
        )  # fmt: skip
        until(lambda: queued(shell.database_url, "k") == 1, "volcano in line")
        assert not report.exists()
        shell.client.locks.release("k", held)
        status, _, stderr = finish(process)
        assert status == 0, stderr
        assert report.read_text().strip() == str(held.fencing_token + 1)

    def test_wait_that_runs_out_exits_75(self, shell: Shell, tmp_path: Path) -> None:
        """--wait 0.3 on a held lock: 75 after the wait, and the command never starts."""
        shell.client.locks.acquire("k", ttl=60)
        marker = tmp_path / "ran"
        result = shell.run("locks", "run", "k", "--wait", "0.3", "--", "touch", str(marker))
        assert result.returncode == 75
        assert "'k' is held by another owner" in one_line(result.stderr)
        assert not marker.exists()

    def test_ctrl_c_while_waiting_leaves_the_line(self, shell: Shell, tmp_path: Path) -> None:
        """SIGINT while waiting: 128 + 2, the command never runs, and the queue lets go at once."""
        shell.client.locks.acquire("k", ttl=60)
        marker = tmp_path / "ran"
        process = shell.start("locks", "run", "k", "--wait", "60", "--", "touch", str(marker))
        until(lambda: queued(shell.database_url, "k") == 1, "volcano in line")
        process.send_signal(signal.SIGINT)
        status, _, _ = finish(process)
        assert status == 128 + signal.SIGINT
        until(lambda: queued(shell.database_url, "k") == 0, "out of line")
        assert not marker.exists()

    def test_bad_wait_is_a_usage_error(self, shell: Shell) -> None:
        """--wait takes 0 or more seconds."""
        result = shell.run("locks", "acquire", "k", "--ttl", "5", "--wait", "-1")
        assert result.returncode == 64
        assert "--wait" in one_line(result.stderr)


class TestRunLimit:
    def test_two_commands_share_a_limit_2_key_and_a_third_waits(
        self, shell: Shell, tmp_path: Path
    ) -> None:
        """--limit 2: two commands run at once with tokens 1 and 2; a third waits in line and
        runs, with token 3, once one of them ends."""
        first, _ = hold(shell, tmp_path / "first", "--limit", "2")
        second, _ = hold(shell, tmp_path / "second", "--limit", "2")
        report = tmp_path / "third"
        third = shell.start(
            "locks", "run", "k", "--limit", "2", "--wait", "30", "--",
            "sh", "-c", f'echo "$VOLCANO_FENCING_TOKEN" > {report}',
        )  # fmt: skip
        until(lambda: queued(shell.database_url, "k") == 1, "the third in line")
        tokens = {(tmp_path / name).read_text().split()[2] for name in ("first", "second")}
        assert tokens == {"1", "2"}
        assert not report.exists()
        first.send_signal(signal.SIGTERM)
        finish(first)
        status, _, stderr = finish(third)
        assert status == 0, stderr
        assert report.read_text().strip() == "3"
        second.send_signal(signal.SIGTERM)
        finish(second)
        assert shell.client.locks.get("k").holders == ()


class TestRunShared:
    def test_two_shared_commands_run_at_once_and_an_exclusive_one_waits_for_both(
        self, shell: Shell, tmp_path: Path
    ) -> None:
        """--shared: two commands run at once with tokens 1 and 2, both holders shared; an
        exclusive one waits in line and runs, with token 3, once both have ended."""
        first, _ = hold(shell, tmp_path / "first", "--shared")
        second, _ = hold(shell, tmp_path / "second", "--shared")
        modes = [h.mode.value for h in shell.client.locks.get("k").holders]
        assert modes == ["shared", "shared"]
        report = tmp_path / "writer"
        writer = shell.start(
            "locks", "run", "k", "--wait", "30", "--",
            "sh", "-c", f'echo "$VOLCANO_FENCING_TOKEN" > {report}',
        )  # fmt: skip
        until(lambda: queued(shell.database_url, "k") == 1, "the writer in line")
        tokens = {(tmp_path / name).read_text().split()[2] for name in ("first", "second")}
        assert tokens == {"1", "2"}
        first.send_signal(signal.SIGTERM)
        finish(first)
        assert queued(shell.database_url, "k") == 1  # one reader still holds: the writer waits
        assert not report.exists()
        second.send_signal(signal.SIGTERM)
        finish(second)
        status, _, stderr = finish(writer)
        assert status == 0, stderr
        assert report.read_text().strip() == "3"
        assert shell.client.locks.get("k").holders == ()


class TestRunRefused:
    def test_busy_lock_exits_75_without_running(self, shell: Shell, tmp_path: Path) -> None:
        """Another owner holds the lock: 75, one line, and the command never starts."""
        shell.client.locks.acquire("k", ttl=60)
        marker = tmp_path / "ran"
        result = shell.run("locks", "run", "k", "--", "touch", str(marker))
        assert result.returncode == 75
        assert "'k' is held by another owner" in one_line(result.stderr)
        assert not marker.exists()

    def test_unreachable_server_exits_69(self, shell: Shell, tmp_path: Path) -> None:
        """No server at VOLCANO_API_URL: 69, one line, the command never starts."""
        marker = tmp_path / "ran"
        env = {**shell.env, "VOLCANO_API_URL": closed_url()}
        result = shell.run("locks", "run", "k", "--", "touch", str(marker), env=env)
        assert result.returncode == 69
        assert "cannot reach the server" in one_line(result.stderr)
        assert not marker.exists()

    def test_refused_credentials_exit_77(self, shell: Shell, tmp_path: Path) -> None:
        """Credentials the server refuses: 77, one line, the command never starts."""
        marker = tmp_path / "ran"
        env = {**shell.env, "VOLCANO_SERVICE_KEY": "vk_service_wrong"}
        result = shell.run("locks", "run", "k", "--", "touch", str(marker), env=env)
        assert result.returncode == 77
        assert "refused the credentials" in one_line(result.stderr)
        assert not marker.exists()

    def test_usage_error_exits_64(self, shell: Shell) -> None:
        """A bad option: 64 and one line, before anything is acquired."""
        result = shell.run("locks", "run", "k", "--grace", "-1", "--", "true")
        assert result.returncode == 64
        assert "--grace" in one_line(result.stderr)
        assert shell.client.locks.get("k").fencing_token is None

    @pytest.mark.parametrize(
        ("command", "status", "says"),
        [
            (["no-such-command-here"], 127, "command not found: no-such-command-here"),
            (["/etc/hostname"], 126, "cannot execute /etc/hostname"),
        ],
    )
    def test_command_that_cannot_start(
        self, shell: Shell, command: list[str], status: int, says: str
    ) -> None:
        """A missing (127) or unexecutable (126) command: one line, and the lock is released."""
        result = shell.run("locks", "run", "k", "--", *command)
        assert result.returncode == status
        assert says in one_line(result.stderr)
        state = shell.client.locks.get("k")
        assert (state.held, state.fencing_token) == (False, 1)


class TestOwnershipLost:
    def test_force_release_stops_the_command_and_exits_76(
        self, shell: Shell, tmp_path: Path
    ) -> None:
        """Another client force-releases mid-command: SIGTERM to the command, then 76."""
        report = tmp_path / "report"
        process, pid = hold(shell, report, "--ttl", "2", "--grace", "30")
        shell.client.locks.force_release("k")
        status, _, stderr = finish(process)
        assert status == 76
        assert "lost the lock on 'k'" in one_line(stderr)
        assert "got SIGTERM" in report.read_text()  # it went at SIGTERM, before the grace ran out
        assert gone(pid)

    def test_sigkill_after_the_grace(self, shell: Shell, tmp_path: Path) -> None:
        """A command that ignores SIGTERM is killed once --grace seconds have passed."""
        report = tmp_path / "report"
        process, pid = hold(shell, report, "--ttl", "2", "--grace", "1", on_term="ignore")
        shell.client.locks.force_release("k")
        status, _, stderr = finish(process)
        assert status == 76
        assert "SIGKILL after 1s" in one_line(stderr)
        assert "got" not in report.read_text()
        assert gone(pid)

    def test_everything_the_command_started_is_stopped(self, shell: Shell, tmp_path: Path) -> None:
        """The command's whole process group goes, children of a shell included."""
        pidfile = tmp_path / "pid"
        script = f"sleep 300 & echo $! > {pidfile}.tmp; mv {pidfile}.tmp {pidfile}; wait"
        process = shell.start("locks", "run", "k", "--ttl", "2", "--", "sh", "-c", script)
        pid = int(wait_for(pidfile, process))
        shell.client.locks.force_release("k")
        status, _, _ = finish(process)
        assert status == 76
        assert gone(pid)

    def test_loss_found_at_release_exits_76(self, shell: Shell) -> None:
        """Lost before any renewal noticed, the refused release still makes it 76."""
        result = shell.run("locks", "run", "k", "--", PYTHON, "-c", FORCE_RELEASE_ITSELF)
        assert result.returncode == 76
        assert "was lost while the command ran" in one_line(result.stderr)


class TestSignals:
    @pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
    def test_signal_is_forwarded_and_lease_released(
        self, shell: Shell, tmp_path: Path, signum: signal.Signals
    ) -> None:
        """A signal to volcano reaches the command; the lease is released after it exits."""
        report = tmp_path / "report"
        process, _ = hold(shell, report, "--ttl", "600", status=7)
        process.send_signal(signum)
        status, _, stderr = finish(process)
        assert (status, stderr) == (7, "")
        assert f"got {signum.name}" in report.read_text()
        assert not shell.client.locks.get("k").held  # released, not left for its 600 s ttl

    def test_signal_before_the_command_starts(self, shell: Shell, tmp_path: Path) -> None:
        """SIGTERM while acquiring stops volcano with 128 + 15; the command never runs."""
        marker = tmp_path / "ran"
        with FaultProxy(upstream=shell.env["VOLCANO_API_URL"]) as proxy:
            proxy.on("POST", r"/acquire$").blackhole()
            env = {**shell.env, "VOLCANO_API_URL": proxy.url}
            process = shell.start_with(env, "locks", "run", "k", "--", "touch", str(marker))
            proxy.wait_until(lambda records: len(records) >= 1, 60, "the acquire")
            process.send_signal(signal.SIGTERM)
            status, _, stderr = finish(process)
        assert status == 128 + signal.SIGTERM
        assert "SIGTERM before the command started" in one_line(stderr)
        assert not marker.exists()


def start_family(
    shell: Shell, pids: Path, before: str = ""
) -> tuple[subprocess.Popen[str], int, int]:
    """Start `volcano locks run k -- sh -c SCRIPT`, its shell starting a grandchild after running
    `before`; return volcano and the pids of the shell and the grandchild once both run."""
    script = f"{before}sleep 300 & echo $$ $! > {pids}.tmp; mv {pids}.tmp {pids}; wait"
    process = shell.start("locks", "run", "k", "--", "sh", "-c", script)
    child, grandchild = map(int, wait_for(pids, process).split())
    return process, child, grandchild


def kill_volcano(process: subprocess.Popen[str], *family: int) -> None:
    """SIGKILL volcano; wait (generously) until every pid in `family` has ended."""
    try:
        process.kill()
        process.wait(WAIT)
        until(lambda: all(gone(pid) for pid in family), "the command's group gone", WAIT)
    finally:
        for pid in family:  # without a watchdog they live on: don't leave them to the machine
            if not gone(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        process.communicate(timeout=WAIT)  # the family held volcano's stdout and stderr


class TestVolcanoKilled:
    def test_sigkill_takes_the_command_and_its_children(self, shell: Shell, tmp_path: Path) -> None:
        """volcano SIGKILLed: its command and the command's child die; the lease is left held."""
        process, child, grandchild = start_family(shell, tmp_path / "pids")
        kill_volcano(process, child, grandchild)
        assert shell.client.locks.get("k").held  # nobody could release it: it expires on its own

    def test_a_signal_to_the_group_leaves_the_watchdog(self, shell: Shell, tmp_path: Path) -> None:
        """A signal the command sends its own group (kill 0) does not disarm the watchdog."""
        before = "trap '' HUP; kill -HUP 0; "
        process, child, grandchild = start_family(shell, tmp_path / "pids", before)
        kill_volcano(process, child, grandchild)


class TestRelease:
    def test_failed_release_is_reported_and_status_kept(self, shell: Shell) -> None:
        """The command succeeded but the release failed: its status, and one line saying so."""
        with FaultProxy(upstream=shell.env["VOLCANO_API_URL"]) as proxy:
            proxy.on("POST", r"/release$").error_response(503)
            env = {**shell.env, "VOLCANO_API_URL": proxy.url}
            result = shell.run("locks", "run", "k", "--", "true", env=env)
        assert result.returncode == 0
        line = one_line(result.stderr)
        assert "the lock on 'k' stays held until" in line
        assert "releasing the lease on k failed: 503" in line
        assert shell.client.locks.get("k").held
