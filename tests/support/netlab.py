"""Hosts on a network of their own, on this one machine: network namespaces joined by a switch.

    with Lab(["here", "a", "b", "db"]) as lab:
        server = lab.command("a", ["python", "-m", "volcano_server", "serve", ...])
        lab.cut("b", "db")                         # packets between b and db vanish
        lab.link("here", "a", delay=0.2, loss=0.05)
        lab.heal("b", "db")

Each host but `here` is a network namespace made for the lab (`ip netns`), with one interface,
`eth0`: a TAP device of the lab's userspace switch (`switch.py`), which carries every frame
between hosts and applies the faults. `here` is the test process's own namespace, joined to the
same network through one more TAP device, so the test itself (and processes it starts without
`command`) is a host too. Addresses come from 198.18.0.0/15 (reserved for network tests), one
/24 per lab not yet used on this machine; neighbours are static, so no ARP answer is ever
missing and a cut link is a pure black hole: no RST, no FIN, no "host unreachable".

Cleanup. Leaving the block kills every process in the lab's namespaces, deletes them and stops
the switch (its TAP devices vanish with it), whatever happened in the block. Processes started
with `command` also get SIGKILL when the test process dies, and the switch stops when its stdin
closes; namespaces left by a test process that was killed outright are reaped by the next lab.

Needs root, `ip`, `setpriv` and /dev/net/tun: `unavailable()` says what is missing, and
`require()` skips a test for that reason (fails it with VOLCANO_REQUIRE_NETNS=1, as in CI).
"""

from __future__ import annotations

import contextlib
import ipaddress
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from types import TracebackType
    from typing import Self

__all__ = ["Lab", "require", "unavailable"]

ROOT = Path(__file__).resolve().parents[2]
_PREFIX = "volcano-lab-"
_NAMESPACE = re.compile(rf"^{_PREFIX}(\d+)l")
_RANGE = ipaddress.ip_network("198.18.0.0/15")
_FIRST_HOST = 10
_COMMAND_SECONDS = 30.0


