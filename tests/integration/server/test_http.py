"""HTTP behaviour of the reference server: routing, credentials, request ids, bad input."""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path

import httpx
import pytest

from tests.conftest import LiveServer
from tests.support.server import create_project
from tests.support.sockets import connect, read_reply, request_bytes

from .conftest import Locks, new_id

ROOT = Path(__file__).resolve().parents[3]
UUID_RE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")


def error(response: httpx.Response) -> dict[str, str]:
    body: dict[str, dict[str, str]] = response.json()
    assert body["error"]["request_id"] == response.headers["x-request-id"]
    return body["error"]


def acquire_body(ttl: object = 30) -> dict[str, object]:
    return {"owner_token": new_id(), "ttl_seconds": ttl}


class TestHealthAndSpec:
    def test_healthz_needs_no_credentials(self, live_server: LiveServer) -> None:
        """GET /healthz answers 200 {"status": "ok"} without keys."""
        with live_server.http() as http:
            response = http.get("/healthz")
        assert response.status_code == 200
        assert response.json() == {"status": "ok"}

    def test_serves_its_spec(self, live_server: LiveServer) -> None:
        """GET /openapi.yaml returns the repository's openapi.yaml byte for byte."""
        with live_server.http() as http:
            response = http.get("/openapi.yaml")
        assert response.status_code == 200
        assert response.content == (ROOT / "openapi.yaml").read_bytes()

    def test_lock_answers_are_not_cacheable(self, api: httpx.Client, key: str) -> None:
        """Lock state must never be served from a cache."""
        assert api.get(f"/v1/locks/{key}").headers["cache-control"] == "no-store"


class TestRouting:
    def test_unknown_path_is_404_json(self, live_server: LiveServer) -> None:
        """An unknown path gets 404 not_found in the error shape, before any credential check."""
        with live_server.http() as http:
            response = http.get("/v1/nothing")
        assert response.status_code == 404
        assert error(response)["code"] == "not_found"

    def test_trailing_slash_is_not_redirected(self, api: httpx.Client, key: str) -> None:
        """/v1/locks/{key}/ is not a route and is not redirected either."""
        response = api.get(f"/v1/locks/{key}/acquire/")
        assert response.status_code == 404

    @pytest.mark.parametrize(
        ("method", "path", "allow"),
        [
            ("PUT", "/v1/locks/k", "DELETE, GET"),
            ("GET", "/v1/locks/k/acquire", "POST"),
            ("DELETE", "/v1/locks/k/release", "POST"),
            ("POST", "/healthz", "GET"),
        ],
    )
    def test_wrong_method_is_405_with_allow(
        self, live_server: LiveServer, method: str, path: str, allow: str
    ) -> None:
        """A known path with another method: 405 listing the allowed methods, before credentials."""
        with live_server.http() as http:
            response = http.request(method, path)
        assert response.status_code == 405
        assert response.headers["allow"] == allow
        assert error(response)["code"] == "method_not_allowed"

    def test_encoded_slash_in_key_is_a_validation_error(self, api: httpx.Client) -> None:
        """a%2Fb is the key "a/b" on the acquire route: 422 naming the key, not 404."""
        response = api.post("/v1/locks/a%2Fb/acquire", json=acquire_body())
        assert response.status_code == 422
        assert "'a/b'" in error(response)["message"]

    def test_empty_key_is_a_validation_error(self, api: httpx.Client) -> None:
        """/v1/locks//acquire is acquire on the empty key: 422."""
        response = api.post("/v1/locks//acquire", json=acquire_body())
        assert response.status_code == 422
        assert error(response)["message"].startswith("key:")


