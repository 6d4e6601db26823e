"""Database URLs: the error for one no backend takes, and a form fit for logs.

Apart from `storage/__init__.py` so that the backends can use them without importing the
package that imports them.
"""

from __future__ import annotations

from urllib.parse import parse_qsl, urlencode, urlsplit

__all__ = ["UnsupportedDatabaseURL", "redact_url"]


class UnsupportedDatabaseURL(ValueError):
    """The database URL names no backend this server has."""


def redact_url(url: str) -> str:
    """The URL with any password replaced, fit for logs and error messages.

    Both places a libpq URL can carry one are masked: `user:PASSWORD@host` and `?password=`.
    """
    parts = urlsplit(url)
    in_query = "password=" in parts.query.lower()
    if parts.password is None and not in_query:
        return url
    if parts.password is not None:
        netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
        parts = parts._replace(netloc=netloc)
    if in_query:
        query = [
            (name, "***" if name.lower() == "password" else value)
            for name, value in parse_qsl(parts.query, keep_blank_values=True)
        ]
        parts = parts._replace(query=urlencode(query, safe="*"))
    return parts.geturl()
