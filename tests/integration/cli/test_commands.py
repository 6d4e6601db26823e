"""`volcano locks get/acquire/renew/release/force-release/check`, run as users run them."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

import volcano
from tests.support.raw import wait_for as until
from tests.support.sockets import closed_url

from .conftest import VOLCANO, Shell, one_line

LEASE_FIELDS = {"key", "owner_token", "fencing_token", "expires_at", "ttl_seconds"}


def timestamp(text: str) -> datetime:
    assert text.endswith("Z"), text
    return datetime.fromisoformat(text)


class TestGet:
    def test_free_key_for_people(self, shell: Shell) -> None:
        """A never-held key prints held no and no fencing token, one field per line."""
        result = shell.run("locks", "get", "daily-report")
        assert result.returncode == 0, result.stderr
        assert result.stdout.split() == [
            "key", "daily-report", "held", "no", "expires_at", "-", "fencing_token", "-",
            "limit", "1", "waiters", "0", "version", "0", "holder_count", "0", "holders", "0",
        ]  # fmt: skip
        assert result.stderr == ""

    def test_json_held_key(self, shell: Shell) -> None:
        """--json prints the API's LockState fields as one JSON object."""
        lease = shell.client.locks.acquire("daily-report", ttl=60)
        result = shell.run("locks", "get", "daily-report", "--json")
        assert result.returncode == 0, result.stderr
        state = json.loads(result.stdout)
        holder = {
            "fencing_token": lease.fencing_token,
            "expires_at": state["expires_at"],
            "label": None,
            "mode": "exclusive",
        }
        assert state == {
            "key": "daily-report",
            "held": True,
            "expires_at": state["expires_at"],
            "fencing_token": lease.fencing_token,
            "limit": 1,
            "waiters": 0,
            "version": 1,
            "holders": [holder],
            "holder_count": 1,
        }
        assert timestamp(state["expires_at"]) == lease.expires_at

    def test_holders_of_a_semaphore_for_people(self, shell: Shell) -> None:
        """A limit-3 key with two holders: its limit, then one line per holder (fencing token,
        expiry, label) under a header, soonest expiry first, and no owner token."""
        soon = shell.client.locks.acquire("slots", ttl=30, limit=3)
        later = shell.client.locks.acquire("slots", ttl=90, limit=3)
        result = shell.run("locks", "get", "slots")
        assert result.returncode == 0, result.stderr
        lines = result.stdout.splitlines()
        assert re.fullmatch(r"limit\s+3", lines[4])
        assert re.fullmatch(r"version\s+2", lines[6])
        assert re.fullmatch(r"holder_count\s+2", lines[7])
        assert re.fullmatch(r"holders\s+2", lines[8])
        assert lines[9].split() == ["fencing_token", "expires_at", "label", "mode"]
        rows = [line.split() for line in lines[10:]]
        assert rows == [
            [
                str(lease.fencing_token),
                lease.expires_at.isoformat().replace("+00:00", "Z"),
                "-",
                "exclusive",
            ]
            for lease in (soon, later)
        ]
        assert soon.owner_token not in result.stdout
        assert later.owner_token not in result.stdout


