"""Strict reading of the request headers the API depends on.

- A credential header sent twice is refused (400), never resolved by "first wins": an `apikey`
  of project A followed by one of project B must not be served as either.
- Both credentials lose leading and trailing spaces and tabs, as RFC 9110 says a field value
  does (httptools keeps trailing ones), so `apikey` and `Authorization` read alike.
- A body in any Content-Encoding but identity is refused (415) rather than read as plain JSON.
"""

from __future__ import annotations

from starlette.datastructures import Headers

from ..wire._errors import ApiError

__all__ = ["check_content_encoding", "credentials"]

_OWS = " \t"


def credentials(headers: Headers) -> tuple[str | None, str | None]:
    """The `apikey` and `Authorization` values, each sent at most once, without edge whitespace."""
    return _single(headers, "apikey"), _single(headers, "Authorization")


def check_content_encoding(headers: Headers) -> None:
    """Refuse a body sent in a Content-Encoding other than identity."""
    codings = [
        coding.strip(_OWS).lower()
        for value in headers.getlist("content-encoding")
        for coding in value.split(",")
    ]
    unsupported = [coding for coding in codings if coding not in ("", "identity")]
    if unsupported:
        raise ApiError.unsupported_encoding(", ".join(unsupported)[:100])


def _single(headers: Headers, name: str) -> str | None:
    values = headers.getlist(name)
    if len(values) > 1:
        raise ApiError.invalid_request(f"send the {name} header once, not {len(values)} times")
    return values[0].strip(_OWS) if values else None
