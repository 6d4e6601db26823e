"""Request handling: judge a request in the contract's order, run its operation, answer.

Order of judgement: routing (404/405, in `_routing`) -> credentials (401/403) -> headers (400)
-> rate limit (429) -> body (400/413) -> schema, path key included (422) -> the project's share
of open requests (429, `_shares`) -> the operation (200/204/409, or 503 when storage is
unavailable). Every answer carries `X-Request-Id`.

Each request is judged once, on the event loop. Storage work (a key lookup, the operation's
transaction) is first tried on the loop without waiting, when the storage runs inline (SQLite),
and only what would have to wait is repeated in a worker thread, so a locked database, a busy
pool or a slow network never stalls the event loop. A waiting acquire joins the key's queue in
its transaction and then waits on the loop, costing no thread (`locks._waiters`).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
import urllib.parse
import uuid
from collections.abc import Callable
from typing import Any

import anyio
import anyio.to_thread
import attrs
from starlette.datastructures import Headers
from starlette.types import Message, Receive, Scope, Send

from .._config import Quotas
from ..locks import _batch
from ..locks._admission import KEY_LOOKUP, Admission, Job
from ..locks._offload import Runner
from ..locks._transactions import Caller
from ..telemetry._accesslog import AccessLog, RequestRecord
from ..telemetry._logs import Throttle
from ..telemetry._metrics import Metrics
from ..telemetry._tracing import Tracing
from ..transport._seats import KEYED
from ..wire._errors import ApiError
from ..wire._wire import HEALTH_BODY, Answer, dumps
from ._auth import Authenticator, Principal
from ._headers import check_content_encoding, credentials
from ._operations import OPERATIONS, Parts
from ._ratelimit import RateLimiter
from ._routing import raw_segments
from ._schema import ValidationFailure, Validator
from ._shares import ProjectShares
from ._spec import Operation

__all__ = ["HANDLED_OPERATIONS", "Api"]

log = logging.getLogger("volcano_server")

_JSON = (b"content-type", b"application/json")
_NO_STORE = (b"cache-control", b"no-store")
_HEALTH = Answer(200, HEALTH_BODY)
_INTERNAL = ApiError.internal()
# The longest a request waits for the waiters it granted to be answered before its own answer.
_AFTER_WAITERS_SECONDS = 1.0

HANDLED_OPERATIONS = frozenset({*OPERATIONS, "getHealth"})
# Operations whose bodies may be larger than the rest: up to 500 entries of a batch.
_BATCHES = frozenset({"renewLeases"})
# Operations whose bodies may be as large as a group body: capabilities, or many memberships.
_GROUP_BODIES = frozenset({"joinGroup", "updateCapabilities", "renewMemberships"})
_LARGE_BODIES = _BATCHES | _GROUP_BODIES  # judged in a worker thread


class _ClientGone(Exception):
    """The client disconnected before it could be answered."""


@attrs.frozen
class _Request:
    """What the event loop gathered about a request, still unjudged."""

    operation: Operation
    params: dict[str, str]
    headers: Headers
    request_id: str
    replayable: bool
    body: bytes | None  # None when over the size limit
    body_limit: int
    query: bytes = b""  # the query string as sent


class Api:
    """The endpoints of the spec's operations."""

    def __init__(
        self,
        parts: Parts,
        authenticator: Authenticator,
        request_id: Validator,
        *,
        max_body_bytes: int,
        max_batch_body_bytes: int,
        quotas: Quotas,
        admission: Admission,
        max_group_body_bytes: int,
        rate_limiter: RateLimiter | None,
        shares: ProjectShares,
        metrics: Metrics,
        access_log: AccessLog,
        run: Runner,
        monotonic: Callable[[], float],
        tracing: Tracing | None = None,
    ) -> None:
        """`monotonic` is the clock the storage reads an answer's `clock_at` on."""
        self._parts = parts
        self._monotonic = monotonic
        self._auth = authenticator
        self._request_id = request_id
        self._max_body = max_body_bytes
        self._max_batch_body = max_batch_body_bytes
        self._quotas = quotas
        self._admission = admission
        self._max_group_body = max_group_body_bytes
        self._limiter = rate_limiter
        self._shares = shares
        self._metrics = metrics
        self._report = access_log
        self._run = run
        self._tracing = tracing
        self._internal_errors = Throttle()
        # Chosen once: untraced requests pay nothing for tracing.
        self.endpoint = self._serve if tracing is None else self._traced

    async def _traced(
        self,
        operation: Operation,
        params: dict[str, str],
        scope: Scope,
        receive: Receive,
        send: Send,
    ) -> None:
        """`_serve` in a span of its own (a lock operation's, not a health probe's)."""
        tracing = self._tracing
        if tracing is None or not operation.authenticated:
            await self._serve(operation, params, scope, receive, send)
            return
        with tracing.request(operation, params, scope) as span:

            async def answer(message: Message) -> None:
                if message["type"] == "http.response.start":
                    headers = dict(message["headers"])
                    request_id = headers[b"x-request-id"].decode("latin-1")
                    tracing.answered(span, message["status"], request_id)
                await send(message)

            await self._serve(operation, params, scope, receive, answer)

    async def _serve(
        self,
        operation: Operation,
        params: dict[str, str],
        scope: Scope,
        receive: Receive,
        send: Send,
    ) -> None:
        """Judge and run one request of `operation`."""
        started = time.perf_counter()
        headers = Headers(scope=scope)
        request_id, replayable, malformed = self._identify(
            headers, declared="x-request-id" in operation.headers
        )
        with self._run.serving():
            try:
                if not operation.authenticated:
                    answer = _HEALTH
                else:
                    principal = await self._admit(headers, malformed, scope)
                    large = operation.operation_id in _LARGE_BODIES
                    limit = self._body_limit(operation.operation_id)
                    with self._shares.hold_body(principal.project_id, _body_size(headers, limit)):
                        body = (
                            await self._read_body(headers, receive, limit)
                            if operation.body is not None
                            else b""
                        )
                        request = _Request(
                            operation,
                            params,
                            headers,
                            request_id,
                            replayable,
                            body,
                            limit,
                            scope.get("query_string", b""),
                        )
                        caller, params_checked, body_checked = await self._judged(
                            request, principal, off_the_loop=large
                        )
                    with self._shares.hold(
                        caller.project_id, waiting=_waits(params_checked, body_checked)
                    ):
                        answer = await self._perform(
                            operation, caller, params_checked, body_checked, receive
                        )
            except ApiError as error:
                answer = error.answer(request_id)
            except _ClientGone:
                return
            except Exception as exc:  # noqa: BLE001 - every fault is answered 500, and logged
                self._internal_error(operation.operation_id, request_id, exc)
                answer = _INTERNAL.answer(request_id)
        await _send(send, answer, request_id)
        self._report(
            RequestRecord.of(
                scope,
                answer.status,
                request_id,
                operation=operation.operation_id,
                started=started,
                replayed=answer.replayed,
            )
        )

    def _body_limit(self, operation_id: str) -> int:
        """How large the operation's body may be: a batch's and a group body's are larger."""
        if operation_id in _GROUP_BODIES:
            return self._max_group_body
        return self._max_batch_body if operation_id in _BATCHES else self._max_body

    def _internal_error(self, operation_id: str, request_id: str, exc: Exception) -> None:
        """Log a fault whole, or, when the same kind repeats within a minute, count it only."""
        kind = (operation_id, type(exc), _origin(exc))
        held = self._internal_errors.allow(kind)
        if held is None:
            return
        more = f" ({held} more like it in the last minute)" if held else ""
        log.error(
            "internal error in %s request_id=%s%s", operation_id, request_id, more, exc_info=exc
        )

    async def not_allowed(
        self, allow: tuple[str, ...], scope: Scope, receive: Receive, send: Send
    ) -> None:
        """405 with the path's methods in `Allow`."""
        await self._refuse(ApiError.method_not_allowed(scope["method"], allow), scope, send)

    async def not_found(self, scope: Scope, receive: Receive, send: Send) -> None:
        """404 for a path no operation has."""
        await self._refuse(ApiError.not_found("/".join(raw_segments(scope))), scope, send)

    async def _refuse(self, error: ApiError, scope: Scope, send: Send) -> None:
        request_id, _, _ = self._identify(Headers(scope=scope), declared=False)
        answer = error.answer(request_id)
        await _send(send, answer, request_id, allow=error.allow)
        self._report(RequestRecord.of(scope, answer.status, request_id))

    def _identify(self, headers: Headers, *, declared: bool) -> tuple[str, bool, str | None]:
        """(request id, sent by the client, why the client's one is refused).

        Where the operation does not declare X-Request-Id, a bad one is ignored, not refused.
        """
        sent = headers.getlist("x-request-id")
        if not sent:
            return str(uuid.uuid4()), False, None
        if len(sent) > 1:
            return (
                str(uuid.uuid4()),
                False,
                "send at most one X-Request-Id header" if declared else None,
            )
        try:
            self._request_id(sent[0], "X-Request-Id")
        except ValidationFailure as failure:
            return str(uuid.uuid4()), False, str(failure) if declared else None
        return sent[0], True, None

    async def _read_body(self, headers: Headers, receive: Receive, limit: int) -> bytes | None:
        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            return None
        chunks: list[bytes] = []
        size = 0
        while True:
            message: Message = await receive()
            if message["type"] == "http.disconnect":
                raise _ClientGone
            chunk: bytes = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    async def _admit(self, headers: Headers, malformed_id: str | None, scope: Scope) -> Principal:
        """What the headers alone decide, first in the contract's order.

        The credentials, the request id's form, the project's rate. Nothing of the body is read
        before this, so a caller without keys never makes the server hold a body (a batch's may
        be 256 KiB). A connection that shows valid keys keeps its seat from then on (the
        server's `volcano.keyed` extension; see `_seats`).
        """
        apikey, authorization = credentials(headers)
        principal = await self._run(
            lambda may_block: self._auth.authenticate(apikey, authorization, may_block=may_block),
            job=KEY_LOOKUP,
        )
        keyed = scope.get("extensions", {}).get(KEYED)
        if keyed is not None:
            keyed["mark"]()
        if malformed_id is not None:
            raise ApiError.invalid_request(malformed_id)
        if self._limiter is not None:
            wait = self._limiter.check(principal.project_id)
            if wait is not None:
                raise ApiError.rate_limited(wait)
        return principal

    async def _judged(
        self, request: _Request, principal: Principal, *, off_the_loop: bool
    ) -> tuple[Caller, dict[str, Any], dict[str, Any]]:
        """`_judge`, in a worker thread holding a slot of the project's share when asked.

        A batch's body (up to 256 KiB of JSON, 500 entries to validate) takes milliseconds to
        judge: never on the event loop, and charged to its project like storage work.
        """
        if not off_the_loop:
            return self._judge(request, principal)
        async with self._admission.slot(Job(principal.project_id, keeps=True)):
            return await anyio.to_thread.run_sync(self._judge, request, principal)

    def _judge(
        self, request: _Request, principal: Principal
    ) -> tuple[Caller, dict[str, Any], dict[str, Any]]:
        """The body and parameters of an admitted request, in the contract's order."""
        headers = request.headers
        body: dict[str, Any] = {}
        if request.operation.body is not None:
            if request.body is None:
                raise ApiError.payload_too_large(request.body_limit)
            check_content_encoding(headers)
            body = _json_object(headers.get("content-type", ""), request.body)
        checked_params, checked_body = _validated(
            request.operation, request.params, body, request.query
        )
        _within_quotas(self._quotas, checked_body)
        fingerprint = None
        if request.replayable:
            fingerprint = _fingerprint(
                request.operation.operation_id, checked_params, checked_body, principal.credential
            )
        return (
            Caller(principal.project_id, request.request_id, fingerprint, principal.credential),
            checked_params,
            checked_body,
        )

    async def _perform(
        self,
        operation: Operation,
        caller: Caller,
        params: dict[str, Any],
        body: dict[str, Any],
        receive: Receive,
    ) -> Answer:
        """Run the operation, and hold its answer until what it committed is on disk.

        A request that handed slots to waiters is answered after them (`Answer.after`: its
        client cannot ask again ahead of them); meanwhile it does not need the loop. Where the
        wait for the disk runs is the runner's to decide (`Runner.synced`).
        """
        parts = self._parts
        gone = lambda: asyncio.ensure_future(_disconnected(receive))  # noqa: E731
        answer = await OPERATIONS[operation.operation_id](parts, caller, params, body, gone)
        if answer is None:
            raise _ClientGone
        if answer.after:  # the waiters this request handed slots to are answered first
            with self._run.parked():
                # Each waiter's request resolves its future as it ends, whatever happens; the
                # bound only keeps this request from ever hanging on another one.
                await asyncio.wait(answer.after, timeout=_AFTER_WAITERS_SECONDS)
        await self._run.synced()
        return _still_true(answer, self._monotonic(), caller.request_id)


