"""Schemathesis hooks for the Volcano contract: UUIDs in any letter case, short waits, two checks.

Loaded by the contract suite (which `scripts/contract.sh` runs against any server), so every run
uses the same rules: each credential is really enforced, and the server's JSON bodies carry
exactly the documented fields (the published response schemas allow more, for clients' sake).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, cast

import httpx
import schemathesis
from hypothesis import strategies as st

# X-Request-Id is `format: uuid` in any letter case: schemathesis' own strategy sends lower case
# only, so valid upper-case ids (which the server must keep byte for byte) are sent too.
schemathesis.openapi.format(
    "uuid",
    st.uuids().flatmap(lambda u: st.sampled_from([str(u), str(u).upper()])),
)

# A valid wait_seconds (up to 60) on a key some earlier case holds makes the request wait that
# long, and so does a watch (a get with after_version) of a key that does not change; every
# generated wait is cut to this, still valid, so the suite stays fast. Invalid values
# (negative, over 60, not a number) are left alone, so negative cases stay negative.
WAIT_CAP_SECONDS = 0.2


@schemathesis.hook
def before_call(ctx: schemathesis.HookContext, case: schemathesis.Case, **kwargs: Any) -> None:
    """Cut every valid generated wait_seconds, in a body or a query, to WAIT_CAP_SECONDS."""
    for values in (case.body, case.query):
        if not isinstance(values, dict):
            continue
        wait = values.get("wait_seconds")
        if isinstance(wait, int | float) and not isinstance(wait, bool) and 0 < wait <= 60:
            values["wait_seconds"] = min(wait, WAIT_CAP_SECONDS)
        elif isinstance(wait, str) and _seconds(wait) is not None:
            values["wait_seconds"] = str(min(_seconds(wait) or 0.0, WAIT_CAP_SECONDS))


def _seconds(text: str) -> float | None:
    """A valid wait written as text (a query value), or None."""
    try:
        seconds = float(text)
    except ValueError:
        return None
    return seconds if 0 < seconds <= 60 else None


_probed: set[str] = set()


def _credential_probes() -> dict[str, dict[str, str]]:
    """Requests that must be refused: each credential is really checked, not just present."""
    anon = os.environ["VOLCANO_ANON_KEY"]
    service = os.environ["VOLCANO_SERVICE_KEY"]
    probes = {
        "valid apikey, unknown service key": {
            "apikey": anon,
            "authorization": "Bearer vk_service_unknown",
        },
        "unknown apikey, valid service key": {
            "apikey": "vk_anon_unknown",
            "authorization": f"Bearer {service}",
        },
        "anon key as the service credential": {"apikey": anon, "authorization": f"Bearer {anon}"},
        "no service key": {"apikey": anon},
        "no apikey": {"authorization": f"Bearer {service}"},
    }
    other = os.environ.get("VOLCANO_OTHER_SERVICE_KEY")
    if other:
        probes["another project's service key"] = {
            "apikey": anon,
            "authorization": f"Bearer {other}",
        }
    return probes


@schemathesis.check
def each_credential_enforced(
    ctx: schemathesis.CheckContext, response: schemathesis.Response, case: schemathesis.Case
) -> bool | None:
    """Once per operation that accepted real credentials, resend the same request with each
    credential wrong or missing: every probe must get 401 or 403."""
    if (
        not case.operation.definition.raw.get("security", [{}])
        or not 200 <= response.status_code < 300
    ):
        return None
    label = case.operation.label
    if label in _probed:
        return None
    _probed.add(label)
    request = response.request
    base = {
        k.lower(): v
        for k, v in request.headers.items()
        if k.lower() not in ("apikey", "authorization", "content-length")
    }
    body: Any = request.body
    with httpx.Client(timeout=30) as http:
        for scenario, credentials in _credential_probes().items():
            probe = http.request(
                request.method, str(request.url), headers={**base, **credentials}, content=body
            )
            assert probe.status_code in (401, 403), (
                f"{label} with {scenario} answered {probe.status_code}, expected 401 or 403"
            )
    return True


def undocumented_fields(
    schema: Mapping[str, Any], value: Any, document: Mapping[str, Any], where: str = "body"
) -> list[str]:
    """Where `value` has object fields that `schema` (with its $refs) does not name."""
    while "$ref" in schema:
        schema = _resolve(document, schema["$ref"])
    if "oneOf" in schema:  # judged by the branches whose required fields it has
        branches = [
            _resolve(document, branch["$ref"]) if "$ref" in branch else branch
            for branch in schema["oneOf"]
        ]
        fits = [
            b
            for b in branches
            if isinstance(value, dict) and set(b.get("required", [])) <= set(value)
        ]
        verdicts = [undocumented_fields(b, value, document, where) for b in fits]
        return min(verdicts, key=len, default=[])
    if "items" in schema and isinstance(value, list):
        return [
            field
            for index, item in enumerate(value)
            for field in undocumented_fields(schema["items"], item, document, f"{where}[{index}]")
        ]
    properties = schema.get("properties")
    if not isinstance(value, dict) or not isinstance(properties, Mapping):
        return []
    found = [f"{where}.{name}" for name in value if name not in properties]
    for name, sub in properties.items():
        if name in value:
            found += undocumented_fields(sub, value[name], document, f"{where}.{name}")
    return found


def _resolve(document: Mapping[str, Any], ref: str) -> Mapping[str, Any]:
    node: Any = document
    for part in ref.removeprefix("#/").split("/"):
        node = node[part.replace("~1", "/").replace("~0", "~")]
    return cast("Mapping[str, Any]", node)


@schemathesis.check
def only_documented_fields(
    ctx: schemathesis.CheckContext, response: schemathesis.Response, case: schemathesis.Case
) -> bool | None:
    """The server's JSON body has no field its documented response schema does not name."""
    document = case.operation.schema.raw_schema
    answers = case.operation.definition.raw.get("responses", {})
    answer = answers.get(str(response.status_code)) or answers.get("default")
    if answer is None:
        return None  # status_code_conformance reports an undocumented status
    while "$ref" in answer:
        answer = _resolve(document, answer["$ref"])
    schema = answer.get("content", {}).get("application/json", {}).get("schema")
    if schema is None:
        return None
    try:
        body = response.json()
    except ValueError:
        return None  # a body that is not JSON is content_type_conformance's to report
    extra = undocumented_fields(schema, body, document)
    label, status = case.operation.label, response.status_code
    assert not extra, f"{label} answered {status} with undocumented {extra}"
    return True
