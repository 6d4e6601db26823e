"""The ASGI application: spec-derived routes on Starlette, storage opened for its lifetime."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING

import anyio
import anyio.lowlevel
import anyio.to_thread
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from .._config import ServerConfig
from ..groups._transactions import GroupTransactions
from ..groups._watching import read_group, record_group
from ..http._api import HANDLED_OPERATIONS, Api
from ..http._auth import Authenticator
from ..http._operations import Parts
from ..http._ratelimit import RateLimiter
from ..http._readiness import readiness_endpoint
from ..http._routing import Endpoint, SpecRoute
from ..http._shares import ProjectShares
from ..http._spec import Operation, Spec, load_spec
from ..locks._admission import Admission
from ..locks._offload import Offload, Runner, ThreadOffload
from ..locks._pulse import Pulse
from ..locks._registry import Registry
from ..locks._transactions import Transactions
from ..locks._waiters import HandoffTimers, Waits
from ..locks._watching import Watches
from ..storage import Storage, StorageUnavailable, open_storage
from ..storage._groups import GROUP_WATCH_PREFIX
from ..telemetry._accesslog import AccessLog, RequestRecord
from ..telemetry._lockmetrics import End, Ended, KeyPrefixes
from ..telemetry._metrics import Metrics
from ..telemetry._tracing import Tracing
from ..transport._pacing import Pacer
from ..wire._errors import ApiError

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider

__all__ = ["create_app"]

log = logging.getLogger("volcano_server")

# Expired leases (and idle keys) deleted per transaction: small, since each holds the write lock
# (SQLite) or its keys' row locks (PostgreSQL) while it runs.
_LEASES_PER_PURGE = 500
# Watchers answered per turn of the event loop, when one read answers many.
_WATCH_ANSWERS_PER_TURN = 64


def create_app(
    config: ServerConfig | None = None,
    *,
    storage: Storage | None = None,
    spec: Spec | None = None,
    offload: Offload | None = None,
    tracer_provider: TracerProvider | None = None,
    accepting: Callable[[], bool] | None = None,
) -> Starlette:
    """Build the server.

    It opens `config.database_url` (unless given `storage`) and checks that the spec's
    operations and the server's handlers are the same set before serving anything. Its
    `state.metrics` and `state.access_log` are what the server's listeners report to.
    `offload` runs its storage work (default: on the loop when SQLite need not block, else in
    worker threads); the schedule explorer gives its own. Requests are traced on
    `tracer_provider`, else on the process's global one if it is configured (`_tracing`).
    `accepting` says whether the API's listener would serve a new connection (`/readyz`).
    """
    config = config or ServerConfig()
    spec = spec or load_spec()
    _check_operations(spec)
    storage = storage or open_storage(
        config.database_url, sqlite_synchronous=config.sqlite_synchronous
    )
    metrics = Metrics(
        KeyPrefixes(config.metric_key_prefixes) if config.metric_key_prefixes else None
    )
    access_log = AccessLog(metrics.observe, enabled=config.access_log)
    authenticator = Authenticator(storage, cache_seconds=config.auth_cache_seconds)
    tracing = Tracing.for_provider(
        tracer_provider,
        lock_keys=config.trace_lock_keys,
        database="sqlite" if storage.runs_inline else "postgresql",
    )
    admission = Admission(
        storage.connections,
        reserved=max(1, storage.connections // 4),
        patience=config.patience,
        on_refused=metrics.over_time_share.inc,
    )
    metrics.watch_admission(lambda: admission.waiting)
    offload = offload or ThreadOffload(inline=storage.runs_inline, admission=admission)
    run = Runner(offload, storage, metrics, tracing)
    lifetime_us = round(config.waiting.heartbeat_lifetime * 1_000_000)
    pulse = Pulse(lifetime_us, round(config.waiting.recovery_seconds * 1_000_000))
    registry = Registry(uuid.uuid4().hex)  # this server's id and its waiting requests
    watches = Watches(
        storage,
        run,
        server_id=registry.server_id,
        max_wait_seconds=config.waiting.max_wait_seconds,
        heartbeat_lifetime_us=lifetime_us,
        readers={GROUP_WATCH_PREFIX: (read_group, record_group)},
        pace=Pacer(_WATCH_ANSWERS_PER_TURN).submit,
    )
    groups = GroupTransactions(
        storage,
        retention_seconds=config.retention_seconds,
        server_id=registry.server_id,
        changed=watches.changed,
    )
    timers = HandoffTimers(registry)
    locks = Transactions(
        storage,
        registry,
        retention_seconds=config.retention_seconds,
        max_keys=config.quotas.keys_per_project,
        settings=config.waiting,
        time_handoff=timers.time_handoff,
        changed=watches.changed,
        pulse=pulse,
        revocations=authenticator,
        metrics=metrics.locks,
    )
    waits = Waits(
        storage,
        registry,
        locks,
        timers,
        settings=config.waiting,
        run=run,
        pulse=pulse,
        revocations=authenticator,
        watches=watches,
        metrics=metrics.locks,
        tracing=tracing,
    )
    metrics.watch_waiters(waits, watches)
    metrics.expect(operation.operation_id for operation in spec.operations)
    api = Api(
        Parts(locks, groups, waits, watches, storage, run),
        authenticator,
        spec.request_id,
        max_body_bytes=config.max_body_bytes,
        max_batch_body_bytes=config.max_batch_body_bytes,
        quotas=config.quotas,
        admission=admission,
        max_group_body_bytes=config.max_group_body_bytes,
        rate_limiter=RateLimiter(config.rate_limit) if config.rate_limit else None,
        shares=ProjectShares(
            config.max_waiters_per_project,
            config.max_requests_per_project,
            config.max_body_bytes_per_project,
        ),
        metrics=metrics,
        access_log=access_log,
        run=run,
        monotonic=storage.monotonic,
        tracing=tracing,
    )

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(_purge_forever, storage, config, metrics, pulse)
            tasks.start_soon(_record_key_uses_forever, storage, authenticator, config, metrics)
            tasks.start_soon(waits.run)
            tasks.start_soon(_measure_loop_lag, metrics)
            try:
                yield
            finally:
                waits.close()
                tasks.cancel_scope.cancel()
        with contextlib.suppress(Exception):  # best effort: the last uses before shutdown
            storage.record_key_uses(authenticator.take_uses())
        storage.close()

    readyz = Route("/readyz", readiness_endpoint(storage, metrics, accepting), methods=["GET"])
    routes = [*_routes(spec, api), readyz]

    app = Starlette(
        routes=routes,
        lifespan=lifespan,
        exception_handlers={Exception: _internal_error(access_log)},
    )
    app.router.redirect_slashes = False
    app.router.default = api.not_found
    app.state.storage = storage
    app.state.metrics = metrics
    app.state.access_log = access_log
    app.state.waits = waits
    app.state.watches = watches
    app.state.tracing = tracing
    return app


def _internal_error(
    access_log: AccessLog,
) -> Callable[[Request, Exception], Awaitable[Response]]:
    """The answer to a fault outside the API's own handling (which answers its own).

    Still the API's JSON 500, counted and access-logged like every answer. Starlette re-raises
    the fault afterwards, and uvicorn logs it through the server's escaped handler.
    """

    async def internal_error(request: Request, _exc: Exception) -> Response:
        request_id = str(uuid.uuid4())
        answer = ApiError.internal().answer(request_id)
        access_log(RequestRecord.of(request.scope, answer.status, request_id))
        headers = {"x-request-id": request_id, "cache-control": "no-store"}
        return Response(answer.body, answer.status, headers, media_type="application/json")

    return internal_error


def _check_operations(spec: Spec) -> None:
    in_spec = {operation.operation_id for operation in spec.operations}
    if in_spec != HANDLED_OPERATIONS:
        raise RuntimeError(
            "openapi.yaml and the server disagree:"
            f" spec-only {sorted(in_spec - HANDLED_OPERATIONS)},"
            f" server-only {sorted(HANDLED_OPERATIONS - in_spec)}"
        )


def _routes(spec: Spec, api: Api) -> list[BaseRoute]:
    by_path: dict[str, dict[str, tuple[Operation, Endpoint]]] = {}
    for operation in spec.operations:
        by_path.setdefault(operation.path, {})[operation.method] = (operation, api.endpoint)
    routes: list[BaseRoute] = [
        SpecRoute(path, endpoints, api.not_allowed) for path, endpoints in by_path.items()
    ]

    async def openapi_yaml(_request: Request) -> Response:
        return Response(spec.text, media_type="application/yaml")

    routes.append(Route("/openapi.yaml", openapi_yaml, methods=["GET"], include_in_schema=False))
    return routes


async def _purge_forever(
    storage: Storage, config: ServerConfig, metrics: Metrics, pulse: Pulse
) -> None:
    """Delete expired outcomes, expired leases, idle keys and departed waiters in batches.

    So all stay bounded under load, whatever a project stores (issue 33): expired leases in
    small batches (each holds the write lock, or its keys' row locks), counted as expiries.
    Waiters only while this server judges every lapsed heartbeat (`Pulse.judges_all`), asked
    at the purge's own clock: right after the database was away every server's heartbeat had
    lapsed, and while this server's own beats hang (its last one old, none failed yet) its
    view of them is as stale as theirs.
    """
    grace_us = round(config.waiting.rejoin_seconds * 1_000_000)
    idle_us = round(config.key_retention_seconds * 1_000_000)
    small = min(config.purge_batch, _LEASES_PER_PURGE)
    while True:
        await anyio.sleep(config.purge_interval_seconds)
        try:
            while (
                await anyio.to_thread.run_sync(storage.purge_outcomes, config.purge_batch)
                >= config.purge_batch
            ):
                await anyio.lowlevel.checkpoint()
            while True:
                expired = await anyio.to_thread.run_sync(storage.purge_leases, small)
                metrics.locks.record(Ended(x.key, End.EXPIRED, x.held_us) for x in expired)
                if len(expired) < small:
                    break
                await anyio.lowlevel.checkpoint()
            while await anyio.to_thread.run_sync(storage.purge_members, small) >= small:
                await anyio.lowlevel.checkpoint()
            while await anyio.to_thread.run_sync(storage.purge_keys, idle_us, small) >= small:
                await anyio.lowlevel.checkpoint()
            while (
                await anyio.to_thread.run_sync(
                    functools.partial(
                        storage.purge_waiters,
                        grace_us,
                        config.purge_batch,
                        judges=pulse.judges_all,
                    )
                )
                >= config.purge_batch
            ):
                await anyio.lowlevel.checkpoint()
        except StorageUnavailable as exc:
            metrics.storage_errors.labels("purge").inc()
            log.warning("purging stored outcomes failed, will retry: %s", exc)
        except Exception:
            log.exception("purging stored outcomes failed, will retry")


async def _measure_loop_lag(metrics: Metrics, every: float = 0.1) -> None:
    """Sample how late the event loop runs a timer (`volcano_event_loop_lag_seconds`)."""
    loop = asyncio.get_running_loop()
    while True:
        due = loop.time() + every
        await asyncio.sleep(every)
        metrics.loop_lag.observe(max(0.0, loop.time() - due))


async def _record_key_uses_forever(
    storage: Storage, authenticator: Authenticator, config: ServerConfig, metrics: Metrics
) -> None:
    """Write the keys' "last used" times in batches, off the requests' path."""
    while True:
        await anyio.sleep(config.key_use_flush_seconds)
        uses = authenticator.take_uses()
        try:
            await anyio.to_thread.run_sync(storage.record_key_uses, uses)
        except StorageUnavailable as exc:
            metrics.storage_errors.labels("key_use").inc()
            log.warning("recording when keys were last used failed, will retry: %s", exc)
            authenticator.put_back_uses(uses)
        except Exception:
            log.exception("recording when keys were last used failed")