class TestCredentials:
    def test_missing_apikey(self, live_server: LiveServer, key: str) -> None:
        """No apikey header: 401."""
        with live_server.http() as http:
            response = http.get(
                f"/v1/locks/{key}",
                headers={"Authorization": f"Bearer {live_server.project.service_key}"},
            )
        assert response.status_code == 401
        assert "apikey" in error(response)["message"]

    def test_missing_bearer(self, live_server: LiveServer, key: str) -> None:
        """No Authorization header: 401."""
        with live_server.http() as http:
            response = http.get(
                f"/v1/locks/{key}", headers={"apikey": live_server.project.anon_key}
            )
        assert response.status_code == 401
        assert error(response)["code"] == "unauthorized"

    @pytest.mark.parametrize("value", ["Basic abc", "Bearer", "bearer-token", "token"])
    def test_malformed_authorization(self, live_server: LiveServer, key: str, value: str) -> None:
        """An Authorization header that is not "Bearer <key>" is 401."""
        with live_server.http() as http:
            response = http.get(
                f"/v1/locks/{key}",
                headers={"apikey": live_server.project.anon_key, "Authorization": value},
            )
        assert response.status_code == 401

    def test_valid_apikey_wrong_bearer(self, live_server: LiveServer, key: str) -> None:
        """A valid anon key with an unknown service key is 401 (the bearer is really checked)."""
        headers = {
            "apikey": live_server.project.anon_key,
            "Authorization": "Bearer vk_service_nope",
        }
        with live_server.http() as http:
            assert http.get(f"/v1/locks/{key}", headers=headers).status_code == 401

    def test_wrong_apikey_valid_bearer(self, live_server: LiveServer, key: str) -> None:
        """An unknown anon key with a valid service key is 401 (the apikey is really checked)."""
        headers = {
            "apikey": "vk_anon_nope",
            "Authorization": f"Bearer {live_server.project.service_key}",
        }
        with live_server.http() as http:
            assert http.get(f"/v1/locks/{key}", headers=headers).status_code == 401

    def test_anon_key_as_bearer_is_forbidden(self, live_server: LiveServer, key: str) -> None:
        """The project's anon key used as the service credential: 403."""
        project = live_server.project
        headers = {"apikey": project.anon_key, "Authorization": f"Bearer {project.anon_key}"}
        with live_server.http() as http:
            response = http.get(f"/v1/locks/{key}", headers=headers)
        assert response.status_code == 403
        assert error(response)["code"] == "forbidden"

    def test_service_key_as_apikey_is_refused(self, live_server: LiveServer, key: str) -> None:
        """The apikey header takes the anon key; a service key there is 401."""
        project = live_server.project
        headers = {"apikey": project.service_key, "Authorization": f"Bearer {project.service_key}"}
        with live_server.http() as http:
            assert http.get(f"/v1/locks/{key}", headers=headers).status_code == 401

    def test_keys_of_two_projects(self, live_server: LiveServer, key: str) -> None:
        """One project's anon key with another project's service key: 401."""
        headers = {
            "apikey": live_server.project.anon_key,
            "Authorization": f"Bearer {live_server.other.service_key}",
        }
        with live_server.http() as http:
            response = http.get(f"/v1/locks/{key}", headers=headers)
        assert response.status_code == 401
        assert "different projects" in error(response)["message"]

    def test_new_keys_work_at_once(self, live_server: LiveServer, key: str) -> None:
        """Keys made while the server runs work at once (unknown keys are not cached)."""
        with live_server.http() as http:
            assert (
                http.get(
                    f"/v1/locks/{key}", headers={"apikey": "vk_anon_x", "Authorization": "Bearer y"}
                ).status_code
                == 401
            )
        fresh = create_project(live_server.database_url, f"fresh-{uuid.uuid4().hex[:6]}")
        with live_server.http(fresh) as http:
            assert http.get(f"/v1/locks/{key}").status_code == 200

    def test_credentials_are_judged_before_the_body(
        self, live_server: LiveServer, key: str
    ) -> None:
        """A request that is both unauthenticated and malformed gets 401, not 400/413/422."""
        with live_server.http() as http:
            assert http.post(f"/v1/locks/{key}/acquire", content=b"{not json").status_code == 401
            assert (
                http.post("/v1/locks/bad key!/acquire", content=b"x" * 100_000).status_code == 401
            )


