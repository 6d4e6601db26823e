"""One contender of the contention tests: a process that takes one lock over and over, writing to
a fencing store while it holds it. Started by test_contention.py, not collected by pytest:

    python -m tests.faults._contender CONFIG_JSON

The SDK reads its keys and URL from the environment (VOLCANO_ANON_KEY, VOLCANO_SERVICE_KEY,
VOLCANO_API_URL). CONFIG_JSON names the contender, its `client` (sync or async) and `style`
(`acquire`: acquire / renew / release by hand; `guard`: with_lock), the key, the ttl, the fencing
store's URL, a stop file and a hard deadline (monotonic), and where to write the journal.

Each round: acquire; write `begin` with the lease's fencing token; then either work (a renewal,
by hand or by the guard) and write `end` and release; or, every third lease, pause like a
stop-the-world GC: longer than the ttl, and until another holder has written to the store (so
that the late write is surely stale), then write `late` without checking anything. The `acquire`
style pauses its thread with sleep (nothing renews meanwhile); the `guard` style stops the whole
process with SIGSTOP (its renewal thread or task included) and has a helper send SIGCONT.

Only the SDK's documented errors are caught: an httpx exception, or any other, ends the process
with a traceback and a non-zero status, which fails the test.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

import volcano

OUTAGE = (volcano.APIConnectionError, volcano.ServiceUnavailableError)
"""What a contender sees while the server is down or restarting (APITimeoutError included)."""

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
PATIENCE = 10.0


def micros(instant: datetime) -> int:
    return (instant - EPOCH) // timedelta(microseconds=1)


class Journal:
    """What one contender did and heard; written as JSON at the end."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.grants: list[dict[str, Any]] = []
        self.errors: list[dict[str, Any]] = []
        self.answers: list[float] = []
        # [operation, whether it waited in the queue, status, seconds from send to answer]
        self.latencies: list[tuple[str, bool, int, float]] = []
        self.replays = 0
        self.attempts = 0
        self.held_elsewhere = 0
        self.renewals = 0
        self.no_successor = 0
        # A guard whose wait ended in a grant that expired before the block could begin (the
        # answer came back later than the ttl): entering renews and is told 409 lease_not_held.
        self.expired_before_entry = 0
        # An acquire answered 409 lease_not_held: its grant expired before the server could
        # send the answer (the server or its database stalled past the ttl, as in a failover).
        self.expired_before_answer = 0
        # token -> expires_at of the first acquire answer granting it: when the lease began,
        # even for a guard that renewed on entry (after a long wait) before its block ran.
        self.acquired: dict[int, int] = {}
        # token -> monotonic time the first release naming it was sent (see `sending`).
        self.releases_sent: dict[int, float] = {}
        self.releases_refused: set[int] = set()  # a 409 on release: it ended nothing

    def sending(self, request: httpx.Request) -> None:
        """httpx request hook: note when a release of each fencing token was first sent.

        A guard's release is judged by the request, not by what the guard says afterwards: a
        release that went out may have ended the lease, whatever answer came back.
        """
        if request.method == "POST" and request.url.path.endswith("/release"):
            token = json.loads(request.content)["fencing_token"]
            self.releases_sent.setdefault(token, time.monotonic())

    def _refused_release(self, response: httpx.Response) -> None:
        request = response.request
        if response.status_code == 409 and request.url.path.endswith("/release"):
            self.releases_refused.add(json.loads(request.content)["fencing_token"])

    async def asending(self, request: httpx.Request) -> None:
        self.sending(request)

    def heard(self, response: httpx.Response) -> None:
        """httpx response hook: any HTTP answer from the lock server."""
        self.answers.append(time.monotonic())
        response.read()  # so that `elapsed` is known
        request = response.request
        operation = request.url.path.rsplit("/", 1)[-1] if request.method == "POST" else "get"
        waited = b'"wait_seconds"' in request.content
        self.latencies.append(
            (operation, waited, response.status_code, response.elapsed.total_seconds())
        )
        self._refused_release(response)
        if response.headers.get("Idempotent-Replayed") == "true":
            self.replays += 1
        if response.status_code == 200 and response.url.path.endswith("/acquire"):
            lease = response.json()
            expires = datetime.fromisoformat(lease["expires_at"])
            self.acquired.setdefault(lease["fencing_token"], micros(expires))

    async def aheard(self, response: httpx.Response) -> None:
        await response.aread()
        self.heard(response)

    def granted(
        self, lease: volcano.LockLease, sent: float, answered: float, *, paused: bool
    ) -> dict[str, Any]:
        grant = {
            "token": lease.fencing_token,
            "owner": lease.owner_token,
            "sent": sent,
            "answered": answered,
            "acquired_expires_at_us": self.acquired.get(
                lease.fencing_token, micros(lease.expires_at)
            ),
            "expires_at_us": micros(lease.expires_at),
            "ttl": lease.ttl_seconds,
            "release_sent": None,
            "release": None,
            "paused": paused,
        }
        self.grants.append(grant)
        return grant

    def error(self, operation: str, exc: volcano.Error) -> None:
        self.errors.append({"op": operation, "type": type(exc).__name__, "at": time.monotonic()})

    def dump(self, path: str) -> None:
        with open(path, "w") as out:
            json.dump({**self.__dict__, "releases_refused": sorted(self.releases_refused)}, out)


