"""The error answers of the API: `{"error": {"code", "message", "request_id"}}` with a status.

Every error the server answers is an `ApiError`, whoever decides it: request handling raises
it, a refusal of the lock rules is rendered as one (`refused`), the HTTP protocol answers it on
a broken connection. `ApiError.answer` is the one place an error body is rendered. A
`limit_mismatch` answer also carries `limit`, the key's own, for clients to read.
"""

from __future__ import annotations

import attrs

from ._wire import Answer, dumps

__all__ = ["ApiError"]


@attrs.frozen
class ApiError(Exception):
    """An error answer: raise it in request handling, or render a rules' refusal as one."""

    status: int
    code: str
    message: str
    retry_after: int | None = None
    allow: tuple[str, ...] = ()
    limit: int | None = None

    @classmethod
    def invalid_request(cls, message: str) -> ApiError:
        """400: the body is not a JSON object in application/json, or a header is malformed."""
        return cls(400, "invalid_request", message)

    @classmethod
    def unauthorized(cls, message: str) -> ApiError:
        """401: missing or unknown keys, or keys of two different projects."""
        return cls(401, "unauthorized", message)

    @classmethod
    def forbidden(cls, message: str) -> ApiError:
        """403: a known key used where it is not allowed."""
        return cls(403, "forbidden", message)

    @classmethod
    def not_found(cls, path: str) -> ApiError:
        """404: no route."""
        return cls(404, "not_found", f"no such path: {path}")

    @classmethod
    def method_not_allowed(cls, method: str, allow: tuple[str, ...]) -> ApiError:
        """405, with the methods the path allows."""
        return cls(
            405,
            "method_not_allowed",
            f"{method} is not allowed here (allowed: {', '.join(allow)})",
            allow=allow,
        )

    @classmethod
    def request_timeout(cls, part: str, seconds: float) -> ApiError:
        """408: the client did not send the request's head or body in time."""
        return cls(
            408, "request_timeout", f"the request {part} did not arrive within {seconds:g} s"
        )

    @classmethod
    def payload_too_large(cls, limit: int) -> ApiError:
        """413: the body is over the limit."""
        return cls(413, "payload_too_large", f"request body is larger than {limit} bytes")

    @classmethod
    def unsupported_encoding(cls, encoding: str) -> ApiError:
        """415: a body in a Content-Encoding the server does not decode."""
        return cls(
            415,
            "unsupported_media_type",
            f"Content-Encoding {encoding} is not supported; send the JSON body uncompressed",
        )

    @classmethod
    def refused(
        cls, code: str, message: str, *, retry_after: int | None = None, limit: int | None = None
    ) -> ApiError:
        """409: the rules refused the operation, for the reason the contract calls `code`."""
        return cls(409, code, message, retry_after=retry_after, limit=limit)

    @classmethod
    def lock_held(cls, message: str, retry_after: int) -> ApiError:
        """409: another owner holds the key (Retry-After: until its lease ends, at least 1)."""
        return cls(409, "lock_held", message, retry_after=retry_after)

    @classmethod
    def lease_not_held(cls, message: str) -> ApiError:
        """409: no live lease matches the owner token and fencing token."""
        return cls(409, "lease_not_held", message)

    @classmethod
    def quota_exceeded(cls, message: str) -> ApiError:
        """409: the request would pass one of the server's per-project quotas."""
        return cls(409, "quota_exceeded", message)

    @classmethod
    def request_id_reused(cls, request_id: str) -> ApiError:
        """409: the request id was used before for a different request."""
        return cls(
            409,
            "request_id_reused",
            f"request id {request_id} was already used for a different request;"
            " use a new request id",
        )

    @classmethod
    def validation(cls, message: str) -> ApiError:
        """422: parses but breaks the schema."""
        return cls(422, "validation_error", message)

    @classmethod
    def headers_too_large(cls, limit: int) -> ApiError:
        """431: the request line and header fields are over the limit."""
        return cls(
            431,
            "request_headers_too_large",
            f"the request line and headers are larger than {limit} bytes",
        )

    @classmethod
    def too_many_headers(cls, limit: int) -> ApiError:
        """431: the request has more header fields than the limit."""
        return cls(
            431,
            "request_headers_too_large",
            f"the request has more than {limit} header fields",
        )

    @classmethod
    def rate_limited(cls, retry_after: int) -> ApiError:
        """429: over the project's request rate."""
        return cls(
            429, "rate_limited", "too many requests for this project", retry_after=retry_after
        )

    @classmethod
    def over_share(cls, what: str, limit: int) -> ApiError:
        """429: the project already holds its share of this server (waiters, requests)."""
        return cls(
            429,
            "rate_limited",
            f"this project has {limit} {what} open on this server, the most one project may;"
            " retry later",
            retry_after=1,
        )

    @classmethod
    def crowded(cls, limit: int) -> ApiError:
        """503: the client's address holds the most connections one address may."""
        return cls(
            503,
            "unavailable",
            f"this address has {limit} connections open, the most one address may; reuse them",
        )

    @classmethod
    def seat_taken(cls) -> ApiError:
        """503: a keyless connection slow with its head gave its seat to a newcomer."""
        return cls(
            503,
            "unavailable",
            "the server needed this connection's seat: it sent no valid keys and its request"
            " was slow to arrive",
        )

    @classmethod
    def over_time_share(cls, retry_after: int) -> ApiError:
        """429: the project's work waited too long in line behind its own earlier work."""
        return cls(
            429,
            "rate_limited",
            "this project's requests are using more than its share of the server's time and"
            " wait behind its own earlier ones; retry later",
            retry_after=retry_after,
        )

    @classmethod
    def unavailable(cls, message: str, retry_after: int = 1) -> ApiError:
        """503: storage cannot be reached or locked right now."""
        return cls(503, "unavailable", message, retry_after=retry_after)

    @classmethod
    def internal(cls) -> ApiError:
        """500: an unexpected fault (details go to the log, never to the client)."""
        return cls(500, "internal", "internal server error")

    def answer(self, request_id: str) -> Answer:
        """The answer: this error's status, body and Retry-After."""
        return Answer(self.status, dumps({"error": self.detail(request_id)}), self.retry_after)

    def detail(self, request_id: str) -> dict[str, object]:
        """The error object of the body (also one refused entry's, in a batch's results)."""
        detail: dict[str, object] = {
            "code": self.code,
            "message": self.message,
            "request_id": request_id,
        }
        if self.limit is not None:
            detail["limit"] = self.limit
        return detail

    def __str__(self) -> str:
        return f"{self.status} {self.code}: {self.message}"
