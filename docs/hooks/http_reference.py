"""MkDocs hook: the HTTP API page, rendered from openapi.yaml at build time.

The page (`http.md`) is made from the spec on every build, never stored, so it cannot drift from
openapi.yaml; it is plain Markdown (tables of parameters, bodies, responses and schemas), which
needs no script or network to read.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

SPEC = Path(__file__).resolve().parents[2] / "openapi.yaml"
PAGE = "http.md"
METHODS = ("get", "put", "post", "delete", "patch")


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Add the HTTP API page, made from openapi.yaml."""
    files.append(File.generated(config, PAGE, content=render(yaml.safe_load(SPEC.read_text()))))
    return files


def render(spec: dict[str, Any]) -> str:
    """The whole page: the spec's own introduction, its operations, then its schemas."""
    info = spec["info"]
    title = (
        f"# HTTP API\n\n{info['title']} {info['version']}, from `openapi.yaml` (OpenAPI "
        f"{spec['openapi']}), the contract every server and client follows. {info['summary']}\n"
    )
    parts = [
        title,
        info["description"],
        _servers(spec),
        _security(spec),
        "## Operations\n",
        *(
            _operation(spec, path, method, item)
            for path, item in spec["paths"].items()
            for method in METHODS
            if method in item
        ),
        "## Schemas\n",
        *(_schema(spec, name, schema) for name, schema in spec["components"]["schemas"].items()),
    ]
    return "\n".join(parts)


def _servers(spec: dict[str, Any]) -> str:
    rows = [f"| `{s['url']}` | {_cell(s.get('description', ''))} |" for s in spec["servers"]]
    return "## Servers\n\n| URL | |\n|---|---|\n" + "\n".join(rows) + "\n"


def _security(spec: dict[str, Any]) -> str:
    rows = []
    for name, scheme in spec["components"]["securitySchemes"].items():
        where = (
            f"header `{scheme['name']}`"
            if scheme["type"] == "apiKey"
            else f"`Authorization: {scheme['scheme'].title()} ...`"
        )
        rows.append(f"| `{name}` | {where} | {_cell(scheme.get('description', ''))} |")
    table = "| scheme | sent as | |\n|---|---|---|\n" + "\n".join(rows)
    return (
        f"## Security schemes\n\nEvery operation needs both unless it says otherwise.\n\n{table}\n"
    )


def _operation(spec: dict[str, Any], path: str, method: str, item: dict[str, Any]) -> str:
    operation = item[method]
    parameters = [
        _resolve(spec, p) for p in [*item.get("parameters", []), *operation.get("parameters", [])]
    ]
    lines = [
        f"### {method.upper()} {path}\n",
        f"`{operation['operationId']}`: {operation['summary']}\n",
        operation.get("description", ""),
    ]
    if operation.get("security") == []:
        lines.append("No credentials.\n")
    if parameters:
        lines.append("| parameter | in | required | schema | |\n|---|---|---|---|---|")
        lines += [
            f"| `{p['name']}` | {p['in']} | {'yes' if p.get('required') else 'no'} "
            f"| {_type(spec, p['schema'])} | {_cell(p.get('description', ''))} |"
            for p in parameters
        ]
        lines.append("")
    body = operation.get("requestBody")
    if body is not None:
        media = body["content"]["application/json"]
        lines.append(f"Request body (`application/json`): {_type(spec, media['schema'])}.\n")
        lines += _examples(spec, media)
    lines.append("| status | | body | headers |\n|---|---|---|---|")
    for status, declared_response in operation["responses"].items():
        response = _resolve(spec, declared_response)
        content = response.get("content", {})
        schema = next(iter(content.values()))["schema"] if content else None
        shape = _type(spec, schema) if schema is not None else ""
        headers = ", ".join(f"`{name}`" for name in response.get("headers", {}))
        lines.append(f"| {status} | {_cell(response['description'])} | {shape} | {headers} |")
    return "\n".join(lines) + "\n"


def _examples(spec: dict[str, Any], media: dict[str, Any]) -> list[str]:
    lines = []
    for declared in media.get("examples", {}).values():
        example = _resolve(spec, declared)
        value = json.dumps(example["value"], indent=2)
        lines += [f"{example.get('summary', 'Example')}\n", f"```json\n{value}\n```\n"]
    return lines


def _schema(spec: dict[str, Any], name: str, schema: dict[str, Any]) -> str:
    lines = [f"### {name}\n", schema.get("description", ""), ""]
    properties = schema.get("properties")
    if properties is None:
        lines.append(f"{_type(spec, schema)}\n")
        return "\n".join(lines)
    required = set(schema.get("required", []))
    extra = "allowed (ignore them)" if schema.get("additionalProperties") else "rejected"
    lines += [f"An object; fields not listed here are {extra}.\n"]
    lines.append("| field | required | schema | |\n|---|---|---|---|")
    lines += [
        f"| `{field}` | {'yes' if field in required else 'no'} | {_type(spec, value)} "
        f"| {_cell(value.get('description', ''))} |"
        for field, value in properties.items()
    ]
    return "\n".join(lines) + "\n"


def _type(spec: dict[str, Any], schema: dict[str, Any]) -> str:
    """A schema in a few words: a link for a reference, else its type and constraints."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{name.lower()})"
    if "oneOf" in schema:
        return " or ".join(_type(spec, option) for option in schema["oneOf"])
    kinds = schema.get("type", "any")
    words = [" or ".join(kinds) if isinstance(kinds, list) else kinds]
    if "format" in schema:
        words.append(f"({schema['format']})")
    if "items" in schema:
        words.append(f"of {_type(spec, schema['items'])}")
    for keyword, say in (
        ("minItems", "items from"),
        ("maxItems", "to"),
        ("minimum", "from"),
        ("maximum", "to"),
        ("minLength", "length from"),
        ("maxLength", "to"),
        ("default", "default"),
    ):
        if keyword in schema:
            words.append(f"{say} {schema[keyword]}")
    if "enum" in schema:
        words.append("one of " + ", ".join(f"`{v}`" for v in schema["enum"]))
    if "pattern" in schema:
        words.append(f"matching `{schema['pattern']}`")
    return " ".join(words)


def _resolve(spec: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    """`node`, or what its `$ref` names (within this document)."""
    while "$ref" in node:
        target: Any = spec
        for step in node["$ref"].removeprefix("#/").split("/"):
            target = target[step]
        node = target
    return node


def _cell(text: str) -> str:
    """`text` fit for one Markdown table cell."""
    return " ".join(text.split()).replace("|", "\\|")