def _still_true(answer: Answer, now: float, request_id: str) -> Answer:
    """The answer, unless the lease it tells of has expired by the server's clock meanwhile.

    The clock is the storage's once the answer's transaction committed, plus every delay since
    it was asked for, by the server's monotonic clock (`now` on it): the answer to that clock
    read held on its way, the fsync, the loop. A server that stalled longer than the ttl
    answers 409 instead of a lease that has already ended (a batch, for that entry alone).
    """
    if answer.lease_until_us is None or answer.clock_us is None or answer.clock_at is None:
        return answer
    elapsed_us = round((now - answer.clock_at) * 1_000_000)
    if answer.clock_us + elapsed_us < answer.lease_until_us:
        return answer
    if answer.results:
        return _batch.still_true(answer, answer.clock_us + elapsed_us, request_id)
    message = (
        "the lease this request was granted expired before the answer could be sent (the"
        " server or its database stalled for longer than the ttl); acquire again"
    )
    return ApiError.lease_not_held(message).answer(request_id)


def _origin(exc: BaseException) -> tuple[str, int]:
    """Where an exception was raised: its innermost frame's file and line."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return (tb.tb_frame.f_code.co_filename, tb.tb_lineno) if tb is not None else ("", 0)


async def _disconnected(receive: Receive) -> None:
    """Return when the client disconnects (its body was read already)."""
    while (await receive())["type"] != "http.disconnect":
        pass


def _json_object(content_type: str, raw: bytes) -> dict[str, Any]:
    media_type, _, parameters = content_type.partition(";")
    if media_type.strip().lower() != "application/json":
        raise ApiError.invalid_request(
            f"Content-Type must be application/json, got {media_type.strip() or 'none'}"
        )
    charset = parameters.replace(" ", "").replace('"', "").lower()
    if charset and charset != "charset=utf-8":
        raise ApiError.invalid_request(f"JSON bodies must be UTF-8, got {parameters.strip()}")
    value = _parse_json(raw)
    if not isinstance(value, dict):
        raise ApiError.invalid_request(
            f"request body must be a JSON object, got {_json_kind(value)}"
        )
    return value


def _validated(
    operation: Operation, params: dict[str, str], body: dict[str, Any], query: bytes = b""
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The path and query parameters (one mapping: their names never collide) and the body."""
    try:
        checked = {
            name: validate(params[name], name) for name, validate in operation.path_params.items()
        }
        checked.update(_query_params(operation, query))
        if operation.body is not None:
            body = operation.body(body, "")
    except ValidationFailure as failure:
        raise ApiError.validation(str(failure)) from None
    return checked, body


