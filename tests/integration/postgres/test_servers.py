"""Several server processes on one PostgreSQL database: crashes, skewed clocks, an outage."""

from __future__ import annotations

import os
import re
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import attrs
import httpx
import pytest

from tests.support.conformance import check_response
from tests.support.databases import allow_connections, fresh_postgres_database, terminate_backends
from tests.support.server import Project, ServerProcess, create_project, serve_in_thread
from volcano_server import ServerConfig, create_app

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


def new_id() -> str:
    return str(uuid.uuid4())


def client(url: str, project: Project, timeout: float = 30) -> httpx.Client:
    return httpx.Client(
        base_url=url,
        headers=project.headers(),
        event_hooks={"response": [check_response]},
        timeout=timeout,
    )


def acquire(
    http: httpx.Client, key: str, owner: str, ttl: float = 30, request_id: str | None = None
) -> httpx.Response:
    return http.post(
        f"/v1/locks/{key}/acquire",
        json={"owner_token": owner, "ttl_seconds": ttl},
        headers={"X-Request-Id": request_id or new_id()},
    )


def release(
    http: httpx.Client, key: str, owner: str, fence: int, request_id: str | None = None
) -> httpx.Response:
    return http.post(
        f"/v1/locks/{key}/release",
        json={"owner_token": owner, "fencing_token": fence},
        headers={"X-Request-Id": request_id or new_id()},
    )


@pytest.fixture
def project(pg_url: str) -> Project:
    return create_project(pg_url, f"servers-{uuid.uuid4().hex[:8]}")


class TestCrashes:
    def test_kill_9_of_both_servers_keeps_leases_and_rising_tokens(
        self, pg_url: str, project: Project
    ) -> None:
        """Both servers killed with -9 mid-churn and restarted: every acknowledged lease is
        still held with its token, and the next token is above every one issued before."""
        servers = [ServerProcess(pg_url, "--no-access-log").start() for _ in range(2)]
        acknowledged: dict[str, int] = {}
        highest = 0
        stop, busy = threading.Event(), threading.Event()

        def churn(server: ServerProcess) -> None:
            nonlocal highest
            with client(server.url, project) as http:
                while not stop.is_set():
                    owner = new_id()
                    try:
                        response = acquire(http, "churn", owner)
                        if response.status_code != 200:
                            continue
                        fence = response.json()["fencing_token"]
                        highest = max(highest, fence)
                        if highest >= 60:
                            busy.set()
                        release(http, "churn", owner, fence)
                    except httpx.TransportError:
                        return

        try:
            for n in range(20):
                with client(servers[n % 2].url, project) as http:
                    response = acquire(http, f"held-{n}", new_id(), ttl=3600)
                    acknowledged[f"held-{n}"] = response.json()["fencing_token"]
            workers = [threading.Thread(target=churn, args=(s,)) for s in servers]
            for worker in workers:
                worker.start()
            assert busy.wait(timeout=60), "the churn made no progress"
            for server in servers:
                server.kill()
            stop.set()
            for worker in workers:
                worker.join(timeout=30)

            for server in servers:
                server.start()
            for server in servers:
                with client(server.url, project) as http:
                    for key, fence in acknowledged.items():
                        state = http.get(f"/v1/locks/{key}").json()
                        assert (state["held"], state["fencing_token"]) == (True, fence), key
            with client(servers[0].url, project) as http:
                http.delete("/v1/locks/churn")  # the lease in flight at the kill, if any
                last = http.get("/v1/locks/churn").json()["fencing_token"]
                assert last >= highest
                assert acquire(http, "churn", new_id()).json()["fencing_token"] == last + 1
        finally:
            for server in servers:
                server.kill()


SKEW_SOURCE = """\
# Test-only: this process's wall clock runs {seconds:+d} s off.
import time

_time, _time_ns = time.time, time.time_ns
time.time = lambda: _time() + {seconds}
time.time_ns = lambda: _time_ns() + {seconds} * 1_000_000_000
"""

_LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) .*listening on", re.MULTILINE)


def skewed_server(pg_url: str, tmp_path: Path, seconds: int) -> ServerProcess:
    """A server process whose own clock (time.time, time.time_ns) is `seconds` off."""
    site = tmp_path / f"skew{seconds:+d}"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SKEW_SOURCE.format(seconds=seconds))
    path = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)
    return ServerProcess(pg_url, env={"PYTHONPATH": path})