class Contender:
    """The round logic shared by both clients; the I/O differs."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.name: str = config["name"]
        self.key: str = config["key"]
        self.ttl: float = config["ttl"]
        self.wait: float = config["wait"]
        self.rng = random.Random(config["seed"])
        self.journal = Journal(self.name)

    def stopping(self) -> bool:
        return os.path.exists(self.config["stop_file"]) or time.monotonic() > self.config["until"]

    def pause_now(self) -> bool:
        return len(self.journal.grants) % 3 == 1

    def wait_now(self) -> float:
        """How long this attempt waits in the queue: every other attempt, so that queues also
        empty and those that do not wait get their turns too."""
        return self.wait if self.journal.attempts % 2 else 0.0

    def idle_time(self) -> float:
        return self.rng.uniform(0.01, 0.04)

    def stop_the_world(self, seconds: float) -> None:
        """SIGSTOP this whole process; a helper process sends SIGCONT after `seconds`."""
        helper = subprocess.Popen(
            [
                sys.executable,
                "-c",
                (
                    "import os, signal, sys, time;"
                    "time.sleep(float(sys.argv[1])); os.kill(int(sys.argv[2]), signal.SIGCONT)"
                ),
                str(seconds),
                str(os.getpid()),
            ]
        )
        os.kill(os.getpid(), signal.SIGSTOP)
        helper.wait(PATIENCE)

    def guard_exited(self, grant: dict[str, Any], guard: Any) -> None:
        """Record what the guard's exit did, judged by the release request it sent (if any)."""
        grant["expires_at_us"] = micros(guard.lease.expires_at)
        token = grant["token"]
        refused = token in self.journal.releases_refused
        grant["release"] = "not_held" if refused else "released_or_unknown"
        grant["release_sent"] = None if refused else self.journal.releases_sent.get(token)

    def released(self, grant: dict[str, Any], sent: float, outcome: str) -> None:
        grant["release"] = outcome
        if outcome != "not_held":  # a refused release ended nothing
            grant["release_sent"] = sent


