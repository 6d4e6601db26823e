"""A reverse proxy that checks every request and response against openapi.yaml with openapi-core.

    python validating_proxy.py serve SPEC UPSTREAM_URL LOG     # prints "listening on URL"
    python validating_proxy.py summary SPEC LOG CLIENT...      # exit 1 on any invalid exchange

`serve` forwards each request to UPSTREAM_URL with `requests`, validates the request and the
response with openapi-core as it comes (OpenAPI.from_file_path, validate_request and
validate_response through its `requests` integration, no option changed) and appends one JSON
line per exchange to LOG. Before listening it checks itself: a request with a malformed
X-Request-Id must be refused, and a response with one field more than documented (what a later
minor version may send) must be accepted.

`summary` counts the exchanges of each client (named by the `interop-CLIENT-` prefix of a lock
key: in the path, else in the query, as a listing's `prefix`, else in the request body, as a
batch renewal's entries) and the operations each exercised, and fails when an exchange broke the
spec, a client left out one of the spec's `locks` or `groups` operations, or an exchange belongs
to no client named.
"""

from __future__ import annotations

import json
import re
import sys
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import requests
import yaml
from openapi_core import OpenAPI
from openapi_core.contrib.requests import RequestsOpenAPIRequest, RequestsOpenAPIResponse
from openapi_core.testing import MockRequest, MockResponse

# Hop-by-hop headers, and the ones `requests` and this server set themselves.
_NOT_FORWARDED = {"host", "connection", "keep-alive", "transfer-encoding", "content-length"}
_CLIENT = re.compile(r"(?:/|=|\")interop-([a-z]+)-")


def operations(spec: str) -> dict[str, tuple[str, re.Pattern[str], str]]:
    """The spec's operations by operationId: (method, path pattern, first tag)."""
    paths = yaml.safe_load(Path(spec).read_text())["paths"]
    found = {}
    for template, item in paths.items():
        pattern = re.compile(re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(template)))
        for method, operation in item.items():
            if isinstance(operation, dict) and "operationId" in operation:
                tag = operation.get("tags", [""])[0]
                found[operation["operationId"]] = (method.upper(), pattern, tag)
    return found


def operation_of(table: dict[str, tuple[str, re.Pattern[str], str]], method: str, path: str) -> str:
    """The operationId a request is for, or "?"."""
    bare = path.split("?", 1)[0]
    for name, (verb, pattern, _) in table.items():
        if verb == method and pattern.fullmatch(bare):
            return name
    return "?"


def problems(openapi: OpenAPI, request: Any, response: Any | None = None) -> list[str]:
    """What openapi-core finds wrong with `request` (and `response`, when given)."""
    found = []
    try:
        openapi.validate_request(request)
    except Exception as exc:  # noqa: BLE001 - every openapi-core error is a finding
        found.append(f"request: {_describe(exc)}")
    if response is not None:
        try:
            openapi.validate_response(request, response)
        except Exception as exc:  # noqa: BLE001
            found.append(f"response: {_describe(exc)}")
    return found


def _describe(exc: BaseException) -> str:
    """The exception with its causes and any JSON Schema errors they carry."""
    parts = []
    current: BaseException | None = exc
    while current is not None:
        parts.append(f"{type(current).__name__}: {current}")
        parts += [f"  {error.message}" for error in getattr(current, "schema_errors", ())]
        current = current.__cause__ or current.__context__
    return "\n".join(parts)


def self_test(openapi: OpenAPI) -> None:
    """Fail unless the validator refuses a malformed request id and accepts an added field."""
    lease = {
        "key": "k",
        "owner_token": "0F8FAD5B-D9CB-469F-A165-70867728950E",
        "fencing_token": 1,
        "expires_at": "2026-11-29T21:15:30.250000Z",
        "ttl_seconds": 30,
        "added_in_a_later_version": True,
    }
    body = json.dumps({"owner_token": lease["owner_token"], "ttl_seconds": 30}).encode()
    credentials = {"apikey": "a", "Authorization": "Bearer s"}

    def acquire(request_id: str) -> MockRequest:
        headers = {**credentials, "X-Request-Id": request_id}
        return MockRequest(
            "http://127.0.0.1:8787", "post", "/v1/locks/k/acquire", headers=headers, data=body
        )

    upper = "7C9E6679-7425-40DE-944B-E07FC1F90AE7"
    answer = MockResponse(json.dumps(lease).encode(), headers={"X-Request-Id": upper})
    if found := problems(openapi, acquire(upper), answer):
        raise SystemExit(f"self-test: a valid exchange with an added field was refused: {found}")
    if not problems(openapi, acquire("0")):
        raise SystemExit("self-test: X-Request-Id: 0 was accepted; the validator is not working")


