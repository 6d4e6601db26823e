"""Test your own code that takes Volcano locks, against a real reference server.

With pytest, nothing to import: the plugin installed with the package gives these fixtures
(they start `volcano-server`, so they need the testing extra, the server's and pytest:
`pip install "volcano[testing]"`, or `pip install ".[testing]"` from a checkout):

- `volcano_server`: one server for the whole session, on a free port with a temporary SQLite
  database (a `LocalServer`).
- `volcano_project`: a project of the test's own (a `Project`: `url`, `anon_key`,
  `service_key`, `env()`, `client()`), so tests never see each other's locks.
- `volcano_client` / `volcano_async_client`: a ready `volcano.Client` / `volcano.AsyncClient`
  in that project.
- `volcano_env`: that project's `VOLCANO_*` variables set for the test, for code that builds
  `volcano.Client()` itself.

```python
def test_report_runs_once(volcano_client):
    with volcano_client.locks.with_lock("daily-report", ttl=30) as guard:
        assert volcano_client.locks.get("daily-report").held
```

Without pytest, `local_server()` is a context manager yielding the server's URL and keys.
"""

from __future__ import annotations

from ._server import LocalServer, Project, ServerStartError, local_server

__all__ = ["LocalServer", "Project", "ServerStartError", "local_server"]
