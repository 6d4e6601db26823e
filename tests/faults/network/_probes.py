"""Requests sent over and over to servers, each timed: what the network scenarios measure."""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

import attrs
import httpx

from tests.support.raw import Locks, new_id
from tests.support.server import Project

if TYPE_CHECKING:
    from types import TracebackType
    from typing import Self

BOUND = 10.0
"""The documented bound (docs/production.md, "When the network fails"): a request that needs
the database is answered within this many seconds, 503 when it cannot be served."""


@attrs.frozen
class Probe:
    """One request and how it ended, by this process's monotonic clock."""

    server: str
    operation: str
    started: float
    ended: float
    outcome: int | str
    """The HTTP status, or the name of the transport error."""

    @property
    def seconds(self) -> float:
        return self.ended - self.started


class Prober:
    """Threads calling each server over and over (acquire, get, renew, release of keys of their
    own) with raw HTTP and a client timeout far past the bound, recording every answer."""

    def __init__(self, urls: dict[str, str], project: Project, threads: int = 2) -> None:
        self._urls = urls
        self._project = project
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._probes: list[Probe] = []
        self._threads = [
            threading.Thread(target=self._run, args=(server, n), name=f"probe-{server}-{n}")
            for server in urls
            for n in range(threads)
        ]

    @property
    def probes(self) -> list[Probe]:
        with self._lock:
            return list(self._probes)

    def of(self, server: str) -> list[Probe]:
        return [p for p in self.probes if p.server == server]

    def __enter__(self) -> Self:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(BOUND * 4)

    def _run(self, server: str, n: int) -> None:
        # One owner throughout: after a failed release its acquire gets the same lease back.
        key, owner = f"probe-{server}-{n}", new_id()
        with httpx.Client(
            base_url=self._urls[server], headers=self._project.headers(), timeout=BOUND * 3
        ) as http:
            locks = Locks(http)
            while not self._stop.is_set():
                acquired = self._call(server, "acquire", lambda: locks.acquire(key, owner, 30))
                if acquired is None or acquired.status_code != 200:
                    time.sleep(0.05)
                    continue
                fence = acquired.json()["fencing_token"]
                self._call(server, "get", lambda: locks.get(key))
                self._call(server, "renew", lambda: locks.renew(key, owner, fence, 30))  # noqa: B023
                self._call(server, "release", lambda: locks.release(key, owner, fence))  # noqa: B023

    def _call(self, server: str, operation: str, send: Any) -> httpx.Response | None:
        started = time.monotonic()
        response: httpx.Response | None = None
        try:
            response = send()
            outcome: int | str = response.status_code
        except httpx.HTTPError as exc:
            outcome = type(exc).__name__
        probe = Probe(server, operation, started, time.monotonic(), outcome)
        with self._lock:
            self._probes.append(probe)
        return response
