"""A tooz driver on Volcano: `tooz.coordination.get_coordinator("volcano://HOST:PORT", member_id)`.

```python
from tooz import coordination

coordinator = coordination.get_coordinator("volcano://127.0.0.1:8787", b"worker-7")
coordinator.start(start_heart=True)
with coordinator.get_lock(b"daily-report"):
    ...
coordinator.stop()
```

Installed with `pip install "volcano[tooz]"`, registered under tooz's `tooz.backends` entry
point as `volcano` (plain HTTP) and `volcanos` (HTTPS). The keys come from the URL's query
(`?anon_key=...&service_key=...`, where a deployment must) or else from `VOLCANO_ANON_KEY` and
`VOLCANO_SERVICE_KEY`. Other options, in the query: `timeout` (seconds a member lives without a
heartbeat, default 30), `lock_timeout` and `leader_timeout` (the ttl of locks' and leaders'
leases, renewed in the background, default 30 each), `request_timeout` (seconds one request may
take, default 10) and tooz's own `executor`.

Everything is built on the public `volcano` SDK, nothing else:

- a lock is a `client.locks.with_lock` guard (renewed by the client's renewal loop: it is held
  until released or the process ends, as a ZooKeeper session's locks are); `break_()` is a force
  release; a shared lock is a guard of `with_lock(..., shared=True)`;
- a group is a Volcano group; joining makes a membership with the ttl `timeout`, renewed by
  `heartbeat()` (so a process that stops heartbeating leaves its groups, as tooz expects);
  capabilities are msgpack bytes, as tooz's other drivers keep them;
- watchers (`watch_join_group`, `watch_leave_group`) compare the group's members when its
  version moved since `run_watchers` last looked (one cheap read per group otherwise);
- a group's leader is elected with `client.groups.campaign` (the key `groups:` + the group's
  name, the member id as the label), so `get_leader` is `client.groups.leader`.

Names: a tooz id (bytes) is used as it is when it is a valid Volcano name; any other (and one
starting with `0x.` or `groups:`) is written `0x.` and its bytes in hex, so that every id keeps
a name of its own and comes back as it was. Ids longer than a name allows (groups 240
characters, members 200, locks 255; half as many bytes when written in hex) raise `ToozError`.
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any, ParamSpec, TypeVar

import tooz
from tooz import coordination, locking, utils

import volcano

__all__ = ["VolcanoDriver", "VolcanoLock"]

LOG = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]*")
_HEX = "0x."
_RESERVED = (_HEX, "groups:")  # names written in hex even when valid: never taken as they are
_GROUP_MAX, _MEMBER_MAX, _KEY_MAX = 240, 200, 255
_FOREVER = timedelta(days=365)  # a blocking acquire: chained long polls, the place kept


def encode(raw: bytes | str, most: int) -> str:
    """The Volcano name of a tooz id (bytes, or text as UTF-8)."""
    data = raw.encode() if isinstance(raw, str) else bytes(raw)
    if data.isascii():
        text = data.decode("ascii")
        if len(text) <= most and _NAME.fullmatch(text) and not text.startswith(_RESERVED):
            return text
    written = _HEX + data.hex()
    if len(written) > most:
        raise tooz.ToozError(
            f"the id {data!r} is too long for a Volcano name of at most {most} characters"
        )
    return written


def decode(name: str) -> bytes:
    """The tooz id a Volcano name stands for."""
    return bytes.fromhex(name[len(_HEX) :]) if name.startswith(_HEX) else name.encode("ascii")


# Volcano's errors and tooz's, first match wins: (error class, tooz error of (group, member)).
_AS_TOOZ: tuple[tuple[type[volcano.Error], Callable[[bytes, bytes], tooz.ToozError]], ...] = (
    (volcano.GroupNotFoundError, lambda group, _: coordination.GroupNotCreated(group)),
    (volcano.GroupExistsError, lambda group, _: coordination.GroupAlreadyExist(group)),
    (volcano.GroupNotEmptyError, lambda group, _: coordination.GroupNotEmpty(group)),
    (volcano.MemberExistsError, coordination.MemberAlreadyExist),
    (volcano.MemberNotFoundError, coordination.MemberNotJoined),
    (volcano.LeaseNotHeldError, coordination.MemberNotJoined),
    # Routing's 404 (no such path): a server that predates groups.
    (volcano.NotFoundError, lambda *_: tooz.NotImplemented("this Volcano server has no groups")),
)


def _as_tooz(
    error: volcano.Error, group_id: bytes | None = None, member_id: bytes | None = None
) -> tooz.ToozError:
    """Volcano's error as tooz's: the group's and member's, a connection's, or ToozError."""
    for cls, made in _AS_TOOZ:
        if isinstance(error, cls):
            return made(group_id or b"?", member_id or b"?")
    if isinstance(error, volcano.APIConnectionError):
        return coordination.ToozConnectionError(str(error))
    return tooz.ToozError(str(error))