class TestAcquire:
    def test_json_is_the_lease(self, shell: Shell) -> None:
        """acquire --json prints the lease as the API names it, and the lock is then held."""
        result = shell.run("locks", "acquire", "daily-report", "--ttl", "60", "--json")
        assert result.returncode == 0, result.stderr
        lease = json.loads(result.stdout)
        assert set(lease) == LEASE_FIELDS
        uuid.UUID(lease["owner_token"])
        assert lease["ttl_seconds"] == 60
        assert timestamp(lease["expires_at"]) > datetime.now(UTC)
        state = shell.client.locks.get("daily-report")
        assert (state.held, state.fencing_token) == (True, lease["fencing_token"])

    def test_token_and_request_id_are_kept(self, shell: Shell) -> None:
        """--token keeps its spelling; repeating --request-id replays the same lease."""
        token, request_id = str(uuid.uuid4()).upper(), str(uuid.uuid4())
        args = ("locks", "acquire", "k", "--ttl", "60", "--token", token)
        args = (*args, "--request-id", request_id)
        first = shell.run(*args, "--json")
        again = shell.run(*args, "--json")
        assert first.returncode == again.returncode == 0, first.stderr + again.stderr
        assert json.loads(first.stdout)["owner_token"] == token
        assert json.loads(again.stdout) == json.loads(first.stdout)

    def test_shared_twice_then_exclusive(self, shell: Shell) -> None:
        """acquire --shared twice: two shared holders, get shows their mode; an exclusive
        acquire exits 75 saying the key is held shared."""
        for _ in range(2):
            result = shell.run("locks", "acquire", "config", "--ttl", "60", "--shared", "--json")
            assert result.returncode == 0, result.stderr
        state = json.loads(shell.run("locks", "get", "config", "--json").stdout)
        assert [h["mode"] for h in state["holders"]] == ["shared", "shared"]
        refused = shell.run("locks", "acquire", "config", "--ttl", "60")
        assert refused.returncode == 75
        assert "'config' is held shared by other owners" in one_line(refused.stderr)

    def test_shared_behind_a_waiting_writer_exits_75(self, shell: Shell) -> None:
        """A shared holder, an exclusive waiter: acquire --shared exits 75 naming the line."""
        shell.client.locks.acquire("config", ttl=60, shared=True)
        waiter = shell.start("locks", "acquire", "config", "--ttl", "60", "--wait", "30")
        try:
            until(lambda: shell.client.locks.get("config").waiters == 1, "the writer in line")
            result = shell.run("locks", "acquire", "config", "--ttl", "60", "--shared")
            assert result.returncode == 75
            line = one_line(result.stderr)
            assert "'config' is not free for a shared lease" in line
            assert "others wait in line first" in line
        finally:
            waiter.kill()
            waiter.communicate()

    @pytest.mark.parametrize(
        ("first", "then", "says"),
        [
            (("--shared",), ("--limit", "2"), "--shared and --limit do not mix"),
            (("--limit", "2"), ("--shared",), "--shared and --limit do not mix"),
        ],
    )
    def test_shared_and_a_limit_on_one_key_exit_64(
        self, shell: Shell, first: tuple[str, ...], then: tuple[str, ...], says: str
    ) -> None:
        """--shared on a key in use with --limit, or the other way round: 64, one line."""
        key = f"mixed{first[0]}"  # a key of its own per case: the server lives on
        assert shell.run("locks", "acquire", key, "--ttl", "60", *first).returncode == 0
        result = shell.run("locks", "acquire", key, "--ttl", "60", *then)
        assert result.returncode == 64
        assert says in one_line(result.stderr)

    def test_a_mode_change_with_the_same_token_exits_64(self, shell: Shell) -> None:
        """--token of a shared lease asking for the key exclusive: 64, one line."""
        lease = shell.client.locks.acquire("k", ttl=60, shared=True)
        result = shell.run("locks", "acquire", "k", "--ttl", "60", "--token", lease.owner_token)
        assert result.returncode == 64
        assert "holds 'k' in the other mode" in one_line(result.stderr)

    def test_held_by_another_exits_75(self, shell: Shell) -> None:
        """A lock held by another owner: status 75, one line naming the key, nothing on stdout."""
        shell.client.locks.acquire("daily-report", ttl=60)
        result = shell.run("locks", "acquire", "daily-report", "--ttl", "60")
        assert result.returncode == 75
        assert "'daily-report' is held by another owner" in one_line(result.stderr)
        assert result.stdout == ""

    def test_human_output_shows_what_release_needs(self, shell: Shell) -> None:
        """Without --json, each field is a line, owner_token and fencing_token included."""
        result = shell.run("locks", "acquire", "daily-report", "--ttl", "2.5")
        assert result.returncode == 0, result.stderr
        fields = dict(line.split(None, 1) for line in result.stdout.splitlines())
        assert set(fields) == LEASE_FIELDS
        assert fields["ttl_seconds"] == "2.5"
        assert shell.client.locks.get("daily-report").fencing_token == int(fields["fencing_token"])