def _query_params(operation: Operation, query: bytes) -> dict[str, Any]:
    """The query parameters the operation declares, validated.

    An operation without query parameters ignores the query string, as it always has; one
    with them refuses a parameter it does not know, or one sent twice, naming it.
    """
    if not operation.query:
        return {}
    text = query.decode("latin-1")
    pairs = urllib.parse.parse_qsl(text, keep_blank_values=True, errors="replace")
    allowed = ", ".join(operation.query)
    checked: dict[str, Any] = {}
    for name, value in pairs:
        validate = operation.query.get(name)
        if validate is None:
            raise ValidationFailure(name, f"unknown query parameter (allowed: {allowed})")
        if name in checked:
            raise ValidationFailure(name, "given more than once")
        checked[name] = validate(value, name)
    return checked


def _body_size(headers: Headers, limit: int) -> int:
    """The bytes a request's body will take: as declared, or its limit (chunked, or none)."""
    declared = headers.get("content-length", "")
    return min(int(declared), limit) if declared.isdigit() else limit


def _within_quotas(quotas: Quotas, body: dict[str, Any]) -> None:
    """Refuse (409 quota_exceeded) more holders or a longer label than the quotas allow.

    The labels of a batch's entries too.
    """
    limit = body.get("limit", 1)
    if limit > quotas.holders_per_key:
        raise ApiError.quota_exceeded(
            f"limit {limit} is over this server's quota of {quotas.holders_per_key} holders per"
            " key (volcano-server serve --max-holders-per-key)"
        )
    labels = [body.get("label")] + [entry.get("label") for entry in body.get("leases", ())]
    longest = max((len(label) for label in labels if label), default=0)
    if longest > quotas.label_bytes:
        raise ApiError.quota_exceeded(
            f"a label of {longest} bytes is over this server's quota of {quotas.label_bytes}"
            " (volcano-server serve --max-label-bytes)"
        )


