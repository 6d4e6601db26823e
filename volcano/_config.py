"""Client settings: arguments, their environment defaults, and the headers they make.

Each argument defaults to an environment variable (`VOLCANO_ANON_KEY`, `VOLCANO_SERVICE_KEY`,
`VOLCANO_API_URL`). A missing key fails at construction with a message naming the variable,
never the value.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import attrs
import httpx

from . import _validate
from ._exceptions import InvalidArgumentError
from ._version import __version__

if TYPE_CHECKING:
    from collections.abc import Mapping

ANON_KEY_ENV = "VOLCANO_ANON_KEY"
SERVICE_KEY_ENV = "VOLCANO_SERVICE_KEY"
API_URL_ENV = "VOLCANO_API_URL"
DEFAULT_API_URL = "https://api.volcano.dev"
DEFAULT_TIMEOUT = 10.0
USER_AGENT = f"volcano-python/{__version__}"


@attrs.frozen
class Settings:
    """What every request of one client shares. The keys never appear in `repr()`."""

    anon_key: str = attrs.field(repr=False)
    service_key: str = attrs.field(repr=False)
    api_url: str
    timeout: float

    def headers(self) -> dict[str, str]:
        """The credential and identification headers of every lock request."""
        return {
            "apikey": self.anon_key,
            "Authorization": f"Bearer {self.service_key}",
            "User-Agent": USER_AGENT,
        }

    def url(self, path: str) -> str:
        """The absolute URL of an API path such as `/v1/locks/k`."""
        return self.api_url + path


def resolve(
    *,
    anon_key: str | None,
    service_key: str | None,
    api_url: str | None,
    timeout: object,
    environ: Mapping[str, str] = os.environ,
) -> Settings:
    """Settings from the arguments, falling back to the environment for each one left None."""
    return Settings(
        anon_key=_credential("anon_key", anon_key, ANON_KEY_ENV, environ),
        service_key=_credential("service_key", service_key, SERVICE_KEY_ENV, environ),
        api_url=_api_url(api_url if api_url is not None else environ.get(API_URL_ENV)),
        timeout=_validate.timeout(timeout),
    )


def _credential(name: str, value: str | None, env: str, environ: Mapping[str, str]) -> str:
    if value is None:
        value = environ.get(env)
        if not value:
            raise InvalidArgumentError(f"{name} is required: pass {name}= or set {env}")
    if not isinstance(value, str):
        raise InvalidArgumentError(f"{name} must be a str, got {type(value).__name__}")
    # A header value must be visible ASCII; say which key is wrong without showing it.
    if not value or not all("!" <= ch <= "~" for ch in value):
        raise InvalidArgumentError(
            f"{name} (or {env}) must be non-empty visible ASCII without spaces or newlines"
        )
    return value


def _api_url(value: str | None) -> str:
    if value is None or value == "":
        return DEFAULT_API_URL
    if not isinstance(value, str):
        raise InvalidArgumentError(f"api_url must be a str, got {type(value).__name__}")
    try:
        url = httpx.URL(value)
    except httpx.InvalidURL as exc:
        raise InvalidArgumentError(f"api_url is not a valid URL: {value!r}") from exc
    if url.userinfo:
        # Never echo it: it holds a password.
        raise InvalidArgumentError("api_url must not hold credentials; use the key arguments")
    if url.scheme not in ("http", "https") or not url.host or url.query or url.fragment:
        raise InvalidArgumentError(
            f"api_url must be an http:// or https:// URL with a host and no query, got {value!r}"
        )
    return value.rstrip("/")