class TestRequestIds:
    def test_sent_id_is_echoed_exactly(self, api: httpx.Client, key: str) -> None:
        """An upper-case X-Request-Id comes back byte for byte in the header."""
        request_id = "7C9E6679-7425-40DE-944B-E07FC1F90AE7"
        assert (
            api.get(f"/v1/locks/{key}", headers={"X-Request-Id": request_id}).headers[
                "x-request-id"
            ]
            == request_id
        )

    def test_sent_id_is_in_error_bodies(self, api: httpx.Client, key: str) -> None:
        """Errors carry the client's request id in error.request_id."""
        request_id = "7C9E6679-7425-40DE-944B-E07FC1F90AE7"
        response = api.post(f"/v1/locks/{key}/renew", json={}, headers={"X-Request-Id": request_id})
        assert error(response)["request_id"] == request_id

    def test_missing_id_is_made_by_the_server(self, api: httpx.Client, key: str) -> None:
        """Without X-Request-Id the server makes a UUID and returns it."""
        assert UUID_RE.fullmatch(api.get(f"/v1/locks/{key}").headers["x-request-id"])

    @pytest.mark.parametrize(
        "bad",
        [
            "not-a-uuid",
            "7C9E66797425-40DE-944B-E07FC1F90AE7-",
            "{7c9e6679-7425-40de-944b-e07fc1f90ae7}",
            "7c9e6679742540de944be07fc1f90ae7",
        ],
    )
    def test_malformed_id_is_400_with_server_id(
        self, api: httpx.Client, key: str, bad: str
    ) -> None:
        """A malformed X-Request-Id is 400 invalid_request, answered under a server-made id."""
        response = api.get(f"/v1/locks/{key}", headers={"X-Request-Id": bad})
        assert response.status_code == 400
        assert error(response)["code"] == "invalid_request"
        assert UUID_RE.fullmatch(response.headers["x-request-id"])

    def test_two_ids_are_400(self, api: httpx.Client, key: str) -> None:
        """Two X-Request-Id headers are ambiguous: 400."""
        headers = [("X-Request-Id", new_id()), ("X-Request-Id", new_id())]
        assert api.get(f"/v1/locks/{key}", headers=headers).status_code == 400


