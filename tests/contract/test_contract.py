"""openapi.yaml against a real server: every phase of schemathesis, every check."""

from __future__ import annotations

import re
import uuid
from collections import Counter
from typing import Any

import schemathesis

from tests.conftest import LiveServer

from .conftest import all_checks, count_case

schema = schemathesis.pytest.from_fixture("contract_schema")

UUID = re.compile(r"[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}")
ACQUIRE = "POST /v1/locks/{key}/acquire"
RENEW = "POST /v1/locks/{key}/renew"
HOLDER_ONLY = (RENEW, "POST /v1/locks/{key}/release")
CREATE_GROUP = "PUT /v1/groups/{group}"
MEMBER = "/v1/groups/{group}/members/{member}"
JOIN, RENEW_MEMBERSHIP = f"POST {MEMBER}/join", f"POST {MEMBER}/renew"
MEMBER_ONLY = (RENEW_MEMBERSHIP, f"POST {MEMBER}/capabilities", f"POST {MEMBER}/leave")


@schema.parametrize()
def test_operation(case: schemathesis.Case) -> None:
    """Examples, coverage and fuzzing cases of each operation pass every check."""
    count_case(case)
    case.call_and_validate(checks=all_checks())


def test_stateful(contract_schema: schemathesis.BaseSchema, contract_env: LiveServer) -> None:
    """Scenarios chained through the spec's links (acquire -> renew/release/get/check) pass every
    check.

    The links carry the key; the lease's owner token and fencing token go into the renew and
    release bodies here (a link's requestBody may only be one runtime expression, and the whole
    lease is not a valid body), so the chain renews and releases real leases. Groups likewise:
    links carry the group and member, and a membership's tokens go into the renew, capabilities
    and leave bodies here.

    Hypothesis replays scenarios and requires each replay to see the same server, so a scenario
    must not leave state behind that changes the next one: every lease it took is released in
    teardown (every membership leaves, every group it created is deleted), a valid request id
    is replaced by a fresh one (stored outcomes outlive a scenario by ten minutes), and a valid
    ttl of an acquire, a join or a renewal is raised to at least 60 s (a
    0.1 s lease expiring between two steps would make a replay differ by timing alone). Invalid
    values are left untouched, so negative cases stay negative; the stateless phases cover every
    ttl and request id.
    """
    base: Any = contract_schema.as_state_machine()
    chained: Counter[str] = Counter()

    class ReleasingMachine(base):  # type: ignore[misc,valid-type]
        def setup(self) -> None:
            super().setup()
            self.leases: list[tuple[str, dict[str, Any]]] = []
            self.groups: list[str] = []
            self.memberships: list[tuple[tuple[str, str], dict[str, Any]]] = []

        def before_call(self, case: schemathesis.Case) -> None:
            super().before_call(case)
            count_case(case, phase="stateful")
            headers = case.headers or {}
            for name in list(headers):
                if (
                    name.lower() == "x-request-id"
                    and isinstance(headers[name], str)
                    and UUID.fullmatch(headers[name])
                ):
                    headers[name] = str(uuid.uuid4())
            body = case.body
            if case.operation.label in (ACQUIRE, RENEW, JOIN, RENEW_MEMBERSHIP) and isinstance(
                body, dict
            ):
                ttl = body.get("ttl_seconds")
                if (
                    isinstance(ttl, int | float)
                    and not isinstance(ttl, bool)
                    and 0.1 <= ttl <= 86400
                ):
                    body["ttl_seconds"] = max(ttl, 60)
            if case.operation.label in HOLDER_ONLY and _valid_holder(body):
                held = dict(self.leases).get((case.path_parameters or {}).get("key"))
                if held is not None:
                    body.update(held)
            if case.operation.label in MEMBER_ONLY and _valid_holder(body):
                path = case.path_parameters or {}
                joined = dict(self.memberships).get((path.get("group"), path.get("member")))
                if joined is not None:
                    body.update(joined)

        def after_call(self, response: schemathesis.Response, case: schemathesis.Case) -> None:
            super().after_call(response, case)
            chained[f"{case.operation.label} {response.status_code}"] += 1
            if case.operation.label == ACQUIRE and response.status_code == 200:
                lease = response.json()
                self.leases.append(
                    (
                        lease["key"],
                        {
                            "owner_token": lease["owner_token"],
                            "fencing_token": lease["fencing_token"],
                        },
                    )
                )
            if case.operation.label == CREATE_GROUP and response.status_code == 201:
                self.groups.append(response.json()["group"])
            if case.operation.label == JOIN and response.status_code == 200:
                joined = response.json()
                tokens = {k: joined[k] for k in ("owner_token", "fencing_token")}
                self.memberships.append(((joined["group"], joined["member"]), tokens))

        def teardown(self) -> None:
            with contract_env.http(contract_env.project, check=False) as http:
                for key, body in self.leases:
                    http.post(f"/v1/locks/{key}/release", json=body)
                for (group, member), body in self.memberships:
                    http.post(f"/v1/groups/{group}/members/{member}/leave", json=body)
                for group in self.groups:
                    http.delete(f"/v1/groups/{group}")
            super().teardown()

    ReleasingMachine.run()
    assert chained["POST /v1/locks/{key}/renew 200"], chained
    assert chained["POST /v1/locks/{key}/release 204"], chained
    assert chained["GET /v1/locks/{key}/leases/{fencing_token} 200"], chained
    assert chained[f"{JOIN} 200"], chained  # created, then joined: a chain of the groups' links


def _valid_holder(body: Any) -> bool:
    """Whether a renew or release body holds a well-formed owner token and fencing token."""
    if not isinstance(body, dict):
        return False
    token, fencing = body.get("owner_token"), body.get("fencing_token")
    return (
        isinstance(token, str)
        and UUID.fullmatch(token) is not None
        and isinstance(fencing, int)
        and not isinstance(fencing, bool)
        and 1 <= fencing <= 2**53 - 1
    )