def _waits(params: dict[str, Any], body: dict[str, Any]) -> bool:
    """Whether a request may be held open: a waiting acquire, or a watch (a long poll)."""
    if body.get("wait_seconds"):
        return True
    return bool(params.get("wait_seconds")) and params.get("after_version") is not None


def _fingerprint(
    operation_id: str, params: dict[str, Any], body: dict[str, Any], credential: bytes
) -> bytes:
    """What makes two requests "the same", decided once from the validated request.

    The operation, its path parameters, its validated body (defaults filled in) and the
    credential: a repeated request id is replayed only with the same fingerprint.
    """
    return hashlib.sha256(
        dumps([operation_id, sorted(params.items()), sorted(body.items()), credential.hex()])
    ).digest()


# No field needs more than 17 significant digits; this bounds what int() and float() are given,
# and keeps Python's own limit on integer digits (and its advice) out of the answer.
_MAX_NUMBER_LENGTH = 100


class _NumberTooLong(ValueError):
    def __init__(self, length: int) -> None:
        super().__init__(length)
        self.length = length


def _number(convert: Callable[[str], int | float]) -> Callable[[str], int | float]:
    def parse(text: str) -> int | float:
        if len(text) > _MAX_NUMBER_LENGTH:
            raise _NumberTooLong(len(text))
        return convert(text)

    return parse


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        names = [name for name, _ in pairs]
        duplicate = next(name for index, name in enumerate(names) if name in names[:index])
        raise ValueError(f"duplicate field {duplicate!r}")
    return result