class _Proxy(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    openapi: OpenAPI
    upstream: str
    log: Path
    lock = threading.Lock()
    session = requests.Session()

    def _forward(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _NOT_FORWARDED}
        prepared = requests.Request(
            self.command, self.upstream + self.path, headers=headers, data=body
        ).prepare()
        answer = self.session.send(prepared, allow_redirects=False, timeout=60)
        found = problems(
            self.openapi, RequestsOpenAPIRequest(prepared), RequestsOpenAPIResponse(answer)
        )
        named = _CLIENT.search(self.path) or _CLIENT.search((body or b"").decode(errors="replace"))
        entry = {
            "method": self.command,
            "path": self.path,
            "client": named.group(1) if named else None,
            "status": answer.status_code,
            "problems": found,
        }
        with self.lock, self.log.open("a") as log:
            log.write(json.dumps(entry) + "\n")
        self.send_response(answer.status_code)
        for name, value in answer.headers.items():
            if name.lower() not in _NOT_FORWARDED:
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(answer.content)))
        self.end_headers()
        self.wfile.write(answer.content)

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _forward  # noqa: N815 - the base's names

    def log_message(self, format: str, *args: Any) -> None:
        pass  # the JSON log says everything


def serve(spec: str, upstream: str, log: str) -> None:
    """Validate and forward until killed."""
    openapi = OpenAPI.from_file_path(spec)
    self_test(openapi)
    _Proxy.openapi, _Proxy.upstream, _Proxy.log = openapi, upstream.rstrip("/"), Path(log)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Proxy)
    print(f"listening on http://127.0.0.1:{server.server_address[1]}", flush=True)
    server.serve_forever()


def summary(spec: str, log: str, clients: list[str]) -> int:
    """Print the exchanges per client; 1 when any broke the spec or did not add up."""
    table = operations(spec)
    wanted = {name for name, (_, _, tag) in table.items() if tag in ("locks", "groups")}
    entries = [json.loads(line) for line in Path(log).read_text().splitlines()]
    seen: Counter[str] = Counter()
    invalid: Counter[str] = Counter()
    exercised: dict[str, Counter[str]] = {client: Counter() for client in clients}
    for entry in entries:
        client = entry["client"] if entry["client"] in clients else "no client named"
        seen[client] += 1
        if client in clients:
            exercised[client][operation_of(table, entry["method"], entry["path"])] += 1
        if entry["problems"] or client not in clients:
            invalid[client] += 1
            print(f"INVALID {entry['method']} {entry['path']} -> {entry['status']}")
            for problem in entry["problems"] or ["sent by no client named"]:
                print("  " + problem.replace("\n", "\n  "))
    missing = False
    for client in [*clients, "no client named"]:
        if seen[client] or client in clients:
            print(f"  openapi-core: {client}: {seen[client]} exchanges, {invalid[client]} invalid")
        if client in clients:
            counts = exercised[client]
            print("    " + ", ".join(f"{name} {counts[name]}" for name in sorted(counts)))
            if left_out := sorted(wanted - set(counts)):
                missing = True
                print(f"    MISSING: {client} never called {', '.join(left_out)}")
    return 1 if sum(invalid.values()) or missing else 0


if __name__ == "__main__":
    match sys.argv[1:]:
        case ["serve", spec, upstream, log]:
            serve(spec, upstream, log)
        case ["summary", spec, log, *clients] if clients:
            sys.exit(summary(spec, log, clients))
        case _:
            sys.exit(__doc__)
