"""Actions: what FaultProxy does with a request a rule selected, written against `Exchange`.

An action gets the request in hand as an `Exchange` and decides, in a few awaits, whether it
reaches the upstream, what (if anything) the client hears, and whether the connection stays.
Build them with the factories (`drop_response()`, `error_response()`...).
"""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Literal, Protocol

from tests.support._http11 import build_response
from tests.support._records import RecordedRequest

if TYPE_CHECKING:
    from tests.support._records import HeaderList, RecordedResponse

__all__ = [
    "Action",
    "Exchange",
    "Forward",
    "PartitionHold",
    "blackhole",
    "cut_after",
    "delay",
    "delay_response",
    "drop_response",
    "error_response",
    "html_error",
    "reset_before_forward",
]

_UUID = re.compile(r"[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}")


class Exchange(Protocol):
    """One request in the proxy's hands: the moves an action can make with it."""

    @property
    def request(self) -> RecordedRequest:
        """The request, as recorded."""
        ...

    @property
    def partitioned(self) -> bool:
        """Whether a partition is on right now."""
        ...

    async def forward(self) -> RecordedResponse | None:
        """Send the request upstream and read the whole response; None if the upstream failed."""
        ...

    async def reply(self, data: bytes, status: int, *, close: bool) -> bool:
        """Send `data` to the client (or hold, if partitioned); return whether to keep going."""
        ...

    async def disconnect(self, *, rst: bool) -> bool:
        """Close the client connection without a response (TCP reset if `rst`); returns False."""
        ...

    async def hold(self, *, partition: bool) -> bool:
        """Pass nothing until the client leaves or held connections are released; returns False."""
        ...

    async def close_upstream(self) -> None:
        """Close the connection to the upstream (FIN), abandoning any request on it."""
        ...


# --------------------------------------------------------------------------------------------
# The contract's error shape


def _request_id_for(request: RecordedRequest) -> str:
    """The request's X-Request-Id, spelled as sent, if it is a UUID (any case); else a new uuid4."""
    sent = request.header("X-Request-Id")
    if sent is not None and _UUID.fullmatch(sent):
        return sent
    return str(uuid.uuid4())


def _error_body(code: str, message: str, request_id: str) -> bytes:
    """The contract's error body: {"error": {"code", "message", "request_id"}} as JSON bytes."""
    error = {"code": code, "message": message, "request_id": request_id}
    return json.dumps({"error": error}).encode()


_DEFAULT_CODES = {
    400: "invalid_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "lock_held",
    413: "payload_too_large",
    422: "validation_error",
    429: "rate_limited",
    500: "internal",
    503: "unavailable",
}


# --------------------------------------------------------------------------------------------
# The actions


class Action:
    """What the proxy does with a request. Build one with the factories: forward(), respond()..."""

    name: ClassVar[str] = "action"

    async def run(self, exchange: Exchange) -> bool:
        """Handle `exchange.request`; return whether the client connection stays open."""
        raise NotImplementedError


@dataclass(frozen=True)
class Forward(Action):
    """Forward the request and the response unchanged."""

    name: ClassVar[str] = "forward"

    async def run(self, exchange: Exchange) -> bool:
        response = await exchange.forward()
        if response is None:  # the upstream failed: reset the client, as a dying server would
            return await exchange.disconnect(rst=True)
        return await exchange.reply(response.raw, response.status, close=response.closes)


@dataclass(frozen=True)
class DropResponse(Action):
    """Forward the request, read the whole response, then close the client connection silently."""

    name: ClassVar[str] = "drop_response"
    rst: bool = False
    """Close with a TCP reset instead of a FIN."""

    async def run(self, exchange: Exchange) -> bool:
        await exchange.forward()
        if exchange.partitioned:
            return await exchange.hold(partition=True)
        return await exchange.disconnect(rst=self.rst)


@dataclass(frozen=True)
class ResetBeforeForward(Action):
    """Close the client connection without forwarding the request."""

    name: ClassVar[str] = "reset_before_forward"
    rst: bool = True
    """Close with a TCP reset (the default) or, if False, with a FIN."""

    async def run(self, exchange: Exchange) -> bool:
        return await exchange.disconnect(rst=self.rst)


@dataclass(frozen=True)
class Respond(Action):
    """Answer from the proxy without forwarding (the base of the error answers)."""

    status: int
    body: bytes = b""
    headers: tuple[tuple[str, str], ...] = ()

    def render(self, rec: RecordedRequest) -> tuple[HeaderList, bytes]:
        """The headers and body to send for `rec`."""
        return list(self.headers), self.body

    async def run(self, exchange: Exchange) -> bool:
        rec = exchange.request
        headers, body = self.render(rec)
        close = rec.wants_close
        data = build_response(
            self.status, headers, body, close=close, head_only=rec.method == "HEAD"
        )
        return await exchange.reply(data, self.status, close=close)


@dataclass(frozen=True)
class ErrorResponse(Respond):
    """Answer with the contract's JSON error body and X-Request-Id header, without forwarding."""

    name: ClassVar[str] = "error_response"
    code: str = ""
    retry_after: int | None = None

    def render(self, rec: RecordedRequest) -> tuple[HeaderList, bytes]:
        """The contract's error for `rec`, echoing its X-Request-Id when that is a UUID."""
        request_id = _request_id_for(rec)
        headers: HeaderList = [
            ("Content-Type", "application/json"),
            ("X-Request-Id", request_id),
        ]
        if self.retry_after is not None:
            headers.append(("Retry-After", str(self.retry_after)))
        message = f"injected by FaultProxy: {self.status} {self.code}"
        return headers, _error_body(self.code, message, request_id)


