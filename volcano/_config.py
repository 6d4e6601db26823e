"""Client settings: arguments, their environment defaults, and the headers they make.

Each argument defaults to an environment variable (`VOLCANO_ANON_KEY`, `VOLCANO_SERVICE_KEY`,
`VOLCANO_API_URL`). A missing key fails at construction with a message naming the variable,
never the value. So do keys made by a volcano-server of the user's own (`vk_local_...`) when
no URL was named: they would otherwise go to the hosted default (`_keys_stay_home`).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, NamedTuple

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
# The reference server (volcano-server) starts every key it makes with this; the hosted
# service never does. Keys it made before carry no mark and are not recognised.
LOCAL_KEY_PREFIX = "vk_local_"
USER_AGENT = f"volcano-python/{__version__}"


class Settings(NamedTuple):
    """What every request of one client shares. The keys never appear in `repr()`."""

    anon_key: str
    service_key: str
    api_url: str
    timeout: float

    def __repr__(self) -> str:
        return f"Settings(api_url={self.api_url!r}, timeout={self.timeout!r})"

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
    """Settings from the arguments, falling back to the environment for each one left None.

    Raises:
        InvalidArgumentError: A key is missing or malformed, a local server's keys would go to
            the hosted default, or another argument is malformed.
    """
    named_url = api_url if api_url is not None else environ.get(API_URL_ENV)
    settings = Settings(
        anon_key=_credential("anon_key", anon_key, ANON_KEY_ENV, environ),
        service_key=_credential("service_key", service_key, SERVICE_KEY_ENV, environ),
        api_url=_api_url(named_url),
        timeout=_validate.timeout(timeout),
    )
    _keys_stay_home(settings, url_named=bool(named_url))
    return settings


def _keys_stay_home(settings: Settings, *, url_named: bool) -> None:
    """Refuse to aim a local server's keys at the hosted default that nobody named.

    A shell that loaded the keys of `volcano-server keys create` but not its URL would send
    them to `https://api.volcano.dev`: a secret travelling to a server the user never chose.
    Naming any URL, the hosted one included, is the user's choice and is respected.
    """
    keys = (settings.anon_key, settings.service_key)
    if url_named or not any(key.startswith(LOCAL_KEY_PREFIX) for key in keys):
        return
    raise InvalidArgumentError(
        f"these keys were made by a volcano-server of your own ({LOCAL_KEY_PREFIX}...) and no"
        f" API URL is set, so they are not sent to the hosted {DEFAULT_API_URL}: set"
        f" {API_URL_ENV} to your server's URL (the file written by `volcano-server keys create"
        " --output FILE` holds it), or pass api_url="
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