class TestRenew:
    def test_renew_keeps_the_fencing_token(self, shell: Shell) -> None:
        """renew extends the lease named by its two tokens; the fencing token stays."""
        lease = shell.client.locks.acquire("k", ttl=30)
        result = shell.run(
            "locks", "renew", "k", "--token", lease.owner_token,
            "--fencing-token", str(lease.fencing_token), "--ttl", "600", "--json",
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        renewed = json.loads(result.stdout)
        assert renewed["fencing_token"] == lease.fencing_token
        assert renewed["ttl_seconds"] == 600
        assert timestamp(renewed["expires_at"]) > lease.expires_at

    def test_renewing_a_lost_lease_exits_76(self, shell: Shell) -> None:
        """A force-released lease cannot be renewed: status 76, ownership lost."""
        lease = shell.client.locks.acquire("k", ttl=30)
        shell.client.locks.force_release("k")
        result = shell.run(
            "locks", "renew", "k", "--token", lease.owner_token,
            "--fencing-token", str(lease.fencing_token), "--ttl", "30",
        )  # fmt: skip
        assert result.returncode == 76
        assert "lease_not_held" in one_line(result.stderr)


class TestRelease:
    def test_release_frees_the_lock(self, shell: Shell) -> None:
        """release ends the lease; --json says what it released."""
        lease = shell.client.locks.acquire("k", ttl=30)
        result = shell.run(
            "locks", "release", "k", "--token", lease.owner_token,
            "--fencing-token", str(lease.fencing_token), "--json",
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout) == {
            "key": "k",
            "released": True,
            "fencing_token": lease.fencing_token,
            "released_count": 1,
        }
        assert not shell.client.locks.get("k").held

    def test_releasing_twice_exits_76(self, shell: Shell) -> None:
        """A lease already released is no longer held: status 76."""
        lease = shell.client.locks.acquire("k", ttl=30)
        shell.client.locks.release("k", lease)
        result = shell.run(
            "locks", "release", "k", "--token", lease.owner_token,
            "--fencing-token", str(lease.fencing_token),
        )  # fmt: skip
        assert result.returncode == 76
        one_line(result.stderr)


class TestForceRelease:
    def test_reports_what_it_removed(self, shell: Shell) -> None:
        """force-release removes another owner's lease and reports its fencing token."""
        lease = shell.client.locks.acquire("k", ttl=30)
        result = shell.run("locks", "force-release", "k", "--json")
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout) == {
            "key": "k",
            "released": True,
            "fencing_token": lease.fencing_token,
            "released_count": 1,
        }
        again = shell.run("locks", "force-release", "k")
        assert again.returncode == 0
        assert re.search(r"^released\s+no$", again.stdout, re.MULTILINE)


class TestLimit:
    def test_acquire_takes_a_slot(self, shell: Shell) -> None:
        """acquire --limit 2 twice: two holders; a third exits 75 naming every slot."""
        for _ in range(2):
            result = shell.run("locks", "acquire", "slots", "--ttl", "60", "--limit", "2")
            assert result.returncode == 0, result.stderr
        state = shell.client.locks.get("slots")
        assert (state.limit, len(state.holders)) == (2, 2)
        refused = shell.run("locks", "acquire", "slots", "--ttl", "60", "--limit", "2")
        assert refused.returncode == 75
        assert "all 2 slots of 'slots' are held by other owners" in one_line(refused.stderr)

    def test_another_limit_exits_64_naming_the_keys(self, shell: Shell) -> None:
        """--limit 3 on a key in use with limit 2: 64, and the line says the key's limit."""
        shell.client.locks.acquire("slots", ttl=60, limit=2)
        result = shell.run("locks", "acquire", "slots", "--ttl", "60", "--limit", "3")
        assert result.returncode == 64
        line = one_line(result.stderr)
        assert "'slots' is in use with --limit 2, not --limit 3" in line

    def test_force_release_counts_every_slot(self, shell: Shell) -> None:
        """force-release on a key with three holders says it removed three."""
        for _ in range(3):
            shell.client.locks.acquire("slots", ttl=60, limit=3)
        result = shell.run("locks", "force-release", "slots", "--json")
        assert json.loads(result.stdout)["released_count"] == 3
        assert shell.client.locks.get("slots").holders == ()


class TestCheck:
    def test_live_exits_0_and_ended_exits_1(self, shell: Shell) -> None:
        """check KEY TOKEN: 0 while the lease is live, 1 once released; --json says the same."""
        lease = shell.client.locks.acquire("k", ttl=60)
        token = str(lease.fencing_token)
        live = shell.run("locks", "check", "k", token)
        assert (live.returncode, live.stderr) == (0, "")
        assert re.search(r"^live\s+yes$", live.stdout, re.MULTILINE)
        shell.client.locks.release("k", lease)
        ended = shell.run("locks", "check", "k", token, "--json")
        assert (ended.returncode, ended.stderr) == (1, "")
        assert json.loads(ended.stdout) == {
            "key": "k",
            "fencing_token": lease.fencing_token,
            "live": False,
        }

    def test_a_token_never_issued_exits_1(self, shell: Shell) -> None:
        """A key nobody acquired: not live, exit 1, not an error."""
        result = shell.run("locks", "check", "never-held", "1")
        assert (result.returncode, result.stderr) == (1, "")