class SyncContender(Contender):
    def run(self) -> None:
        hooks = {"request": [self.journal.sending], "response": [self.journal.heard]}
        with (
            httpx.Client(event_hooks=hooks) as http,
            volcano.Client(http_client=http, timeout=self.config["timeout"]) as client,
            httpx.Client(base_url=self.config["store"], timeout=30) as store,
        ):
            self.client, self.store = client, store
            store.post("/hello", json={"writer": self.name}).raise_for_status()
            while not self.stopping():
                if self.config["style"] == "guard":
                    self.guarded_round()
                else:
                    self.plain_round()

    def write(self, grant: dict[str, Any], phase: str) -> None:
        body = {"writer": self.name, "token": grant["token"], "phase": phase}
        self.store.post("/write", json=body).raise_for_status()

    def wait_for_successor(self, grant: dict[str, Any]) -> bool:
        end = time.monotonic() + PATIENCE
        while self.store.get("/highest").json()["highest"] <= grant["token"]:
            if self.stopping():
                return False
            if time.monotonic() > end:
                self.journal.no_successor += 1
                return False
            time.sleep(0.02)
        return True

    def acquire(self) -> tuple[volcano.LockLease, float] | None:
        self.journal.attempts += 1
        sent = time.monotonic()
        try:
            return self.client.locks.acquire(self.key, ttl=self.ttl, wait=self.wait_now()), sent
        except volcano.LockHeldError:
            self.journal.held_elsewhere += 1
        except volcano.LeaseNotHeldError:
            self.journal.expired_before_answer += 1
        except OUTAGE as exc:
            self.journal.error("acquire", exc)
        time.sleep(self.idle_time())
        return None

    def plain_round(self) -> None:
        acquired = self.acquire()
        if acquired is None:
            return
        lease, sent = acquired
        grant = self.journal.granted(lease, sent, time.monotonic(), paused=self.pause_now())
        self.write(grant, "begin")
        if grant["paused"]:
            time.sleep(self.ttl)
            if self.wait_for_successor(grant):
                self.write(grant, "late")
        else:
            time.sleep(self.rng.uniform(0, self.ttl * 0.2))
            try:
                lease = self.client.locks.renew(self.key, lease)
            except volcano.LeaseNotHeldError:
                return  # lost: no more writes, nothing to release
            except OUTAGE as exc:
                self.journal.error("renew", exc)
                return
            self.journal.renewals += 1
            grant["expires_at_us"] = micros(lease.expires_at)
            time.sleep(self.rng.uniform(0, self.ttl * 0.2))
            self.write(grant, "end")
        self.release(lease, grant)

    def release(self, lease: volcano.LockLease, grant: dict[str, Any]) -> None:
        sent = time.monotonic()
        try:
            self.client.locks.release(self.key, lease)
        except volcano.LeaseNotHeldError:
            self.released(grant, sent, "not_held")
        except OUTAGE as exc:
            self.journal.error("release", exc)
            self.released(grant, sent, "unknown")
        else:
            self.released(grant, sent, "released")

    def guarded_round(self) -> None:
        self.journal.attempts += 1
        sent = time.monotonic()
        guard = self.client.locks.with_lock(self.key, ttl=self.ttl, wait=self.wait_now())
        try:
            with guard:
                answered = time.monotonic()
                grant = self.journal.granted(guard.lease, sent, answered, paused=self.pause_now())
                self.write(grant, "begin")
                if grant["paused"]:
                    self.stop_the_world(self.ttl * 1.5)
                    if self.wait_for_successor(grant):
                        self.write(grant, "late")
                else:
                    time.sleep(self.rng.uniform(0, self.ttl))
                    if not guard.lost:
                        self.write(grant, "end")
        except volcano.LockHeldError:
            self.journal.held_elsewhere += 1
            time.sleep(self.idle_time())
            return
        except volcano.LeaseNotHeldError:
            self.journal.expired_before_entry += 1
            time.sleep(self.idle_time())
            return
        except OUTAGE as exc:
            self.journal.error("acquire", exc)
            time.sleep(self.idle_time())
            return
        self.guard_exited(grant, guard)