class TestBadInput:
    def post(
        self,
        api: httpx.Client,
        key: str,
        body: bytes,
        content_type: str | None = "application/json",
    ) -> httpx.Response:
        headers = {"Content-Type": content_type} if content_type else {}
        return api.post(f"/v1/locks/{key}/acquire", content=body, headers=headers)

    @pytest.mark.parametrize(
        ("body", "phrase"),
        [
            (b"", "empty"),
            (b"{", "not valid JSON"),
            (b"[]", "must be a JSON object, got an array"),
            (b'"x"', "got a string"),
            (b"null", "got null"),
            (b"3", "got a number"),
            (b'{"owner_token": "x", "ttl_seconds": NaN}', "NaN"),
            (b'{"owner_token": "x", "ttl_seconds": Infinity}', "Infinity"),
            (b'{"ttl_seconds": 1, "ttl_seconds": 2}', "duplicate field 'ttl_seconds'"),
            (b'{"owner_token": "\xff"}', "not UTF-8"),
            (b"[" * 5000 + b"]" * 5000, "nested too deeply"),
        ],
    )
    def test_unparseable_bodies_are_400(
        self, api: httpx.Client, key: str, body: bytes, phrase: str
    ) -> None:
        """Bodies that are not one JSON object get 400 invalid_request saying why."""
        response = self.post(api, key, body)
        assert response.status_code == 400
        assert phrase in error(response)["message"]

    @pytest.mark.parametrize(
        "content_type",
        [
            None,
            "text/plain",
            "application/x-www-form-urlencoded",
            "application/json; charset=latin-1",
        ],
    )
    def test_wrong_content_type_is_400(
        self, api: httpx.Client, key: str, content_type: str | None
    ) -> None:
        """Only application/json (UTF-8) bodies are accepted."""
        response = self.post(api, key, json.dumps(acquire_body()).encode(), content_type)
        assert response.status_code == 400
        assert error(response)["code"] == "invalid_request"

    def test_json_with_charset_is_accepted(self, api: httpx.Client, key: str) -> None:
        """application/json; charset=utf-8 is JSON."""
        response = self.post(
            api, key, json.dumps(acquire_body()).encode(), "application/json; charset=utf-8"
        )
        assert response.status_code == 200

    def test_oversized_body_is_413(self, api: httpx.Client, key: str) -> None:
        """A body over 16 KiB gets 413 payload_too_large."""
        body = json.dumps(
            {"owner_token": new_id(), "ttl_seconds": 30, "pad": "x" * 20_000}
        ).encode()
        response = self.post(api, key, body)
        assert response.status_code == 413
        assert error(response)["code"] == "payload_too_large"

    def test_oversized_streamed_body_is_413(self, api: httpx.Client, key: str) -> None:
        """A chunked body without Content-Length is cut off at the limit too."""

        def chunks() -> object:
            for _ in range(40):
                yield b" " * 1000

        response = api.post(
            f"/v1/locks/{key}/acquire",
            content=chunks(),
            headers={"Content-Type": "application/json"},
        )  # type: ignore[arg-type]
        assert response.status_code == 413

    @pytest.mark.parametrize(
        ("body", "phrase"),
        [
            ({"ttl_seconds": 30}, "owner_token: is required"),
            ({"owner_token": "0F8FAD5B-D9CB-469F-A165-70867728950E"}, "ttl_seconds: is required"),
            ({**acquire_body(), "extra": 1}, "extra: unknown field"),
            (
                {"owner_token": "zzzzzzzz-zzzz-zzzz-zzzz-zzzzzzzzzzzz", "ttl_seconds": 30},
                "owner_token: must match",
            ),
            (
                {"owner_token": "nope", "ttl_seconds": 30},
                "owner_token: must be at least 36 characters",
            ),
            (
                {"owner_token": "0f8fad5b-d9cb-469f-a165-70867728950e\n", "ttl_seconds": 30},
                "owner_token: must",
            ),
            ({"owner_token": 42, "ttl_seconds": 30}, "owner_token: must be a string"),
            (acquire_body(0.05), "ttl_seconds: must be at least 0.1"),
            (acquire_body(86400.5), "ttl_seconds: must be at most 86400"),
            (acquire_body("30"), "ttl_seconds: must be a number, got '30'"),
            (acquire_body(True), "ttl_seconds: must be a number, got true"),
            (acquire_body(None), "ttl_seconds: must be a number, got null"),
        ],
    )
    def test_schema_violations_are_422_naming_the_field(
        self, api: httpx.Client, key: str, body: dict[str, object], phrase: str
    ) -> None:
        """Bodies that parse but break the schema get 422 validation_error naming field and rule."""
        response = api.post(f"/v1/locks/{key}/acquire", json=body)
        assert response.status_code == 422
        assert error(response)["code"] == "validation_error"
        assert phrase in error(response)["message"]

    def test_huge_exponent_is_422(self, api: httpx.Client, key: str) -> None:
        """1e400 parses as infinity: refused as out of range, never stored."""
        body = b'{"owner_token": "0f8fad5b-d9cb-469f-a165-70867728950e", "ttl_seconds": 1e400}'
        response = self.post(api, key, body)
        assert response.status_code == 422
        assert "finite" in error(response)["message"]

    @pytest.mark.parametrize(
        ("fence", "phrase"),
        [
            (0, "at least 1"),
            (-3, "at least 1"),
            (2**53, "at most 9007199254740991"),
            (1.5, "integer"),
            ("1", "integer"),
        ],
    )
    def test_bad_fencing_tokens_are_422(
        self, api: httpx.Client, key: str, fence: object, phrase: str
    ) -> None:
        """Fencing tokens are integers from 1 to 2^53-1."""
        body = {"owner_token": new_id(), "fencing_token": fence, "ttl_seconds": 30}
        response = api.post(f"/v1/locks/{key}/renew", json=body)
        assert response.status_code == 422
        assert phrase in error(response)["message"]

    def test_integral_float_is_an_integer(self, locks: Locks, key: str) -> None:
        """As in JSON Schema, 1.0 is the integer 1."""
        owner = new_id()
        locks.acquire(key, owner)
        response = locks.http.post(
            f"/v1/locks/{key}/release", json={"owner_token": owner, "fencing_token": 1.0}
        )
        assert response.status_code == 204

    @pytest.mark.parametrize(
        ("path_key", "ok"),
        [
            ("a" * 255, True),
            ("a" * 256, False),
            ("9lives", True),
            ("-lead", False),
            ("a.b_c:d-e", True),
            ("a%0A", False),
            ("caf%C3%A9", False),
            ("sp%20ace", False),
        ],
    )
    def test_key_rules(self, api: httpx.Client, path_key: str, ok: bool) -> None:
        """Keys are 1 to 255 of [A-Za-z0-9._:-], starting with a letter or digit, matched whole."""
        response = api.get(f"/v1/locks/{path_key}")
        assert response.status_code == (200 if ok else 422)

    def test_rejected_requests_change_nothing(self, locks: Locks, key: str) -> None:
        """A refused acquire leaves the key untouched."""
        locks.http.post(f"/v1/locks/{key}/acquire", json=acquire_body(0))
        assert locks.get(key).json()["fencing_token"] is None


