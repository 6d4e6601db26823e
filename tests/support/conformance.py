"""Check real responses against openapi.yaml: documented status, body schema, required headers.

Integration tests install `check_response` as an httpx response hook, so every answer the
reference server gives in any test is held against the spec, not only in the contract suite.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any

import httpx
import jsonschema_rs
import yaml

__all__ = ["SPEC", "SchemaViolation", "check_response", "validate_schema"]

SPEC: dict[str, Any] = yaml.safe_load(
    (Path(__file__).resolve().parents[2] / "openapi.yaml").read_text()
)
SchemaViolation = jsonschema_rs.ValidationError


@functools.cache
def _validator(pointer: str) -> Any:
    # jsonschema-rs, not the Python jsonschema: it follows ECMA-262 regex semantics as JSON Schema
    # requires, where the Python package's re.search lets "$" match before a trailing newline.
    return jsonschema_rs.Draft202012Validator(
        {"$ref": f"#{pointer}", "components": SPEC["components"]}, validate_formats=True
    )


def validate_schema(value: Any, pointer: str) -> None:
    """Raise SchemaViolation if `value` breaks the schema at `pointer` (/components/schemas/X)."""
    _validator(pointer).validate(value)
    if isinstance(value, dict) and isinstance(value.get("expires_at"), str):
        assert value["expires_at"].endswith("Z"), f"expires_at is not UTC: {value['expires_at']}"


def _deref(node: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        target: Any = SPEC
        for part in node["$ref"][2:].split("/"):
            target = target[part]
        node = target
    return node


def _operation(method: str, path: str) -> dict[str, Any] | None:
    segments = path.split("/")
    for template, item in SPEC["paths"].items():
        parts = template.split("/")
        if len(parts) == len(segments) and all(
            t.startswith("{") or t == s for t, s in zip(parts, segments, strict=True)
        ):
            operation: dict[str, Any] | None = item.get(method.lower())
            return operation
    return None


def check_response(response: httpx.Response) -> None:
    """Fail when `response` is not what openapi.yaml documents for its request."""
    response.read()
    request = response.request
    raw_path = request.url.raw_path.split(b"?")[0].decode()
    operation = _operation(request.method, raw_path)
    if raw_path == "/openapi.yaml":
        return
    assert re.fullmatch(r"[0-9A-Fa-f-]{36}", response.headers.get("x-request-id", "")), (
        f"{request.method} {raw_path} -> {response.status_code} lacks a valid X-Request-Id"
    )
    if operation is None:
        # Routing errors (404/405) are not operations of the spec, but still use its error shape.
        assert response.status_code in (404, 405), (
            f"{request.method} {raw_path} -> {response.status_code}"
        )
        validate_schema(response.json(), "/components/schemas/Error")
        return
    documented = operation["responses"]
    status = str(response.status_code)
    assert status in documented, (
        f"{operation['operationId']} answered undocumented {status}: {response.text}"
    )
    spec_response = _deref(documented[status])
    content = spec_response.get("content")
    if content is None:
        assert response.content == b"", f"{operation['operationId']} {status} must have no body"
    else:
        assert response.headers["content-type"].startswith("application/json")
        validate_schema(response.json(), _pointer(content["application/json"]["schema"]))
    for name, header in spec_response.get("headers", {}).items():
        if _deref(header).get("required"):
            assert name.lower() in response.headers, (
                f"{operation['operationId']} {status} lacks {name}"
            )


def _pointer(schema: dict[str, Any]) -> str:
    ref: str = schema["$ref"]
    return ref[1:]
