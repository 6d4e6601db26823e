"""The network lab itself: hosts in namespaces, and the faults its switch injects between them.

A TCP echo server runs on host `a`; the test process is host `here`. Timeouts are upper bounds
on what a working lab does far sooner; the one lower bound (a delayed round trip cannot be
faster than its delay) cannot be broken by a slow machine.
"""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import netlab
from tests.support.netlab import Lab, reap_stale

pytestmark = pytest.mark.netns

PORT = 7000
PATIENCE = 10.0
SILENCE = 1.0
"""How long a test listens to a black hole before concluding that nothing comes back."""

ECHO = f"""
import socket, sys, threading
server = socket.create_server(("0.0.0.0", {PORT}))
def serve(conn):
    with conn, open(sys.argv[1], "ab", buffering=0) as heard:
        while data := conn.recv(65536):
            heard.write(data)
            conn.sendall(data)
while True:
    threading.Thread(target=serve, args=(server.accept()[0],), daemon=True).start()
"""


@pytest.fixture(scope="module")
def heard(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Everything the echo server on a received."""
    return tmp_path_factory.mktemp("netlab") / "heard"


@pytest.fixture(scope="module")
def lab(heard: Path) -> Iterator[Lab]:
    netlab.require(netlab.unavailable())
    with Lab(["here", "a"]) as made:
        server = subprocess.Popen(made.python("a", "-c", ECHO, str(heard)))
        deadline = time.monotonic() + PATIENCE
        while True:
            try:
                socket.create_connection((made.address("a"), PORT), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise
                time.sleep(0.05)
        yield made
        server.kill()
        server.wait(PATIENCE)


@pytest.fixture(autouse=True)
def clean(lab: Lab) -> Iterator[None]:
    lab.reset()
    yield
    lab.reset()


def connect(lab: Lab) -> socket.socket:
    return socket.create_connection((lab.address("a"), PORT), timeout=PATIENCE)


def echo(conn: socket.socket, data: bytes) -> bytes:
    conn.sendall(data)
    received = b""
    while len(received) < len(data):
        chunk = conn.recv(65536)
        if not chunk:
            break
        received += chunk
    return received


class TestHosts:
    def test_hosts_talk_through_the_switch(self, lab: Lab) -> None:
        """A TCP round trip between here and a works, in both directions' bytes."""
        with connect(lab) as conn:
            assert echo(conn, b"x" * 100_000) == b"x" * 100_000
        forwarded = lab.stats()["links"]
        assert forwarded["here>a"]["forwarded"] > 0
        assert forwarded["a>here"]["forwarded"] > 0

    def test_each_host_has_its_own_namespace(self, lab: Lab) -> None:
        """a lives in a namespace of the lab's; here is the test process's own."""
        assert lab.namespace("here") is None
        namespace = lab.namespace("a")
        assert namespace is not None
        listed = subprocess.run(
            ["ip", "netns", "list"], capture_output=True, text=True, check=False
        )
        assert namespace in listed.stdout


class TestCut:
    def test_a_cut_link_swallows_an_established_connection_silently(self, lab: Lab) -> None:
        """Bytes sent across a cut vanish: no answer, no reset; after heal the connection
        carries on."""
        with connect(lab) as conn:
            lab.cut("here", "a")
            conn.sendall(b"lost")
            conn.settimeout(SILENCE)
            with pytest.raises(TimeoutError):
                conn.recv(10)
            lab.heal("here", "a")
            conn.settimeout(PATIENCE)
            assert conn.recv(10) == b"lost"  # retransmitted once the link is back

    def test_a_cut_link_never_refuses_a_connection(self, lab: Lab) -> None:
        """A connection attempt across a cut times out (no RST, no ICMP), never is refused."""
        lab.cut("here", "a")
        with pytest.raises(TimeoutError):
            socket.create_connection((lab.address("a"), PORT), timeout=SILENCE)
        assert lab.stats()["links"]["here>a"]["dropped"] > 0


class TestDelayAndLoss:
    def test_a_delayed_round_trip_takes_at_least_both_delays(self, lab: Lab) -> None:
        """0.1 s each way: a round trip cannot take less than 0.2 s."""
        with connect(lab) as conn:
            echo(conn, b"warm")
            lab.link("here", "a", delay=0.1)
            started = time.monotonic()
            assert echo(conn, b"ping") == b"ping"
            assert time.monotonic() - started >= 0.2

    def test_total_loss_is_a_black_hole(self, lab: Lab) -> None:
        """loss=1 drops every packet, and the switch counts them."""
        with connect(lab) as conn:
            lab.link("here", "a", loss=1.0)
            before = lab.stats()["links"]["here>a"]["dropped"]
            conn.sendall(b"lost")
            conn.settimeout(SILENCE)
            with pytest.raises(TimeoutError):
                conn.recv(10)
            assert lab.stats()["links"]["here>a"]["dropped"] > before

    def test_partial_loss_is_repaired_by_tcp(self, lab: Lab) -> None:
        """20% loss each way: TCP still delivers every byte, and some packets were dropped."""
        lab.link("here", "a", loss=0.2)
        with connect(lab) as conn:
            # Retransmission timers back off (1, 2, 4 s ... once the switch's latency under a
            # loaded machine has raised the estimate): a segment lost three times in a row can
            # stall longer than PATIENCE without anything being wrong.
            conn.settimeout(60.0)
            payload = bytes(range(256)) * 400
            assert echo(conn, payload) == payload
        links = lab.stats()["links"]
        assert links["here>a"]["dropped"] + links["a>here"]["dropped"] > 0


class TestTriggers:
    @pytest.mark.parametrize("passes", [True, False])
    def test_a_trigger_cuts_at_the_packet_that_fires_it(
        self, lab: Lab, heard: Path, passes: bool
    ) -> None:
        """Armed by one packet of a connection, fired by a later one: the link is cut from
        there, and the firing packet itself reaches the other host only if asked."""
        trigger = lab.cut_on("here", "a", arm="ARM", fire="FIRE", passes=passes)
        with connect(lab) as conn:
            assert echo(conn, b"FIRE before arming") == b"FIRE before arming"
            assert echo(conn, b"ARM") == b"ARM"
            assert not lab.fired(trigger)
            before = heard.read_bytes()
            conn.sendall(b"FIRE")
            conn.settimeout(SILENCE)
            with pytest.raises(TimeoutError):
                conn.recv(10)  # the link is cut either way: no echo comes back
            assert lab.fired(trigger)
            assert heard.read_bytes() == (before + b"FIRE" if passes else before)
            lab.heal("here", "a")
            conn.settimeout(PATIENCE)
            # Passed: the echo was on its way and is retransmitted. Swallowed: the FIRE is
            # retransmitted by the sender's TCP after heal, and echoed then.
            assert conn.recv(10) == b"FIRE"


class TestCleanup:
    def test_leaving_removes_namespaces_and_devices(self) -> None:
        """After the block: none of the lab's namespaces, none of its TAP devices."""
        netlab.require(netlab.unavailable())
        with Lab(["here", "x"]) as lab:
            namespace = lab.namespace("x")
            assert namespace is not None
            prefix = f"vk{lab.tag}x"
        listed = subprocess.run(
            ["ip", "netns", "list"], capture_output=True, text=True, check=False
        )
        assert namespace not in listed.stdout
        links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=False)
        assert prefix not in links.stdout

    def test_namespaces_of_a_dead_test_process_are_reaped(self) -> None:
        """A namespace left by a test process that died, and what runs in it, are removed by
        the next lab."""
        netlab.require(netlab.unavailable())
        dead = subprocess.Popen(["true"])
        dead.wait()
        name = f"volcano-lab-{dead.pid}l1-left"
        subprocess.run(["ip", "netns", "add", name], check=True)
        sleeper = subprocess.Popen(["ip", "netns", "exec", name, "sleep", "600"])
        try:
            reap_stale()
            listed = subprocess.run(
                ["ip", "netns", "list"], capture_output=True, text=True, check=False
            )
            assert name not in listed.stdout
            assert sleeper.wait(PATIENCE) == -9
        finally:
            if sleeper.poll() is None:
                sleeper.kill()
            subprocess.run(["ip", "netns", "del", name], capture_output=True, check=False)
        assert not Path(f"/run/netns/{name}").exists()
