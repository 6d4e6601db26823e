"""The one seam between the SDK and what it is built on: the generated client and httpx.

This is the only package of `volcano` that imports `_volcano_api`, in three small modules:

- `_operations`: the table of operations, and the frozen `Call` (`_calls`) of each request;
- `_sending`: `Sender` and `AsyncSender`, the one place every request goes out;
- `_reading`: what arrived, as SDK values (`Answer`) or `volcano` errors.

It always calls the generated `*_detailed` functions, and turns every outcome into an SDK value
or a `volcano` error: no generated type, `Unset` or httpx exception gets past it.
tests/unit/sdk/test_seam.py pins what it relies on in the generated code.
"""

from __future__ import annotations

from ._calls import Call
from ._operations import acquire, check, force_release, get, release, renew, renew_many
from ._reading import PARSE_ERRORS, Answer, Renewed
from ._sending import AsyncSender, Sender

__all__ = [
    "PARSE_ERRORS",
    "Answer",
    "AsyncSender",
    "Call",
    "Renewed",
    "Sender",
    "acquire",
    "check",
    "force_release",
    "get",
    "release",
    "renew",
    "renew_many",
]
