"""The ASGI application: spec-derived routes on Starlette, storage opened for its lifetime."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator

import anyio
import anyio.lowlevel
import anyio.to_thread
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from ._api import HANDLED_OPERATIONS, Api
from ._auth import Authenticator
from ._config import ServerConfig
from ._ratelimit import RateLimiter
from ._routing import Endpoint, SpecRoute
from ._service import LockService
from ._spec import Operation, Spec, load_spec
from ._waiting import WaitingRoom
from .storage import Storage, StorageUnavailable, open_storage

__all__ = ["create_app"]

log = logging.getLogger("volcano_server")


def create_app(
    config: ServerConfig | None = None, *, storage: Storage | None = None, spec: Spec | None = None
) -> Starlette:
    """Build the server.

    It opens `config.database_url` (unless given `storage`) and checks that the spec's
    operations and the server's handlers are the same set before serving anything.
    """
    config = config or ServerConfig()
    spec = spec or load_spec()
    _check_operations(spec)
    storage = storage or open_storage(
        config.database_url, sqlite_synchronous=config.sqlite_synchronous
    )
    room = WaitingRoom(config.waiting)
    service = LockService(storage, config.retention_seconds, room)
    api = Api(
        service,
        Authenticator(storage, cache_seconds=config.auth_cache_seconds),
        spec.request_id,
        max_body_bytes=config.max_body_bytes,
        rate_limiter=RateLimiter(config.rate_limit) if config.rate_limit else None,
        access_log_enabled=config.access_log,
    )

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(_purge_forever, storage, config)
            tasks.start_soon(room.run, service, storage, api.run_storage)
            try:
                yield
            finally:
                room.close()
                tasks.cancel_scope.cancel()
        storage.close()

    app = Starlette(routes=_routes(spec, api), lifespan=lifespan)
    app.router.redirect_slashes = False
    app.router.default = api.not_found
    app.state.storage = storage
    app.state.waiting_room = room
    return app


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


async def _purge_forever(storage: Storage, config: ServerConfig) -> None:
    """Delete expired request outcomes and departed waiters in bounded batches.

    So both stay bounded under load.
    """
    grace_us = round(config.waiting.rejoin_seconds * 1_000_000)
    while True:
        await anyio.sleep(config.purge_interval_seconds)
        try:
            while (
                await anyio.to_thread.run_sync(storage.purge_outcomes, config.purge_batch)
                >= config.purge_batch
            ):
                await anyio.lowlevel.checkpoint()
            while (
                await anyio.to_thread.run_sync(storage.purge_waiters, grace_us, config.purge_batch)
                >= config.purge_batch
            ):
                await anyio.lowlevel.checkpoint()
        except StorageUnavailable as exc:
            log.warning("purging stored outcomes failed, will retry: %s", exc)
        except Exception:
            log.exception("purging stored outcomes failed, will retry")
