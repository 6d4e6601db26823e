"""`GET /readyz`: whether this process can serve lock calls now, for a load balancer.

`/healthz` says the process is up (it never touches the database, so a database outage does not
make a supervisor restart healthy servers); `/readyz` asks the database a trivial query and
answers 503 `unavailable` while it cannot serve, so a load balancer sends requests elsewhere.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable

import anyio
import anyio.to_thread
from starlette.requests import Request
from starlette.responses import Response

from ._errors import ApiError
from ._metrics import Metrics
from ._wire import dumps
from .storage import Storage, StorageUnavailable

__all__ = ["readiness_endpoint"]

log = logging.getLogger("volcano_server")

# Longer than the storage's own connect and pool timeouts (3 s), so those speak first.
_CHECK_SECONDS = 5.0


def readiness_endpoint(
    storage: Storage, metrics: Metrics
) -> Callable[[Request], Awaitable[Response]]:
    """The endpoint: 200 {"status": "ready"}, or 503 with the API's error shape."""
    limiter = anyio.CapacityLimiter(2)  # probes must not crowd out lock calls' threads

    async def readyz(_request: Request) -> Response:
        request_id = str(uuid.uuid4())
        headers = {"x-request-id": request_id, "cache-control": "no-store"}
        try:
            with anyio.fail_after(_CHECK_SECONDS):
                await anyio.to_thread.run_sync(
                    storage.check, limiter=limiter, abandon_on_cancel=True
                )
        except (StorageUnavailable, TimeoutError) as exc:
            metrics.storage_errors.labels("readiness").inc()
            log.warning("not ready: %s", exc or "the database did not answer in time")
            answer = ApiError.unavailable("the database cannot serve right now").answer(request_id)
            headers["retry-after"] = str(answer.retry_after)
            return Response(answer.body, answer.status, headers, media_type="application/json")
        return Response(dumps({"status": "ready"}), 200, headers, media_type="application/json")

    return readyz
