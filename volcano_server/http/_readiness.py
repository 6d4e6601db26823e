"""`GET /readyz`: whether this process can serve lock calls now, for a load balancer.

`/healthz` says the process is up (it never touches the database, so a database outage does not
make a supervisor restart healthy servers); `/readyz` asks the database a trivial query and
answers 503 `unavailable` while it cannot serve, so a load balancer sends requests elsewhere;
likewise while the API's listener has no seat for a new connection (every one is held by a
connection with keys: `_seats`), which `/healthz` cannot see.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable

import anyio
import anyio.to_thread
from starlette.requests import Request
from starlette.responses import Response

from ..storage import Storage, StorageUnavailable
from ..telemetry._metrics import Metrics
from ..wire._errors import ApiError
from ..wire._wire import Answer, dumps

__all__ = ["readiness_endpoint"]

log = logging.getLogger("volcano_server")

# Longer than the storage's own connect and pool timeouts (3 s), so those speak first.
_CHECK_SECONDS = 5.0


def readiness_endpoint(
    storage: Storage, metrics: Metrics, accepting: Callable[[], bool] | None = None
) -> Callable[[Request], Awaitable[Response]]:
    """The endpoint: 200 {"status": "ready"}, or 503 with the API's error shape.

    `accepting` says whether the API's listener would serve a new connection (None: it is not
    known here, as for an app served by another server).
    """
    limiter = anyio.CapacityLimiter(2)  # probes must not crowd out lock calls' threads

    async def readyz(_request: Request) -> Response:
        request_id = str(uuid.uuid4())
        headers = {"x-request-id": request_id, "cache-control": "no-store"}
        if accepting is not None and not accepting():
            log.warning("not ready: every connection seat of the API is held by keyed clients")
            message = "the server has no seat for a new connection; retry, or go elsewhere"
            return _unready(ApiError.unavailable(message).answer(request_id), headers)
        try:
            with anyio.fail_after(_CHECK_SECONDS):
                await anyio.to_thread.run_sync(
                    storage.check, limiter=limiter, abandon_on_cancel=True
                )
        except (StorageUnavailable, TimeoutError) as exc:
            metrics.storage_errors.labels("readiness").inc()
            log.warning("not ready: %s", exc or "the database did not answer in time")
            answer = ApiError.unavailable("the database cannot serve right now").answer(request_id)
            return _unready(answer, headers)
        return Response(dumps({"status": "ready"}), 200, headers, media_type="application/json")

    return readyz


def _unready(answer: Answer, headers: dict[str, str]) -> Response:
    headers["retry-after"] = str(answer.retry_after)
    return Response(answer.body, answer.status, headers, media_type="application/json")
