"""The server as a process: its command line, SIGTERM, kill -9, two processes on one database."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.conformance import check_response
from tests.support.databases import process_database
from tests.support.server import Project, ServerProcess, create_project

from .conftest import Locks, new_id

pytestmark = pytest.mark.slow


def cli(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "volcano_server", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
        env=env,
        check=False,
    )


def one_line(stderr: str) -> str:
    """The only line of `stderr`, which must hold exactly one."""
    [line] = stderr.strip().splitlines()
    return line


def http(server: ServerProcess, project: Project) -> httpx.Client:
    return httpx.Client(
        base_url=server.url,
        headers=project.headers(),
        event_hooks={"response": [check_response]},
        timeout=30,
    )


class TestCommandLine:
    def test_keys_create_prints_the_keys_and_the_url(self, tmp_path: Path) -> None:
        """keys create prints VOLCANO_ANON_KEY, VOLCANO_SERVICE_KEY (marked vk_local_) and
        VOLCANO_API_URL, the default server's URL."""
        result = cli(
            "keys", "create", "--project", "demo", "--db", f"sqlite:///{tmp_path / 'k.db'}"
        )
        assert result.returncode == 0, result.stderr
        lines = result.stdout.splitlines()
        assert [line.split("=", 1)[0] for line in lines] == [
            "VOLCANO_ANON_KEY",
            "VOLCANO_SERVICE_KEY",
            "VOLCANO_API_URL",
        ]
        anon, service, url = (line.split("=", 1)[1] for line in lines)
        assert anon.startswith("vk_local_anon_")
        assert service.startswith("vk_local_service_")
        assert url == "http://127.0.0.1:8787"
        assert anon not in result.stderr
        assert service not in result.stderr

    def test_keys_create_output_is_a_private_file_with_the_url(self, tmp_path: Path) -> None:
        """--output writes the three lines to a file of mode 0600, replacing one that was
        readable by others, with --api-url as VOLCANO_API_URL; no key on stdout or stderr."""
        keys_file = tmp_path / "volcano.env"
        keys_file.write_text("old\n")
        keys_file.chmod(0o644)
        db = f"sqlite:///{tmp_path / 'k.db'}"
        url = "https://locks.example.test:8443"
        result = cli(
            "keys", "create", "--project", "demo", "--db", db,
            "--api-url", url + "/", "--output", str(keys_file),
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        assert keys_file.stat().st_mode & 0o777 == 0o600
        written = dict(line.split("=", 1) for line in keys_file.read_text().splitlines())
        assert sorted(written) == ["VOLCANO_ANON_KEY", "VOLCANO_API_URL", "VOLCANO_SERVICE_KEY"]
        assert written["VOLCANO_API_URL"] == url
        assert result.stdout == ""
        for key in (written["VOLCANO_ANON_KEY"], written["VOLCANO_SERVICE_KEY"]):
            assert key not in result.stderr
        assert f"set -a; . {keys_file}; set +a" in result.stderr
        assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []

    def test_keys_create_into_an_unwritable_place_makes_no_keys(self, tmp_path: Path) -> None:
        """An --output that cannot be written fails in one line before any key is made."""
        db = f"sqlite:///{tmp_path / 'k.db'}"
        result = cli(
            "keys", "create", "--project", "demo", "--db", db,
            "--output", str(tmp_path / "missing" / "volcano.env"),
        )  # fmt: skip
        assert result.returncode == 1
        assert "cannot write" in one_line(result.stderr)
        listed = cli("keys", "list", "--db", db)
        assert listed.stdout.splitlines()[1:] == []

    @pytest.mark.parametrize(
        "url", ["ftp://x.test", "http://", "http://u:p@x.test", "http://x.test/?a=1", "http://x y"]
    )
    def test_keys_create_refuses_a_bad_api_url(self, tmp_path: Path, url: str) -> None:
        """--api-url must be an http(s) URL with a host, no credentials, query or spaces."""
        result = cli("keys", "create", "--project", "demo", "--api-url", url, cwd=tmp_path)
        assert result.returncode == 2
        assert "--api-url" in one_line(result.stderr)

    def test_keys_create_with_an_empty_url_makes_no_keys(self, tmp_path: Path) -> None:
        """`--api-url ""` (a `url=$(...)` whose serve failed) is refused, saying what likely
        happened, before any key is made or file written."""
        result = cli(
            "keys", "create", "--project", "demo", "--api-url", "", "--output", "volcano.env",
            cwd=tmp_path,
        )  # fmt: skip
        assert result.returncode == 2
        expected = "argument --api-url: the URL is empty (did the command that should have given"
        assert f"{expected} it fail?)" in one_line(result.stderr)
        assert not (tmp_path / "volcano.env").exists()
        assert not (tmp_path / "volcano.db").exists()

    def test_keys_are_stored_only_as_hashes(self, tmp_path: Path) -> None:
        """The database file never contains a key in plain text."""
        db = tmp_path / "k.db"
        result = cli("keys", "create", "--project", "demo", "--db", f"sqlite:///{db}")
        assert result.returncode == 0, result.stderr
        keys = dict(line.split("=", 1) for line in result.stdout.splitlines())
        del keys["VOLCANO_API_URL"]
        assert set(keys) == {"VOLCANO_ANON_KEY", "VOLCANO_SERVICE_KEY"}  # else nothing is checked
        data = b"".join(p.read_bytes() for p in tmp_path.iterdir())
        assert data
        for key in keys.values():
            assert key.encode() not in data

    def test_database_url_from_environment(self, tmp_path: Path) -> None:
        """VOLCANO_DATABASE_URL is used when --db is absent."""
        env = {**os.environ, "VOLCANO_DATABASE_URL": f"sqlite:///{tmp_path / 'env.db'}"}
        assert cli("keys", "create", "--project", "p", env=env).returncode == 0
        assert (tmp_path / "env.db").exists()

    def test_default_database_is_in_working_directory(self, tmp_path: Path) -> None:
        """Without --db or the variable, the database is ./volcano.db."""
        env = {k: v for k, v in os.environ.items() if k != "VOLCANO_DATABASE_URL"}
        assert cli("migrate", cwd=tmp_path, env=env).returncode == 0
        assert (tmp_path / "volcano.db").exists()

    @pytest.mark.parametrize(
        ("args", "status", "phrase"),
        [
            ((), 2, "choose a command"),
            (("keys",), 2, "choose a command"),
            (("keys", "create"), 2, "--project"),
            (("keys", "create", "--project", ""), 2, "project names"),
            (("serve", "--port", "http"), 2, "a port is 0 to 65535"),
            (("serve", "--port", "70000"), 2, "a port is 0 to 65535"),
            (("serve", "--retention", "-5"), 2, "positive number"),
            (("serve", "--db", "mysql://localhost/x"), 1, "unsupported database URL"),
            (("serve", "--db", "sqlite:///:memory:"), 1, "needs a database file"),
            (("serve", "--db", "sqlite:////nonexistent/dir/v.db"), 1, "cannot open the database"),
            (("serve", "--retention", "60"), 1, "at least 600"),
            (("serve", "--bogus"), 2, "unrecognized arguments"),
            (("serve", "--daemon"), 1, "--daemon needs --log-file"),
            (("serve", "--log-file", "v.log"), 1, "--log-file goes with --daemon"),
            (
                ("serve", "--daemon", "--log-file", "/nonexistent/dir/v.log"),
                1,
                "cannot open the log file",
            ),
            (("serve", "--pid-file", "/nonexistent/dir/v.pid"), 1, "cannot write the pid file"),
        ],
    )
    def test_bad_invocations_fail_in_one_clear_line(
        self, tmp_path: Path, args: tuple[str, ...], status: int, phrase: str
    ) -> None:
        """Bad flags and unusable databases: a short message on stderr, never a traceback."""
        result = cli(*args, cwd=tmp_path)
        assert result.returncode == status
        assert phrase in result.stderr
        assert "Traceback" not in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr

    def test_password_in_database_url_is_never_printed(self, tmp_path: Path) -> None:
        """A failing database URL is shown with its password masked."""
        result = cli("serve", "--db", "mysql://user:hunter2@localhost/x", cwd=tmp_path)
        assert result.returncode == 1
        assert "hunter2" not in result.stderr


class TestServeProcess:
    def test_serves_logs_one_line_and_stops_on_sigterm(self, tmp_path: Path) -> None:
        """serve announces where it listens in one line, serves, and stops cleanly on SIGTERM."""
        db = f"sqlite:///{tmp_path / 's.db'}"
        server = ServerProcess(db).start()
        try:
            listening = [line for line in server.log.splitlines() if "listening on" in line]
            assert len(listening) == 1
            assert server.url in listening[0]
            assert httpx.get(f"{server.url}/healthz").status_code == 200
        finally:
            code = server.terminate()
        # uvicorn shuts down gracefully, then re-raises SIGTERM so a supervisor sees why it ended.
        assert code in (0, -signal.SIGTERM)
        assert "volcano-server stopped" in server.log
        assert "Traceback" not in server.log

    def test_port_in_use_fails_cleanly(self, tmp_path: Path) -> None:
        """A port already taken is reported and the process exits non-zero."""
        db = f"sqlite:///{tmp_path / 's.db'}"
        with ServerProcess(db) as first:
            result = cli("serve", "--port", str(first.port), "--db", db)
        assert result.returncode != 0
        assert "address already in use" in result.stderr.lower()
        assert "Traceback" not in result.stderr


class Daemon:
    """What `serve --daemon` left running, found through its pid file; stopped afterwards."""

    def __init__(self, pid_file: Path) -> None:
        self.pid_file = pid_file

    @property
    def pid(self) -> int:
        return int(self.pid_file.read_text())

    def wait_stopped(self) -> None:
        """Wait until the pid file is gone: the server removes it once it has stopped."""
        deadline = time.monotonic() + 30
        while self.pid_file.exists():
            assert time.monotonic() < deadline, "the daemon did not stop"
            time.sleep(0.02)

    def stop(self) -> None:
        if self.pid_file.exists():
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGTERM)
            self.wait_stopped()


