"""The Volcano reference lock server: openapi.yaml served over SQLite or PostgreSQL.

    from volcano_server import ServerConfig, create_app
    app = create_app(ServerConfig(database_url="sqlite:///volcano.db"))   # an ASGI app

`volcano-server` (see `volcano_server.cli`) is the command that runs it under uvicorn.

It ships inside the `volcano` distribution (CONTRIBUTING.md, "One distribution"): importing it
needs only the SDK's dependencies, and so do the key and migrate commands on SQLite; the app
and `serve` need the server extra, `pip install "volcano[server]"`, and say so.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._config import ServerConfig
    from .app._app import create_app

__all__ = ["ServerConfig", "create_app"]


def __getattr__(name: str) -> Any:
    # Imported on first use, so `volcano-server keys create` works without the web stack.
    if name == "create_app":
        try:
            from .app._app import create_app
        except ModuleNotFoundError as exc:  # `pip install volcano` alone: see CONTRIBUTING.md
            raise ModuleNotFoundError(
                f"volcano_server.create_app needs the server extra ({exc.name} is missing): "
                'pip install "volcano[server]"',
                name=exc.name,
            ) from None
        return create_app
    if name == "ServerConfig":
        from ._config import ServerConfig

        return ServerConfig
    raise AttributeError(f"module 'volcano_server' has no attribute {name!r}")
