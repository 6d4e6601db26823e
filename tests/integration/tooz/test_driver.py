"""The tooz driver's own behaviour, beyond what tooz's suite checks: URLs, keys, TLS,
heartbeats and locks renewed in the background, against real servers."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import tooz
import trustme
from tooz import coordination

import volcano
from tests.conftest import LiveServer, running_server
from tests.support.raw import wait_for
from tests.support.server import ServerProcess, create_project


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    path = tmp_path_factory.mktemp("tooz-driver") / "volcano.db"
    with running_server(f"sqlite:///{path}") as running:
        yield running


@pytest.fixture
def keys(server: LiveServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """The project's keys in the environment, where the driver reads them."""
    monkeypatch.setenv("VOLCANO_ANON_KEY", server.project.anon_key)
    monkeypatch.setenv("VOLCANO_SERVICE_KEY", server.project.service_key)


@pytest.fixture
def url(server: LiveServer) -> str:
    return server.url.replace("http://", "volcano://", 1)


@pytest.fixture
def coordinator(url: str, keys: None) -> Iterator[coordination.CoordinationDriver]:
    made = coordination.get_coordinator(url + "?timeout=2&lock_timeout=1", b"member-1")
    made.start()
    yield made
    made.stop()


def new_id() -> bytes:
    return uuid.uuid4().hex.encode()


class TestConnecting:
    def test_keys_from_the_urls_query(
        self, server: LiveServer, url: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """With no keys in the environment, the URL's query gives them."""
        monkeypatch.delenv("VOLCANO_ANON_KEY", raising=False)
        monkeypatch.delenv("VOLCANO_SERVICE_KEY", raising=False)
        query = f"?anon_key={server.project.anon_key}&service_key={server.project.service_key}"
        made = coordination.get_coordinator(url + query, b"m")
        made.start()
        try:
            group = new_id()
            made.create_group(group).get()
            assert group in made.get_groups().get()
        finally:
            made.stop()

    def test_no_keys_is_a_tooz_error_naming_them(
        self, url: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Without keys anywhere, start() raises ToozError naming the variable to set."""
        monkeypatch.delenv("VOLCANO_ANON_KEY", raising=False)
        monkeypatch.delenv("VOLCANO_SERVICE_KEY", raising=False)
        with pytest.raises(tooz.ToozError, match="VOLCANO_ANON_KEY"):
            coordination.get_coordinator(url, b"m").start()

    def test_volcanos_speaks_https(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """`volcanos://` is HTTPS: a server with a certificate of a CA the process trusts
        (SSL_CERT_FILE, as httpx reads it) serves the driver."""
        ca = trustme.CA()
        leaf = ca.issue_cert("127.0.0.1")
        cert, key, trusted = tmp_path / "cert.pem", tmp_path / "key.pem", tmp_path / "ca.pem"
        leaf.private_key_pem.write_to_path(str(key))
        leaf.cert_chain_pems[0].write_to_path(str(cert))
        ca.cert_pem.write_to_path(str(trusted))
        db = f"sqlite:///{tmp_path / 'tls.db'}"
        project = create_project(db, "tls")
        monkeypatch.setenv("SSL_CERT_FILE", str(trusted))
        monkeypatch.setenv("VOLCANO_ANON_KEY", project.anon_key)
        monkeypatch.setenv("VOLCANO_SERVICE_KEY", project.service_key)
        with ServerProcess(db, "--ssl-certfile", str(cert), "--ssl-keyfile", str(key)) as served:
            made = coordination.get_coordinator(
                served.url.replace("https://", "volcanos://", 1), b"m"
            )
            made.start()
            try:
                assert made.get_groups().get() == []
            finally:
                made.stop()


class TestHeartbeat:
    def test_a_heartbeat_keeps_the_member(
        self, coordinator: coordination.CoordinationDriver
    ) -> None:
        """A member lives on while heartbeats renew it (the membership's expiry moves)."""
        group = new_id()
        coordinator.create_group(group).get()
        coordinator.join_group(group).get()
        before = coordinator.get_member_info(group, b"member-1").get()["expires_at"]
        wait_for(
            lambda: (
                coordinator.heartbeat() is not None
                and coordinator.get_member_info(group, b"member-1").get()["expires_at"] > before
            ),
            "a later expiry",
        )
        assert b"member-1" in coordinator.get_members(group).get()

    def test_a_removed_member_is_forgotten(
        self, coordinator: coordination.CoordinationDriver, url: str
    ) -> None:
        """Booted out by another coordinator with the same member id, the heartbeat forgets
        the membership: it no longer claims to update its capabilities."""
        group = new_id()
        coordinator.create_group(group).get()
        coordinator.join_group(group).get()
        other = coordination.get_coordinator(url, b"member-1")
        other.start()
        try:
            other.leave_group(group).get()
        finally:
            other.stop()
        assert coordinator.heartbeat() == 2.0
        with pytest.raises(coordination.MemberNotJoined):
            coordinator.update_capabilities(group, {"x": 1}).get()


class TestServerGone:
    def test_calls_fail_with_a_connection_error_and_locks_stay_usable(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The server stops under a started coordinator: a lock's acquire is a
        ToozConnectionError each time (the lock object is not left half-taken), and so is a
        group call's result."""
        db = f"sqlite:///{tmp_path / 'gone.db'}"
        project = create_project(db, "gone")
        monkeypatch.setenv("VOLCANO_ANON_KEY", project.anon_key)
        monkeypatch.setenv("VOLCANO_SERVICE_KEY", project.service_key)
        served = ServerProcess(db).start()
        made = coordination.get_coordinator(served.url.replace("http://", "volcano://"), b"m")
        made.start()
        try:
            lock = made.get_lock(b"gone-lock")
            served.terminate()
            for _ in range(2):
                with pytest.raises(coordination.ToozConnectionError):
                    lock.acquire(blocking=False)
            with pytest.raises(coordination.ToozConnectionError):
                made.create_group(b"gone-group").get()
        finally:
            made.stop()


class TestLocks:
    def test_a_held_lock_is_renewed_past_its_ttl(
        self, coordinator: coordination.CoordinationDriver, server: LiveServer
    ) -> None:
        """A lock's lease (lock_timeout=1) is renewed by the client's renewal loop, with no
        heartbeat: its expiry moves on while it is held, and it is free once released."""
        name = new_id()
        lock = coordinator.get_lock(name)
        assert lock.acquire(blocking=False)
        with volcano.Client(**server.project.client_args(server.url)) as client:
            first = client.locks.get(name.decode()).expires_at
            assert first is not None
            wait_for(
                lambda: (client.locks.get(name.decode()).expires_at or first) > first,
                "a renewal",
            )
            assert lock.release()
            assert not client.locks.get(name.decode()).held

    def test_shared_holders_exclude_an_exclusive_one(
        self, coordinator: coordination.CoordinationDriver, url: str
    ) -> None:
        """Two shared holders at once; an exclusive request meanwhile is refused."""
        name = new_id()
        other = coordination.get_coordinator(url, b"member-2")
        other.start()
        try:
            mine, theirs = coordinator.get_lock(name), other.get_lock(name)
            assert mine.acquire(shared=True)
            assert theirs.acquire(shared=True)
            assert not coordinator.get_lock(name).acquire(blocking=False)
            assert mine.release()
            assert theirs.release()
        finally:
            other.stop()
