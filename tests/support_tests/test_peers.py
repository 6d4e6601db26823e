"""bench/_peers.py: the local ZooKeeper and etcd the benchmarks measure Volcano against.

Each runs when its server is installed (`python -m bench` installs them; the test suite does
not, to keep CI's time); without it the test skips with the reason, or fails with
VOLCANO_REQUIRE_PEERS=1. A write goes through each peer's own protocol, so "started" means
"serving"; every socket the server listens on must be on loopback; once the block is left, the
process must have ended and its data be gone.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import urllib.request
from pathlib import Path

import pytest

from bench import _peers

LOOPBACK = {"127.0.0.1", "::ffff:127.0.0.1"}


def require(name: str) -> None:
    if _peers.installed(name):
        return
    reason = f"{name} is not installed (bench._peers.install('{name}') installs it)"
    if os.environ.get("VOLCANO_REQUIRE_PEERS") == "1":
        pytest.fail(f"{reason}; VOLCANO_REQUIRE_PEERS=1 demands it", pytrace=False)
    pytest.skip(reason)


def listening(pid: int) -> set[tuple[str, int]]:
    """The (address, port) of every TCP socket process `pid` listens on, from /proc."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        target = os.readlink(fd) if fd.is_symlink() else ""
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == "0A" and inode in inodes:  # 0A: LISTEN
                address, port = local.split(":")
                found.add((_address(address), int(port, 16)))
    return found


def _address(hex_address: str) -> str:
    raw = bytes.fromhex(hex_address)
    if len(raw) == 4:
        return socket.inet_ntop(socket.AF_INET, raw[::-1])
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))
    return socket.inet_ntop(socket.AF_INET6, words)


def ended(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def zookeeper_srvr(port: int) -> dict[str, str]:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as connection:
        connection.sendall(b"srvr")
        text = b"".join(iter(lambda: connection.recv(4096), b"")).decode()
    return dict(line.split(": ", 1) for line in text.splitlines() if ": " in line)


def etcd_put(address: str, key: str, value: str) -> int:
    """Put through etcd's v3 JSON gateway; the revision it answered."""
    body = json.dumps(
        {
            "key": base64.b64encode(key.encode()).decode(),
            "value": base64.b64encode(value.encode()).decode(),
        }
    ).encode()
    request = urllib.request.Request(f"http://{address}/v3/kv/put", data=body, method="POST")
    with urllib.request.urlopen(request, timeout=10) as answer:  # noqa: S310 - loopback
        return int(json.load(answer)["header"]["revision"])


class TestZooKeeper:
    def test_serves_on_loopback_with_fsync_and_leaves_nothing(self) -> None:
        """A ZooKeeper that serves, listens on loopback alone and says fsync is on; afterwards
        its process and its data are gone."""
        require("zookeeper")
        with _peers.zookeeper() as zk:
            host, port = zk.address.split(":")
            assert host == "127.0.0.1"
            assert zk.version.startswith("3.")
            assert "forceSync=yes" in zk.durability
            assert zookeeper_srvr(int(port))["Mode"] == "standalone"
            sockets = listening(zk.pid)
            assert (host, int(port)) in {(a.removeprefix("::ffff:"), p) for a, p in sockets}
            assert {address for address, _ in sockets} <= LOOPBACK
            assert (zk.data_dir / "version-2").is_dir()
        assert ended(zk.pid)
        assert not zk.data_dir.exists()


class TestEtcd:
    def test_serves_on_loopback_with_fsync_and_leaves_nothing(self) -> None:
        """An etcd that takes a write, listens on loopback alone and says fsync is on;
        afterwards its process and its data are gone."""
        require("etcd")
        with _peers.etcd() as peer:
            assert peer.address.startswith("127.0.0.1:")
            assert "fsynced" in peer.durability
            assert etcd_put(peer.address, "bench-test", "one") >= 2
            sockets = listening(peer.pid)
            assert ("127.0.0.1", int(peer.address.rsplit(":", 1)[1])) in sockets
            assert {address for address, _ in sockets} <= LOOPBACK
            assert (peer.data_dir / "member").is_dir()
        assert ended(peer.pid)
        assert not peer.data_dir.exists()
