"""openapi.yaml, loaded once: the routes, parameters and request schemas the server serves.

The server's routes and request validators are derived from this file at start-up, so what the
spec says and what the server enforces cannot drift apart.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from importlib import resources
from typing import Any

import attrs
import yaml

from ._schema import SchemaError, ValidationFailure, Validator, compile_schema

__all__ = ["Operation", "Spec", "load_spec"]

_METHODS = ("get", "put", "post", "delete", "patch", "head", "options", "trace")


@attrs.frozen
class Operation:
    """One operation of the spec, with validators for what a request may carry."""

    operation_id: str
    method: str
    path: str
    path_params: Mapping[str, Validator]
    headers: Mapping[str, Validator]  # lower-cased header name -> validator
    body: Validator | None
    authenticated: bool
    query: Mapping[str, Validator] = attrs.field(factory=dict)  # each parses the text sent


@attrs.frozen
class Spec:
    """The loaded spec: its raw text (served at /openapi.yaml) and its operations."""

    text: bytes
    document: Mapping[str, Any]
    operations: tuple[Operation, ...]
    request_id: Validator  # components/schemas/RequestId, for every answer's X-Request-Id

    def operation(self, operation_id: str) -> Operation:
        """The operation with this operationId."""
        for operation in self.operations:
            if operation.operation_id == operation_id:
                return operation
        raise KeyError(operation_id)


def load_spec(text: bytes | None = None) -> Spec:
    """Load and compile openapi.yaml (the copy shipped with the server unless `text` is given)."""
    if text is None:
        text = resources.files("volcano_server").joinpath("openapi.yaml").read_bytes()
    document = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506
    if not isinstance(document, dict):
        raise SchemaError("openapi.yaml is not a mapping")
    resolve = _resolver(document)
    return Spec(
        text=text,
        document=document,
        operations=tuple(_operations(document, resolve)),
        request_id=compile_schema({"$ref": "#/components/schemas/RequestId"}, resolve),
    )


def _resolver(document: Mapping[str, Any]) -> Callable[[str], Mapping[str, Any]]:
    def resolve(ref: str) -> Mapping[str, Any]:
        if not ref.startswith("#/"):
            raise SchemaError(f"only local $refs are supported, got {ref!r}")
        node: Any = document
        for part in ref[2:].split("/"):
            node = node[part.replace("~1", "/").replace("~0", "~")]
        if not isinstance(node, Mapping):
            raise SchemaError(f"{ref} is not an object")
        return node

    return resolve


def _operations(
    document: Mapping[str, Any], resolve: Callable[[str], Mapping[str, Any]]
) -> list[Operation]:
    def deref(node: Mapping[str, Any]) -> Mapping[str, Any]:
        while "$ref" in node:
            node = resolve(node["$ref"])
        return node

    default_security = document.get("security", [])
    operations = []
    for path, item in document["paths"].items():
        shared = [deref(p) for p in item.get("parameters", [])]
        for method in _METHODS:
            if method not in item:
                continue
            op = item[method]
            params = {(p["in"], p["name"]): p for p in shared}
            params.update({(p["in"], p["name"]): p for p in map(deref, op.get("parameters", []))})
            body = None
            if "requestBody" in op:
                content = deref(op["requestBody"])["content"]
                if set(content) != {"application/json"}:
                    raise SchemaError(
                        f"{op['operationId']}: only application/json bodies are supported"
                    )
                body = compile_schema(content["application/json"]["schema"], resolve)
            operations.append(
                Operation(
                    operation_id=op["operationId"],
                    method=method.upper(),
                    path=path,
                    path_params={
                        name: _from_path(deref(p["schema"]), compile_schema(p["schema"], resolve))
                        for (where, name), p in params.items()
                        if where == "path"
                    },
                    headers={
                        name.lower(): compile_schema(p["schema"], resolve)
                        for (where, name), p in params.items()
                        if where == "header"
                    },
                    body=body,
                    authenticated=bool(op.get("security", default_security)),
                    query={
                        name: _from_query(deref(p["schema"]), compile_schema(p["schema"], resolve))
                        for (where, name), p in params.items()
                        if where == "query"
                    },
                )
            )
            unsupported = {where for where, _ in params} - {"path", "header", "query"}
            if unsupported:
                raise SchemaError(f"{op['operationId']}: unsupported parameters in {unsupported}")
    return operations


# A path segment is text; an integer parameter (a fencing token) is at most this many digits.
_MAX_PATH_DIGITS = 20


def _from_path(schema: Mapping[str, Any], validate: Validator) -> Validator:
    """`validate` for a path parameter: an integer one is parsed from its segment first.

    Only plain ASCII digits are an integer here (no sign, spaces, underscores or other
    digits `int()` would take), so each number has one spelling.
    """
    if schema.get("type") != "integer":
        return validate

    def parse(text: Any, name: str) -> Any:
        if not (
            isinstance(text, str)
            and text.isascii()
            and text.isdigit()
            and len(text) <= _MAX_PATH_DIGITS
        ):
            raise ValidationFailure(name, f"must be a whole number in digits, got {text!r}")
        return validate(int(text), name)

    return parse


# A query parameter is text; a number in it is written in plain digits, at most this long.
_MAX_QUERY_NUMBER = 30
_INTEGER_TEXT = re.compile(r"-?[0-9]+")
_NUMBER_TEXT = re.compile(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?")  # as JSON writes one


def _from_query(schema: Mapping[str, Any], validate: Validator) -> Validator:
    """`validate` for a query parameter: a number is parsed from its text first.

    An integer is ASCII digits with an optional leading `-`; a number is written as JSON
    writes one (`30`, `2.5`, `1e-3`). No spaces, `+` sign, underscores, other digits, `nan`
    or `inf` that Python's own parsing would take; a bound is judged on the number, not on
    its text.
    """
    kind = schema.get("type")
    if kind not in ("integer", "number"):
        return validate
    pattern = _INTEGER_TEXT if kind == "integer" else _NUMBER_TEXT
    noun = "a whole number in digits" if kind == "integer" else "a number, like 30 or 2.5"

    def parse(text: Any, name: str) -> Any:
        if not (
            isinstance(text, str)
            and text.isascii()
            and len(text) <= _MAX_QUERY_NUMBER
            and pattern.fullmatch(text)
        ):
            raise ValidationFailure(name, f"must be {noun}, got {text!r}")
        return validate(int(text) if kind == "integer" else float(text), name)

    return parse