@contextlib.contextmanager
def _translated(group_id: bytes | None = None, member_id: bytes | None = None) -> Iterator[None]:
    """Raise Volcano's errors as tooz's (`_as_tooz`), the Volcano error as their cause."""
    try:
        yield
    except volcano.Error as exc:
        raise _as_tooz(exc, group_id, member_id) from exc


class VolcanoLock(locking.Lock):
    """A tooz lock on a Volcano key, held by a `with_lock` guard renewed in the background.

    One object is one holder: a second `acquire` of the same object waits for (or, not
    blocking, fails on) its first, as a thread lock would; two objects of one name are two
    holders, which exclude each other on the server.
    """

    def __init__(self, driver: VolcanoDriver, name: bytes) -> None:
        super().__init__(name)
        self._driver = driver
        self._key = encode(name, _KEY_MAX)
        self._mine = threading.Lock()  # this object's own holder: one at a time
        self._guard: Any = None  # the guard holding the lease, while held
        self._shared: list[Any] = []  # shared holds, latest last

    def acquire(
        self, blocking: bool | float = True, shared: bool = False, timeout: float | None = None
    ) -> bool:
        """Take the lock (shared: one of any number of shared holders); False when not taken."""
        waits, limit = utils.convert_blocking(blocking, timeout)
        if shared:
            return self._acquire_shared(waits, limit)
        end = None if limit is None else time.monotonic() + limit
        if not self._mine.acquire(waits, -1 if limit is None or not waits else limit):
            return False
        left = None if end is None else end - time.monotonic()
        try:
            guard = self._driver.hold_lock(self._key, wait=_wait(waits, left))
        except BaseException:
            self._mine.release()  # not held: the next acquire of this object may try
            raise
        if guard is None:
            self._mine.release()
            return False
        self._guard = guard
        self._driver.locked(self)
        return True

    def _acquire_shared(self, waits: bool, limit: float | None) -> bool:
        guard = self._driver.hold_lock(self._key, wait=_wait(waits, limit), shared=True)
        if guard is None:
            return False
        self._shared.append(guard)
        self._driver.locked(self)
        return True

    def release(self) -> bool:
        """Release the latest hold; True only if the lock was still held until now."""
        mine = False
        if self._shared:
            guard = self._shared.pop()
        elif self._guard is not None:
            guard, self._guard, mine = self._guard, None, True
        else:
            return False
        if not self._shared and self._guard is None:
            self._driver.unlocked(self)
        try:
            return self._driver.let_go(guard)
        finally:
            if mine:  # once the server has it back: a waiter here asks after that
                self._mine.release()

    def break_(self) -> bool:
        """Force the lock free, whoever holds it (its holders find out on their next renewal)."""
        return self._driver.break_lock(self._key)

    def is_still_owner(self) -> bool:
        """Whether this object holds the lock, by its guard's reckoning."""
        guards = [self._guard, *self._shared] if self._guard is not None else self._shared
        return bool(guards) and not any(guard.lost for guard in guards)

    @property
    def acquired(self) -> bool:
        """Whether this object holds the lock (or a shared hold of it)."""
        return self._guard is not None or bool(self._shared)