def unavailable() -> str | None:
    """Why this machine cannot run a lab, or None when it can."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "setpriv"):
        if shutil.which(tool) is None:
            return f"the {tool!r} command is missing"
    if not os.path.exists("/dev/net/tun"):
        return "/dev/net/tun is missing (no TAP devices)"
    probe = f"{_PREFIX}probe{os.getpid()}"
    made = subprocess.run(
        ["ip", "netns", "add", probe], capture_output=True, text=True, check=False
    )
    if made.returncode != 0:
        return f"ip netns add failed: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], check=False)
    return None


def require(reason: str | None) -> None:
    """Skip the test when `reason` (what the machine lacks) is set; fail it instead when
    VOLCANO_REQUIRE_NETNS=1, so CI on a machine that can run labs never skips them."""
    if reason is None:
        return
    if os.environ.get("VOLCANO_REQUIRE_NETNS") == "1":
        pytest.fail(f"{reason}; VOLCANO_REQUIRE_NETNS=1 demands the network tests", pytrace=False)
    pytest.skip(f"{reason}: the network tests cannot run on this machine")


def _ip(*args: str, namespace: str | None = None) -> None:
    command = ["ip", *(("-n", namespace) if namespace else ()), *args]
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=_COMMAND_SECONDS, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)}: {done.stderr.strip()}")


def _sysctl(namespace: str | None, setting: str) -> None:
    prefix = ["ip", "netns", "exec", namespace] if namespace else []
    subprocess.run([*prefix, "sysctl", "-qw", setting], check=True, capture_output=True, timeout=30)


def reap_stale() -> None:
    """Remove the namespaces (and their processes) of labs whose test process is gone."""
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    for line in listed.stdout.splitlines():
        name = line.split()[0] if line.strip() else ""
        match = _NAMESPACE.match(name)
        if match is not None and not Path(f"/proc/{match.group(1)}").exists():
            _remove_namespace(name)


def _remove_namespace(name: str) -> None:
    pids = subprocess.run(
        ["ip", "netns", "pids", name], capture_output=True, text=True, check=False
    )
    for pid in pids.stdout.split():
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(pid), signal.SIGKILL)
    subprocess.run(["ip", "netns", "del", name], capture_output=True, check=False)


def _free_subnet() -> ipaddress.IPv4Network:
    """A /24 of 198.18.0.0/15 that no address or route on this machine uses yet."""
    shown = subprocess.run(
        ["ip", "-4", "-o", "addr", "show"], capture_output=True, text=True, check=True
    ).stdout
    shown += subprocess.run(
        ["ip", "-4", "route", "show"], capture_output=True, text=True, check=True
    ).stdout
    subnets = list(_RANGE.subnets(new_prefix=24))
    start = os.getpid() % len(subnets)
    for index in range(len(subnets)):
        subnet = subnets[(start + index) % len(subnets)]
        if str(subnet.network_address).rsplit(".", 1)[0] + "." not in shown:
            return subnet
    raise RuntimeError("no free /24 in 198.18.0.0/15")


class Lab:
    """Hosts in network namespaces joined by the fault-injecting switch; a context manager."""

    _made = itertools.count(1)

    def __init__(self, hosts: Sequence[str]) -> None:
        self.hosts = list(hosts)
        # Names unique to this lab: the test process's pid (for reaping) and a serial number.
        self.tag = f"{os.getpid()}l{next(Lab._made)}"
        self.subnet = _free_subnet()
        self._addresses = {
            host: str(self.subnet.network_address + _FIRST_HOST + n)
            for n, host in enumerate(self.hosts)
        }
        self._macs = {host: f"02:76:6b:00:00:{_FIRST_HOST + n:02x}" for n, host in enumerate(hosts)}
        self._taps = {host: f"vk{self.tag}x{n}" for n, host in enumerate(self.hosts)}
        self._switch: subprocess.Popen[str] | None = None
        self._switch_lock = threading.Lock()
        self._namespaces: list[str] = []

    def namespace(self, host: str) -> str | None:
        """The host's namespace name; None for `here`, the test process's own."""
        return None if host == "here" else f"{_PREFIX}{self.tag}-{host}"

    def address(self, host: str) -> str:
        """The host's IPv4 address."""
        return self._addresses[host]

    def command(self, host: str, argv: Sequence[str], *, pdeathsig: str = "KILL") -> list[str]:
        """`argv` run on `host`, dying with the test process (`pdeathsig`)."""
        namespace = self.namespace(host)
        if namespace is None:
            return list(argv)
        return ["ip", "netns", "exec", namespace, "setpriv", "--pdeathsig", pdeathsig, "--", *argv]

    def python(self, host: str, *args: str) -> list[str]:
        """This interpreter on `host`, running `args`."""
        return self.command(host, [sys.executable, *args])

    # -- faults ------------------------------------------------------------------------------

    def cut(self, a: str, b: str) -> None:
        """Packets between `a` and `b` vanish, both ways, until `heal`."""
        self._order({"op": "link", "a": a, "b": b, "cut": True})

    def heal(self, a: str, b: str) -> None:
        """Undo `cut` and any trigger's cut between `a` and `b` (delay and loss stay)."""
        self._order({"op": "link", "a": a, "b": b, "cut": False})

    def link(self, a: str, b: str, *, delay: float = 0.0, loss: float = 0.0) -> None:
        """Delay each packet between `a` and `b` by `delay` s and lose a `loss` share, each way."""
        self._order({"op": "link", "a": a, "b": b, "delay": delay, "loss": loss})

    def cut_on(self, src: str, dst: str, *, arm: str, fire: str, passes: bool) -> int:
        """Cut `src`<->`dst` at the first packet from `src` carrying `fire` on a TCP connection
        that has carried `arm` (that packet included); it gets through if `passes`. Returns
        the trigger's number, for `fired`."""
        self._order(
            {"op": "trigger", "src": src, "dst": dst, "arm": arm, "fire": fire, "passes": passes}
        )
        return len(self.stats()["fired"]) - 1

    def fired(self, trigger: int) -> bool:
        """Whether trigger number `trigger` has cut its link."""
        return bool(self.stats()["fired"][trigger])

    def reset(self) -> None:
        """Every link clean again (no cut, delay or loss), every trigger gone."""
        self._order({"op": "reset"})

    def stats(self) -> dict[str, Any]:
        """Frames forwarded and dropped per direction ("a>b"), and which triggers fired."""
        return self._order({"op": "stats"})

    def _order(self, order: dict[str, Any]) -> dict[str, Any]:
        switch = self._switch
        assert switch is not None
        assert switch.stdin is not None
        assert switch.stdout is not None
        with self._switch_lock:
            switch.stdin.write(json.dumps(order) + "\n")
            switch.stdin.flush()
            answer: dict[str, Any] = json.loads(switch.stdout.readline() or '{"error": "gone"}')
        if "error" in answer:
            raise RuntimeError(f"the switch refused {order}: {answer['error']}")
        return answer

    # -- life cycle --------------------------------------------------------------------------

    def __enter__(self) -> Self:
        reap_stale()
        try:
            self._start_switch()
            for host in self.hosts:
                self._attach(host)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Kill the lab's processes, delete its namespaces, stop its switch."""
        for namespace in self._namespaces:
            _remove_namespace(namespace)
        self._namespaces.clear()
        switch, self._switch = self._switch, None
        if switch is not None:
            for stream in (switch.stdin, switch.stdout):
                if stream is not None:
                    stream.close()
            try:
                switch.wait(10)
            except subprocess.TimeoutExpired:
                switch.kill()
                switch.wait(10)

    def _start_switch(self) -> None:
        ports = [f"{host}:{self._taps[host]}={self._macs[host]}" for host in self.hosts]
        self._switch = subprocess.Popen(
            self.python("here", "-m", "tests.support.switch", *ports),
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        stdout: IO[str] | None = self._switch.stdout
        assert stdout is not None
        ready = stdout.readline()
        if not ready.startswith('{"ready"'):
            raise RuntimeError(f"the lab's switch did not start: {ready!r}")

    def _attach(self, host: str) -> None:
        """Give `host` its interface: address, MAC, static neighbours, no IPv6 chatter."""
        tap, namespace = self._taps[host], self.namespace(host)
        device = tap
        if namespace is not None:
            _ip("netns", "add", namespace)
            self._namespaces.append(namespace)
            _ip("link", "set", tap, "netns", namespace)
            _ip("link", "set", tap, "name", "eth0", namespace=namespace)
            _ip("link", "set", "lo", "up", namespace=namespace)
            device = "eth0"
        _sysctl(namespace, f"net.ipv6.conf.{device}.disable_ipv6=1")
        _ip("link", "set", device, "address", self._macs[host], namespace=namespace)
        prefix = self.subnet.prefixlen
        _ip("addr", "add", f"{self._addresses[host]}/{prefix}", "dev", device, namespace=namespace)
        _ip("link", "set", device, "up", namespace=namespace)
        for other in self.hosts:
            if other != host:
                _ip(
                    "neigh",
                    "replace",
                    self._addresses[other],
                    "lladdr",
                    self._macs[other],
                    "dev",
                    device,
                    "nud",
                    "permanent",
                    namespace=namespace,
                )