class TestFailures:
    def test_unreachable_server_exits_69(self, shell: Shell) -> None:
        """Nothing listening at VOLCANO_API_URL: status 69, one line naming the URL."""
        url = closed_url()
        result = shell.run("locks", "get", "k", env={**shell.env, "VOLCANO_API_URL": url})
        assert result.returncode == 69
        assert f"cannot reach the server at {url}" in one_line(result.stderr)

    @pytest.mark.parametrize("variable", ["VOLCANO_SERVICE_KEY", "VOLCANO_ANON_KEY"])
    def test_unknown_key_exits_77(self, shell: Shell, variable: str) -> None:
        """A key the server does not know: status 77, and the key is not printed."""
        bogus = "vk_bogus_" + "x" * 40
        result = shell.run("locks", "get", "k", env={**shell.env, variable: bogus})
        assert result.returncode == 77
        line = one_line(result.stderr)
        assert "refused the credentials" in line
        assert bogus not in line
        assert shell.env["VOLCANO_SERVICE_KEY"] not in line

    def test_anon_key_as_service_key_exits_77(self, shell: Shell) -> None:
        """The anon key sent as the credential (403) is refused credentials too: status 77."""
        env = {**shell.env, "VOLCANO_SERVICE_KEY": shell.env["VOLCANO_ANON_KEY"]}
        assert shell.run("locks", "get", "k", env=env).returncode == 77

    @pytest.mark.parametrize(
        ("args", "says"),
        [
            ((), "choose a command"),
            (("locks",), "choose a command"),
            (("locks", "grab", "k"), "invalid choice"),
            (("locks", "acquire", "k"), "--ttl"),
            (("locks", "acquire", "k", "--ttl", "soon"), "expected seconds"),
            (("locks", "acquire", "k", "--ttl", "0"), "more than 0"),
            (("locks", "acquire", "k", "--ttl", "100000"), "ttl must be from 0.1 to 86400"),
            (("locks", "acquire", "bad key", "--ttl", "5"), "key must be 1 to 255 characters"),
            (("locks", "acquire", "k", "--ttl", "5", "--token", "nope"), "token must be a UUID"),
            (("locks", "release", "k", "--token", "t", "--fencing-token", "0"), "1 to 2^53-1"),
            (("locks", "get", "k", "--", "extra"), "unexpected arguments after --"),
            (("locks", "run", "k"), "give the command to run after --"),
            (("locks", "acquire", "k", "--ttl", "5", "--limit", "x"), "--limit: expected a whole"),
            (("locks", "acquire", "k", "--ttl", "5", "--limit", "0"), "limit must be from 1 to"),
            (("locks", "run", "k", "--limit", "1001", "--", "true"), "limit must be from 1 to"),
            (("locks", "acquire", "k", "--ttl", "5", "--shared", "--limit", "2"), "do not mix"),
            (("locks", "run", "k", "--shared", "--limit", "3", "--", "true"), "do not mix"),
            (("locks", "check", "k"), "TOKEN"),
            (("locks", "check", "k", "seven"), "expected a fencing token"),
        ],
    )
    def test_usage_errors_exit_64(self, shell: Shell, args: tuple[str, ...], says: str) -> None:
        """A bad invocation: status 64 and one line saying what was wrong, never a traceback."""
        result = shell.run(*args)
        assert result.returncode == 64, result.stderr
        assert says in one_line(result.stderr)

    def test_missing_keys_exit_64(self, shell: Shell) -> None:
        """Without the key variables: status 64, and the line names both variables."""
        env = {k: v for k, v in shell.env.items() if not k.endswith("_KEY")}
        result = shell.run("locks", "get", "k", env=env)
        assert result.returncode == 64
        assert "VOLCANO_ANON_KEY and VOLCANO_SERVICE_KEY are not set" in one_line(result.stderr)


