"""What `Client` and `AsyncClient` share: settings, the HTTP client, repr and properties.

Each client makes its engine (`_engine.Engine`, `_async_engine.AsyncEngine`) here and hands it
to its `locks` namespace; only entering, leaving and closing differ between the two.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Generic, TypeVar

import httpx

from . import _config
from ._exceptions import InvalidArgumentError

if TYPE_CHECKING:
    from collections.abc import Callable
    from datetime import timedelta

    from ._clock import Clock
    from ._config import Settings
    from ._engine import EngineBase

HttpT = TypeVar("HttpT", httpx.Client, httpx.AsyncClient)
EngineT = TypeVar("EngineT", bound="EngineBase")
LocksT = TypeVar("LocksT")


class BaseClient(Generic[HttpT, EngineT, LocksT]):
    """The part both clients share; the subclasses make the engine and the `locks`."""

    def __init__(
        self,
        http_type: type[HttpT],
        engine_type: Callable[[HttpT, Settings, Clock], EngineT],
        locks_type: Callable[[EngineT], LocksT],
        *,
        anon_key: str | None,
        service_key: str | None,
        api_url: str | None,
        timeout: float | timedelta,
        http_client: HttpT | None,
        clock: Clock,
    ) -> None:
        self._settings = _config.resolve(
            anon_key=anon_key, service_key=service_key, api_url=api_url, timeout=timeout
        )
        if http_client is not None and not isinstance(http_client, http_type):
            raise InvalidArgumentError(
                f"http_client must be an httpx.{http_type.__name__},"
                f" got {type(http_client).__name__}"
            )
        self._owns_http = http_client is None
        if http_client is None:
            from ._transport import default_http

            self._http: HttpT = default_http(http_type)
        else:
            self._http = http_client
        self._engine = engine_type(self._http, self._settings, clock)
        self._locks = locks_type(self._engine)

    def __repr__(self) -> str:
        return self._engine.describe()

    @property
    def locks(self) -> LocksT:
        """The lock operations (`Locks`; `AsyncLocks` on an `AsyncClient`).

        Operations: acquire, renew, release, get, force_release, check, watch, list, holders,
        with_lock.
        """
        return self._locks

    @property
    def api_url(self) -> str:
        """The base URL requests go to."""
        return self._settings.api_url

    @property
    def timeout(self) -> float:
        """Seconds each request may take."""
        return self._settings.timeout

    @property
    def closed(self) -> bool:
        """Whether `close()` was called."""
        return self._engine.closed