class TestDaemon:
    @pytest.fixture
    def daemon(self, tmp_path: Path) -> Iterator[Daemon]:
        daemon = Daemon(tmp_path / "volcano-server.pid")
        yield daemon
        daemon.stop()

    def serve(self, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
        return cli(
            "serve", "--daemon", "--port", "0", "--db", f"sqlite:///{tmp_path / 'd.db'}",
            "--log-file", "volcano-server.log", "--pid-file", "volcano-server.pid", *args,
            cwd=tmp_path,
        )  # fmt: skip

    def test_returns_once_listening_and_stops_by_its_pid_file(
        self, tmp_path: Path, daemon: Daemon
    ) -> None:
        """--daemon returns 0 only once the server answers (the very next request, no retry,
        is served); the server runs in a session of its own, logs to the file, and
        `kill $(cat PID_FILE)` stops it cleanly, removing the pid file."""
        result = self.serve(tmp_path)
        assert result.returncode == 0, result.stderr
        [url] = re.findall(r"listening on (http://\S+) \(pid (\d+)\)", one_line(result.stderr))
        assert httpx.get(f"{url[0]}/readyz").status_code == 200
        assert daemon.pid == int(url[1])
        assert os.getsid(daemon.pid) == daemon.pid  # no terminal: closing the shell spares it
        log = tmp_path / "volcano-server.log"
        assert f"listening on {url[0]}" in log.read_text()
        os.kill(daemon.pid, signal.SIGTERM)
        daemon.wait_stopped()
        assert "volcano-server stopped" in log.read_text()
        assert "Traceback" not in log.read_text()

    def test_a_server_that_cannot_start_says_why(self, tmp_path: Path, daemon: Daemon) -> None:
        """A daemon that fails once in the background (a certificate it cannot load) makes the
        command exit 1 with the log's last line, prints no URL, and leaves no pid file."""
        certificate = tmp_path / "cert.pem"
        certificate.write_text("not a certificate\n")
        result = self.serve(tmp_path, "--ssl-certfile", str(certificate))
        assert (result.returncode, result.stdout) == (1, "")
        line = one_line(result.stderr)
        assert "volcano-server did not start (log: volcano-server.log)" in line
        assert "cannot load the TLS certificate and key" in line
        assert not daemon.pid_file.exists()

    def test_a_taken_port_fails_before_forking(self, tmp_path: Path, daemon: Daemon) -> None:
        """A port already taken stops `serve --daemon` at once, in one line naming the port and
        how to choose another; nothing on stdout (so `url=$(...)` stays empty), no log file,
        no pid file."""
        with socket.create_server(("127.0.0.1", 0)) as taken:
            port = taken.getsockname()[1]
            result = self.serve(tmp_path, "--port", str(port))
        assert (result.returncode, result.stdout) == (1, "")
        assert one_line(result.stderr) == (
            f"volcano-server: cannot listen on 127.0.0.1:{port}: address already in use"
            f" (another server?): choose another port with --port, e.g. --port {port + 1},"
            " or --port 0 for any free one"
        )
        assert not (tmp_path / "volcano-server.log").exists()
        assert not daemon.pid_file.exists()

    def test_prints_the_url_alone_on_stdout(self, tmp_path: Path, daemon: Daemon) -> None:
        """Once listening, the URL is the only line on stdout, for `url=$(...)` and
        `keys create --api-url "$url"`."""
        result = self.serve(tmp_path)
        assert result.returncode == 0, result.stderr
        url = result.stdout.strip()
        assert result.stdout == f"{url}\n"
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+", url)
        assert f"listening on {url} (pid {daemon.pid})" in result.stderr


class TestPrivateFiles:
    @pytest.mark.parametrize("umask", [0o000, 0o022])
    def test_the_database_its_wal_and_the_log_are_the_owners_alone(
        self, tmp_path: Path, umask: int
    ) -> None:
        """Whatever the umask, the quick start's database, its -wal and -shm files and the log
        file are created 0600: they hold every tenant's owner tokens and labels (before: 0644,
        readable by any local user). The keys file was 0600 already."""
        keys = tmp_path / "volcano.env"
        db = f"sqlite:///{tmp_path / 'volcano.db'}"
        created = subprocess.run(
            [sys.executable, "-m", "volcano_server", "keys", "create", "--project", "p", "--db", db,
             "--output", str(keys)],
            capture_output=True, text=True, timeout=60, check=False,
            umask=umask,
        )  # fmt: skip
        assert created.returncode == 0, created.stderr
        env = dict(line.split("=", 1) for line in keys.read_text().splitlines())
        daemon = Daemon(tmp_path / "volcano-server.pid")
        try:
            started = subprocess.run(
                [sys.executable, "-m", "volcano_server", "serve", "--daemon", "--port", "0",
                 "--db", db, "--log-file", "volcano-server.log", "--pid-file",
                 "volcano-server.pid"],
                capture_output=True, text=True, timeout=60, check=False, cwd=tmp_path,
                umask=umask,
            )  # fmt: skip
            assert started.returncode == 0, started.stderr
            [url] = re.findall(r"listening on (http://\S+)", started.stderr)
            headers = {"apikey": env["VOLCANO_ANON_KEY"]}
            headers["Authorization"] = f"Bearer {env['VOLCANO_SERVICE_KEY']}"
            body = {"owner_token": new_id(), "ttl_seconds": 30}
            answer = httpx.post(f"{url}/v1/locks/k/acquire", json=body, headers=headers)
            assert answer.status_code == 200  # a commit: the WAL and its index exist now
            files = ["volcano.db", "volcano.db-wal", "volcano.db-shm", "volcano-server.log"]
            modes = {name: (tmp_path / name).stat().st_mode & 0o777 for name in files}
            assert modes == dict.fromkeys(files, 0o600)
            assert keys.stat().st_mode & 0o777 == 0o600
        finally:
            daemon.stop()

    def test_a_database_others_can_read_is_warned_about(self, tmp_path: Path) -> None:
        """An existing database file keeps its mode (an operator's choice), but one that every
        local user can read is named in a warning at start."""
        path = tmp_path / "open.db"
        path.touch(mode=0o644)
        path.chmod(0o644)
        with ServerProcess(f"sqlite:///{path}") as server:
            assert "can be read by every local user (mode 0644)" in server.log
        assert path.stat().st_mode & 0o777 == 0o644


class TestSecrets:
    def test_logs_never_contain_keys_or_owner_tokens(
        self, database_url: str, tmp_path: Path
    ) -> None:
        """At debug level, through successes and every kind of error, no secret is logged."""
        db = process_database(database_url, tmp_path / "s.db")
        project = create_project(db, "secrets")
        owner = "0F8FAD5B-D9CB-469F-A165-70867728950E"
        with ServerProcess(db, "--log-level", "debug") as server, http(server, project) as client:
            locks = Locks(client)
            lease = locks.acquire("secret", owner).json()
            locks.acquire("secret", new_id())
            locks.renew("secret", owner, lease["fencing_token"])
            locks.renew("secret", owner, 99)
            locks.release("secret", owner, lease["fencing_token"])
            client.post("/v1/locks/secret/acquire", json={"owner_token": owner, "ttl_seconds": -1})
            client.post(
                "/v1/locks/secret/acquire",
                content=b"{bad",
                headers={"Content-Type": "application/json"},
            )
            client.get("/v1/locks/secret", headers={"Authorization": f"Bearer {project.anon_key}"})
            client.get("/v1/locks/secret", headers={"apikey": project.service_key})
            log = server.log
        assert (
            "POST /v1/locks/secret/acquire 200" in log
        )  # the access log is on, so this test can fail
        for secret in (project.anon_key, project.service_key, owner, owner.lower()):
            assert secret not in log


class TestCrashes:
    def test_kill_9_keeps_acknowledged_leases_and_rising_tokens(
        self, database_url: str, tmp_path: Path
    ) -> None:
        """Leases acknowledged before kill -9 are still held after restart; tokens keep rising."""
        db = process_database(database_url, tmp_path / "crash.db")
        project = create_project(db, "crash")
        server = ServerProcess(db, "--no-access-log").start()
        acknowledged: dict[str, int] = {}
        highest = 0
        stop, busy = threading.Event(), threading.Event()

        def churn() -> None:
            nonlocal highest
            with http(server, project) as client:
                locks = Locks(client)
                while not stop.is_set():
                    owner = new_id()
                    try:
                        lease = locks.acquire("churn", owner).json()
                        highest = max(highest, lease["fencing_token"])
                        if highest >= 50:
                            busy.set()
                        locks.release("churn", owner, lease["fencing_token"])
                    except httpx.TransportError:
                        return

        with http(server, project) as client:
            for n in range(20):
                acknowledged[f"held-{n}"] = (
                    Locks(client).acquire(f"held-{n}", new_id(), ttl=3600).json()["fencing_token"]
                )
        worker = threading.Thread(target=churn)
        worker.start()
        assert busy.wait(timeout=60), "the churn made no progress"
        server.kill()
        stop.set()
        worker.join(timeout=30)

        server.start()
        try:
            with http(server, project) as client:
                locks = Locks(client)
                for key, fence in acknowledged.items():
                    state = locks.get(key).json()
                    assert (state["held"], state["fencing_token"]) == (True, fence), key
                locks.force_release("churn")  # the lease in flight at the kill, if any
                last = locks.get("churn").json()["fencing_token"]
                assert last >= highest
                assert locks.acquire("churn", new_id()).json()["fencing_token"] == last + 1
        finally:
            server.kill()


class TestTwoProcesses:
    def test_two_servers_on_one_file_never_double_grant(
        self, database_url: str, tmp_path: Path
    ) -> None:
        """Two server processes on one SQLite file (or PostgreSQL database), eight clients racing
        each round: one winner per round, and fencing tokens rise by exactly one per round."""
        db = process_database(database_url, tmp_path / "race.db")
        project = create_project(db, "race")
        rounds, racers = 40, 8
        with ServerProcess(db, "--no-access-log") as a, ServerProcess(db, "--no-access-log") as b:
            clients = [http(a if n % 2 else b, project) for n in range(racers)]
            try:
                tokens = []
                for _ in range(rounds):
                    owners = [new_id() for _ in range(racers)]
                    barrier = threading.Barrier(racers)
                    results: list[httpx.Response | None] = [None] * racers

                    def race(
                        n: int,
                        owners: list[str] = owners,
                        barrier: threading.Barrier = barrier,
                        results: list[httpx.Response | None] = results,
                    ) -> None:
                        barrier.wait()
                        results[n] = Locks(clients[n]).acquire("contended", owners[n], ttl=30)

                    threads = [threading.Thread(target=race, args=(n,)) for n in range(racers)]
                    for thread in threads:
                        thread.start()
                    for thread in threads:
                        thread.join()
                    winners = [
                        n for n, r in enumerate(results) if r is not None and r.status_code == 200
                    ]
                    assert len(winners) == 1, [r.status_code if r else None for r in results]
                    assert all(r is not None and r.status_code in (200, 409) for r in results)
                    lease = results[winners[0]].json()  # type: ignore[union-attr]
                    tokens.append(lease["fencing_token"])
                    released = Locks(clients[(winners[0] + 1) % racers]).release(
                        "contended", owners[winners[0]], lease["fencing_token"]
                    )
                    assert released.status_code == 204
                assert tokens == list(range(1, rounds + 1))
            finally:
                for client in clients:
                    client.close()

    def test_lease_taken_on_one_server_is_seen_by_the_other(
        self, database_url: str, tmp_path: Path
    ) -> None:
        """Acquire through one process, renew and release through the other."""
        db = process_database(database_url, tmp_path / "pair.db")
        project = create_project(db, "pair")
        key, owner = f"pair-{uuid.uuid4().hex[:6]}", new_id()
        with (
            ServerProcess(db) as a,
            ServerProcess(db) as b,
            http(a, project) as ca,
            http(b, project) as cb,
        ):
            lease = Locks(ca).acquire(key, owner).json()
            assert Locks(cb).get(key).json()["held"] is True
            assert Locks(cb).acquire(key, new_id()).status_code == 409
            assert Locks(cb).renew(key, owner, lease["fencing_token"]).status_code == 200
            assert Locks(cb).release(key, owner, lease["fencing_token"]).status_code == 204
            assert Locks(ca).get(key).json()["held"] is False