class AsyncContender(Contender):
    async def run(self) -> None:
        hooks = {"request": [self.journal.asending], "response": [self.journal.aheard]}
        async with (
            httpx.AsyncClient(event_hooks=hooks) as http,
            volcano.AsyncClient(http_client=http, timeout=self.config["timeout"]) as client,
            httpx.AsyncClient(base_url=self.config["store"], timeout=30) as store,
        ):
            self.client, self.store = client, store
            (await store.post("/hello", json={"writer": self.name})).raise_for_status()
            while not self.stopping():
                if self.config["style"] == "guard":
                    await self.guarded_round()
                else:
                    await self.plain_round()

    async def write(self, grant: dict[str, Any], phase: str) -> None:
        body = {"writer": self.name, "token": grant["token"], "phase": phase}
        (await self.store.post("/write", json=body)).raise_for_status()

    async def wait_for_successor(self, grant: dict[str, Any]) -> bool:
        end = time.monotonic() + PATIENCE
        while (await self.store.get("/highest")).json()["highest"] <= grant["token"]:
            if self.stopping():
                return False
            if time.monotonic() > end:
                self.journal.no_successor += 1
                return False
            await asyncio.sleep(0.02)
        return True

    async def acquire(self) -> tuple[volcano.LockLease, float] | None:
        self.journal.attempts += 1
        sent = time.monotonic()
        try:
            return await self.client.locks.acquire(
                self.key, ttl=self.ttl, wait=self.wait_now()
            ), sent
        except volcano.LockHeldError:
            self.journal.held_elsewhere += 1
        except volcano.LeaseNotHeldError:
            self.journal.expired_before_answer += 1
        except OUTAGE as exc:
            self.journal.error("acquire", exc)
        await asyncio.sleep(self.idle_time())
        return None

    async def plain_round(self) -> None:
        acquired = await self.acquire()
        if acquired is None:
            return
        lease, sent = acquired
        grant = self.journal.granted(lease, sent, time.monotonic(), paused=self.pause_now())
        await self.write(grant, "begin")
        if grant["paused"]:
            time.sleep(self.ttl)  # noqa: ASYNC251 - the loop stuck, as in a GC pause
            if await self.wait_for_successor(grant):
                await self.write(grant, "late")
        else:
            await asyncio.sleep(self.rng.uniform(0, self.ttl * 0.2))
            try:
                lease = await self.client.locks.renew(self.key, lease)
            except volcano.LeaseNotHeldError:
                return
            except OUTAGE as exc:
                self.journal.error("renew", exc)
                return
            self.journal.renewals += 1
            grant["expires_at_us"] = micros(lease.expires_at)
            await asyncio.sleep(self.rng.uniform(0, self.ttl * 0.2))
            await self.write(grant, "end")
        await self.release(lease, grant)

    async def release(self, lease: volcano.LockLease, grant: dict[str, Any]) -> None:
        sent = time.monotonic()
        try:
            await self.client.locks.release(self.key, lease)
        except volcano.LeaseNotHeldError:
            self.released(grant, sent, "not_held")
        except OUTAGE as exc:
            self.journal.error("release", exc)
            self.released(grant, sent, "unknown")
        else:
            self.released(grant, sent, "released")

    async def guarded_round(self) -> None:
        self.journal.attempts += 1
        sent = time.monotonic()
        guard = self.client.locks.with_lock(self.key, ttl=self.ttl, wait=self.wait_now())
        try:
            async with guard:
                answered = time.monotonic()
                grant = self.journal.granted(guard.lease, sent, answered, paused=self.pause_now())
                await self.write(grant, "begin")
                if grant["paused"]:
                    self.stop_the_world(self.ttl * 1.5)
                    if await self.wait_for_successor(grant):
                        await self.write(grant, "late")
                else:
                    await asyncio.sleep(self.rng.uniform(0, self.ttl))
                    if not guard.lost:
                        await self.write(grant, "end")
        except volcano.LockHeldError:
            self.journal.held_elsewhere += 1
            await asyncio.sleep(self.idle_time())
            return
        except volcano.LeaseNotHeldError:
            self.journal.expired_before_entry += 1
            await asyncio.sleep(self.idle_time())
            return
        except OUTAGE as exc:
            self.journal.error("acquire", exc)
            await asyncio.sleep(self.idle_time())
            return
        self.guard_exited(grant, guard)


def main() -> None:
    config = json.loads(sys.argv[1])
    if config["client"] == "async":
        contender: Contender = AsyncContender(config)
        asyncio.run(contender.run())  # type: ignore[attr-defined]
    else:
        contender = SyncContender(config)
        contender.run()  # type: ignore[attr-defined]
    contender.journal.dump(config["out"])


if __name__ == "__main__":
    main()