def logged_skew(server: ServerProcess) -> float:
    """How far the server's log clock is from ours: proof the skew took effect."""
    match = _LOG_TIME.search(server.log)
    assert match is not None, server.log
    logged = datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f")  # local time, as logged
    return (logged - datetime.now()).total_seconds()


class TestClocks:
    def test_server_clocks_do_not_matter(
        self, pg_url: str, project: Project, tmp_path: Path
    ) -> None:
        """Two servers whose own clocks are an hour fast and an hour slow agree on a lease:
        its expiry is the database's now + ttl, and it frees at the database's instant."""
        with (
            skewed_server(pg_url, tmp_path, +3600) as fast,
            skewed_server(pg_url, tmp_path, -3600) as slow,
            client(fast.url, project) as via_fast,
            client(slow.url, project) as via_slow,
        ):
            assert abs(logged_skew(fast) - 3600) < 120
            assert abs(logged_skew(slow) + 3600) < 120
            owner = new_id()
            sent = time.time()  # the database runs on this machine: its clock is ours
            lease = acquire(via_fast, "skew", owner, ttl=5).json()
            expires = datetime.fromisoformat(lease["expires_at"]).timestamp()
            assert sent + 5 <= expires + 0.01
            assert expires < time.time() + 5 + 0.01

            state = via_slow.get("/v1/locks/skew").json()
            assert (state["held"], state["fencing_token"]) == (True, lease["fencing_token"])
            refused = acquire(via_slow, "skew", new_id())
            assert refused.status_code == 409
            assert 1 <= int(refused.headers["retry-after"]) <= 5
            renewed = via_slow.post(
                "/v1/locks/skew/renew",
                json={
                    "owner_token": owner,
                    "fencing_token": lease["fencing_token"],
                    "ttl_seconds": 1,
                },
            ).json()
            expires = datetime.fromisoformat(renewed["expires_at"]).timestamp()

            time.sleep(max(0.0, expires - time.time()) + 0.1)
            assert via_fast.get("/v1/locks/skew").json()["held"] is False
            taken = acquire(via_slow, "skew", new_id()).json()
            assert taken["fencing_token"] == lease["fencing_token"] + 1


@attrs.define
class Tally:
    """What the clients saw during the outage test."""

    statuses: Counter[int] = attrs.Factory(Counter)
    failures: list[str] = attrs.Factory(list)
    tokens: list[int] = attrs.Factory(list)
    slowest: float = 0.0
    live: dict[int, float] = attrs.Factory(dict)  # fencing token -> expiry, while in use
    lock: threading.Lock = attrs.Factory(threading.Lock)

    def saw(self, response: httpx.Response, took: float) -> None:
        with self.lock:
            self.statuses[response.status_code] += 1
            self.slowest = max(self.slowest, took)

    def granted(self, fence: int, expires_at: str) -> None:
        """Record a lease in use; any other one still in use and unexpired is a double grant."""
        expires = datetime.fromisoformat(expires_at).timestamp()
        with self.lock:
            now = time.time()
            overlapping = [t for t, until in self.live.items() if until > now]
            if overlapping:
                self.failures.append(f"token {fence} granted while {overlapping} were held")
            self.live[fence] = expires
            self.tokens.append(fence)

    def done_with(self, fence: int) -> None:
        with self.lock:
            self.live.pop(fence, None)


@pytest.fixture
def outage_db() -> Iterator[str]:
    """A database of its own, so refusing its connections disturbs no other test."""
    with fresh_postgres_database("volcano_outage") as url:
        try:
            yield url
        finally:
            allow_connections(url, True)