class TestStrictHeaders:
    @pytest.mark.parametrize("name", ["apikey", "Authorization"])
    def test_a_credential_sent_twice_is_400(
        self, live_server: LiveServer, key: str, name: str
    ) -> None:
        """Two apikey (or Authorization) headers are refused, never resolved by "first wins",
        even when the first is valid."""
        own, other = live_server.project, live_server.other
        values = {
            "apikey": [own.anon_key, other.anon_key],
            "Authorization": [f"Bearer {own.service_key}", f"Bearer {other.service_key}"],
        }
        single = "Authorization" if name == "apikey" else "apikey"
        headers = [(name, value) for value in values[name]] + [(single, values[single][0])]
        with live_server.http() as http:
            response = http.get(f"/v1/locks/{key}", headers=headers)
        assert response.status_code == 400
        assert name in error(response)["message"]

    @pytest.mark.parametrize("space", [" ", "\t", "  "])
    def test_both_credentials_lose_edge_whitespace_alike(
        self, live_server: LiveServer, key: str, space: str
    ) -> None:
        """Whitespace around either credential is ignored the same way (sent raw: httpx will
        not send it)."""
        port = int(live_server.url.rsplit(":", 1)[1])
        project = live_server.project
        headers = [
            ("apikey", f"{space}{project.anon_key}{space}"),
            ("Authorization", f"Bearer {project.service_key}{space}"),
        ]
        with connect(port) as sock:
            sock.sendall(
                request_bytes("GET", f"/v1/locks/{key}", [*headers, ("Connection", "close")])
            )
            reply = read_reply(sock, timeout=5)
        assert reply.status == 200

    @pytest.mark.parametrize("encoding", ["gzip", "br", "identity, gzip"])
    def test_compressed_body_is_415(self, api: httpx.Client, key: str, encoding: str) -> None:
        """A body in a Content-Encoding the server does not decode is refused, not misread."""
        response = api.post(
            f"/v1/locks/{key}/acquire",
            json=acquire_body(),
            headers={"Content-Encoding": encoding},
        )
        assert response.status_code == 415
        assert error(response)["code"] == "unsupported_media_type"

    def test_identity_encoding_is_accepted(self, api: httpx.Client, key: str) -> None:
        """Content-Encoding: identity is no encoding at all."""
        response = api.post(
            f"/v1/locks/{key}/acquire",
            json=acquire_body(),
            headers={"Content-Encoding": "identity"},
        )
        assert response.status_code == 200

    @pytest.mark.parametrize("digits", [101, 5001])
    def test_overlong_number_names_no_python_internals(
        self, api: httpx.Client, key: str, digits: int
    ) -> None:
        """A number of thousands of digits is a 400 saying so, never Python's advice on
        sys.set_int_max_str_digits()."""
        body = b'{"owner_token": "%s", "fencing_token": %s}' % (new_id().encode(), b"9" * digits)
        response = api.post(
            f"/v1/locks/{key}/release", content=body, headers={"Content-Type": "application/json"}
        )
        assert response.status_code == 400
        message = error(response)["message"]
        assert f"number of {digits} characters" in message
        assert "sys." not in message
        assert "int_max_str_digits" not in message

    def test_long_but_sane_number_is_judged_by_the_schema(
        self, api: httpx.Client, key: str
    ) -> None:
        """A 40-digit fencing token is still a number: 422 at most 2^53-1."""
        body = b'{"owner_token": "%s", "fencing_token": %s}' % (new_id().encode(), b"9" * 40)
        response = api.post(
            f"/v1/locks/{key}/release", content=body, headers={"Content-Type": "application/json"}
        )
        assert response.status_code == 422