class TestHelp:
    @pytest.mark.parametrize(
        "args",
        [
            (),
            ("locks",),
            *(
                ("locks", name)
                for name in ("get", "acquire", "renew", "release", "force-release", "check")
            ),
            ("locks", "run"),
        ],
    )
    def test_every_level_has_help_with_examples(self, shell: Shell, args: tuple[str, ...]) -> None:
        """--help works at every level and shows examples and the environment it reads."""
        result = shell.run(*args, "--help")
        assert result.returncode == 0, result.stderr
        assert "examples:" in result.stdout
        assert "VOLCANO_SERVICE_KEY" in result.stdout

    def test_run_usage_names_every_option(self, shell: Shell) -> None:
        """`volcano locks run --help`'s usage line names each of run's options."""
        result = shell.run("locks", "run", "--help")
        usage = result.stdout.split("\n\n", 1)[0]
        # Options taking seconds (`--ttl S`); -h and -v stand alone.
        options = set(re.findall(r"^  (--[a-z-]+) S ", result.stdout, re.MULTILINE))
        assert {"--ttl", "--wait", "--grace"} <= options
        for option in options:
            assert f"[{option} S]" in usage, option
        assert "[-v]" in usage

    @pytest.mark.parametrize("command", ["renew", "release"])
    def test_token_help_warns_of_ps(self, shell: Shell, command: str) -> None:
        """renew and release --help: --token shows in ps; the file and variable do not."""
        text = " ".join(shell.run("locks", command, "--help").stdout.split())
        assert "other users of the machine see a command line in ps" in text
        assert "--token-file PATH" in text
        assert "VOLCANO_OWNER_TOKEN" in text

    def test_python_dash_m_is_the_same_command(self, shell: Shell) -> None:
        """`python -m volcano` runs the same command as the console script."""
        result = subprocess.run(
            [sys.executable, "-m", "volcano", "locks", "get", "k", "--json"],
            env=shell.env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)["held"] is False

    def test_console_script_is_installed(self) -> None:
        """pip installed the `volcano` console script beside the interpreter."""
        assert VOLCANO.exists()
        assert os.access(VOLCANO, os.X_OK)

    def test_version(self, shell: Shell) -> None:
        """--version prints the SDK's version."""
        result = shell.run("--version")
        assert result.stdout.strip() == f"volcano {volcano.__version__}"


class Listener:
    """A loopback TCP port that counts the connections made to it and closes each at once."""

    def __init__(self) -> None:
        self._socket = socket.create_server(("127.0.0.1", 0))
        self._socket.settimeout(0.1)
        self.url = f"http://127.0.0.1:{self._socket.getsockname()[1]}"
        self.connections = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                connection, _ = self._socket.accept()
            except TimeoutError:
                continue
            self.connections += 1
            connection.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self._socket.close()


class TestLocalKeysStayHome:
    @pytest.fixture
    def hosted(self) -> Iterator[Listener]:
        """Stands in for the hosted default: the CLI's HTTPS proxy, so every request meant
        for https://api.volcano.dev reaches this listener instead."""
        listener = Listener()
        yield listener
        listener.close()

    def env_without_url(self, shell: Shell, hosted: Listener, **keys: str) -> dict[str, str]:
        env = {k: v for k, v in shell.env.items() if k != "VOLCANO_API_URL"}
        return {**env, **keys, "HTTPS_PROXY": hosted.url, "NO_PROXY": ""}

    def test_local_keys_without_a_url_are_sent_nowhere(
        self, shell: Shell, hosted: Listener
    ) -> None:
        """Keys of `keys create` with no VOLCANO_API_URL: exit 64 naming the fix, and not one
        connection towards the hosted default."""
        assert shell.env["VOLCANO_SERVICE_KEY"].startswith("vk_local_service_")
        result = shell.run("locks", "get", "k", env=self.env_without_url(shell, hosted))
        assert result.returncode == 64, result.stderr
        line = one_line(result.stderr)
        assert "set VOLCANO_API_URL to your server's URL" in line
        assert shell.env["VOLCANO_SERVICE_KEY"] not in line
        assert hosted.connections == 0

    def test_unmarked_keys_still_go_to_the_default(self, shell: Shell, hosted: Listener) -> None:
        """Keys without the local mark (the hosted service's, or older ones) go to the default,
        as before: the listener above does see such a request."""
        env = self.env_without_url(
            shell, hosted, VOLCANO_ANON_KEY="vk_anon_x", VOLCANO_SERVICE_KEY="vk_service_y"
        )
        result = shell.run("locks", "get", "k", env=env)
        assert result.returncode == 69, result.stderr
        assert "https://api.volcano.dev" in one_line(result.stderr)
        assert hosted.connections >= 1
