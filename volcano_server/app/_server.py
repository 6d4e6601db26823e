"""Running the app under uvicorn: bounded connections, TLS, a private listener, SIGTERM.

One uvicorn server, one event loop. The API listens on `host:port` (with TLS when given a
certificate); the private listener, when asked for, on its own plain-HTTP socket in the same
loop: metrics, and `/healthz` and `/readyz` for supervisors and load balancers, with the same
per-connection limits (`_protocol`) but seats and an accept queue of its own, so that no flood
of the public port, and no cap of it, keeps a probe waiting.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import resource
import socket
import ssl
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import attrs
import uvicorn
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .._config import ServerConfig
from ..http._readiness import readiness_endpoint
from ..storage import Storage, redact_url
from ..telemetry._metrics import Metrics
from ..transport._protocol import LimitedProtocol, Policy, protocol_class, seats_for
from ..transport._seats import (
    PRIVATE_BACKLOG,
    PRIVATE_SEATS,
    Seats,
    files_needed,
    max_connections_within,
)
from ..wire._wire import HEALTH_BODY
from ._app import create_app

__all__ = [
    "Listeners",
    "StartupError",
    "check_address",
    "raise_open_files_limit",
    "serve",
    "uvicorn_config",
]

log = logging.getLogger("volcano_server")


class Announce(Protocol):
    """What the server tells whoever started it (the command's `Announce` in `cli/_daemon`)."""

    def listening(self, url: str) -> None:
        """The server listens at `url`."""
        ...

    def stopped(self) -> None:
        """The server stopped cleanly."""
        ...


class StartupError(Exception):
    """The server cannot start as configured (a bad certificate, say)."""


@attrs.frozen
class Listeners:
    """Where a server listens."""

    host: str = "127.0.0.1"
    port: int = 8787
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    metrics_host: str = "127.0.0.1"
    metrics_port: int | None = None  # None: no metrics listener


def check_address(listeners: Listeners) -> None:
    """Raise `StartupError` now, in words a newcomer can act on, if the API's address is taken.

    The same bind uvicorn makes later (asyncio's, with SO_REUSEADDR), made and closed at once,
    before `--daemon` forks and before anything else is set up, so that a taken port stops the
    command with advice instead of a log line. `--port 0` needs no check.
    """
    if listeners.port == 0:
        return

    async def bind() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(asyncio.Protocol, listeners.host, listeners.port)
        server.close()
        await server.wait_closed()

    try:
        asyncio.run(bind())
    except OSError as exc:
        where = f"[{listeners.host}]" if ":" in listeners.host else listeners.host
        # asyncio words it "error while attempting to bind on address (...): <reason>"
        if exc.errno is not None and not isinstance(exc, socket.gaierror):
            reason = os.strerror(exc.errno).lower()
        else:
            reason = (exc.strerror or str(exc)).lower()
        advice = ""
        if exc.errno == errno.EADDRINUSE:
            advice = (
                " (another server?): choose another port with --port, e.g. "
                f"--port {listeners.port + 1}, or --port 0 for any free one"
            )
        raise StartupError(f"cannot listen on {where}:{listeners.port}: {reason}{advice}") from None


def uvicorn_config(
    app: Starlette, config: ServerConfig, listeners: Listeners, seats: Seats | None = None
) -> uvicorn.Config:
    """The uvicorn settings for `app` (made by `create_app`) with `config`'s limits.

    `seats`: the API listener's (default: made for the limits).
    """
    limits = config.limits
    metrics: Metrics = app.state.metrics
    metrics.max_connections.set(limits.max_connections)
    seats = seats or seats_for(limits)
    metrics.count_reaped(lambda: seats.reaped)
    policy = Policy(limits, app.state.access_log, metrics.refused_connections.inc, seats)
    return uvicorn.Config(
        app,
        host=listeners.host,
        port=listeners.port,
        backlog=limits.backlog,
        http=protocol_class(policy),
        ws="none",
        ssl_certfile=listeners.ssl_certfile,
        ssl_keyfile=listeners.ssl_keyfile,
        timeout_keep_alive=limits.keepalive_timeout,
        access_log=False,  # the app and the protocol log each request themselves, escaped
        log_config=None,
        log_level="error",  # its per-request warnings are access lines already
        server_header=False,
        timeout_graceful_shutdown=10,
        lifespan="on",
    )


class Server(uvicorn.Server):
    """uvicorn's server, announcing where it listens and adding the metrics listener."""

    def __init__(
        self,
        config: uvicorn.Config,
        listeners: Listeners,
        database: str,
        announce: Announce,
        on_stop: Callable[[], None],
    ) -> None:
        super().__init__(config)
        self._on_stop = on_stop
        self._listeners = listeners
        self._database = database
        self._announce = announce
        self._metrics: Metrics = config.app.state.metrics  # type: ignore[union-attr]
        self._public: type[LimitedProtocol] = config.http  # type: ignore[assignment]
        self._metrics.open_connections.set_function(lambda: len(self.server_state.connections))

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.should_exit or not self.servers:
            return
        if self._listeners.metrics_port is not None:
            metrics = await self._start_metrics_listener()
            log.info("metrics on %s/metrics", _url("http", metrics))
        url = _url("https" if self.config.is_ssl else "http", self.servers[0])
        log.info("volcano-server listening on %s (database %s)", url, self._database)
        self._announce.listening(url)

    async def _start_metrics_listener(self) -> asyncio.Server:
        """The private listener: metrics, and the health probes on seats of their own."""
        registry = self._metrics.registry
        app_state = self.config.app.state  # type: ignore[union-attr]

        async def scrape(_request: Request) -> Response:
            return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

        async def healthz(_request: Request) -> Response:
            headers = {"x-request-id": str(uuid.uuid4()), "cache-control": "no-store"}
            return Response(HEALTH_BODY, 200, headers, "application/json")

        app = Starlette(
            routes=[
                Route("/metrics", scrape, methods=["GET"]),
                Route("/healthz", healthz, methods=["GET"]),
                Route(
                    "/readyz",
                    readiness_endpoint(
                        app_state.storage, self._metrics, self._public.policy.seats.accepting
                    ),
                    methods=["GET"],
                ),
            ]
        )
        config = uvicorn.Config(app, lifespan="off", log_config=None, server_header=False)
        config.load()
        public = self._public
        limits = attrs.evolve(
            public.policy.limits, max_connections=PRIVATE_SEATS, backlog=PRIVATE_BACKLOG
        )
        http = protocol_class(Policy(limits, public.policy.report, public.policy.on_refused))
        server = await asyncio.get_running_loop().create_server(
            lambda: http(config=config, server_state=self.server_state, app_state={}),
            host=self._listeners.metrics_host,
            port=self._listeners.metrics_port,
            backlog=limits.backlog,
        )
        self.servers.append(server)
        return server

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        # Waiting acquires would hold the graceful shutdown for up to a minute: answer them
        # 503 now (their places are kept a few seconds for a retry through another server).
        waits = getattr(getattr(self.config.app, "state", None), "waits", None)
        if waits is not None:
            waits.close()
        await super().shutdown(sockets)
        log.info("volcano-server stopped")
        self._announce.stopped()
        self._on_stop()  # before uvicorn re-raises SIGTERM, which ends the process at once


def _url(scheme: str, server: asyncio.Server) -> str:
    host, port = server.sockets[0].getsockname()[:2]
    return f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}"


