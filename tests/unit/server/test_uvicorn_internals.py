"""The uvicorn internals `transport/_protocol.py` relies on, each pinned by name.

`LimitedProtocol` subclasses uvicorn's httptools protocol and reaches into it, hence the
`uvicorn<0.55` pin in pyproject.toml. tests/integration/server/test_protocol.py and
test_hostile.py pin what each internal is used for, over real sockets; these say which one
moved when an upgrade breaks: the hooks it overrides (their parameters, and that uvicorn still
calls them where it did), and the state it reads and writes, on a real uvicorn protocol fed a
real request.
"""

from __future__ import annotations

import asyncio
import inspect
from collections import deque
from typing import Any

import pytest
import uvicorn
from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle
from uvicorn.server import ServerState

from volcano_server._config import Limits
from volcano_server.transport._protocol import (
    BURST_PER_TURN,
    LimitedProtocol,
    Policy,
    protocol_class,
)

pytestmark = pytest.mark.anyio

# Each method of uvicorn's protocol that LimitedProtocol overrides, with uvicorn's parameters.
HOOKS = {
    "__init__": ["self", "config", "server_state", "app_state", "_loop"],
    "connection_made": ["self", "transport"],
    "connection_lost": ["self", "exc"],
    "data_received": ["self", "data"],
    "send_400_response": ["self", "msg"],
    "timeout_keep_alive_handler": ["self"],
    "on_message_begin": ["self"],
    "on_header": ["self", "name", "value"],
    "on_headers_complete": ["self"],
    "on_message_complete": ["self"],
    "on_body": ["self", "body"],
    "_start_asgi_task": ["self", "cycle", "app"],
    "on_response_complete": ["self"],
    "pause_writing": ["self"],
    "resume_writing": ["self"],
}

# Where uvicorn calls a hook of its own (not asyncio, not the parser): (caller, what it says).
CALLED = [
    ("data_received", "self.send_400_response("),  # a request it cannot parse
    ("on_response_complete", "self.timeout_keep_alive_handler"),  # the keep-alive timer
    ("on_headers_complete", "on_response=self.on_response_complete"),  # each cycle's end
    ("on_headers_complete", "flow=self.flow"),  # the cycle uses the protocol's flow control
    ("data_received", "self._unset_keepalive_if_required()"),  # a read stops the keep-alive
    ("on_headers_complete", "self._start_asgi_task(self.cycle, app)"),  # a request starts
    ("on_response_complete", "self._start_asgi_task(cycle, app)"),  # a pipelined one starts
    ("on_response_complete", "self.timeout_keep_alive_task ="),  # ... an answer starts it
]

# What LimitedProtocol reads of a request's cycle.
CYCLE = ["keep_alive", "more_body", "response_complete", "response_started", "disconnected"]


def test_the_protocol_subclasses_uvicorn_s_httptools_protocol() -> None:
    """Every hook below is reached through this base class."""
    assert issubclass(LimitedProtocol, HttpToolsProtocol)


@pytest.mark.parametrize("name", sorted(HOOKS))
def test_each_hook_overridden_is_uvicorn_s_with_its_parameters(name: str) -> None:
    """uvicorn's protocol still has the method LimitedProtocol overrides, same parameters."""
    method = getattr(HttpToolsProtocol, name, None)
    assert method is not None, f"uvicorn's HttpToolsProtocol has no {name} any more"
    assert list(inspect.signature(method).parameters) == HOOKS[name], name
    assert name in vars(LimitedProtocol), f"LimitedProtocol no longer overrides {name}"


@pytest.mark.parametrize(("caller", "call"), CALLED)
def test_uvicorn_still_calls_each_hook_where_it_did(caller: str, call: str) -> None:
    """A hook nobody calls would leave a limit silently unenforced."""
    source = inspect.getsource(getattr(HttpToolsProtocol, caller))
    assert call in source, f"uvicorn's {caller} no longer does {call!r}"


def test_flow_control_pauses_and_resumes_reading() -> None:
    """`_Flow` subclasses uvicorn's FlowControl and overrides its reading switches."""
    for name in ("pause_reading", "resume_reading"):
        assert list(inspect.signature(getattr(FlowControl, name)).parameters) == ["self"]
    assert list(inspect.signature(FlowControl).parameters) == ["transport"]