def _wait(waits: bool, limit: float | None) -> float | timedelta:
    if not waits:
        return 0
    return _FOREVER if limit is None else max(0.0, limit)


class VolcanoDriver(
    coordination.CoordinationDriverCachedRunWatchers,
    coordination.CoordinationDriverWithExecutor,
):
    """tooz's coordination API on a Volcano server (see the module's docstring).

    Every group call returns an asynchronous result run on tooz's executor; errors are tooz's
    (`GroupNotCreated`, `GroupAlreadyExist`, `GroupNotEmpty`, `MemberAlreadyExist`,
    `MemberNotJoined`, `ToozConnectionError`, `ToozError`), raised by `get()`.
    """

    CHARACTERISTICS = (
        coordination.Characteristics.DISTRIBUTED_ACROSS_THREADS,
        coordination.Characteristics.DISTRIBUTED_ACROSS_PROCESSES,
        coordination.Characteristics.DISTRIBUTED_ACROSS_HOSTS,
        # Each operation is one transaction on one database, answered once it committed.
        coordination.Characteristics.LINEARIZABLE,
    )

    def __init__(self, member_id: bytes, parsed_url: Any, options: dict[str, Any]) -> None:
        super().__init__(member_id, parsed_url, options)
        scheme = "https" if parsed_url.scheme == "volcanos" else "http"
        path = parsed_url.path.rstrip("/")
        self._api_url = f"{scheme}://{parsed_url.netloc}{path}"
        self._keys = (self._options.get("anon_key"), self._options.get("service_key"))
        self._timeout = float(self._options.get("timeout", 30))
        self._lock_timeout = float(self._options.get("lock_timeout", 30))
        self._leader_timeout = float(self._options.get("leader_timeout", self._timeout))
        self._request_timeout = float(self._options.get("request_timeout", 10))
        self._client: volcano.Client | None = None
        self._closing: weakref.finalize[..., Any] | None = None
        self._state = threading.Lock()  # guards what follows
        self._memberships: dict[bytes, volcano.Membership] = {}
        self._versions: dict[bytes, int] = {}  # each watched group's version when last listed
        self._campaigns: dict[bytes, tuple[Any, Any]] = {}  # (campaign, leadership)
        self._locks: set[VolcanoLock] = set()

    # -- the connection ------------------------------------------------------------------

    @property
    def _member(self) -> bytes:
        return utils.to_binary(self._member_id, "utf-8")

    @property
    def client(self) -> volcano.Client:
        """The Volcano client this coordinator talks through (once started)."""
        if self._client is None:
            raise tooz.ToozError("the Volcano driver has not been started")
        return self._client

    def _start(self) -> None:
        anon_key, service_key = self._keys
        try:
            client = volcano.Client(
                anon_key=anon_key,
                service_key=service_key,
                api_url=self._api_url,
                timeout=self._request_timeout,
            )
        except volcano.Error as exc:
            raise tooz.ToozError(f"cannot make a Volcano client: {exc}") from exc
        try:
            with _translated():
                next(iter(client.locks.list(page_size=1)), None)  # reachable, keys known
        except BaseException:
            client.close()
            raise
        self._client = client
        # A coordinator dropped without stop() closes its connections when it is collected,
        # as redis-py's do, instead of leaving sockets for the garbage collector to find.
        self._closing = weakref.finalize(self, client.close)

    def _stop(self) -> None:
        with self._state:
            campaigns, self._campaigns = list(self._campaigns.values()), {}
            held, self._locks = list(self._locks), set()
            self._memberships.clear()
            self._versions.clear()
        for campaign, _ in campaigns:
            campaign.__exit__(None, None, None)
        for lock in held:
            while lock.acquired:
                lock.release()
        if self._closing is not None:
            self._closing()  # closes the client, once
            self._closing = None
        self._client = None

    def _submit(self, work: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> Any:
        if not self._started:
            raise tooz.ToozError("the Volcano driver has not been started")
        return coordination.CoordinatorResult(self._executor.submit(work, *args, **kwargs))

    def heartbeat(self) -> float:
        """Renew this member's memberships; a membership that ended is forgotten.

        Returns the seconds until the next heartbeat is due (tooz's Heart waits half of it).
        """
        with self._state:
            held = list(self._memberships.items())
        for group_id, membership in held:
            try:
                renewed = self.client.groups.renew(membership, ttl=self._timeout)
            except (volcano.LeaseNotHeldError, volcano.GroupNotFoundError):
                self._forget(group_id, membership)  # removed, or expired: it left
                continue
            except volcano.Error as exc:
                raise _as_tooz(exc, group_id) from exc
            with self._state:
                if self._memberships.get(group_id) is membership:
                    self._memberships[group_id] = renewed
        return self._timeout

    def _forget(self, group_id: bytes, membership: volcano.Membership | None = None) -> None:
        with self._state:
            if membership is None or self._memberships.get(group_id) is membership:
                self._memberships.pop(group_id, None)
                self._joined_groups.discard(group_id)

    # -- locks ---------------------------------------------------------------------------

    def get_lock(self, name: bytes) -> VolcanoLock:
        """A lock named `name` (bytes), a Volcano key."""
        return VolcanoLock(self, utils.to_binary(name, "utf-8"))

    def hold_lock(self, key: str, *, wait: float | timedelta, shared: bool = False) -> Any:
        """A guard holding `key` (entered), or None when another holds it past `wait`."""
        options: dict[str, Any] = {"ttl": self._lock_timeout, "wait": wait}
        if shared:
            options["shared"] = True
        guard = self.client.locks.with_lock(key, **options)
        try:
            guard.__enter__()
        except (volcano.LockHeldError, volcano.LeaseNotHeldError):
            return None  # held by another past the wait (or granted too late to hold)
        except volcano.Error as exc:
            raise _as_tooz(exc) from exc
        return guard

    def let_go(self, guard: Any) -> bool:
        """Leave a guard's block: True when the lease was held until released."""
        guard.__exit__(None, None, None)
        return guard.state is volcano.GuardState.RELEASED

    def break_lock(self, key: str) -> bool:
        """Force release `key`: whether a live lease was removed."""
        with _translated():
            return self.client.locks.force_release(key).released

    def locked(self, lock: VolcanoLock) -> None:
        """`lock` holds its key: released when the coordinator stops."""
        with self._state:
            self._locks.add(lock)

    def unlocked(self, lock: VolcanoLock) -> None:
        """`lock` holds nothing any more."""
        with self._state:
            self._locks.discard(lock)

    # -- groups --------------------------------------------------------------------------

    def create_group(self, group_id: bytes) -> Any:
        """Create the group (`GroupAlreadyExist` if it exists)."""
        group_id = utils.to_binary(group_id, "utf-8")

        def create() -> None:
            with _translated(group_id):
                self.client.groups.create(encode(group_id, _GROUP_MAX))

        return self._submit(create)

    def get_groups(self) -> Any:
        """Every group's id."""

        def groups() -> list[bytes]:
            with _translated():
                return [decode(state.group) for state in self.client.groups.list()]

        return self._submit(groups)

    def delete_group(self, group_id: bytes) -> Any:
        """Delete the group (`GroupNotEmpty` while it has members, `GroupNotCreated`)."""
        group_id = utils.to_binary(group_id, "utf-8")

        def delete() -> None:
            with _translated(group_id):
                self.client.groups.delete(encode(group_id, _GROUP_MAX))

        return self._submit(delete)

    def join_group(self, group_id: bytes, capabilities: Any = None) -> Any:
        """Join the group as this member, with `capabilities` (msgpack-encoded)."""
        group_id, member = utils.to_binary(group_id, "utf-8"), self._member
        announced = None if capabilities is None else utils.dumps(capabilities)

        def join() -> None:
            with _translated(group_id, member):
                membership = self.client.groups.join(
                    encode(group_id, _GROUP_MAX),
                    encode(member, _MEMBER_MAX),
                    ttl=self._timeout,
                    capabilities=announced,
                )
            with self._state:
                self._memberships[group_id] = membership
                self._joined_groups.add(group_id)

        return self._submit(join)

    def leave_group(self, group_id: bytes) -> Any:
        """Leave the group: this coordinator's membership, or this member id's whoever holds it."""
        group_id, member = utils.to_binary(group_id, "utf-8"), self._member

        def leave() -> None:
            with self._state:
                membership = self._memberships.get(group_id)
            try:
                with _translated(group_id, member):
                    if membership is not None:
                        self.client.groups.leave(membership)
                        return
                    removal = self.client.groups.remove(
                        encode(group_id, _GROUP_MAX), encode(member, _MEMBER_MAX)
                    )
                    if not removal.removed:
                        raise coordination.MemberNotJoined(group_id, member)
            finally:
                self._forget(group_id)

        return self._submit(leave)

    def get_members(self, group_id: bytes) -> Any:
        """The ids of the group's live members."""
        group_id = utils.to_binary(group_id, "utf-8")
        return self._submit(self._members_of, group_id)

    def _members_of(self, group_id: bytes) -> set[bytes]:
        with _translated(group_id):
            listed = self.client.groups.members(encode(group_id, _GROUP_MAX), page_size=500)
            return {decode(member.member) for member in listed}

    def get_member_capabilities(self, group_id: bytes, member_id: bytes) -> Any:
        """A member's capabilities (`MemberNotJoined`, `GroupNotCreated`)."""
        group_id, member_id = utils.to_binary(group_id, "utf-8"), utils.to_binary(member_id)

        def capabilities() -> Any:
            with _translated(group_id, member_id):
                found = self.client.groups.member(
                    encode(group_id, _GROUP_MAX), encode(member_id, _MEMBER_MAX)
                )
            return _loaded(found.capabilities)

        return self._submit(capabilities)

    def get_members_with_capabilities(self, group_id: bytes) -> Any:
        """Every live member's id and capabilities."""
        group_id = utils.to_binary(group_id, "utf-8")

        def members() -> dict[bytes, Any]:
            with _translated(group_id):
                listed = self.client.groups.members(encode(group_id, _GROUP_MAX), page_size=500)
                return {decode(m.member): _loaded(m.capabilities) for m in listed}

        return self._submit(members)

    def get_member_info(self, group_id: bytes, member_id: bytes) -> Any:
        """A member's capabilities, fencing token and expiry."""
        group_id, member_id = utils.to_binary(group_id, "utf-8"), utils.to_binary(member_id)

        def info() -> dict[str, Any]:
            with _translated(group_id, member_id):
                found = self.client.groups.member(
                    encode(group_id, _GROUP_MAX), encode(member_id, _MEMBER_MAX)
                )
            return {
                "capabilities": _loaded(found.capabilities),
                "fencing_token": found.fencing_token,
                "expires_at": found.expires_at,
            }

        return self._submit(info)

    def update_capabilities(self, group_id: bytes, capabilities: Any) -> Any:
        """Announce new capabilities in a group this coordinator joined (`MemberNotJoined`)."""
        group_id, member = utils.to_binary(group_id, "utf-8"), self._member
        announced = None if capabilities is None else utils.dumps(capabilities)

        def update() -> None:
            with self._state:
                membership = self._memberships.get(group_id)
            if membership is None:
                raise coordination.MemberNotJoined(group_id, member)
            with _translated(group_id, member):
                self.client.groups.update(membership, announced)

        return self._submit(update)

    # -- watchers and leaders ------------------------------------------------------------

    def run_watchers(self, timeout: float | None = None) -> list[Any]:
        """Call the hooks of the watched groups whose membership changed, then elect leaders.

        A group's members are listed only when its version moved since they were last.
        """
        result: list[Any] = []
        watched = set(self._hooks_join_group) | set(self._hooks_leave_group)
        for group_id in watched:
            members = self._changed_members(group_id)
            if members is None:
                continue
            if group_id in self._joined_groups and self._member not in members:
                self._forget(group_id)  # booted out: removed, or expired
            before = self._group_members.get(group_id, set())
            for member_id in members - before:
                event = coordination.MemberJoinedGroup(group_id, member_id)
                result.extend(self._hooks_join_group[group_id].run(event))
            for member_id in before - members:
                left = coordination.MemberLeftGroup(group_id, member_id)
                result.extend(self._hooks_leave_group[group_id].run(left))
            self._group_members[group_id] = members
        self.run_elect_coordinator()
        return result

    def _changed_members(self, group_id: bytes) -> set[bytes] | None:
        """The group's members if its version moved since last listed (None: it did not)."""
        name = encode(group_id, _GROUP_MAX)
        try:
            with _translated(group_id):
                version = self.client.groups.get(name).version
        except coordination.GroupNotCreated:
            self._versions.pop(group_id, None)
            return set()
        if self._versions.get(group_id) == version and group_id in self._group_members:
            return None
        try:
            members = self._members_of(group_id)
        except coordination.GroupNotCreated:
            return set()
        # The version read before the listing: a change between the two lists again next time.
        self._versions[group_id] = version
        return members

    def run_elect_coordinator(self) -> None:
        """Campaign, not waiting, for each watched election this member does not lead."""
        for group_id, hooks in list(self._hooks_elected_leader.items()):
            if self._leads(group_id):
                continue
            campaign = self.client.groups.campaign(
                encode(group_id, _GROUP_MAX),
                encode(self._member, _MEMBER_MAX),
                ttl=self._leader_timeout,
                wait=0,
            )
            try:
                leadership = campaign.__enter__()
            except volcano.LockHeldError:
                continue  # another member leads
            except volcano.Error as exc:
                raise _as_tooz(exc, group_id) from exc
            with self._state:
                self._campaigns[group_id] = (campaign, leadership)
            hooks.run(coordination.LeaderElected(group_id, self._member))

    def _leads(self, group_id: bytes) -> bool:
        """Whether this member leads the group; a leadership it lost is resigned."""
        with self._state:
            held = self._campaigns.get(group_id)
        if held is None:
            return False
        _, leadership = held
        if not leadership.lost:
            return True
        self._resign(group_id)
        return False

    def _resign(self, group_id: bytes) -> bool:
        with self._state:
            held = self._campaigns.pop(group_id, None)
        if held is None:
            return False
        held[0].__exit__(None, None, None)
        return True

    def stand_down_group_leader(self, group_id: bytes) -> bool:
        """Resign the group's leadership if this member holds it; whether it did."""
        return self._resign(utils.to_binary(group_id, "utf-8"))

    def get_leader(self, group_id: bytes) -> Any:
        """The id of the group's leader, or None while nobody leads."""
        group_id = utils.to_binary(group_id, "utf-8")

        def leader() -> bytes | None:
            with _translated(group_id):
                found = self.client.groups.leader(encode(group_id, _GROUP_MAX))
            return None if found is None or found.label is None else decode(found.label)

        return self._submit(leader)


def _loaded(capabilities: Any) -> Any:
    """Capabilities as tooz's callers expect them: msgpack bytes loaded, JSON as it came."""
    if isinstance(capabilities, bytes):
        return utils.loads(capabilities)
    return capabilities
