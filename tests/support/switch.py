"""A userspace Ethernet switch between TAP devices, with faults on the links between its hosts.

    python -m tests.support.switch HOST:TAP=MAC [HOST:TAP=MAC ...]

Each HOST's port is a TAP device this process creates (named TAP, in its own network namespace;
the caller then moves it where the host lives, which keeps the device working) and whose frames
come from MAC. Frames are forwarded by destination MAC, broadcasts to every other port. Between
any two hosts, each way, a link can:

- delay every frame by a fixed time (order kept), and lose a share of them at random;
- be cut: frames vanish, with no RST, no FIN, no ICMP, no error on the sending host;
- be cut by a trigger: on a TCP flow from one host to another, the first frame carrying `fire`
  on a flow that has carried `arm` (that frame included) cuts both ways, and itself passes or
  vanishes. (Cut a database link during one request's COMMIT, or while a transaction holds a
  key's row lock.)

This is what `tc netem` and a drop rule would do, for a kernel without netem, classifiers or
iptables. Commands arrive as JSON lines on stdin, each answered by one JSON line on stdout:

    {"op": "link", "a": "b", "b": "db", "delay": 0.2, "loss": 0.05, "cut": false}  (both ways)
    {"op": "trigger", "src": "b", "dst": "db", "arm": "<text>", "fire": "COMMIT", "passes": true}
    {"op": "reset"}   every link clean again, every trigger gone
    {"op": "stats"}   frames forwarded and dropped per (src, dst), triggers fired

End of input (the test process ended, however) stops the switch; its TAP devices go with it.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import fcntl
import json
import os
import random
import struct
import sys
from typing import Any

import attrs

_TUNSETIFF = 0x400454CA
_IFF_TAP = 0x0002
_IFF_NO_PI = 0x1000
_BROADCAST_BIT = 0x01  # the group bit of a destination MAC's first octet
_READS_PER_TURN = 64


@attrs.define
class Link:
    """One direction between two ports."""

    delay: float = 0.0
    loss: float = 0.0
    cut: bool = False
    forwarded: int = 0
    dropped: int = 0
    queue: collections.deque[tuple[float, bytes]] = attrs.field(factory=collections.deque)


@attrs.define
class Trigger:
    """Cut src<->dst on the frame carrying `fire` that follows one carrying `arm` in its flow."""

    src: str
    dst: str
    arm: bytes
    fire: bytes
    passes: bool
    armed: set[tuple[bytes, bytes]] = attrs.field(factory=set)  # flows, by (src, dst) ip:port
    fired: bool = False


def open_tap(name: str) -> int:
    """A non-blocking file descriptor of a new TAP device `name` (gone when it is closed)."""
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    fcntl.ioctl(fd, _TUNSETIFF, struct.pack("16sH", name.encode(), _IFF_TAP | _IFF_NO_PI))
    return fd


def tcp_flow(frame: bytes) -> tuple[tuple[bytes, bytes], bytes] | None:
    """((source ip:port, destination ip:port), payload) of an IPv4 TCP frame, else None."""
    if frame[12:14] != b"\x08\x00" or frame[23] != 6:
        return None
    ip_start = 14
    tcp_start = ip_start + (frame[ip_start] & 0x0F) * 4
    payload_start = tcp_start + (frame[tcp_start + 12] >> 4) * 4
    flow = (
        frame[26:30] + frame[tcp_start : tcp_start + 2],
        frame[30:34] + frame[tcp_start + 2 : tcp_start + 4],
    )
    return flow, frame[payload_start:]


class Switch:
    """The ports, the links between them, and the forwarding loop."""

    def __init__(self, ports: dict[str, tuple[str, str]], seed: int = 16) -> None:
        """`ports`: host -> (TAP device name, MAC)."""
        self._fds = {host: open_tap(tap) for host, (tap, _) in ports.items()}
        self._by_mac = {
            bytes.fromhex(mac.replace(":", "")): host for host, (_, mac) in ports.items()
        }
        self._links: dict[tuple[str, str], Link] = {}
        self._triggers: list[Trigger] = []
        self._random = random.Random(seed)
        self._loop: asyncio.AbstractEventLoop | None = None

    def link(self, src: str, dst: str) -> Link:
        return self._links.setdefault((src, dst), Link())

    async def run(self) -> None:
        self._loop = asyncio.get_running_loop()
        for name, fd in self._fds.items():
            self._loop.add_reader(fd, self._read, name, fd)
        reader = asyncio.StreamReader()
        await self._loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        _answer({"ready": sorted(self._fds)})
        while line := await reader.readline():
            try:
                _answer(self.command(json.loads(line)))
            except (KeyError, TypeError, ValueError) as exc:
                _answer({"error": f"{type(exc).__name__}: {exc}"})

    def command(self, order: dict[str, Any]) -> dict[str, Any]:
        op = order["op"]
        if op == "link":
            for src, dst in ((order["a"], order["b"]), (order["b"], order["a"])):
                link = self.link(src, dst)
                link.delay = float(order.get("delay", link.delay))
                link.loss = float(order.get("loss", link.loss))
                link.cut = bool(order.get("cut", link.cut))
            return {"ok": True}
        if op == "trigger":
            self._triggers.append(
                Trigger(
                    order["src"],
                    order["dst"],
                    order["arm"].encode(),
                    order["fire"].encode(),
                    bool(order["passes"]),
                )
            )
            return {"ok": True}
        if op == "reset":
            for link in self._links.values():
                link.delay, link.loss, link.cut = 0.0, 0.0, False
            self._triggers.clear()
            return {"ok": True}
        if op == "stats":
            return {
                "links": {
                    f"{src}>{dst}": {"forwarded": link.forwarded, "dropped": link.dropped}
                    for (src, dst), link in sorted(self._links.items())
                },
                "fired": [t.fired for t in self._triggers],
            }
        raise ValueError(f"unknown op {op!r}")

    def _read(self, name: str, fd: int) -> None:
        for _ in range(_READS_PER_TURN):
            try:
                frame = os.read(fd, 65536)
            except BlockingIOError:
                return
            except OSError:  # the device went away with its namespace
                assert self._loop is not None
                self._loop.remove_reader(fd)
                return
            self._route(name, frame)

    def _route(self, src: str, frame: bytes) -> None:
        destination = frame[:6]
        if destination[0] & _BROADCAST_BIT:
            targets = [port for port in self._fds if port != src]
        else:
            port = self._by_mac.get(destination)
            targets = [port] if port is not None and port != src else []
        for dst in targets:
            self._send(src, dst, frame)

    def _send(self, src: str, dst: str, frame: bytes) -> None:
        link = self.link(src, dst)
        cut = link.cut or (self._triggers and not self._passes_triggers(src, dst, frame))
        if cut or (link.loss and self._random.random() < link.loss):
            link.dropped += 1
            return
        link.forwarded += 1
        if not link.delay:
            self._write(dst, frame)
            return
        assert self._loop is not None
        due = self._loop.time() + link.delay
        link.queue.append((due, frame))
        if len(link.queue) == 1:
            self._loop.call_at(due, self._drain, link, dst)

    def _passes_triggers(self, src: str, dst: str, frame: bytes) -> bool:
        """Watch the frame for armed triggers; False when a firing trigger swallows it."""
        parsed = None
        for trigger in self._triggers:
            if trigger.fired or (trigger.src, trigger.dst) != (src, dst):
                continue
            parsed = parsed or tcp_flow(frame)
            if parsed is None:
                continue
            flow, payload = parsed
            if trigger.arm in payload:
                trigger.armed.add(flow)
            if flow in trigger.armed and trigger.fire in payload:
                trigger.fired = True
                self.link(src, dst).cut = True
                self.link(dst, src).cut = True
                return trigger.passes
        return True

    def _drain(self, link: Link, dst: str) -> None:
        assert self._loop is not None
        now = self._loop.time()
        while link.queue and link.queue[0][0] <= now:
            self._write(dst, link.queue.popleft()[1])
        if link.queue:
            self._loop.call_at(link.queue[0][0], self._drain, link, dst)

    def _write(self, dst: str, frame: bytes) -> None:
        with contextlib.suppress(OSError):  # its host is gone: the frame is lost
            os.write(self._fds[dst], frame)


def _answer(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def main() -> None:
    ports = {}
    for argument in sys.argv[1:]:
        host, _, rest = argument.partition(":")
        tap, _, mac = rest.partition("=")
        ports[host] = (tap, mac)
    asyncio.run(Switch(ports).run())


if __name__ == "__main__":
    main()
