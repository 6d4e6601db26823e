"""The peers Volcano is measured against, run locally: single-node ZooKeeper and etcd.

```python
from bench import _peers

_peers.install("zookeeper", "kazoo")      # what is missing: apt-get (as root) or pip
with _peers.zookeeper() as zk:            # a fresh single-node ZooKeeper
    KazooClient(hosts=zk.address)          # "127.0.0.1:PORT"
    print(zk.version, zk.durability)
```

Each server runs as a child process with its data in a temporary directory (removed when the
block ends), listens on loopback only, on a free port, and has fsync on: `Peer.durability`
says what an acknowledged write survives as configured here, for the report. Leaving the block
stops the server (SIGTERM, then SIGKILL after 10 s) and removes its data.

- ZooKeeper: Debian's `zookeeper` package (the jars; `zookeeperd` would add a system service
  on port 2181 of every interface, which a benchmark has no use for), run standalone by
  `ZooKeeperServerMain` with `forceSync=yes` (its default: the transaction log is fsynced
  before a write is acknowledged, group-committed), `clientPortAddress=127.0.0.1`, the admin
  HTTP server off.
- etcd: Debian's `etcd-server`, one member, client and peer URLs on 127.0.0.1, its default
  durability (the WAL is fsynced before a write is acknowledged; `--unsafe-no-fsync` not set).
- kazoo (PyPI): the Python ZooKeeper client whose recipes (Lock, Semaphore, Election) are the
  peers of Volcano's.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import attrs

__all__ = ["KAZOO_VERSION", "Peer", "PeerError", "etcd", "install", "installed", "zookeeper"]

KAZOO_VERSION = "2.11.0"
"""The kazoo release `install("kazoo")` fetches (the bench extra pins the same)."""

ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")
"""Debian's ZooKeeper server; its manifest's Class-Path names every jar it needs."""

START_TIMEOUT = 60.0
"""Seconds a peer may take to answer after it is started (a cold JVM on a busy machine)."""

STOP_TIMEOUT = 10.0
"""Seconds a peer has to exit after SIGTERM before it is killed."""

_APT_PACKAGES = {"zookeeper": "zookeeper", "etcd": "etcd-server"}


class PeerError(Exception):
    """A peer could not be installed or started; the message says why."""


@attrs.frozen
class Peer:
    """A running peer server."""

    name: str
    version: str
    address: str
    """Where clients connect: `127.0.0.1:PORT` (for etcd, `http://` goes in front)."""
    durability: str
    """What an acknowledged write survives, as this peer is configured here."""
    data_dir: Path
    log: Path
    pid: int


def installed(name: str) -> bool:
    """Whether `name` ("zookeeper", "etcd" or "kazoo") is ready to use here."""
    if name == "zookeeper":
        return ZOOKEEPER_JAR.exists() and shutil.which("java") is not None
    if name == "etcd":
        return shutil.which("etcd") is not None
    if name == "kazoo":
        return importlib.util.find_spec("kazoo") is not None
    raise ValueError(f"unknown peer {name!r}: zookeeper, etcd or kazoo")


def install(*names: str) -> None:
    """Install whichever of `names` is missing: apt-get for the servers (root only), pip for
    kazoo (into this interpreter's environment).

    Raises:
        PeerError: A missing server and no root to install it, or an install that failed.
    """
    missing = [name for name in names if not installed(name)]
    packages = [_APT_PACKAGES[name] for name in missing if name in _APT_PACKAGES]
    if packages:
        _apt_install(packages)
    if "kazoo" in missing:
        _run([sys.executable, "-m", "pip", "install", "--quiet", f"kazoo=={KAZOO_VERSION}"])
        importlib.invalidate_caches()
    still = [name for name in names if not installed(name)]
    if still:
        raise PeerError(f"still missing after installing: {', '.join(still)}")


@contextlib.contextmanager
def zookeeper() -> Iterator[Peer]:
    """A fresh single-node ZooKeeper on a loopback port, fsync on, stopped when the block ends."""
    if not installed("zookeeper"):
        raise PeerError("ZooKeeper is not installed: bench._peers.install('zookeeper')")
    with tempfile.TemporaryDirectory(prefix="volcano-bench-zk-") as directory:
        root = Path(directory)
        port = _free_port()
        config = root / "zoo.cfg"
        config.write_text(
            "\n".join(
                [
                    "tickTime=2000",
                    f"dataDir={root / 'data'}",
                    f"clientPort={port}",
                    "clientPortAddress=127.0.0.1",
                    "forceSync=yes",
                    "admin.enableServer=false",
                    "4lw.commands.whitelist=srvr",
                    "maxClientCnxns=0",
                    "",
                ]
            )
        )
        command = [
            "java",
            "-Xmx512m",
            f"-Dzookeeper.log.dir={root}",
            "-cp",
            str(ZOOKEEPER_JAR),
            "org.apache.zookeeper.server.ZooKeeperServerMain",
            str(config),
        ]
        log = root / "zookeeper.log"
        with _child(command, log) as process:
            # `ruok` answers imok before the server serves; `srvr` says so only once it does.
            _until_ready(process, log, lambda: _four_letters(port, "srvr").startswith("Zookeeper"))
            version = _four_letters(port, "srvr").splitlines()[0].split(":", 1)[1].strip()
            yield Peer(
                name="zookeeper",
                version=version.split("-", 1)[0],
                address=f"127.0.0.1:{port}",
                durability="forceSync=yes: the transaction log is fsynced (group commit) "
                "before a write is acknowledged",
                data_dir=root / "data",
                log=log,
                pid=process.pid,
            )


@contextlib.contextmanager
def etcd() -> Iterator[Peer]:
    """A fresh single-member etcd on loopback ports, fsync on, stopped when the block ends."""
    if not installed("etcd"):
        raise PeerError("etcd is not installed: bench._peers.install('etcd')")
    with tempfile.TemporaryDirectory(prefix="volcano-bench-etcd-") as directory:
        root = Path(directory)
        client, peer = f"http://127.0.0.1:{_free_port()}", f"http://127.0.0.1:{_free_port()}"
        command = [
            "etcd",
            "--name=bench",
            f"--data-dir={root / 'data'}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=bench={peer}",
            "--initial-cluster-state=new",
        ]
        log = root / "etcd.log"
        with _child(command, log) as process:
            _until_ready(
                process, log, lambda: _http_json(f"{client}/health").get("health") == "true"
            )
            version = str(_http_json(f"{client}/version").get("etcdserver", "?"))
            yield Peer(
                name="etcd",
                version=version,
                address=client.removeprefix("http://"),
                durability="the WAL is fsynced before a write is acknowledged (etcd's default;"
                " --unsafe-no-fsync not set)",
                data_dir=root / "data",
                log=log,
                pid=process.pid,
            )


@contextlib.contextmanager
def _child(command: list[str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """`command` as a child in a session of its own, its output in `log`; stopped at the end."""
    with log.open("wb") as out:
        try:
            process = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        except OSError as error:
            raise PeerError(f"{command[0]} did not start: {error}") from None
        try:
            yield process
        finally:
            _stop(process)


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def _until_ready(process: subprocess.Popen[bytes], log: Path, ready: Callable[[], bool]) -> None:
    name = log.stem
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise PeerError(f"{name} exited with {process.returncode}: {_tail(log)}")
        with contextlib.suppress(OSError, ValueError, IndexError):
            if ready():
                return
        time.sleep(0.1)
    raise PeerError(f"{name} did not answer within {START_TIMEOUT:g} s: {_tail(log)}")


def _four_letters(port: int, word: str) -> str:
    """ZooKeeper's four-letter command `word`, answered on its client port."""
    with socket.create_connection(("127.0.0.1", port), timeout=2) as connection:
        connection.sendall(word.encode())
        chunks = []
        while chunk := connection.recv(4096):
            chunks.append(chunk)
    return b"".join(chunks).decode()


def _http_json(url: str) -> dict[str, object]:
    with urllib.request.urlopen(url, timeout=2) as answer:  # noqa: S310 - a loopback http URL
        body: dict[str, object] = json.load(answer)
    return body


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def _apt_install(packages: list[str]) -> None:
    if os.geteuid() != 0:
        raise PeerError(
            f"{', '.join(packages)} missing, and installing needs root: "
            f"sudo apt-get install --no-install-recommends {' '.join(packages)}"
        )
    environment = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    command = ["apt-get", "install", "-y", "--no-install-recommends", *packages]
    if subprocess.run(command, env=environment, capture_output=True, check=False).returncode:
        _run(["apt-get", "update"], env=environment)  # a fresh machine has no package lists
        _run(command, env=environment)


def _run(command: list[str], env: dict[str, str] | None = None) -> None:
    result = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if result.returncode:
        raise PeerError(f"{' '.join(command)} failed: {result.stderr.strip()[-500:]}")


def _tail(log: Path) -> str:
    lines = log.read_text(errors="replace").strip().splitlines() if log.exists() else []
    return " | ".join(lines[-3:]) or "(no output)"
