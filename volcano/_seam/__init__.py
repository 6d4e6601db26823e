"""The one seam between the SDK and what it is built on: the generated client and httpx.

This is the only package of `volcano` that imports `_volcano_api`, in three small modules:

- `_operations`: the table of operations, and the frozen `Call` of each request;
- `_sending`: `Sender` and `AsyncSender`, the one place every request goes out, and every
  failure to send or refusal turned into its `volcano` error;
- `_reading`: what a success's body holds, as SDK values (`Success`).

It always calls the generated `*_detailed` functions, and turns every outcome into an SDK value
or a `volcano` error: no generated type, `Unset` or httpx exception gets past it.
tests/unit/sdk/test_seam.py pins what it relies on in the generated code.
"""

from __future__ import annotations

from . import _groups as groups
from ._operations import (
    Call,
    acquire,
    check,
    force_release,
    get,
    holders_page,
    list_page,
    release,
    renew,
    renew_many,
    renewals,
    watch,
)
from ._reading import PARSE_ERRORS, Page, Renewed, Success
from ._sending import AsyncSender, Sender

__all__ = [
    "PARSE_ERRORS",
    "AsyncSender",
    "Call",
    "Page",
    "Renewed",
    "Sender",
    "Success",
    "acquire",
    "check",
    "force_release",
    "get",
    "groups",
    "holders_page",
    "list_page",
    "release",
    "renew",
    "renew_many",
    "renewals",
    "watch",
]
