"""--rate-limit over real HTTP: 429 rate_limited with Retry-After, per project, never stored."""

from __future__ import annotations

import time
from pathlib import Path

import httpx

from tests.support.conformance import check_response
from tests.support.server import create_project, serve_in_thread
from volcano_server import ServerConfig, create_app

from .conftest import Locks, new_id


class TestRateLimit:
    def test_over_the_limit_is_429_per_project_and_not_stored(self, tmp_path: Path) -> None:
        """Past the burst a project gets 429 with Retry-After; another project is unaffected;
        the refused request is not stored, so once the budget refills its request id runs."""
        url = f"sqlite:///{tmp_path / 'limited.db'}"
        busy, quiet = create_project(url, "busy"), create_project(url, "quiet")
        config = ServerConfig(database_url=url, access_log=False, rate_limit=2)  # burst of 2
        hooks = {"response": [check_response]}
        with (
            serve_in_thread(create_app(config)) as base,
            httpx.Client(base_url=base, headers=busy.headers(), event_hooks=hooks) as a,
            httpx.Client(base_url=base, headers=quiet.headers(), event_hooks=hooks) as b,
        ):
            assert [Locks(a).get("k").status_code for _ in range(2)] == [200, 200]
            rid, owner = new_id(), new_id()
            refused = Locks(a).acquire("k", owner, request_id=rid)
            assert refused.status_code == 429
            assert refused.json()["error"]["code"] == "rate_limited"
            assert refused.headers["retry-after"] == "1"
            assert Locks(b).get("k").status_code == 200
            time.sleep(1.0)  # the refill the Retry-After asked for
            granted = Locks(a).acquire("k", owner, request_id=rid)
            assert granted.status_code == 200
            assert "idempotent-replayed" not in granted.headers

    def test_credentials_come_before_the_limit(self, tmp_path: Path) -> None:
        """Unauthenticated requests are 401 and do not use up the project's budget."""
        url = f"sqlite:///{tmp_path / 'limited.db'}"
        project = create_project(url, "p")
        config = ServerConfig(database_url=url, access_log=False, rate_limit=0.2)
        with serve_in_thread(create_app(config)) as base, httpx.Client(base_url=base) as http:
            for _ in range(3):
                assert (
                    http.get("/v1/locks/k", headers={"apikey": project.anon_key}).status_code == 401
                )
            assert http.get("/v1/locks/k", headers=project.headers()).status_code == 200
