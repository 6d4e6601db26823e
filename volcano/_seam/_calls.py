"""A `Call`: one request of an `Operation`, ready to send.

A Call says which operation, with which arguments for its generated `*_detailed` function, and
how to read a success. It is frozen, and it is one request id: sending it again is a retry of
the same request. The generated modules are imported on first use, so `import volcano` stays
light (the first request pays about 8 ms).
"""

from __future__ import annotations

import functools
import importlib
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import attrs

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from types import ModuleType

T = TypeVar("T")


@attrs.frozen
class Operation:
    """One operation of the spec: the generated module that sends it, and its success status."""

    name: str
    module: str
    success_status: int

    def generated(self) -> ModuleType:
        """The generated module of this operation (`sync_detailed`, `asyncio_detailed`)."""
        return _module(self.module)


@attrs.frozen
class Call(Generic[T]):
    """One lock request, ready to send: its operation, arguments, and how to read a success.

    `subject` names what it is about in logs: the lock's key (a batch: how many leases).
    """

    operation: Operation
    subject: str
    request_id: str
    kwargs: Mapping[str, Any]
    convert: Callable[[object], T]


@functools.cache
def _module(name: str) -> ModuleType:
    return importlib.import_module(f"_volcano_api.api.locks.{name}")