@dataclass(frozen=True)
class HtmlError(Respond):
    """A non-JSON HTML error page, as a load balancer in front of the server would send."""

    name: ClassVar[str] = "html_error"


@dataclass(frozen=True)
class Delay(Action):
    """Hold the request for `seconds`, then forward it.

    The request is forwarded even if the client went away meanwhile (it was on the wire); the
    response then goes nowhere. A partition that starts during the delay holds the request.
    """

    name: ClassVar[str] = "delay"
    seconds: float

    async def run(self, exchange: Exchange) -> bool:
        await asyncio.sleep(self.seconds)
        if exchange.partitioned:
            return await exchange.hold(partition=True)
        return await Forward().run(exchange)


@dataclass(frozen=True)
class DelayResponse(Action):
    """Forward at once, then hold the upstream's response for `seconds` before sending it."""

    name: ClassVar[str] = "delay_response"
    seconds: float

    async def run(self, exchange: Exchange) -> bool:
        response = await exchange.forward()
        if response is None:  # the upstream failed: reset the client, as a dying server would
            return await exchange.disconnect(rst=True)
        await asyncio.sleep(self.seconds)
        return await exchange.reply(response.raw, response.status, close=response.closes)


@dataclass(frozen=True)
class CutAfter(Action):
    """Forward; if no answer came within `seconds`, close both connections (FIN), as a load
    balancer's idle timeout cuts a request that waits too long."""

    name: ClassVar[str] = "cut_after"
    seconds: float

    async def run(self, exchange: Exchange) -> bool:
        try:
            response = await asyncio.wait_for(exchange.forward(), self.seconds)
        except TimeoutError:
            await exchange.close_upstream()
            return await exchange.disconnect(rst=False)
        if response is None:
            return await exchange.disconnect(rst=True)
        return await exchange.reply(response.raw, response.status, close=response.closes)


@dataclass(frozen=True)
class Blackhole(Action):
    """Read the request, never forward nor answer it; hold the connection until heal() or stop."""

    name: ClassVar[str] = "blackhole"

    async def run(self, exchange: Exchange) -> bool:
        return await exchange.hold(partition=False)


@dataclass(frozen=True)
class PartitionHold(Action):
    """What a partition does to a request: hold it (not meant for rules)."""

    name: ClassVar[str] = "partition"

    async def run(self, exchange: Exchange) -> bool:
        return await exchange.hold(partition=True)


def drop_response(*, rst: bool = False) -> DropResponse:
    """Forward, let the upstream answer in full (it has committed), send the client nothing.

    The client connection is closed with a FIN (httpx: RemoteProtocolError), or with a TCP
    reset if `rst` (httpx: ReadError).
    """
    return DropResponse(rst=rst)


def reset_before_forward(*, rst: bool = True) -> ResetBeforeForward:
    """Close the client connection without forwarding: the request never reaches the upstream.

    A TCP reset by default (httpx: ReadError); `rst=False` closes with a FIN instead.
    """
    return ResetBeforeForward(rst=rst)


def error_response(
    status: int, *, retry_after: int | Literal["auto"] | None = "auto"
) -> ErrorResponse:
    """Answer with the contract's JSON error, without forwarding.

    The body is {"error": {"code", "message", "request_id"}}, the code the contract's for
    `status` (503 -> unavailable), and the X-Request-Id response header echoes the request's
    X-Request-Id when it is a UUID, else a fresh uuid4.

    Args:
        status: the status code.
        retry_after: Retry-After seconds; "auto" sends 1 for 429, 503 and lock_held, None omits it.
    """
    code = _DEFAULT_CODES.get(status, "internal")
    if retry_after == "auto":
        retry_after = 1 if status in (429, 503) or code == "lock_held" else None
    return ErrorResponse(status=status, code=code, retry_after=retry_after)


def html_error(status: int) -> HtmlError:
    """Answer with a small HTML error page (not JSON), like a load balancer, without forwarding."""
    title = f"{status} Service Temporarily Unavailable" if status == 503 else f"{status} Error"
    page = f"<html><head><title>{title}</title></head><body><h1>{title}</h1></body></html>\n"
    return HtmlError(status=status, body=page.encode(), headers=(("Content-Type", "text/html"),))


def delay(seconds: float) -> Delay:
    """Hold the request `seconds` before forwarding it: a slow link.

    The upstream sees the request only after the delay, even if the client gave up meanwhile.
    """
    return Delay(seconds=seconds)


def delay_response(seconds: float) -> DelayResponse:
    """Forward at once and hold the response `seconds`: a slow server that has already committed."""
    return DelayResponse(seconds=seconds)


def cut_after(seconds: float) -> CutAfter:
    """Forward, and cut both connections if no answer came within `seconds`."""
    return CutAfter(seconds=seconds)


def blackhole() -> Blackhole:
    """Read the request, then neither forward nor answer it, holding the connection open."""
    return Blackhole()
