"""Schemathesis hooks for the Volcano contract: a string format, short waits, a credential check.

Loaded by the contract suite and by `scripts/contract.sh` (SCHEMATHESIS_HOOKS), so a run against
any server uses the same rules.
"""

from __future__ import annotations

import os
from typing import Any

import httpx
import schemathesis
from hypothesis import strategies as st

# Owner tokens and request ids are UUIDs in any letter case, kept byte for byte. The spec gives
# them this custom format so that schemathesis' coverage phase, which otherwise builds header
# values from [A-Za-z0-9] only, generates real UUIDs as positive data.
schemathesis.openapi.format(
    "uuid-any-case",
    st.uuids().flatmap(lambda u: st.sampled_from([str(u), str(u).upper()])),
)

# A valid wait_seconds (up to 60) on a key some earlier case holds makes the request wait that
# long; every generated wait is cut to this, still valid, so the suite stays fast. Invalid
# values (negative, over 60, not a number) are left alone, so negative cases stay negative.
WAIT_CAP_SECONDS = 0.2


@schemathesis.hook
def before_call(ctx: schemathesis.HookContext, case: schemathesis.Case, **kwargs: Any) -> None:
    """Cut every valid generated wait_seconds to WAIT_CAP_SECONDS."""
    body = case.body
    if not isinstance(body, dict):
        return
    wait = body.get("wait_seconds")
    if isinstance(wait, int | float) and not isinstance(wait, bool) and 0 < wait <= 60:
        body["wait_seconds"] = min(wait, WAIT_CAP_SECONDS)


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