def hammer(http: httpx.Client, key: str, tally: Tally, stop: threading.Event) -> None:
    """Acquire (a 503 retried once with the same request id, as the SDK does) and release
    (retried until answered) until told to stop."""

    def send(call: str, body: dict[str, object], rid: str) -> httpx.Response:
        started = time.monotonic()
        response = http.post(f"/v1/locks/{key}/{call}", json=body, headers={"X-Request-Id": rid})
        tally.saw(response, time.monotonic() - started)
        return response

    mine: list[int] = []
    while not stop.is_set():
        owner, rid = new_id(), new_id()
        body: dict[str, object] = {"owner_token": owner, "ttl_seconds": 2}
        try:
            response = send("acquire", body, rid)
            if response.status_code == 503:
                response = send("acquire", body, rid)
            if response.status_code != 200:
                time.sleep(0.01)
                continue
            lease = response.json()
            fence = lease["fencing_token"]
            if mine and fence <= mine[-1]:
                tally.failures.append(f"tokens fell for one client: {mine[-1]} then {fence}")
            mine.append(fence)
            tally.granted(fence, lease["expires_at"])
            tally.done_with(fence)  # from here on this client no longer relies on the lease
            body, rid = {"owner_token": owner, "fencing_token": fence}, new_id()
            deadline = time.monotonic() + 20
            while send("release", body, rid).status_code == 503 and time.monotonic() < deadline:
                time.sleep(0.1)
        except httpx.TransportError as exc:
            tally.failures.append(f"transport error: {exc!r}")
            return


class TestOutage:
    def test_database_restart_under_load(self, outage_db: str, tmp_path: Path) -> None:
        """Every session of the database terminated and new ones refused for four seconds,
        while six clients race for one key through two servers: clients see only successes,
        409s and 503s (never a 500 or a hang), no lease is granted twice, tokens rise, and
        both servers recover by themselves."""
        project = create_project(outage_db, "outage")
        servers = [ServerProcess(outage_db, "--no-access-log").start() for _ in range(2)]
        clients = [client(servers[n % 2].url, project, timeout=15) for n in range(6)]
        tally, stop = Tally(), threading.Event()
        workers = [
            threading.Thread(target=hammer, args=(http, "hot", tally, stop)) for http in clients
        ]
        try:
            for worker in workers:
                worker.start()
            time.sleep(1.5)
            before = len(tally.tokens)
            allow_connections(outage_db, False)
            assert terminate_backends(outage_db) >= 2  # both servers' pools had sessions
            time.sleep(4)
            allow_connections(outage_db, True)
            back = time.monotonic()
            recovered = {}
            while len(recovered) < 2 and time.monotonic() - back < 15:
                for server in servers:
                    with client(server.url, project) as http:
                        if http.get("/v1/locks/hot").status_code == 200:
                            recovered.setdefault(server.url, time.monotonic() - back)
                time.sleep(0.1)
            after = len(tally.tokens)
            time.sleep(1)
        finally:
            stop.set()
            for worker in workers:
                worker.join(timeout=60)
            for http in clients:
                http.close()
            for server in servers:
                server.kill()
        assert tally.failures == []
        assert set(tally.statuses) <= {200, 204, 409, 503}, tally.statuses
        assert tally.statuses[503] > 0, "the outage was not seen"
        assert before > 0
        assert len(tally.tokens) > after, "no lease was granted after the outage"
        assert len(recovered) == 2, f"not every server recovered: {recovered}"
        assert len(set(tally.tokens)) == len(tally.tokens), "a fencing token was granted twice"
        assert tally.slowest < 10
        for server in servers:
            assert "Traceback" not in server.log
            assert "internal error" not in server.log

    def test_unreachable_database_answers_503_quickly_then_recovers(self, outage_db: str) -> None:
        """With the database refusing sessions, a lock operation gets 503 unavailable with
        Retry-After within seconds; once it accepts them again the same server serves."""
        project = create_project(outage_db, "unreachable")
        app = create_app(ServerConfig(database_url=outage_db, access_log=False))
        with serve_in_thread(app) as url, client(url, project) as http:
            assert acquire(http, "k", new_id()).status_code == 200
            allow_connections(outage_db, False)
            terminate_backends(outage_db)
            for call in (lambda: http.get("/v1/locks/k"), lambda: acquire(http, "k", new_id())):
                started = time.monotonic()
                response = call()
                assert time.monotonic() - started < 5
                assert response.status_code == 503
                assert response.json()["error"]["code"] == "unavailable"
                assert int(response.headers["retry-after"]) >= 1
            allow_connections(outage_db, True)
            deadline = time.monotonic() + 10
            while (status := http.get("/v1/locks/k").status_code) == 503:
                assert time.monotonic() < deadline, "the server did not recover"
                time.sleep(0.1)
            assert status == 200
            assert http.get("/v1/locks/k").json()["held"] is True
