"""Starlette routes built from the spec's paths, matched on the raw (still percent-encoded) path.

Matching on the raw path keeps each path segment whole: `/v1/locks/a%2Fb/acquire` is the acquire
operation on the key `a/b` (answered 422: keys have no `/`), and `/v1/locks//acquire` is acquire
on the empty key (422), where decoding first would have made both a 404. One route per path
carries all of its methods, so a wrong method gets 405 with an `Allow` listing them all.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import unquote

from starlette.datastructures import URLPath
from starlette.routing import BaseRoute, Match, NoMatchFound
from starlette.types import Receive, Scope, Send

from ._spec import Operation

__all__ = ["Endpoint", "SpecRoute", "raw_segments"]

# An endpoint gets the operation, its decoded path parameters and the ASGI triple.
Endpoint = Callable[[Operation, dict[str, str], Scope, Receive, Send], Awaitable[None]]
MethodNotAllowed = Callable[[tuple[str, ...], Scope, Receive, Send], Awaitable[None]]


def raw_segments(scope: Scope) -> list[str]:
    """The request path's segments, each percent-decoded on its own."""
    raw: bytes | None = scope.get("raw_path")
    path = raw.split(b"?", 1)[0].decode("latin-1") if raw else scope["path"]
    return [unquote(part, errors="replace") for part in path.split("/")]


class SpecRoute(BaseRoute):
    """All the operations of one spec path, e.g. `/v1/locks/{key}` with GET and DELETE."""

    def __init__(
        self,
        path: str,
        endpoints: dict[str, tuple[Operation, Endpoint]],
        not_allowed: MethodNotAllowed,
    ) -> None:
        self.path = path
        self._template = path.split("/")
        self._endpoints = endpoints
        self._allow = tuple(sorted(endpoints))
        self._not_allowed = not_allowed

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        """FULL when the path and method match, PARTIAL (405) when only the path does."""
        if scope["type"] != "http":
            return Match.NONE, {}
        segments = scope.get("volcano.segments")
        if segments is None:  # split once per request, not once per route tried
            segments = scope["volcano.segments"] = raw_segments(scope)
        if len(segments) != len(self._template):
            return Match.NONE, {}
        params: dict[str, str] = {}
        for want, got in zip(self._template, segments, strict=True):
            if want.startswith("{") and want.endswith("}"):
                params[want[1:-1]] = got
            elif want != got:
                return Match.NONE, {}
        child = {"path_params": params}
        return (Match.FULL if scope["method"] in self._endpoints else Match.PARTIAL), child

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Run the method's endpoint, or answer 405."""
        entry = self._endpoints.get(scope["method"])
        if entry is None:
            await self._not_allowed(self._allow, scope, receive, send)
            return
        operation, endpoint = entry
        await endpoint(operation, scope["path_params"], scope, receive, send)

    def url_path_for(self, name: str, /, **path_params: Any) -> URLPath:
        """Not used: the API has no server-side links."""
        raise NoMatchFound(name, path_params)