async def test_a_request_leaves_the_state_the_protocol_reads() -> None:
    """On a real uvicorn protocol fed a real request: `transport`, `loop`, `flow` once
    connected; `url`, `parser.get_method()` and `scope` by the end of the head; then `cycle`
    (with what LimitedProtocol reads of it, and the protocol's flow) and `pipeline`."""
    seen: dict[str, Any] = {}

    class Probe(HttpToolsProtocol):
        def on_headers_complete(self) -> None:
            seen["url"], seen["method"] = self.url, self.parser.get_method()
            seen["headers"] = list(self.headers)
            super().on_headers_complete()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    config = uvicorn.Config(app, log_level="critical", lifespan="off")
    loop = asyncio.get_running_loop()
    state = ServerState()
    protocol = Probe(config, state, {}, loop)
    recorder = _Transport()
    transport: Any = recorder
    protocol.connection_made(transport)
    assert protocol.transport is transport
    assert protocol.loop is loop
    assert isinstance(protocol.flow, FlowControl)
    assert isinstance(protocol.pipeline, deque)
    protocol.data_received(b"GET /v1/locks/k?x=1 HTTP/1.1\r\nHost: a\r\n\r\n")
    assert seen == {"url": b"/v1/locks/k?x=1", "method": b"GET", "headers": [(b"host", b"a")]}
    # What the protocol's own health answer reads and writes.
    assert isinstance(state.default_headers, list)  # uvicorn's server keeps `date` in it
    assert isinstance(state.total_requests, int)
    assert protocol.timeout_keep_alive == config.timeout_keep_alive
    assert protocol.timeout_keep_alive_task is None
    protocol._unset_keepalive_if_required()
    assert protocol.scope["method"] == "GET"
    assert protocol.scope["raw_path"] == b"/v1/locks/k"
    cycle = protocol.cycle
    assert isinstance(cycle, RequestResponseCycle)
    assert cycle.flow is protocol.flow
    assert isinstance(cycle.message_event, asyncio.Event)
    for name in CYCLE:
        assert isinstance(getattr(cycle, name), bool), name
    await asyncio.gather(*state.tasks)  # the app's answer
    assert cycle.response_complete
    assert recorder.written.startswith(b"HTTP/1.1 204 ")
    protocol.connection_lost(None)


class _Transport:
    """What uvicorn's protocol asks of a transport, recording what it writes."""

    def __init__(self) -> None:
        self.written = b""
        self.closing = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 50000), "sockname": ("127.0.0.1", 8080)}.get(
            name, default
        )

    def write(self, data: bytes) -> None:
        self.written += data

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0


async def test_reads_start_a_few_per_turn_and_lease_keeping_at_once() -> None:
    """On real protocols fed real requests in one turn of the loop: of 100 GETs, the first
    `BURST_PER_TURN` start at once and the rest in later turns; a POST fed after them starts
    at once, ahead of the GETs still waiting."""
    started: list[str] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        started.append(f"{scope['method']} {scope['path']}")
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    config = uvicorn.Config(app, log_level="critical", lifespan="off")
    config.load()
    state = ServerState()
    protocol = protocol_class(Policy(Limits(), report=lambda _record: None))

    connections = []
    for _ in range(101):
        transport: Any = _Transport()
        made = protocol(config, state, {}, asyncio.get_running_loop())
        made.connection_made(transport)
        connections.append(made)
    for _ in range(10):  # new connections are admitted a few per turn, too
        await asyncio.sleep(0)
    for n, made in enumerate(connections[:100]):
        made.data_received(b"GET /r%d HTTP/1.1\r\nHost: a\r\n\r\n" % n)
    assert len(state.tasks) == BURST_PER_TURN
    connections[100].data_received(b"POST /keep HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n")
    assert len(state.tasks) == BURST_PER_TURN + 1
    for _ in range(10):
        await asyncio.sleep(0)
    assert started[BURST_PER_TURN] == "POST /keep"
    assert sorted(started) == sorted(["POST /keep", *(f"GET /r{n}" for n in range(100))])
