"""Running the app under uvicorn: one log line saying where it listens, clean SIGTERM shutdown."""

from __future__ import annotations

import logging
import socket

import uvicorn

from ._app import create_app
from ._config import ServerConfig
from .storage import Storage, redact_url

__all__ = ["serve"]

log = logging.getLogger("volcano_server")


class _Server(uvicorn.Server):
    """uvicorn's server, announcing the bound address (the real port when asked for port 0)."""

    def __init__(self, config: uvicorn.Config, database: str) -> None:
        super().__init__(config)
        self._database = database

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.should_exit or not self.servers:
            return
        host, port = self.servers[0].sockets[0].getsockname()[:2]
        shown = f"[{host}]" if ":" in host else host
        log.info(
            "volcano-server listening on http://%s:%d (database %s)", shown, port, self._database
        )

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        # Waiting acquires would hold the graceful shutdown for up to a minute: answer them
        # 503 now (their places are kept a few seconds for a retry through another server).
        room = getattr(getattr(self.config.app, "state", None), "waiting_room", None)
        if room is not None:
            room.close()
        await super().shutdown(sockets)
        log.info("volcano-server stopped")


def serve(config: ServerConfig, storage: Storage, *, host: str, port: int) -> int:
    """Serve until SIGINT or SIGTERM; returns the exit status."""
    app = create_app(config, storage=storage)
    uv_config = uvicorn.Config(
        app,
        host=host,
        port=port,
        access_log=False,  # the app logs each request itself, without secrets
        log_config=None,
        log_level="warning",
        server_header=False,
        timeout_graceful_shutdown=10,
        lifespan="on",
    )
    logging.getLogger("uvicorn.error").setLevel(logging.WARNING)
    server = _Server(uv_config, redact_url(config.database_url))
    server.run()
    return 0 if server.started else 1