def _parse_json(raw: bytes) -> Any:
    if not raw:
        raise ApiError.invalid_request("request body is empty; send a JSON object")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ApiError.invalid_request(
            f"request body is not UTF-8: {exc.reason} at byte {exc.start}"
        ) from None
    try:
        value = json.loads(
            text,
            parse_constant=_reject_constant,
            parse_int=_number(int),
            parse_float=_number(float),
            object_pairs_hook=_no_duplicates,
        )
    except _NumberTooLong as exc:
        raise ApiError.invalid_request(
            f"request body has a number of {exc.length} characters;"
            f" numbers are at most {_MAX_NUMBER_LENGTH}"
        ) from None
    except RecursionError:
        raise ApiError.invalid_request(
            "request body is not valid JSON: nested too deeply"
        ) from None
    except ValueError as exc:
        raise ApiError.invalid_request(f"request body is not valid JSON: {exc}") from None
    if not _valid_unicode(value):
        raise ApiError.invalid_request(
            "request body has a string (or field name) with a lone surrogate escape, such as"
            " \\ud800: JSON text must be valid Unicode"
        )
    return value


def _valid_unicode(value: Any) -> bool:
    r"""Whether every string in a parsed JSON value, field names included, is valid Unicode.

    Python's JSON parser turns the escape `\ud800` into a lone surrogate, which no UTF-8
    text can hold: refused here, it never reaches a message, an answer or a log line. (A walk
    with a stack, not recursion: the parser accepts nesting deeper than a recursive walk could
    add to.)
    """
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            if not (item.isascii() or _encodable(item)):
                return False
        elif isinstance(item, dict):
            pending.extend(item)
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return True


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _json_kind(value: Any) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    return "null" if value is None else "a number"


async def _send(send: Send, answer: Answer, request_id: str, allow: tuple[str, ...] = ()) -> None:
    headers = [(b"x-request-id", request_id.encode("latin-1")), _NO_STORE]
    if answer.body:
        headers += [_JSON, (b"content-length", str(len(answer.body)).encode())]
    if answer.replayed:
        headers.append((b"idempotent-replayed", b"true"))
    if answer.retry_after is not None:
        headers.append((b"retry-after", str(answer.retry_after).encode()))
    if allow:
        headers.append((b"allow", ", ".join(allow).encode()))
    await send({"type": "http.response.start", "status": answer.status, "headers": headers})
    await send({"type": "http.response.body", "body": answer.body})
