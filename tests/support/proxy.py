"""FaultProxy: a real HTTP/1.1 proxy that injects faults between a real client and a real server.

    with FaultProxy(upstream=server_url) as proxy:
        proxy.on("POST", r"/acquire$").drop_response()  # server commits, client hears nothing
        client = volcano.Client(api_url=proxy.url, ...)
        ...
        [first, retry] = proxy.wait_until(lambda records: len(records) >= 2)
        assert retry.raw == first.raw  # byte-identical retry

The proxy listens on 127.0.0.1 (a free port by default) and runs an asyncio event loop in its own
thread. Each client connection gets its own upstream connection, opened on the first request that
is forwarded and reopened if the upstream closes it while idle. Requests are parsed one at a time
(keep-alive, pipelining and `Connection: close` work as in HTTP/1.1), recorded in `proxy.requests`,
and matched against the rules in order; the first rule that matches and is not used up decides
what happens; with no match the request is forwarded. Bytes are forwarded exactly as received,
both ways, Host header included.

Actions (factories in _actions.py), each a method of `proxy.on(method, path_regex)`, which
applies it to the next matching request (`times=2` to the next two, `times=None` forever):

    drop_response(rst=False)         forward, read the whole response, close without a word
    reset_before_forward(rst=True)   close the client connection, never forward
    error_response(503)              answer the contract's JSON error, X-Request-Id echoed
    html_error(503)                  answer an HTML page, as a load balancer would
    delay(seconds)                   hold the request, then forward it
    delay_response(seconds)          forward at once, hold the response
    cut_after(seconds)               forward; no answer within `seconds`: close both sides
    blackhole()                      read the request, never forward nor answer

Without a matching rule a request is forwarded unchanged.

Partition: `proxy.partition()` cuts all traffic. Requests on existing connections and on new ones
are read, recorded with action "partition", and never forwarded nor answered; a response that
arrives from the upstream while partitioned is withheld. New TCP connections are accepted and
their requests held (the client times out, as across a real partition). `proxy.heal()` lets
traffic pass again and closes every held connection without a response (blackholed ones
included); by then their clients have usually timed out.

Limitations: messages are buffered whole (fine for test-sized bodies); `Expect: 100-continue`
is not honoured (the proxy waits for the body); a `101 Switching Protocols` response and upstream
failures (refused connection, a close before the end of the response, a malformed response) close
the client connection with a TCP reset and set `RecordedRequest.error`; malformed requests get a
400 from the proxy and are noted in `proxy.errors`, not in `proxy.requests`.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import re
import socket
import struct
import threading
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from tests.support._actions import Action, Forward, PartitionHold
from tests.support._http11 import (
    ProtocolError,
    build_response,
    read_body,
    read_head,
    request_framing,
    response_framing,
    wants_close,
)
from tests.support._records import RecordedRequest, RecordedResponse
from tests.support._rules import Match, Rule, RuleBuilder

if TYPE_CHECKING:
    from collections.abc import Callable
    from types import TracebackType
    from typing import Self

__all__ = ["FaultProxy", "RecordedRequest", "RecordedResponse"]

logger = logging.getLogger(__name__)

_STREAM_LIMIT = 1 << 20  # longest head or chunk-size line the proxy accepts
_CLOSE_TIMEOUT = 5.0
_LOOP_CALL_TIMEOUT = 10.0


# --------------------------------------------------------------------------------------------
# The proxy


class _Connection:
    """One client connection and the upstream connection that serves it."""

    def __init__(
        self, conn_id: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        self.id = conn_id
        self.reader = reader
        self.writer = writer
        self.up_reader: asyncio.StreamReader | None = None
        self.up_writer: asyncio.StreamWriter | None = None

    @property
    def upstream_usable(self) -> bool:
        """Whether the upstream connection is open and has not been closed by the upstream."""
        return (
            self.up_reader is not None
            and self.up_writer is not None
            and not self.up_writer.is_closing()
            and not self.up_reader.at_eof()
            and self.up_reader.exception() is None
        )

    async def upstream_streams(
        self, address: tuple[str, int], connect_timeout: float
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """The upstream streams, (re)connecting if there are none or the upstream closed them."""
        if self.up_reader is not None and self.up_writer is not None and self.upstream_usable:
            return self.up_reader, self.up_writer
        await self.close_upstream()
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(*address, limit=_STREAM_LIMIT), connect_timeout
        )
        self.up_reader, self.up_writer = reader, writer
        return reader, writer

    async def close_upstream(self, *, rst: bool = False) -> None:
        if self.up_writer is not None:
            writer, self.up_writer, self.up_reader = self.up_writer, None, None
            await _close_stream(writer, rst=rst)

    async def close(self) -> None:
        try:
            await _close_stream(self.writer)
        finally:
            await self.close_upstream()


async def _close_stream(writer: asyncio.StreamWriter, *, rst: bool = False) -> None:
    """Close a stream (with a TCP reset if `rst`) and wait until its socket is closed."""
    if rst and not writer.is_closing():
        sock = writer.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()
    else:
        writer.close()
    try:
        await asyncio.wait_for(writer.wait_closed(), _CLOSE_TIMEOUT)
    except (OSError, TimeoutError):
        writer.transport.abort()
    except asyncio.CancelledError:  # the proxy is stopping: never leave the socket open
        writer.transport.abort()
        raise


async def _discard_until_eof(reader: asyncio.StreamReader) -> None:
    with contextlib.suppress(OSError):
        while await reader.read(65536):
            pass


async def _read_response(reader: asyncio.StreamReader, method: str) -> RecordedResponse:
    """Read one final response (after any 1xx ones) to a request with `method`."""
    interim = b""
    while True:
        head = await read_head(reader)
        if head is None:
            raise ProtocolError("upstream closed the connection without a response")
        version, _, rest = head.start_line.partition(" ")
        status_text, _, reason = rest.partition(" ")
        if not version.startswith("HTTP/1.") or not status_text.isdigit():
            raise ProtocolError(f"malformed status line {head.start_line!r}")
        status = int(status_text)
        if status == 101:
            raise ProtocolError("101 Switching Protocols is not supported")
        if 100 <= status < 200:
            interim += head.raw
            continue
        framing = response_framing(method, status, head.headers)
        raw_body, body = await read_body(reader, framing)
        return RecordedResponse(
            version=version,
            status=status,
            reason=reason,
            headers=head.headers,
            body=body,
            head=head.raw,
            raw_body=raw_body,
            interim=interim,
            closes=framing[0] == "until_close" or wants_close(version, head.headers),
        )


_UPSTREAM_ERRORS = (OSError, TimeoutError, ProtocolError, asyncio.IncompleteReadError)


class FaultProxy:
    """A fault-injecting HTTP/1.1 proxy on 127.0.0.1, running in a background thread.

    Use it as a context manager (or call start() and stop()); everything it opened is closed
    when it stops. All public methods are thread-safe.

    Args:
        upstream: where to forward, as a URL: "http://host:port".
    """

    host = "127.0.0.1"
    connect_timeout = 5.0
    """Seconds to wait for a connection to the upstream."""

    def __init__(self, upstream: str) -> None:
        self.upstream: tuple[str, int] = _parse_upstream(upstream)
        self._port: int | None = None
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._rules: list[Rule] = []
        self._records: list[RecordedRequest] = []
        self._errors: list[str] = []
        self._partitioned = False
        self._conn_ids = itertools.count(1)
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready = threading.Event()
        self._start_error: BaseException | None = None
        self._stop_requested: asyncio.Event | None = None
        self._release: asyncio.Event | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closing = False

    # ---- lifecycle

    def start(self) -> Self:
        """Start listening and serving in a background thread; returns self.

        Raises:
            RuntimeError: already started.
            OSError: the address could not be bound.
        """
        if self._thread is not None:
            raise RuntimeError("FaultProxy already started")
        self._thread = threading.Thread(target=self._run, name="FaultProxy", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._start_error is not None:
            self._thread.join()
            raise self._start_error
        return self

    def stop(self) -> None:
        """Stop: close the listening socket and every connection, then end the thread.

        Held and delayed requests are abandoned (their clients see the connection close).
        Calling it again does nothing.

        Raises:
            RuntimeError: called from the proxy's own thread (a rule predicate), or the thread
                did not end.
        """
        thread = self._thread
        if thread is None or not thread.is_alive():
            return
        if threading.current_thread() is thread:
            raise RuntimeError("FaultProxy.stop() called from the proxy's own thread")
        loop, stop_requested = self._loop, self._stop_requested
        if loop is not None and stop_requested is not None:
            with contextlib.suppress(RuntimeError):  # the loop has already closed
                loop.call_soon_threadsafe(stop_requested.set)
        thread.join(_LOOP_CALL_TIMEOUT + _CLOSE_TIMEOUT)
        if thread.is_alive():
            raise RuntimeError("FaultProxy thread did not stop")

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        where = self.url if self._port is not None else "not started"
        upstream_host, upstream_port = self.upstream
        return f"<FaultProxy {where} -> {upstream_host}:{upstream_port}>"

    @property
    def port(self) -> int:
        """The port the proxy listens on."""
        if self._port is None:
            raise RuntimeError("FaultProxy not started")
        return self._port

    @property
    def url(self) -> str:
        """The proxy's base URL, e.g. http://127.0.0.1:41234 (no trailing slash)."""
        return f"http://{self.host}:{self.port}"

    # ---- rules

    def on(
        self, method: str | None = None, path: str | re.Pattern[str] | None = None
    ) -> RuleBuilder:
        """Start a rule for requests matching method and path regex (re.search).

        Rules are tried in the order added; the first that matches and is not used up applies.
        """
        return RuleBuilder(self, Match(method=method, path=path))

    def _add_rule(self, match: Match, action: Action, times: int | None) -> Rule:
        if times is not None and times < 1:
            raise ValueError(f"times must be at least 1 or None, not {times}")
        rule = Rule(match=match, action=action, times=times)
        with self._lock:
            self._rules.append(rule)
        return rule

    # ---- partition

    def partition(self) -> None:
        """Cut all traffic until heal(); takes effect for every request read from now on."""
        with self._lock:
            self._partitioned = True

    def heal(self) -> None:
        """End the partition, and close every held connection (see release_held())."""
        with self._lock:
            self._partitioned = False
        self.release_held()

    def release_held(self) -> None:
        """Close, without a response, every connection held by a partition or a blackhole."""
        self._call_in_loop(self._release_held)

    @property
    def partitioned(self) -> bool:
        """Whether a partition is on."""
        with self._lock:
            return self._partitioned

    # ---- recording

    @property
    def requests(self) -> list[RecordedRequest]:
        """A snapshot of the requests received so far, in order of arrival."""
        with self._lock:
            return list(self._records)

    @property
    def errors(self) -> list[str]:
        """Problems the proxy met outside any recorded request (malformed requests, bugs)."""
        with self._lock:
            return list(self._errors)

    def wait_until(
        self,
        predicate: Callable[[list[RecordedRequest]], bool],
        timeout: float = 10.0,
        what: str = "the condition",
    ) -> list[RecordedRequest]:
        """Wait until `predicate(requests)` holds; re-checked whenever a request changes state.

        Raises:
            TimeoutError: it did not hold within `timeout` seconds.
        """
        with self._changed:
            if not self._changed.wait_for(lambda: predicate(list(self._records)), timeout):
                raise TimeoutError(
                    f"FaultProxy: {what} not reached within {timeout}s; "
                    f"requests so far: {self._records!r}"
                )
            return list(self._records)

    # ---- the event loop thread

    def _run(self) -> None:
        try:
            with asyncio.Runner(loop_factory=asyncio.SelectorEventLoop) as runner:
                self._loop = runner.get_loop()
                runner.run(self._serve())
        except BaseException as exc:
            if not self._ready.is_set():
                self._start_error = exc  # start() raises it in the caller's thread
            else:
                logger.exception("FaultProxy: event loop crashed")
                self._note_error(f"event loop crashed: {exc!r}")
        finally:
            self._ready.set()

    async def _serve(self) -> None:
        self._stop_requested = asyncio.Event()
        self._release = asyncio.Event()
        server = await asyncio.start_server(self._on_client, self.host, 0, limit=_STREAM_LIMIT)
        try:
            self._port = server.sockets[0].getsockname()[1]
            self._ready.set()
            await self._stop_requested.wait()
        finally:
            self._closing = True
            server.close()
            await server.wait_closed()
            for _ in range(3):  # let connections accepted just before close() register
                await asyncio.sleep(0)
            while self._tasks:
                tasks = list(self._tasks)
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)

    def _release_held(self) -> None:
        release, self._release = self._release, asyncio.Event()
        if release is not None:
            release.set()

    def _call_in_loop(self, fn: Callable[[], None]) -> None:
        """Run `fn` on the proxy's loop and wait for it (no-op if the loop is not running)."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None or not thread.is_alive():
            return
        if threading.current_thread() is thread:
            fn()
            return
        finished = threading.Event()

        def run() -> None:
            try:
                fn()
            finally:
                finished.set()

        try:
            loop.call_soon_threadsafe(run)
        except RuntimeError:  # the loop has closed meanwhile
            return
        finished.wait(_LOOP_CALL_TIMEOUT)

    def _note_error(self, message: str) -> None:
        logger.warning("FaultProxy: %s", message)
        with self._lock:
            self._errors.append(message)

    def _update(self, rec: RecordedRequest, **changes: Any) -> None:
        with self._changed:
            for name, value in changes.items():
                setattr(rec, name, value)
            self._changed.notify_all()

    # ---- one client connection

    async def _on_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        conn = _Connection(next(self._conn_ids), reader, writer)
        try:
            if not self._closing:
                await self._serve_connection(conn)
        except asyncio.CancelledError:
            # stop() cancels handlers; ending quietly keeps asyncio's streams code (3.11)
            # from logging every cancelled handler as an error.
            pass
        except Exception:
            logger.exception("FaultProxy: connection %d failed", conn.id)
            self._note_error(f"connection {conn.id}: internal error (see the log)")
        finally:
            with contextlib.suppress(asyncio.CancelledError):  # same reason
                await conn.close()
            if task is not None:
                self._tasks.discard(task)

    async def _serve_connection(self, conn: _Connection) -> None:
        while True:
            rec = await self._read_request(conn)
            if rec is None:
                return
            action = self._choose_action(rec)
            try:
                keep_open = await action.run(_Exchange(self, conn, rec))
            finally:
                if rec.outcome in ("pending", "held"):
                    self._update(rec, outcome="closed")
                rec.done.set()
            if not keep_open:
                return

    async def _read_request(self, conn: _Connection) -> RecordedRequest | None:
        """Read the next request, or None when the client closed or sent garbage."""
        try:
            head = await read_head(conn.reader)
            if head is None:
                return None
            method, target, version = _parse_request_line(head.start_line)
            raw_body, body = await read_body(conn.reader, request_framing(head.headers))
        except ProtocolError as exc:
            self._note_error(f"connection {conn.id}: bad request: {exc}")
            with contextlib.suppress(OSError):
                conn.writer.write(build_response(400, [], str(exc).encode(), close=True))
                await conn.writer.drain()
            return None
        except (OSError, asyncio.IncompleteReadError):
            return None
        return RecordedRequest(
            seq=-1,
            connection_id=conn.id,
            method=method,
            target=target,
            version=version,
            headers=head.headers,
            body=body,
            head=head.raw,
            raw_body=raw_body,
        )

    def _choose_action(self, rec: RecordedRequest) -> Action:
        """Record `rec` and pick what to do with it: partition, the first live rule, or forward."""
        with self._changed:
            rec.seq = len(self._records)
            action: Action = Forward()
            if self._partitioned:
                action = PartitionHold()
            else:
                for rule in self._rules:
                    if not rule.exhausted and rule.match(rec):
                        rule.hits += 1
                        action = rule.action
                        break
            rec.action = action.name
            self._records.append(rec)
            self._changed.notify_all()
        logger.debug("FaultProxy: %s %s -> %s", rec.method, rec.target, rec.action)
        return action


class _Exchange:
    """The `Exchange` the proxy hands to an action: one request on one client connection."""

    def __init__(self, proxy: FaultProxy, conn: _Connection, request: RecordedRequest) -> None:
        self._proxy = proxy
        self._conn = conn
        self._request = request

    @property
    def request(self) -> RecordedRequest:
        return self._request

    @property
    def partitioned(self) -> bool:
        return self._proxy.partitioned

    def _update(self, **changes: Any) -> None:
        self._proxy._update(self._request, **changes)

    async def forward(self) -> RecordedResponse | None:
        conn, rec = self._conn, self._request
        try:
            reader, writer = await conn.upstream_streams(
                self._proxy.upstream, self._proxy.connect_timeout
            )
            writer.write(rec.raw)
            await writer.drain()
            response = await _read_response(reader, rec.method)
        except _UPSTREAM_ERRORS as exc:
            self._update(error=f"upstream: {exc!r}")
            await conn.close_upstream(rst=True)
            return None
        self._update(upstream_response=response)
        if response.closes or rec.wants_close:
            await conn.close_upstream()
        return response

    async def reply(self, data: bytes, status: int, *, close: bool) -> bool:
        if self.partitioned:
            return await self.hold(partition=True)
        # Recorded first, so a client that has its response also finds it in the record.
        self._update(outcome="responded", client_status=status)
        try:
            self._conn.writer.write(data)
            await self._conn.writer.drain()
        except OSError as exc:
            self._update(outcome="closed", client_status=None, error=f"client: {exc!r}")
            return False
        return not (close or self._request.wants_close)

    async def disconnect(self, *, rst: bool) -> bool:
        self._update(outcome="closed")
        await _close_stream(self._conn.writer, rst=rst)
        return False

    async def close_upstream(self) -> None:
        await self._conn.close_upstream()

    async def hold(self, *, partition: bool) -> bool:
        # Taken before any await, so a heal() racing with this call still releases it.
        release = self._proxy._release
        if release is None:
            raise RuntimeError("FaultProxy is not running")
        self._update(outcome="held", partitioned=self._request.partitioned or partition)
        waiters = [
            asyncio.ensure_future(_discard_until_eof(self._conn.reader)),
            asyncio.ensure_future(release.wait()),
        ]
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()
            await asyncio.gather(*waiters, return_exceptions=True)
        self._update(outcome="closed")
        return False


def _parse_request_line(line: str) -> tuple[str, str, str]:
    parts = line.split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1.") or not parts[0] or not parts[1]:
        raise ProtocolError(f"malformed request line {line!r}")
    method, target, version = parts
    return method, target, version


def _parse_upstream(upstream: str) -> tuple[str, int]:
    parts = urlsplit(upstream)
    if parts.scheme != "http" or not parts.hostname or not parts.port:
        raise ValueError(f"upstream must be an http://host:port URL, not {upstream!r}")
    return parts.hostname, parts.port