def raise_open_files_limit(wanted: int) -> int:
    """Raise this process's soft limit on open files towards `wanted` (up to the hard limit).

    Returns the soft limit now in force.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = target
    return soft


def serve(
    config: ServerConfig,
    storage: Storage,
    listeners: Listeners,
    announce: Announce,
    on_stop: Callable[[], None] = lambda: None,
) -> int:
    """Serve until SIGINT or SIGTERM, telling `announce` once listening; returns the status.

    `on_stop` runs once the server has shut down (say, to export the last spans).
    """
    config = _fit_open_files(config)
    seats = seats_for(config.limits)
    app = create_app(config, storage=storage, accepting=seats.accepting)
    uv_config = uvicorn_config(app, config, listeners, seats)
    try:
        uv_config.load()  # reads the certificate and key now, so a bad one is a clear error
    except (OSError, ssl.SSLError) as exc:
        storage.close()
        raise StartupError(f"cannot load the TLS certificate and key: {exc}") from None
    server = Server(uv_config, listeners, redact_url(config.database_url), announce, on_stop)
    server.run()
    return 0 if server.started else 1


def _fit_open_files(config: ServerConfig) -> ServerConfig:
    """Raise the open-files limit for the connection cap, or lower the cap to fit the limit.

    The limit must hold every connection the server keeps, spare seats and a full accept queue
    included (see `_seats`), so that it can always answer 503 rather than run out.
    """
    limits = config.limits
    files = raise_open_files_limit(files_needed(limits.max_connections, limits.backlog))
    backlog = min(limits.backlog, files // 4)
    cap = min(limits.max_connections, max_connections_within(files, backlog))
    if cap < limits.max_connections:
        log.warning(
            "the open-files limit is %d: serving at most %d connections, not %d"
            " (raise the hard limit, e.g. LimitNOFILE= in systemd)",
            files,
            cap,
            limits.max_connections,
        )
    limits = attrs.evolve(limits, max_connections=cap, backlog=backlog)
    log.info(
        "open-files limit %d; at most %d connections (and %d spare for health probes);"
        " accept queue %d",
        files,
        cap,
        Seats(cap, backlog).spare,
        _accept_queue(backlog),
    )
    return attrs.evolve(config, limits=limits)


def _accept_queue(backlog: int) -> int:
    """The accept queue the kernel grants for `backlog` (Linux caps it at somaxconn)."""
    try:
        return min(backlog, int(Path("/proc/sys/net/core/somaxconn").read_text()))
    except (OSError, ValueError):
        return backlog
